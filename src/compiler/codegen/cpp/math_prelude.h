// The text generated C++ starts with instead of <cmath>: declarations that
// let GCC vectorize libm calls into Sleef, for the price of no header.
//
// Two measurements on this machine drove this (docs/kernel-cache.md):
// <immintrin.h> (which <sleef.h> includes) costs ~0.3 s of cc1plus per
// translation unit with the AVX-512 flags, <cmath> ~0.12 s, while a kernel
// itself costs ~0.02 s. And with `#pragma omp declare simd` on expf & co.,
// GCC turns `y[i] = expf(x[i])` in an `omp simd` loop into calls of the GNU
// vector ABI (_ZGVeN16v_expf: 16 lanes on AVX-512, _ZGVdN8v_expf on AVX2),
// which Debian's libsleefgnuabi provides at Sleef's 1-ulp accuracy. So the
// renderer writes plain scalar math, the vectorizer picks the width of the
// ISA the JIT compiles for, and tails use libm's scalar functions.
//
// What it provides: expf logf tanhf erff powf log1pf expm1f sinf cosf and
// their double versions (vectorized), sqrtf/sqrt and fabsf/fabs (single
// instructions under -fno-math-errno), isnan(float|double), NAN, INFINITY,
// and <cstdint>'s int64_t etc. It must not be combined with <cmath> or
// <math.h> in one translation unit (both define isnan). One trap: sinf(v)
// and cosf(v) of the same v in one loop become sincosf, which has no vector
// declaration, and the loop stays scalar.
#pragma once
#include <string>

namespace kiln::compiler::codegen {

const std::string& jit_math_prelude();

// What the C++ backend's generated files start with: <cstdint> and the text
// of src/ops/cpu/vec_math.h in namespace kv, the vector math the eager
// float32 kernels run, so generated and eager results agree bit for bit.
const std::string& jit_vector_prelude();

}  // namespace kiln::compiler::codegen
