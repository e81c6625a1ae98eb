// The float32 pointwise rows compiled for AVX-512 (this file gets the
// AVX-512 flags from CMakeLists.txt); reached only through f32_kernels()
// after cpu_has_avx512().
// GCC 12 warns about _mm512_undefined_ps() inside its own intrinsics
// (a known false positive of -Wmaybe-uninitialized).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "ops/cpu/pointwise_f32_rows.h"

#if !defined(__AVX512F__)
#error "pointwise_f32_avx512.cpp must be compiled with AVX-512 flags (see CMakeLists.txt)"
#endif

namespace kiln::cpu {
const F32Kernels& f32_kernels_avx512() { return avx512::kTable; }
}  // namespace kiln::cpu
