// Seedable random numbers. Philox-4x32 (counter based), so the same seed gives
// the same numbers whatever the thread count, and a CUDA backend can produce
// the same streams.
#pragma once
#include <cstdint>

namespace kiln {

class Generator {
 public:
  explicit Generator(uint64_t seed = 67280421310721ULL) : seed_(seed) {}
  void manual_seed(uint64_t seed) { seed_ = seed; offset_ = 0; }
  uint64_t seed() const { return seed_; }
  // Reserves n counter values (each gives four 32-bit draws) and returns the
  // first; kernels fill their range from it.
  uint64_t advance(uint64_t n) { uint64_t o = offset_; offset_ += n; return o; }
  uint64_t offset() const { return offset_; }
  void set_offset(uint64_t o) { offset_ = o; }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The process-wide default generator (documented global state, like torch's).
Generator& default_generator();
void manual_seed(uint64_t seed);

// Philox-4x32-10: four 32-bit random words for (seed, counter).
struct Philox4 { uint32_t v[4]; };
Philox4 philox(uint64_t seed, uint64_t counter);
inline float uint_to_unit_float(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }

}  // namespace kiln
