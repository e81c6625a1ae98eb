#include "compiler/codegen/cpp/system_compiler.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/atomic_file.h"
#include "compiler/codegen/cpp/cache_key.h"
#include "kiln/error.h"

extern char** environ;

namespace kiln::compiler::codegen {
namespace fs = std::filesystem;

namespace {

// `name` with a slash is a path; otherwise the first executable of that name on PATH.
std::string resolve_program(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    return access(name.c_str(), X_OK) == 0 ? fs::absolute(name).string() : std::string();
  }
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    // An empty PATH entry means the current directory.
    fs::path candidate = (dir.empty() ? fs::current_path() : fs::path(dir)) / name;
    if (access(candidate.c_str(), X_OK) == 0) return fs::absolute(candidate).string();
  }
  return {};
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

}  // namespace

std::string find_system_compiler() {
  if (const char* env = std::getenv("KILN_CXX"); env && *env) {
    std::string p = resolve_program(env);
    KILN_CHECK(!p.empty(), "KILN_CXX=", env, " is not an executable file or a program on PATH; point it at a C++ "
               "compiler (g++) or unset it");
    return p;
  }
  for (const char* name : {"g++", "c++"}) {
    if (std::string p = resolve_program(name); !p.empty()) return p;
  }
  KILN_FAIL("kiln's C++ code generator (kiln::compile's default backend, \"cpp\") needs a C++ compiler, and "
            "neither g++ nor c++ is on PATH; install g++ (apt-get install g++), set KILN_CXX to a compiler's path, or "
            "compile with CompileOptions().backend(\"interpreter\") (the eager kernels, nothing generated)");
}

CompilerIdentity identify_compiler(const std::string& path, const fs::path& memo_dir, bool& ran_compiler) {
  ran_compiler = false;
  std::error_code ec;
  fs::path real = fs::canonical(path, ec);
  struct stat st{};
  KILN_CHECK(!ec && ::stat(real.c_str(), &st) == 0, "cannot stat the C++ compiler ", path, ": ", ec.message());
  std::string memo_key = sha256_hex({"compiler-identity", real.string(), std::to_string(st.st_size),
                                     std::to_string(st.st_mtim.tv_sec), std::to_string(st.st_mtim.tv_nsec)});
  fs::path memo = memo_dir / (memo_key + ".txt");
  if (std::string cached = read_file(memo); !cached.empty()) return {path, cached};

  ran_compiler = true;
  fs::create_directories(memo_dir, ec);
  ProcessResult r = run_process({path, "--version"}, unique_temp_path(memo_dir, memo_key, ".log"));
  KILN_CHECK(r.ok(), "the C++ compiler ", path, " failed to print its version (exit ", r.exit_code, ", signal ",
             r.term_signal, "):\n", r.output);
  std::string version = r.output.substr(0, r.output.find('\n'));
  KILN_CHECK(!version.empty(), "the C++ compiler ", path, " printed no version for --version");
  write_file_atomically(memo, version);
  return {path, version};
}

ProcessResult run_process(const std::vector<std::string>& argv, const fs::path& log_path) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  // posix_spawn (vfork-like in glibc) rather than fork: kiln's address space
  // can be gigabytes, and compiles are started from several threads at once.
  int err = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  KILN_CHECK(err == 0, "cannot start ", argv[0], ": ", std::strerror(err));

  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    KILN_ASSERT(errno == EINTR, "waitpid: ", std::strerror(errno));
  }
  ProcessResult r;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.term_signal = WTERMSIG(status);
  r.output = read_file(log_path);
  std::error_code ec;
  fs::remove(log_path, ec);
  return r;
}

}  // namespace kiln::compiler::codegen
