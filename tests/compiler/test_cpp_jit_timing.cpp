// Timings for docs/kernel-cache.md, run by hand (DESIGN.md: speed is measured,
// never asserted in a test):
//   build/tests/test_compiler --gtest_also_run_disabled_tests --gtest_filter='CppJitTiming.*'
// Cold compile of a typical generated kernel file, 4 files serially and in
// parallel, and the warm start of 40 modules in a second process.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "compiler/codegen/cpp/jit_compiler.h"
#include "compiler/codegen/cpp/math_prelude.h"
#include "cpp_jit_testing.h"

namespace kiln::compiler::codegen {
namespace {

using kiln::testing::ScratchDir;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// What the generator emits for a small graph: a GELU (erff), batch-norm
// statistics (a vectorized reduction) and a fused batch-norm apply + ReLU.
// With `sleef_header` the GELU calls Sleef by name through <sleef.h>, as
// hand-written code would; otherwise the file starts with jit_math_prelude().
std::string typical_kernel_file(int salt, bool sleef_header = false) {
  std::string head = "// variant " + std::to_string(salt) + "\n";
  head += sleef_header ? "#include <cstdint>\n#include <sleef.h>\n#define erff Sleef_erff_u10\n" : jit_math_prelude();
  return head + R"(
extern "C" void gelu_fwd(int64_t n, const float* x, float* y) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.f + erff(x[i] * 0.70710678f));
}
extern "C" void bn_stats(int64_t c, int64_t hw, const float* x, float* mean, float* var) {
#pragma omp parallel for
  for (int64_t ch = 0; ch < c; ++ch) {
    float s = 0, s2 = 0;
#pragma omp simd reduction(+:s, s2)
    for (int64_t i = 0; i < hw; ++i) { float v = x[ch * hw + i]; s += v; s2 += v * v; }
    mean[ch] = s / hw;
    var[ch] = s2 / hw - (s / hw) * (s / hw);
  }
}
extern "C" void bn_apply_relu(int64_t c, int64_t hw, const float* x, const float* m, const float* r,
                              const float* w, const float* b, float* y) {
#pragma omp parallel for
  for (int64_t ch = 0; ch < c; ++ch) {
    float a = w[ch] * r[ch], o = b[ch] - m[ch] * a;
#pragma omp simd
    for (int64_t i = 0; i < hw; ++i) { float v = x[ch * hw + i] * a + o; y[ch * hw + i] = v > 0 ? v : 0; }
  }
}
)";
}

std::vector<std::string> kernel_files(int n, int first_salt) {
  std::vector<std::string> v;
  for (int i = 0; i < n; ++i) v.push_back(typical_kernel_file(first_salt + i));
  return v;
}

TEST(CppJitTiming, DISABLED_WarmLoadChild) {
  const char* dir = std::getenv("KILN_TEST_JIT_CACHE");
  if (!dir) GTEST_SKIP() << "runs as a child of CppJitTiming.DISABLED_ColdWarmAndParallel";
  auto t0 = std::chrono::steady_clock::now();
  CppJit jit(dir);
  auto one = jit.compile(typical_kernel_file(1000));
  double t_one = seconds_since(t0);
  auto t1 = std::chrono::steady_clock::now();
  auto mods = jit.compile_many(kernel_files(40, 1001));
  double t_many = seconds_since(t1);
  EXPECT_EQ(jit.stats().compiler_invocations, 0);
  std::printf("warm start (new process): 1 module %.4f s (incl. CppJit setup), 40 modules %.4f s\n", t_one, t_many);
}

TEST(CppJitTiming, DISABLED_ColdWarmAndParallel) {
  ScratchDir dir;
  CppJit jit(dir.path());
  jit.cache_key("");  // the one-time `g++ --version` probe, outside the timings
  // Best of three rounds (fresh sources each time): this machine is shared.
  double cold_prelude = 1e9, cold_header = 1e9, serial = 1e9, parallel = 1e9;
  for (int round = 0; round < 3; ++round) {
    auto t0 = std::chrono::steady_clock::now();
    jit.compile(typical_kernel_file(10 + round));
    cold_prelude = std::min(cold_prelude, seconds_since(t0));
    t0 = std::chrono::steady_clock::now();
    jit.compile(typical_kernel_file(20 + round, /*sleef_header=*/true));
    cold_header = std::min(cold_header, seconds_since(t0));

    {
      kiln::testing::ScopedEnv one_job("KILN_COMPILE_JOBS", "1");
      t0 = std::chrono::steady_clock::now();
      jit.compile_many(kernel_files(4, 100 + 10 * round));
      serial = std::min(serial, seconds_since(t0));
    }
    t0 = std::chrono::steady_clock::now();
    jit.compile_many(kernel_files(4, 200 + 10 * round));
    parallel = std::min(parallel, seconds_since(t0));
  }
  std::printf("cold compile, one typical kernel file: %.3f s with jit_math_prelude, %.3f s with <sleef.h>\n",
              cold_prelude, cold_header);
  std::printf("4 files: serial %.3f s, parallel (%u jobs) %.3f s, speed-up %.2fx\n", serial,
              std::thread::hardware_concurrency(), parallel, serial / parallel);

  jit.compile(typical_kernel_file(1000));
  jit.compile_many(kernel_files(40, 1001));
  auto child = kiln::testing::spawn_self("CppJitTiming.DISABLED_WarmLoadChild",
                                         {"KILN_TEST_JIT_CACHE=" + dir.path().string()}, dir.path() / "child.out");
  int status = kiln::testing::wait_child(child);
  std::string out = child.read_output();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  std::printf("%s", out.substr(out.find("warm start")).c_str());
}

}  // namespace
}  // namespace kiln::compiler::codegen
