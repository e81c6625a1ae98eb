// Generated C++ source in, callable functions out: compile with the system
// compiler into a shared object, cache it on disk, dlopen it.
//
//   using Saxpy = void (*)(int64_t, float, const float*, float*);
//   auto mod = compile_cpp(R"(
//     extern "C" void saxpy(long n, float a, const float* x, float* y) {
//     #pragma omp parallel for simd
//       for (long i = 0; i < n; ++i) y[i] += a * x[i];
//     })");
//   mod->symbol<Saxpy>("saxpy")(n, 2.f, x, y);
//
// Each source is one translation unit built with
//   <compiler> -O3 -fopenmp -fPIC -shared -std=c++20 -fno-math-errno <ISA flags> <extra flags>
//              -Wl,-z,defs -lsleef -lsleefgnuabi
// so it may use OpenMP pragmas, <sleef.h> (Sleef_expf16_u10, ...) and, under
// #if KILN_JIT_AVX512, AVX-512 intrinsics. Functions to call must be extern "C".
//
// The cache key is SHA-256 over (source, compiler path, compiler --version,
// flags, cache format version): a warm start — every key already on disk —
// loads the .so files and never runs the compiler, not even for --version.
// docs/kernel-cache.md has the layout, the environment variables and timings.
#pragma once
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "compiler/codegen/cpp/host_isa.h"
#include "compiler/codegen/cpp/kernel_cache.h"
#include "compiler/codegen/cpp/loaded_module.h"
#include "compiler/codegen/cpp/system_compiler.h"

namespace kiln::compiler::codegen {

struct CompileOptions {
  std::optional<JitIsa> isa;             // unset: jit_isa() (KILN_CPU_ISA, else the host's widest)
  std::vector<std::string> extra_flags;  // appended to the command line; part of the key ("-DTILE=64")
};

struct JitStats {
  int64_t compiles = 0;              // sources compiled (cache misses), failed ones included
  int64_t compiler_invocations = 0;  // every process of the compiler: compiles + --version probes
  int64_t disk_hits = 0;             // loaded from an existing entry, no compile
  int64_t memory_hits = 0;           // already loaded by this CppJit, nothing done
  int64_t corrupt_entries = 0;       // entries that would not load: deleted and rebuilt
  double compile_seconds = 0;        // wall time of the compiler processes, summed over compiles
};

class CppJit {
 public:
  // A JIT over the cache in `cache_root` (entries in <root>/cpp-v1/). Tests
  // make one over a temporary directory; a second CppJit over the same
  // directory behaves as a second process would (its own loads and stats).
  explicit CppJit(std::filesystem::path cache_root);
  // The process's JIT over KernelCache::default_root() (KILN_CACHE_DIR),
  // made on first use.
  static CppJit& global();

  // The module built from `source`; compiles only on a cache miss. A compile
  // error is a kiln::Error with the compiler's first 40 lines of output and
  // the path of the kept source.
  std::shared_ptr<LoadedModule> compile(const std::string& source, const CompileOptions& options = {});
  // The modules of independent sources, in order; misses compile in
  // parallel (KILN_COMPILE_JOBS, default: the number of hardware threads).
  // If any fails, the others still finish (and are cached), then the first
  // error is thrown.
  std::vector<std::shared_ptr<LoadedModule>> compile_many(const std::vector<std::string>& sources,
                                                          const CompileOptions& options = {});

  // The cache key and the full command-line flags `source` would get (for
  // dumps, `kiln explain` and tests).
  std::string cache_key(const std::string& source, const CompileOptions& options = {});
  std::vector<std::string> flags(const CompileOptions& options = {}) const;

  // The compiler this JIT runs (found and identified on first use).
  const CompilerIdentity& compiler();

  JitStats stats() const;
  const KernelCache& cache() const { return cache_; }

 private:
  // The module for `key` if it is loaded or loads from disk; nullptr on a
  // miss (a corrupt entry is deleted and counts as a miss).
  std::shared_ptr<LoadedModule> find_loaded_or_on_disk(const std::string& key, const JitIsa& isa);
  std::shared_ptr<LoadedModule> build(const std::string& key, const std::string& source, const JitIsa& isa,
                                      const std::vector<std::string>& flags);
  std::shared_ptr<LoadedModule> get_or_build(const std::string& key, const std::string& source,
                                             const CompileOptions& options);

  KernelCache cache_;
  std::once_flag compiler_once_;
  CompilerIdentity compiler_;
  std::once_flag cleanup_once_;

  std::mutex mu_;  // guards the two maps
  std::unordered_map<std::string, std::shared_ptr<LoadedModule>> loaded_;
  // Keys being built now, so two threads asking for one source compile it once.
  std::unordered_map<std::string, std::shared_future<std::shared_ptr<LoadedModule>>> in_flight_;

  std::atomic<int64_t> compiles_{0}, compiler_invocations_{0}, disk_hits_{0}, memory_hits_{0}, corrupt_{0};
  std::atomic<int64_t> compile_ns_{0};
};

// How many compiles run at once: KILN_COMPILE_JOBS, else the hardware threads.
int compile_jobs();

// CppJit::global().compile / compile_many.
std::shared_ptr<LoadedModule> compile_cpp(const std::string& source, const CompileOptions& options = {});
std::vector<std::shared_ptr<LoadedModule>> compile_cpp_many(const std::vector<std::string>& sources,
                                                            const CompileOptions& options = {});

}  // namespace kiln::compiler::codegen
