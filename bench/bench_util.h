// What the stand-alone benchmarks share: summary statistics over repeated
// timings, and timing one call. Argument parsing is CLI11's (as in the kiln CLI).
#pragma once
#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace kiln::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
// Wall seconds of one call of f.
inline double seconds(const std::function<void()>& f) {
  auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
inline double min_of(const std::vector<double>& v) { return v.empty() ? 0 : *std::min_element(v.begin(), v.end()); }

}  // namespace kiln::bench
