// Integer power by squaring, with wrap-around like PyTorch's; negative
// exponents give 0 except for bases 1 and -1. One definition for the CPU
// kernels (pointwise.cpp) and the CUDA kernels (src/cuda/pointwise.cu), so
// the two backends cannot drift apart on integer pow.
#pragma once
#include <type_traits>

#ifdef __CUDACC__
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif

namespace kiln {

template <typename T>
KILN_HOST_DEVICE inline T int_pow(T base, T exp) {
  if constexpr (std::is_same_v<T, bool>) {
    return exp ? base : true;
  } else {
    if constexpr (std::is_signed_v<T>) {
      if (exp < 0) {
        if (base == 1) return 1;
        if (base == -1) return (exp & 1) ? T(-1) : T(1);
        return 0;
      }
    }
    using U = std::make_unsigned_t<T>;
    U r = 1, b = static_cast<U>(base);
    auto e = static_cast<U>(exp);
    while (e) {
      if (e & 1) r = static_cast<U>(r * b);
      b = static_cast<U>(b * b);
      e >>= 1;
    }
    return static_cast<T>(r);
  }
}

}  // namespace kiln
