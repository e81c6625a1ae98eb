// The C++ JIT: generated source in, correct callable kernels out
// (src/compiler/codegen/cpp/jit_compiler.h). Cache behaviour across
// instances and processes is in test_cpp_jit_cache.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "compiler/codegen/cpp/jit_compiler.h"
#include "cpp_jit_testing.h"
#include "kiln/error.h"

namespace kiln::compiler::codegen {
namespace {

using kiln::testing::kSaxpySource;
using kiln::testing::saxpy_is_correct;
using kiln::testing::ScratchDir;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Which vector extension the compiler targeted: the predefined macros say.
const char* kIsaProbeSource = R"(
extern "C" int compiled_with_avx512() {
#if defined(__AVX512F__) && defined(KILN_JIT_AVX512)
  return 1;
#else
  return 0;
#endif
}
extern "C" int compiled_with_avx2_fma() {
#if defined(__AVX2__) && defined(__FMA__)
  return 1;
#else
  return 0;
#endif
}
)";

TEST(CppJit, CompiledSaxpyMatchesTheReferenceAndCountsOneCompile) {
  ScratchDir dir;
  CppJit jit(dir.path());
  auto mod = jit.compile(kSaxpySource);
  EXPECT_TRUE(saxpy_is_correct(*mod));
  EXPECT_TRUE(saxpy_is_correct(*mod, 3));  // shorter than one vector: the tail alone
  JitStats s = jit.stats();
  EXPECT_EQ(s.compiles, 1);
  EXPECT_EQ(s.disk_hits, 0);
  EXPECT_TRUE(jit.cache().has_entry(mod->key()));
  EXPECT_EQ(mod->path(), jit.cache().entry_path(mod->key()));
  EXPECT_EQ(mod->key().size(), 64u);  // SHA-256 in hex

  // The same source again in this CppJit: the loaded module, nothing done.
  auto again = jit.compile(kSaxpySource);
  EXPECT_EQ(again.get(), mod.get());
  EXPECT_EQ(jit.stats().compiles, 1);
  EXPECT_EQ(jit.stats().memory_hits, 1);
}

TEST(CppJit, KeyDependsOnSourceFlagsAndIsa) {
  ScratchDir dir;
  CppJit jit(dir.path());
  std::string k = jit.cache_key(kSaxpySource);
  EXPECT_EQ(jit.cache_key(kSaxpySource), k);
  EXPECT_NE(jit.cache_key(std::string(kSaxpySource) + "\n"), k);
  EXPECT_NE(jit.cache_key(kSaxpySource, {.isa = JitIsa{}, .extra_flags = {}}),
            jit.cache_key(kSaxpySource, {.isa = JitIsa{JitIsaLevel::Avx512, false}, .extra_flags = {}}));
  EXPECT_NE(jit.cache_key(kSaxpySource, {.isa = {}, .extra_flags = {"-DTILE=64"}}), k);
}

TEST(CppJit, FlagsAreTheDocumentedOnes) {
  ScratchDir dir;
  CppJit jit(dir.path());
  std::vector<std::string> f = jit.flags({.isa = JitIsa{}, .extra_flags = {"-DX=1"}});
  for (const char* want : {"-O3", "-fopenmp", "-fPIC", "-shared", "-mavx2", "-mfma", "-DX=1"}) {
    EXPECT_NE(std::find(f.begin(), f.end(), want), f.end()) << want;
  }
  EXPECT_EQ(std::find(f.begin(), f.end(), "-mavx512f"), f.end());
  std::vector<std::string> f512 = jit.flags({.isa = JitIsa{JitIsaLevel::Avx512, true}, .extra_flags = {}});
  for (const char* want : {"-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512bf16"}) {
    EXPECT_NE(std::find(f512.begin(), f512.end(), want), f512.end()) << want;
  }
}

TEST(CppJit, Avx2FloorBuildsAWorkingModuleWithoutAvx512) {
  ScratchDir dir;
  CppJit jit(dir.path());
  CompileOptions avx2{.isa = jit_isa_named("avx2"), .extra_flags = {}};
  auto probe = jit.compile(kIsaProbeSource, avx2);
  EXPECT_EQ(probe->isa().name(), "avx2");
  EXPECT_EQ(probe->symbol<int (*)()>("compiled_with_avx512")(), 0);
  EXPECT_EQ(probe->symbol<int (*)()>("compiled_with_avx2_fma")(), 1);
  EXPECT_TRUE(saxpy_is_correct(*jit.compile(kSaxpySource, avx2)));
  if (host_max_isa().level == JitIsaLevel::Avx512) {
    auto wide = jit.compile(kIsaProbeSource, {.isa = jit_isa_named("avx512"), .extra_flags = {}});
    EXPECT_NE(wide.get(), probe.get());
    EXPECT_EQ(wide->symbol<int (*)()>("compiled_with_avx512")(), 1);
    EXPECT_TRUE(saxpy_is_correct(*jit.compile(kSaxpySource, {.isa = jit_isa_named("avx512"), .extra_flags = {}})));
  }
}

TEST(CppJit, KilnCpuIsaEnvironmentForcesTheLevel) {
  kiln::testing::ScopedEnv isa("KILN_CPU_ISA", "avx2");
  EXPECT_EQ(jit_isa().name(), "avx2");
  isa.set("sse2");
  try {
    jit_isa();
    ADD_FAILURE() << "KILN_CPU_ISA=sse2 accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "KILN_CPU_ISA=sse2")) << e.what();
  }
  if (host_max_isa().level == JitIsaLevel::Avx512) {
    isa.set("avx512");
    EXPECT_EQ(jit_isa().level, JitIsaLevel::Avx512);
  }
}

TEST(CppJit, SleefExpMatchesStdExp) {
  ScratchDir dir;
  CppJit jit(dir.path());
  // The scalar Sleef function everywhere; the 16-lane one where the module
  // is built for AVX-512 (the renderer's vector path).
  auto mod = jit.compile(R"(#include <sleef.h>
#include <cstdint>
#if KILN_JIT_AVX512
#include <immintrin.h>
#endif
extern "C" void sleef_exp(int64_t n, const float* x, float* y) {
  int64_t i = 0;
#if KILN_JIT_AVX512
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, Sleef_expf16_u10(_mm512_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) y[i] = Sleef_expf_u10(x[i]);
}
)");
  const int64_t n = 1000 + 7;
  std::vector<float> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) x[i] = -20.f + 40.f * static_cast<float>(i) / static_cast<float>(n);
  mod->symbol<void (*)(int64_t, const float*, float*)>("sleef_exp")(n, x.data(), y.data());
  for (int64_t i = 0; i < n; ++i) {
    double want = std::exp(static_cast<double>(x[i]));
    EXPECT_NEAR(y[i], want, 2e-7 * want) << "x = " << x[i];  // Sleef's u10: 1.0 ulp
  }
}

