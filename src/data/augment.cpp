// The DataLoader's per-image work: seeded augmentation draws and the fused
// uint8 -> augmented, normalized float32 copy. Every random choice is a pure
// function of (seed, epoch, dataset index), so batches do not depend on the
// worker count or timing.
#include <algorithm>
#include <cmath>

#include "data/data_internal.h"
#include "kiln/error.h"
#include "kiln/random.h"

namespace kiln::data::detail {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

enum Purpose : uint64_t { kPermutation = 1, kAugment = 2, kFlipBase = 3 };

// Uniform in [0, range) from 32 random bits (Lemire's multiply; the bias is
// below 2^-20 for the small ranges used here).
inline int uniform32(uint32_t bits, uint32_t range) {
  return static_cast<int>((static_cast<uint64_t>(bits) * range) >> 32);
}
inline int uniform16(uint32_t bits16, uint32_t range) { return static_cast<int>((bits16 * range) >> 16); }

// Reflection without repeating the edge (numpy/torch "reflect").
inline int64_t reflect(int64_t i, int64_t n) {
  if (n == 1) return 0;
  const int64_t period = 2 * (n - 1);
  i %= period;
  if (i < 0) i += period;
  return i < n ? i : period - i;
}

// Output coordinate -> source coordinate (-1 = zero padding) along one axis:
// the inverse of flip, then crop with zero padding, then translate with
// reflect padding.
void axis_map(int64_t n, int64_t pad, int crop, int64_t translate, int shift, bool flip, int64_t* map) {
  for (int64_t o = 0; o < n; ++o) {
    int64_t u = translate > 0 ? reflect(o + shift - translate, n) : o;
    int64_t v = pad > 0 ? u + crop - pad : u;
    if (v < 0 || v >= n) {
      map[o] = -1;
      continue;
    }
    map[o] = flip ? n - 1 - v : v;
  }
}

// pixel * s + b in one fma (one rounding), as the device loader's kernel
// (src/cuda/augment.cu) computes it, so the two give the same bits.
inline void convert_row(const uint8_t* __restrict src, float* __restrict dst, int64_t n, float s, float b) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = std::fma(static_cast<float>(src[i]), s, b);
}

// dst[i] = src[-i]: a flipped row.
inline void convert_row_reversed(const uint8_t* __restrict src, float* __restrict dst, int64_t n, float s, float b) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = std::fma(static_cast<float>(src[-i]), s, b);
}

// A column map as runs of zero padding (step 0), forward (1) or reversed (-1)
// source columns: a crop, flip or translate gives at most a handful, so each
// row is a few vectorized copies instead of a per-pixel gather.
struct Run {
  int64_t out, len, src, step;
};
void column_runs(const int64_t* map, int64_t n, std::vector<Run>& runs) {
  runs.clear();
  for (int64_t x = 0; x < n;) {
    Run r{x, 1, map[x], map[x] < 0 ? 0 : 1};
    if (r.step != 0 && x + 1 < n && map[x + 1] >= 0 && map[x + 1] == map[x] - 1) r.step = -1;
    while (x + r.len < n &&
           (r.step == 0 ? map[x + r.len] < 0 : map[x + r.len] >= 0 && map[x + r.len] == map[x] + r.step * r.len))
      ++r.len;
    if (r.step == 0) r.src = 0;
    runs.push_back(r);
    x += r.len;
  }
}

}  // namespace

uint64_t mix_key(uint64_t seed, uint64_t epoch, uint64_t purpose) {
  return splitmix64(splitmix64(splitmix64(seed) ^ epoch) ^ (purpose * 0xD1B54A32D192ED03ULL));
}

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = i;
  const uint64_t key = mix_key(seed, static_cast<uint64_t>(epoch), kPermutation);
  Philox4 r{};
  for (int64_t i = n - 1, k = 0; i > 0; --i, ++k) {
    if (k % 4 == 0) r = philox(key, static_cast<uint64_t>(k / 4));
    int64_t j = uniform32(r.v[k % 4], static_cast<uint32_t>(i + 1));
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(j)]);
  }
  return p;
}

