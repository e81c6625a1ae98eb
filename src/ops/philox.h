// Philox-4x32-10 (Salmon et al., SC'11), the generator cuRAND and PyTorch's
// CUDA backend use, and the conversions of its words to numbers. One
// definition for the CPU (src/core/random.cpp, src/ops/factory.cpp) and the
// CUDA kernels (src/cuda/random.cu), so both draw the same stream: element i
// of a draw depends only on (seed, offset, i).
#pragma once
#include <cstdint>

#include "ops/int_pow.h"  // KILN_HOST_DEVICE

namespace kiln {

KILN_HOST_DEVICE inline void philox_words(uint64_t seed, uint64_t counter, uint32_t out[4]) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = 0xD2511F53ULL * c0, p1 = 0xCD9E8D57ULL * c2;
    uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    uint32_t n1 = static_cast<uint32_t>(p1);
    uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    uint32_t n3 = static_cast<uint32_t>(p0);
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

// [0, 1) from the top 24 bits of a word.
KILN_HOST_DEVICE inline float philox_unit_float(uint32_t x) {
  return static_cast<float>(x >> 8) * (1.0f / 16777216.0f);
}
// (0, 1]: safe for log().
KILN_HOST_DEVICE inline float philox_unit_float_open0(uint32_t x) {
  return static_cast<float>((x >> 8) + 1) * (1.0f / 16777216.0f);
}
// [0, 1) with 53 bits from two words.
KILN_HOST_DEVICE inline double philox_unit_double(uint32_t hi, uint32_t lo) {
  uint64_t v = (static_cast<uint64_t>(hi) << 32 | lo) >> 11;
  return static_cast<double>(v) * (1.0 / 9007199254740992.0);
}

}  // namespace kiln
