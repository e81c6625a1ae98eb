// math_prelude.h: scalar libm calls in `omp simd` loops become Sleef's
// vector functions (GNU vector ABI, libsleefgnuabi), with results as
// accurate as libm's, on both ISA levels the JIT builds for.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "compiler/codegen/cpp/jit_compiler.h"
#include "compiler/codegen/cpp/math_prelude.h"
#include "cpp_jit_testing.h"

namespace kiln::compiler::codegen {
namespace {

using kiln::testing::ScratchDir;

// Each function of the prelude once, in one vectorizable loop per output.
std::string math_kernels() {
  return jit_math_prelude() + R"(
extern "C" void float_math(int64_t n, const float* x, float* out) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    out[0 * n + i] = expf(v);
    out[1 * n + i] = logf(fabsf(v) + 0.5f);
    out[2 * n + i] = tanhf(v);
    out[3 * n + i] = erff(v);
    out[4 * n + i] = powf(fabsf(v) + 0.25f, 1.5f);
    out[5 * n + i] = log1pf(fabsf(v));
    out[6 * n + i] = expm1f(v);
    out[7 * n + i] = sinf(v) + cosf(0.5f * v);  // sinf(v) with cosf(v) would fuse into sincosf, which stays scalar
    out[8 * n + i] = sqrtf(fabsf(v));
    out[9 * n + i] = isnan(v) ? 1.f : (v > 5.f ? INFINITY : 0.f);
  }
}
extern "C" void double_math(int64_t n, const double* x, double* out) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    double v = x[i];
    out[0 * n + i] = exp(v) + log(fabs(v) + 0.5) + tanh(v) + erf(v) + pow(fabs(v) + 0.25, 1.5) + sqrt(fabs(v));
  }
}
)";
}

std::string file_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void check_math(const LoadedModule& mod) {
  const int64_t n = 203;  // not a multiple of 16: the scalar tail runs too
  std::vector<float> x(n), out(10 * n);
  for (int64_t i = 0; i < n; ++i) x[i] = -6.f + 12.f * static_cast<float>(i) / static_cast<float>(n);
  x[7] = NAN;
  mod.symbol<void (*)(int64_t, const float*, float*)>("float_math")(n, x.data(), out.data());
  for (int64_t i = 0; i < n; ++i) {
    double v = x[i];
    if (std::isnan(v)) {
      EXPECT_EQ(out[9 * n + i], 1.f);
      continue;
    }
    const double want[] = {std::exp(v), std::log(std::fabs(v) + 0.5), std::tanh(v), std::erf(v),
                           std::pow(std::fabs(v) + 0.25, 1.5), std::log1p(std::fabs(v)), std::expm1(v),
                           std::sin(v) + std::cos(0.5 * v), std::sqrt(std::fabs(v))};
    for (int f = 0; f < 9; ++f) {
      EXPECT_NEAR(out[f * n + i], want[f], 1e-6 * std::fabs(want[f]) + 1e-7) << "function " << f << " at x = " << v;
    }
    EXPECT_EQ(out[9 * n + i], v > 5 ? INFINITY : 0.f);
  }
  std::vector<double> xd(x.begin(), x.end()), outd(n);
  xd[7] = 0.5;
  mod.symbol<void (*)(int64_t, const double*, double*)>("double_math")(n, xd.data(), outd.data());
  for (int64_t i = 0; i < n; ++i) {
    double v = xd[i];
    double want = std::exp(v) + std::log(std::fabs(v) + 0.5) + std::tanh(v) + std::erf(v) +
                  std::pow(std::fabs(v) + 0.25, 1.5) + std::sqrt(std::fabs(v));
    EXPECT_NEAR(outd[i], want, 1e-13 * std::fabs(want) + 1e-14) << v;
  }
}

TEST(CppJitMath, PreludeFunctionsMatchLibmAndVectorizeThroughSleef) {
  ScratchDir dir;
  CppJit jit(dir.path());
  auto mod = jit.compile(math_kernels());
  check_math(*mod);
  // The module imports Sleef's vector expf of its ISA: the loop was vectorized.
  std::string bytes = file_bytes(mod->path());
  const char* vector_expf = mod->isa().level == JitIsaLevel::Avx512 ? "_ZGVeN16v_expf" : "_ZGVdN8v_expf";
  EXPECT_NE(bytes.find(vector_expf), std::string::npos) << vector_expf << " not referenced by " << mod->path();
}

TEST(CppJitMath, Avx2FloorVectorizesEightWide) {
  ScratchDir dir;
  CppJit jit(dir.path());
  auto mod = jit.compile(math_kernels(), {.isa = jit_isa_named("avx2"), .extra_flags = {}});
  check_math(*mod);
  std::string bytes = file_bytes(mod->path());
  EXPECT_NE(bytes.find("_ZGVdN8v_expf"), std::string::npos);
  EXPECT_EQ(bytes.find("_ZGVeN16v_expf"), std::string::npos);
}

}  // namespace
}  // namespace kiln::compiler::codegen