TEST(CppJit, SyntaxErrorIsAnErrorWithTheCompilerMessageAndTheKeptSource) {
  ScratchDir dir;
  CppJit jit(dir.path());
  std::string bad = "extern \"C\" int broken( { return 1; }\n";
  std::string key = jit.cache_key(bad);
  try {
    jit.compile(bad);
    FAIL() << "a syntax error compiled";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "error:")) << msg;  // g++'s own diagnostic
    EXPECT_TRUE(contains(msg, jit.cache().source_path(key).string())) << msg;
    EXPECT_TRUE(contains(msg, "exit code")) << msg;
  }
  EXPECT_TRUE(std::filesystem::exists(jit.cache().source_path(key)));
  EXPECT_FALSE(jit.cache().has_entry(key));
  EXPECT_EQ(jit.cache().info().temps, 0);  // the failed .so's temporary is gone
  EXPECT_EQ(jit.stats().compiles, 1);
}

TEST(CppJit, CallOfAnUndefinedFunctionFailsTheCompileNamingIt) {
  ScratchDir dir;
  CppJit jit(dir.path());
  std::string src = "extern \"C\" float kiln_no_such_fn(float);\nextern \"C\" float f(float x) { return kiln_no_such_fn(x); }\n";
  try {
    jit.compile(src);
    FAIL() << "a module with an undefined function was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "undefined reference to `kiln_no_such_fn'")) << e.what();
  }
  EXPECT_FALSE(jit.cache().has_entry(jit.cache_key(src)));  // nothing a later start would trip over
}

TEST(CppJit, LongCompilerOutputIsCutToFortyLines) {
  ScratchDir dir;
  CppJit jit(dir.path());
  std::string bad;
  for (int i = 0; i < 60; ++i) bad += "int f" + std::to_string(i) + "() { return undeclared_" + std::to_string(i) + "; }\n";
  try {
    jit.compile(bad);
    FAIL() << "undeclared names compiled";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "undeclared_0")) << msg;
    EXPECT_FALSE(contains(msg, "undeclared_59")) << msg;
    EXPECT_TRUE(contains(msg, "cut after 40 lines")) << msg;
  }
}

TEST(CppJit, MissingSymbolIsAnErrorNamingIt) {
  ScratchDir dir;
  CppJit jit(dir.path());
  auto mod = jit.compile(kSaxpySource);
  EXPECT_TRUE(mod->has_symbol("saxpy"));
  EXPECT_FALSE(mod->has_symbol("saxpy_v2"));
  try {
    mod->symbol<void (*)()>("saxpy_v2");
    FAIL() << "a missing symbol was found";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "'saxpy_v2'")) << e.what();
    EXPECT_TRUE(contains(e.what(), "extern \"C\"")) << e.what();
  }
}

// n kernels that each add a different constant: kernel k must add k.
std::vector<std::string> add_constant_sources(int n, const std::string& salt) {
  std::vector<std::string> v;
  for (int k = 0; k < n; ++k) {
    v.push_back("// " + salt + "\n#include <cstdint>\nextern \"C\" void add_k(int64_t n, float* y) {\n"
                "#pragma omp parallel for simd\n  for (int64_t i = 0; i < n; ++i) y[i] += " +
                std::to_string(k) + ".0f;\n}\n");
  }
  return v;
}

TEST(CppJit, CompileManyReturnsEachSourcesModuleInOrder) {
  ScratchDir dir;
  CppJit jit(dir.path());
  auto sources = add_constant_sources(4, "many");
  sources.push_back(sources[1]);  // a repeat compiles once
  auto mods = jit.compile_many(sources);
  ASSERT_EQ(mods.size(), 5u);
  for (int k = 0; k < 4; ++k) {
    std::vector<float> y(100, 1.f);
    mods[k]->symbol<void (*)(int64_t, float*)>("add_k")(100, y.data());
    EXPECT_EQ(y[0], 1.f + k);
    EXPECT_EQ(y[99], 1.f + k);
  }
  EXPECT_EQ(mods[4].get(), mods[1].get());
  EXPECT_EQ(jit.stats().compiles, 4);

  // All loaded: nothing compiles, nothing is read from disk.
  auto again = jit.compile_many(sources);
  EXPECT_EQ(again[2].get(), mods[2].get());
  EXPECT_EQ(jit.stats().compiles, 4);
  EXPECT_EQ(jit.stats().memory_hits, 5 + 1);
}

// How many compiler processes ran at once, from the "start NS" / "end NS"
// lines the wrapper below writes.
int max_concurrent(const std::filesystem::path& log) {
  std::ifstream in(log);
  std::vector<std::pair<long long, int>> events;
  std::string what;
  for (long long ns; in >> what >> ns;) events.emplace_back(ns, what == "start" ? 1 : -1);
  std::sort(events.begin(), events.end());  // at equal times an end (-1) sorts first
  int now = 0, most = 0;
  for (const auto& e : events) most = std::max(most, now += e.second);
  return most;
}

TEST(CppJit, CompileManyRunsTheCompilesConcurrently) {
  ScratchDir dir;
  // g++ behind a wrapper that logs when each compile starts and ends and
  // first sleeps, so compiles overlap whenever they run in parallel, however
  // busy the machine's cores are.
  std::filesystem::path log = dir.path() / "times.log", cxx = dir.path() / "slow-g++";
  std::ofstream(cxx) << "#!/bin/sh\necho start $(date +%s%N) >> '" << log.string()
                     << "'\nsleep 0.3\ng++ \"$@\"\nrc=$?\necho end $(date +%s%N) >> '" << log.string()
                     << "'\nexit $rc\n";
  std::filesystem::permissions(cxx, std::filesystem::perms::owner_all);
  kiln::testing::ScopedEnv use_wrapper("KILN_CXX", cxx.c_str()), four_jobs("KILN_COMPILE_JOBS", "4");
  CppJit jit(dir.path() / "cache");
  jit.cache_key("");  // the --version probe, before the log counts
  std::filesystem::remove(log);
  auto mods = jit.compile_many(add_constant_sources(4, "concurrent"));
  EXPECT_EQ(jit.stats().compiles, 4);
  std::vector<float> y(8, 0.f);
  mods[3]->symbol<void (*)(int64_t, float*)>("add_k")(8, y.data());
  EXPECT_EQ(y[7], 3.f);
  int most = max_concurrent(log);
  EXPECT_GE(most, 2) << "compile_many ran its compiles one after another";
  std::printf("compile_many with 4 jobs: up to %d compiles at once\n", most);
}

TEST(CppJit, CompileManyFinishesTheGoodSourcesWhenOneFails) {
  ScratchDir dir;
  CppJit jit(dir.path());
  auto sources = add_constant_sources(3, "one-bad");
  sources.insert(sources.begin() + 1, "this is not C++;\n");
  EXPECT_THROW(jit.compile_many(sources), Error);
  for (int i : {0, 2, 3}) EXPECT_TRUE(jit.cache().has_entry(jit.cache_key(sources[i]))) << i;
  EXPECT_FALSE(jit.cache().has_entry(jit.cache_key(sources[1])));
}

}  // namespace
}  // namespace kiln::compiler::codegen
