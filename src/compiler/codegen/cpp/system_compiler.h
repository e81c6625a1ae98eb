// The system C++ compiler, found at run time, and running it as a child
// process.
//
// The JIT shells out to g++ rather than linking a compiler library: g++ is
// what Debian ships with OpenMP and Sleef ready, and a separate process is
// what makes a killed or crashed compile harmless to kiln.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace kiln::compiler::codegen {

// The compiler a cache key names: its absolute path and the first line of
// its --version output ("g++ (Debian 12.2.0-14+deb12u1) 12.2.0").
struct CompilerIdentity {
  std::string path;
  std::string version;
};

// KILN_CXX (a path or a name looked up on PATH), else g++, else c++ on PATH,
// as an absolute path. None found is a kiln::Error saying what to install.
std::string find_system_compiler();

// The identity of the compiler at `path`. Asking it for --version costs a
// process, which a warm start must not pay, so the answer is memoized in
// `memo_dir` per binary (its resolved path, size and modification time: an
// upgraded compiler is a different file). `ran_compiler` is set when the
// compiler had to be run.
CompilerIdentity identify_compiler(const std::string& path, const std::filesystem::path& memo_dir,
                                   bool& ran_compiler);

struct ProcessResult {
  int exit_code = -1;    // the exit status when the process exited
  int term_signal = 0;   // the signal that ended it, else 0
  std::string output;    // stdout and stderr, interleaved
  bool ok() const { return term_signal == 0 && exit_code == 0; }
};

// Runs argv[0] (an absolute path) with argv, stdin from /dev/null, stdout and
// stderr into `log_path` (read back into output, then removed), and waits.
// A program that cannot be started is a kiln::Error.
ProcessResult run_process(const std::vector<std::string>& argv, const std::filesystem::path& log_path);

}  // namespace kiln::compiler::codegen
