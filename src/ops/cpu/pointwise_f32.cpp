// The float32 pointwise rows compiled for the AVX2 + FMA floor, and the
// run-time choice between them and the AVX-512 build.
#include "ops/cpu/pointwise_f32_rows.h"

#include "core/cpu_features.h"

namespace kiln::cpu {
const F32Kernels& f32_kernels_avx2() { return avx2::kTable; }
const F32Kernels& f32_kernels() { return cpu_has_avx512() ? f32_kernels_avx512() : f32_kernels_avx2(); }
}  // namespace kiln::cpu