ImageAugment draw_augment(const AugmentOptions& opt, uint64_t seed, int64_t epoch, int64_t index) {
  ImageAugment a;
  const Philox4 r = philox(mix_key(seed, static_cast<uint64_t>(epoch), kAugment), static_cast<uint64_t>(index));
  if (opt.alternating_flip) {
    // airbench: the epoch-0 choice is fixed per image; odd epochs flip the complement.
    const Philox4 base = philox(mix_key(seed, 0, kFlipBase), static_cast<uint64_t>(index));
    a.flip = ((base.v[0] >> 31) != 0) != ((epoch & 1) != 0);
  } else if (opt.flip) {
    a.flip = (r.v[0] >> 31) != 0;
  }
  if (opt.crop_padding > 0) {
    const auto range = static_cast<uint32_t>(2 * opt.crop_padding + 1);
    a.crop_y = uniform32(r.v[1], range);
    a.crop_x = uniform32(r.v[2], range);
  }
  if (opt.translate > 0) {
    const auto range = static_cast<uint32_t>(2 * opt.translate + 1);
    a.translate_y = uniform16(r.v[3] & 0xFFFFu, range);
    a.translate_x = uniform16(r.v[3] >> 16, range);
  }
  return a;
}

Normalizer make_normalizer(int64_t channels, const std::vector<float>& mean, const std::vector<float>& std) {
  KILN_CHECK(mean.size() == std.size(), "DataLoader: mean has ", mean.size(), " values but std has ", std.size(),
             "; give one of each per channel (or both empty for no normalization)");
  KILN_CHECK(mean.empty() || mean.size() == static_cast<size_t>(channels) || mean.size() == 1, "DataLoader: mean/std have ",
             mean.size(), " values but the images have ", channels, " channels");
  Normalizer n;
  for (int64_t c = 0; c < channels; ++c) {
    float m = mean.empty() ? 0.f : mean[mean.size() == 1 ? 0 : static_cast<size_t>(c)];
    float s = std.empty() ? 1.f : std[std.size() == 1 ? 0 : static_cast<size_t>(c)];
    KILN_CHECK(s > 0.f, "DataLoader: std[", c, "] is ", s, "; it must be positive");
    n.scale.push_back(1.f / (255.f * s));
    n.bias.push_back(-m / s);
  }
  return n;
}

void assemble_image(const uint8_t* src, int64_t channels, int64_t height, int64_t width, const AugmentOptions& opt,
                    const ImageAugment& aug, const Normalizer& norm, float* dst) {
  const int64_t hw = height * width;
  const bool moves = aug.flip || opt.crop_padding > 0 || opt.translate > 0;
  if (!moves) {
    for (int64_t c = 0; c < channels; ++c) convert_row(src + c * hw, dst + c * hw, hw, norm.scale[c], norm.bias[c]);
    return;
  }
  thread_local std::vector<int64_t> ymap, xmap;
  thread_local std::vector<Run> runs;
  ymap.resize(static_cast<size_t>(height));
  xmap.resize(static_cast<size_t>(width));
  axis_map(height, opt.crop_padding, aug.crop_y, opt.translate, aug.translate_y, false, ymap.data());
  axis_map(width, opt.crop_padding, aug.crop_x, opt.translate, aug.translate_x, aug.flip, xmap.data());
  column_runs(xmap.data(), width, runs);
  for (int64_t c = 0; c < channels; ++c) {
    const uint8_t* plane = src + c * hw;
    const float s = norm.scale[c], b = norm.bias[c];
    for (int64_t y = 0; y < height; ++y) {
      float* out = dst + c * hw + y * width;
      if (ymap[y] < 0) {
        std::fill(out, out + width, b);  // zero padding: pixel value 0
        continue;
      }
      const uint8_t* in = plane + ymap[y] * width;
      for (const Run& r : runs) {
        if (r.step == 1)
          convert_row(in + r.src, out + r.out, r.len, s, b);
        else if (r.step == -1)
          convert_row_reversed(in + r.src, out + r.out, r.len, s, b);
        else
          std::fill(out + r.out, out + r.out + r.len, b);
      }
    }
  }
}

}  // namespace kiln::data::detail
