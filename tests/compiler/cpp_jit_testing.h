// Shared by the C++ JIT tests: a scratch cache directory per test, kernel
// sources with known answers, and running this test binary again as a second
// process (a warm start, a compile to kill).
#pragma once
#include <gtest/gtest.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/codegen/cpp/jit_compiler.h"
#include "testing/scoped_env.h"

extern char** environ;

namespace kiln::testing {

// A fresh directory under the system temp dir, removed at the end: the tests
// never touch the user's ~/.cache/kiln.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kiln-jit-test-XXXXXX").string();
    char* p = ::mkdtemp(tmpl.data());
    if (p) path_ = p;
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// y[i] += a * x[i], parallel and vectorized: the typical shape of a
// generated pointwise kernel.
inline const char* kSaxpySource = R"(#include <cstdint>
extern "C" void saxpy(int64_t n, float a, const float* x, float* y) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}
)";
using SaxpyFn = void (*)(int64_t, float, const float*, float*);

// Runs saxpy from `mod` on n values and compares with a loop computed here
// (exactly: one multiply-add per element, so FMA contraction would show).
inline ::testing::AssertionResult saxpy_is_correct(const kiln::compiler::codegen::LoadedModule& mod,
                                                   int64_t n = 10007) {
  std::vector<float> x(n), y(n), ref(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = 0.25f * static_cast<float>(i % 97) - 3.f;
    y[i] = ref[i] = 1.5f - 0.125f * static_cast<float>(i % 13);
  }
  mod.symbol<SaxpyFn>("saxpy")(n, 2.5f, x.data(), y.data());
  for (int64_t i = 0; i < n; ++i) {
    float want = ref[i] + 2.5f * x[i];  // exact in float32 for these inputs
    if (y[i] != want) return ::testing::AssertionFailure() << "y[" << i << "] = " << y[i] << ", want " << want;
  }
  return ::testing::AssertionSuccess();
}

// A source that takes g++ -O3 a few seconds: many functions with loops the
// vectorizer works on. slow_total(x, n) sums f_k(x, n) over k, whose value
// slow_total_reference computes.
inline std::string slow_source(int functions) {
  std::ostringstream s;
  s << "#include <cmath>\n#include <cstdint>\n";
  for (int k = 0; k < functions; ++k) {
    s << "static float f_" << k << "(const float* x, int64_t n) {\n  float acc = 0;\n"
      << "#pragma omp simd reduction(+:acc)\n  for (int64_t i = 0; i < n; ++i) acc += x[i] * " << (k % 7 + 1)
      << ".0f + std::fabs(x[i] - " << (k % 5) << ".0f);\n  return acc;\n}\n";
  }
  s << "extern \"C\" double slow_total(const float* x, int64_t n) {\n  double t = 0;\n";
  for (int k = 0; k < functions; ++k) s << "  t += f_" << k << "(x, n);\n";
  s << "  return t;\n}\n";
  return s.str();
}
inline double slow_total_reference(int functions, const std::vector<float>& x) {
  double t = 0;
  for (int k = 0; k < functions; ++k) {
    float acc = 0;
    for (float v : x) acc += v * static_cast<float>(k % 7 + 1) + std::fabs(v - static_cast<float>(k % 5));
    t += acc;
  }
  return t;
}

// The test binary run again with `filter` (a DISABLED_ test, which only runs
// when asked) and extra environment entries "NAME=value".
struct ChildProcess {
  pid_t pid = -1;
  std::filesystem::path output;  // its stdout + stderr
  std::string read_output() const {
    std::ifstream in(output);
    std::ostringstream os;
    os << in.rdbuf();
    return os.str();
  }
};
inline ChildProcess spawn_self(const std::string& filter, const std::vector<std::string>& env_extra,
                               const std::filesystem::path& output, bool own_process_group = false) {
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<std::string> args = {self, "--gtest_also_run_disabled_tests", "--gtest_filter=" + filter};
  // Ours first: getenv returns the first entry of a name.
  std::vector<std::string> ordered(env_extra);
  for (char** e = environ; *e; ++e) ordered.emplace_back(*e);
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : ordered) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  if (own_process_group) {
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
  }
  ChildProcess c;
  c.output = output;
  if (posix_spawn(&c.pid, self.c_str(), &fa, &attr, argv.data(), envp.data()) != 0) c.pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  return c;
}
// waitpid's status.
inline int wait_child(const ChildProcess& c) {
  int status = 0;
  while (::waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

}  // namespace kiln::testing
