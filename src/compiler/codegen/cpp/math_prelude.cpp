#include "compiler/codegen/cpp/math_prelude.h"

#include "generated/vec_math_text.h"  // by CMake from src/ops/cpu/vec_math.h

namespace kiln::compiler::codegen {

const std::string& jit_math_prelude() {
  // noexcept matches glibc's own declarations of these names.
  static const std::string text = R"(// kiln JIT math prelude (src/compiler/codegen/cpp/math_prelude.h)
#include <cstdint>
extern "C" {
#pragma omp declare simd notinbranch
float expf(float) noexcept;
#pragma omp declare simd notinbranch
float logf(float) noexcept;
#pragma omp declare simd notinbranch
float tanhf(float) noexcept;
#pragma omp declare simd notinbranch
float erff(float) noexcept;
#pragma omp declare simd notinbranch
float powf(float, float) noexcept;
#pragma omp declare simd notinbranch
float log1pf(float) noexcept;
#pragma omp declare simd notinbranch
float expm1f(float) noexcept;
#pragma omp declare simd notinbranch
float sinf(float) noexcept;
#pragma omp declare simd notinbranch
float cosf(float) noexcept;
#pragma omp declare simd notinbranch
double exp(double) noexcept;
#pragma omp declare simd notinbranch
double log(double) noexcept;
#pragma omp declare simd notinbranch
double tanh(double) noexcept;
#pragma omp declare simd notinbranch
double erf(double) noexcept;
#pragma omp declare simd notinbranch
double pow(double, double) noexcept;
float sqrtf(float) noexcept;
double sqrt(double) noexcept;
float fabsf(float) noexcept;
double fabs(double) noexcept;
}
static inline bool isnan(float x) { return __builtin_isnan(x); }
static inline bool isnan(double x) { return __builtin_isnan(x); }
#define NAN __builtin_nanf("")
#define INFINITY __builtin_inff()
)";
  return text;
}

const std::string& jit_vector_prelude() {
  static const std::string text = std::string("#include <cstdint>\nnamespace kv {\n") + kVecMathText + "}  // namespace kv\n";
  return text;
}

}  // namespace kiln::compiler::codegen
