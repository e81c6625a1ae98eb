// The kernel cache across JIT instances and processes: warm starts that
// never run the compiler, a compile killed mid-way, corrupt and abandoned
// files (src/compiler/codegen/cpp/kernel_cache.h, jit_compiler.h).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/atomic_file.h"
#include "compiler/codegen/cpp/elf_check.h"
#include "compiler/codegen/cpp/jit_compiler.h"
#include "cpp_jit_testing.h"
#include "kiln/error.h"

namespace kiln::compiler::codegen {
namespace {

namespace fs = std::filesystem;
using kiln::testing::ChildProcess;
using kiln::testing::kSaxpySource;
using kiln::testing::saxpy_is_correct;
using kiln::testing::ScratchDir;
using kiln::testing::spawn_self;
using kiln::testing::wait_child;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

int count_lines(const fs::path& p) {
  std::ifstream in(p);
  int n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

// A compiler that is g++ but writes each of its command lines to calls.log:
// the proof that a process did or did not run the compiler.
fs::path write_logging_compiler(const fs::path& dir) {
  fs::path script = dir / "logging-g++";
  std::ofstream(script) << "#!/bin/sh\necho \"$*\" >> '" << (dir / "calls.log").string() << "'\nexec g++ \"$@\"\n";
  fs::permissions(script, fs::perms::owner_all);
  return script;
}

// The child processes' side: each runs only when a parent test spawns it
// with KILN_TEST_JIT_CACHE set (DISABLED_ keeps it out of normal runs).
const char* child_cache_dir() { return std::getenv("KILN_TEST_JIT_CACHE"); }

TEST(CppJitChild, DISABLED_CompileSaxpyAndReportStats) {
  if (!child_cache_dir()) GTEST_SKIP() << "runs as a child of CppJitCache tests";
  CppJit jit(child_cache_dir());
  auto mod = jit.compile(kSaxpySource);
  EXPECT_TRUE(saxpy_is_correct(*mod));
  JitStats s = jit.stats();
  std::printf("child stats: compiles=%lld invocations=%lld disk_hits=%lld\n", static_cast<long long>(s.compiles),
              static_cast<long long>(s.compiler_invocations), static_cast<long long>(s.disk_hits));
}

TEST(CppJitChild, DISABLED_CompileSlowSource) {
  if (!child_cache_dir()) GTEST_SKIP() << "runs as a child of CppJitCache tests";
  CppJit jit(child_cache_dir());
  jit.compile(kiln::testing::slow_source(std::atoi(std::getenv("KILN_TEST_SLOW_FUNCTIONS"))));
  std::printf("child finished the slow compile\n");
}

TEST(CppJitCache, SecondInstanceOverTheSameDirectoryLoadsWithoutCompiling) {
  ScratchDir dir;
  {
    CppJit first(dir.path());
    EXPECT_TRUE(saxpy_is_correct(*first.compile(kSaxpySource)));
    EXPECT_EQ(first.stats().compiles, 1);
    EXPECT_EQ(first.stats().compiler_invocations, 2);  // --version, then the compile
    EXPECT_GT(first.stats().compile_seconds, 0.0);
  }
  CppJit second(dir.path());
  auto mod = second.compile(kSaxpySource);
  EXPECT_TRUE(saxpy_is_correct(*mod));
  JitStats s = second.stats();
  EXPECT_EQ(s.compiles, 0);
  EXPECT_EQ(s.compiler_invocations, 0);  // the --version answer is memoized on disk too
  EXPECT_EQ(s.disk_hits, 1);
  EXPECT_EQ(s.compile_seconds, 0.0);
}

// rm -rf of the cache while a process runs (kiln cache --clear keeps the
// directories; a user's rm does not): the next compile makes it again.
TEST(CppJitCache, ACacheDirectoryDeletedUnderTheProcessIsMadeAgain) {
  ScratchDir dir;
  CppJit jit(dir.path());
  EXPECT_TRUE(saxpy_is_correct(*jit.compile(kSaxpySource)));
  fs::remove_all(dir.path());
  auto mod = jit.compile("extern \"C\" int seven() { return 7; }\n");
  EXPECT_EQ(mod->symbol<int (*)()>("seven")(), 7);
  EXPECT_TRUE(jit.cache().has_entry(mod->key()));
}

TEST(CppJitCache, WarmStartInASecondProcessNeverRunsTheCompiler) {
  ScratchDir dir;
  fs::path cxx = write_logging_compiler(dir.path());
  fs::path cache = dir.path() / "cache", calls = dir.path() / "calls.log";
  {
    kiln::testing::ScopedEnv use_logging_compiler("KILN_CXX", cxx.c_str());
    CppJit cold(cache);
    EXPECT_TRUE(saxpy_is_correct(*cold.compile(kSaxpySource)));
  }
  ASSERT_EQ(count_lines(calls), 2) << "the cold process runs --version and one compile";

  ChildProcess child = spawn_self("CppJitChild.DISABLED_CompileSaxpyAndReportStats",
                                  {"KILN_CXX=" + cxx.string(), "KILN_TEST_JIT_CACHE=" + cache.string()},
                                  dir.path() / "child.out");
  ASSERT_GT(child.pid, 0);
  int status = wait_child(child);
  std::string out = child.read_output();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  EXPECT_TRUE(contains(out, "child stats: compiles=0 invocations=0 disk_hits=1")) << out;
  EXPECT_EQ(count_lines(calls), 2) << "the warm process ran the compiler";
}

TEST(CppJitCache, TwoProcessesCompilingOneSourceAtOnceBothSucceed) {
  ScratchDir dir;
  std::vector<ChildProcess> children;
  for (int i = 0; i < 2; ++i) {
    children.push_back(spawn_self("CppJitChild.DISABLED_CompileSaxpyAndReportStats",
                                  {"KILN_TEST_JIT_CACHE=" + dir.path().string()},
                                  dir.path() / ("child" + std::to_string(i) + ".out")));
    ASSERT_GT(children.back().pid, 0);
  }
  for (const ChildProcess& c : children) {
    int status = wait_child(c);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << c.read_output();
  }
  CppJit jit(dir.path());
  EXPECT_TRUE(saxpy_is_correct(*jit.compile(kSaxpySource)));
  EXPECT_EQ(jit.stats().compiles, 0);
  EXPECT_EQ(jit.cache().info().entries, 1);
  EXPECT_EQ(jit.cache().info().temps, 0);
}

// The acceptance test of issue 9: SIGKILL a process while g++ runs for it.
TEST(CppJitCache, KilledCompileLeavesNoEntryAndTheNextCompileIsCorrect) {
  ScratchDir dir;
  const int functions = 60;  // a few seconds of g++ -O3
  std::string source = kiln::testing::slow_source(functions);
  CppJit jit(dir.path());
  const std::string key = jit.cache_key(source);

  // Its own process group, so the kill takes the child and its g++ together,
  // as Ctrl-C or a job scheduler would.
  ChildProcess child = spawn_self("CppJitChild.DISABLED_CompileSlowSource",
                                  {"KILN_TEST_JIT_CACHE=" + dir.path().string(),
                                   "KILN_TEST_SLOW_FUNCTIONS=" + std::to_string(functions)},
                                  dir.path() / "child.out", /*own_process_group=*/true);
  ASSERT_GT(child.pid, 0);
  // The source is published just before the compiler starts.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!fs::exists(jit.cache().source_path(key)) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // g++ is well under way
  int status = 0;
  ASSERT_EQ(::waitpid(child.pid, &status, WNOHANG), 0)
      << "the slow compile finished before the kill; make slow_source larger\n" << child.read_output();
  ASSERT_EQ(::kill(-child.pid, SIGKILL), 0);
  status = wait_child(child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  EXPECT_FALSE(jit.cache().has_entry(key)) << "a killed compile published an entry";
  KernelCache::Info left = jit.cache().info();
  EXPECT_EQ(left.entries, 0);
  EXPECT_GE(left.temps, 1) << "the killed compile's temporaries (its .so and log) stay, ignored";

  auto mod = jit.compile(source);
  EXPECT_EQ(jit.stats().compiles, 1);
  EXPECT_EQ(jit.stats().corrupt_entries, 0);
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) * 0.5f - 4.f;
  double got = mod->symbol<double (*)(const float*, int64_t)>("slow_total")(x.data(), static_cast<int64_t>(x.size()));
  double want = kiln::testing::slow_total_reference(functions, x);
  EXPECT_NEAR(got, want, 1e-5 * std::abs(want));

  // The abandoned temporaries go once they are old (a compile that old is dead).
  EXPECT_EQ(jit.cache().remove_stale_temps(std::chrono::hours(1)), 0);
  for (const auto& e : fs::directory_iterator(jit.cache().dir())) {
    if (is_temp_file_name(e.path().filename().string())) {
      fs::last_write_time(e.path(), fs::file_time_type::clock::now() - std::chrono::hours(2));
    }
  }
  EXPECT_EQ(jit.cache().remove_stale_temps(std::chrono::hours(1)), left.temps);
  EXPECT_EQ(jit.cache().info().temps, 0);
  EXPECT_TRUE(jit.cache().has_entry(key));
}

TEST(CppJitCache, HalfWrittenEntryIsDeletedAndRebuilt) {
  ScratchDir good_dir, broken_dir;
  CppJit good(good_dir.path());
  auto mod = good.compile(kSaxpySource);
  // The first half of a real entry, as a disk filling up mid-copy would leave it.
  std::ifstream in(mod->path(), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CppJit jit(broken_dir.path());
  std::ofstream(jit.cache().entry_path(mod->key()), std::ios::binary) << bytes.substr(0, bytes.size() / 2);

  auto rebuilt = jit.compile(kSaxpySource);
  EXPECT_TRUE(saxpy_is_correct(*rebuilt));
  EXPECT_EQ(jit.stats().corrupt_entries, 1);
  EXPECT_EQ(jit.stats().compiles, 1);
  EXPECT_EQ(fs::file_size(jit.cache().entry_path(mod->key())), bytes.size());
}

TEST(CppJitCache, AnEntryCutAnywhereIsRejectedBeforeDlopen) {
  ScratchDir dir;
  CppJit jit(dir.path());
  auto mod = jit.compile(kSaxpySource);
  std::ifstream in(mod->path(), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string why;
  EXPECT_TRUE(elf_file_is_complete(mod->path(), why)) << why;
  fs::path cut = dir.path() / "cut.so";
  for (size_t n : {size_t{0}, size_t{10}, size_t{64}, size_t{200}, bytes.size() / 4, bytes.size() / 2,
                   bytes.size() - 1}) {
    std::ofstream(cut, std::ios::binary | std::ios::trunc) << bytes.substr(0, n);
    EXPECT_FALSE(elf_file_is_complete(cut, why)) << "cut at " << n << " of " << bytes.size();
  }
  std::ofstream(cut, std::ios::binary | std::ios::trunc) << "#!/bin/sh\necho not a library\n";
  EXPECT_FALSE(elf_file_is_complete(cut, why));
  EXPECT_TRUE(contains(why, "not a 64-bit ELF")) << why;
}

TEST(CppJitCache, TemporaryFilesAreNeverTakenForEntries) {
  ScratchDir dir;
  CppJit jit(dir.path());
  std::string key = jit.cache_key(kSaxpySource);
  std::ofstream(unique_temp_path(jit.cache().dir(), key, ".so")) << "partial";
  EXPECT_FALSE(jit.cache().has_entry(key));
  EXPECT_TRUE(saxpy_is_correct(*jit.compile(kSaxpySource)));
  EXPECT_EQ(jit.stats().compiles, 1);
  EXPECT_EQ(jit.stats().corrupt_entries, 0);
  EXPECT_EQ(jit.cache().info().temps, 1);  // young: it may be another process's compile in progress
}

TEST(CppJitCache, ThreadsAskingForOneSourceCompileItOnce) {
  ScratchDir dir;
  CppJit jit(dir.path());
  std::vector<std::shared_ptr<LoadedModule>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back([&, t] { got[t] = jit.compile(kSaxpySource); });
  for (auto& t : threads) t.join();
  for (int t = 1; t < 4; ++t) EXPECT_EQ(got[t].get(), got[0].get());
  EXPECT_EQ(jit.stats().compiles, 1);
  EXPECT_TRUE(saxpy_is_correct(*got[3]));
}

TEST(CppJitCache, InfoCountsAndClearEmpties) {
  ScratchDir dir;
  CppJit jit(dir.path());
  jit.compile(kSaxpySource);
  jit.compile(std::string(kSaxpySource) + "// another\n");
  KernelCache::Info info = jit.cache().info();
  EXPECT_EQ(info.entries, 2);
  EXPECT_EQ(info.sources, 2);
  EXPECT_GT(info.bytes, 0u);
  EXPECT_GT(jit.cache().clear(), 0);
  EXPECT_EQ(jit.cache().info().entries, 0);
  EXPECT_EQ(jit.cache().info().bytes, 0u);
  CppJit fresh(dir.path());  // after --clear a new process compiles again
  EXPECT_TRUE(saxpy_is_correct(*fresh.compile(kSaxpySource)));
  EXPECT_EQ(fresh.stats().compiles, 1);
}

TEST(CppJitCache, DefaultRootFollowsKilnCacheDirThenXdgThenHome) {
  kiln::testing::ScopedEnv kiln_dir("KILN_CACHE_DIR", "/tmp/kiln-a"), xdg("XDG_CACHE_HOME", "/tmp/xdg"),
      home("HOME", "/tmp/home-of-someone");
  EXPECT_EQ(KernelCache::default_root(), fs::path("/tmp/kiln-a"));
  kiln_dir.set(nullptr);
  EXPECT_EQ(KernelCache::default_root(), fs::path("/tmp/xdg/kiln"));
  xdg.set(nullptr);
  EXPECT_EQ(KernelCache::default_root(), fs::path("/tmp/home-of-someone/.cache/kiln"));
}

TEST(CppJitCache, UnwritableCacheDirectoryIsAClearError) {
  try {
    CppJit jit("/proc/kiln-cannot-write-here");
    FAIL() << "a cache under /proc was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "KILN_CACHE_DIR")) << e.what();
  }
}

TEST(CppJitCache, MissingCompilerIsAClearError) {
  ScratchDir dir;
  kiln::testing::ScopedEnv no_compiler("KILN_CXX", "/nonexistent/g++");
  CppJit jit(dir.path());
  try {
    jit.compile(kSaxpySource);
    ADD_FAILURE() << "compiled without a compiler";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "KILN_CXX=/nonexistent/g++")) << e.what();
  }
}

}  // namespace
}  // namespace kiln::compiler::codegen
