#include "compiler/codegen/cpp/jit_compiler.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <sstream>
#include <thread>

#include "core/atomic_file.h"
#include "compiler/codegen/cpp/cache_key.h"
#include "kiln/error.h"

namespace kiln::compiler::codegen {
namespace fs = std::filesystem;

namespace {

// Flags every module gets. No -ffast-math: compiled results must match eager
// to 1e-4, and reductions that may reorder say so with `omp simd reduction`.
// -fno-math-errno lets sqrtf and friends become single instructions.
// -ffp-contract=off: a * b + c stays two roundings, as in the eager float32
// kernels (built with it too), so generated and eager results agree bit for bit.
const std::vector<std::string> kBaseFlags = {"-O3",        "-fopenmp",        "-fPIC",          "-shared",
                                             "-std=c++20", "-fno-math-errno", "-ffp-contract=off"};

// The end of the command line, after the source. -z defs: a call of a
// function that no library defines fails the link, naming it, instead of
// producing a .so that dlopen(RTLD_NOW) rejects on every later start. Sleef
// for transcendental functions, called by name (<sleef.h>: Sleef_expf16_u10)
// or through the GNU vector ABI that math_prelude.h's `omp declare simd`
// makes GCC emit (libsleefgnuabi: _ZGVeN16v_expf).
const std::vector<std::string> kLinkFlags = {"-Wl,-z,defs", "-lsleef", "-lsleefgnuabi"};

// Temporaries older than this are from dead compiles (a compile takes seconds).
constexpr std::chrono::seconds kStaleTempAge{3600};

std::string first_lines(const std::string& text, int n) {
  std::istringstream in(text);
  std::ostringstream out;
  std::string line;
  int i = 0;
  for (; i < n && std::getline(in, line); ++i) out << line << "\n";
  if (std::getline(in, line)) out << "[... compiler output cut after " << n << " lines]\n";
  return out.str();
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

}  // namespace

int compile_jobs() {
  if (const char* env = std::getenv("KILN_COMPILE_JOBS"); env && *env) {
    int n = std::atoi(env);
    KILN_CHECK(n >= 1, "KILN_COMPILE_JOBS=", env, " must be a positive number of parallel compiles");
    return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

CppJit::CppJit(fs::path cache_root) : cache_(std::move(cache_root)) {}

CppJit& CppJit::global() {
  static CppJit jit(KernelCache::default_root());
  return jit;
}

const CompilerIdentity& CppJit::compiler() {
  std::call_once(compiler_once_, [&] {
    bool ran = false;
    compiler_ = identify_compiler(find_system_compiler(), cache_.compiler_memo_dir(), ran);
    if (ran) ++compiler_invocations_;
  });
  return compiler_;
}

std::vector<std::string> CppJit::flags(const CompileOptions& options) const {
  std::vector<std::string> f = kBaseFlags;
  for (const std::string& m : options.isa.value_or(jit_isa()).compiler_flags()) f.push_back(m);
  for (const std::string& x : options.extra_flags) f.push_back(x);
  return f;
}

std::string CppJit::cache_key(const std::string& source, const CompileOptions& options) {
  const CompilerIdentity& cc = compiler();
  std::string fmt = std::to_string(KernelCache::kFormatVersion);
  std::string all_flags = join(flags(options), " ") + " | " + join(kLinkFlags, " ");
  return sha256_hex({"kiln-cpp-jit", fmt, cc.path, cc.version, all_flags, source});
}

std::shared_ptr<LoadedModule> CppJit::find_loaded_or_on_disk(const std::string& key, const JitIsa& isa) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = loaded_.find(key); it != loaded_.end()) {
      ++memory_hits_;
      return it->second;
    }
  }
  if (!cache_.has_entry(key)) return nullptr;
  std::string error;
  auto mod = LoadedModule::try_open(cache_.entry_path(key), key, isa, error);
  if (!mod) {
    // A file that is there but will not load: truncated by a full disk, or
    // written by something other than kiln. Rebuilding is always safe.
    ++corrupt_;
    std::cerr << "[kiln:cache] kernel cache entry " << cache_.entry_path(key).string()
              << " does not load (" << error << "); deleting it and compiling again\n";
    cache_.remove_entry(key);
    return nullptr;
  }
  ++disk_hits_;
  std::lock_guard<std::mutex> lock(mu_);
  return loaded_.emplace(key, mod).first->second;
}

std::shared_ptr<LoadedModule> CppJit::build(const std::string& key, const std::string& source, const JitIsa& isa,
                                            const std::vector<std::string>& flags) {
  std::call_once(cleanup_once_, [&] { cache_.remove_stale_temps(kStaleTempAge); });
  // The source is published under its final name first (content-addressed, so
  // two processes writing it agree), so the compiler's messages name a file
  // that is kept; the .so is compiled under a temporary name and renamed into
  // place only when complete: its presence is what makes an entry.
  fs::path src = cache_.source_path(key);
  // The directory may have been deleted under a running process (rm -rf of
  // the cache while a long run trains): make it again rather than fail.
  std::error_code ec;
  fs::create_directories(cache_.dir(), ec);
  write_file_atomically(src, source);
  fs::path temp_so = unique_temp_path(cache_.dir(), key, ".so");
  std::vector<std::string> argv = {compiler().path};
  argv.insert(argv.end(), flags.begin(), flags.end());
  for (const char* a : {"-o", temp_so.c_str(), src.c_str()}) argv.emplace_back(a);
  argv.insert(argv.end(), kLinkFlags.begin(), kLinkFlags.end());

  ++compiles_;
  ++compiler_invocations_;
  auto t0 = std::chrono::steady_clock::now();
  ProcessResult r = run_process(argv, unique_temp_path(cache_.dir(), key, ".log"));
  compile_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  if (!r.ok()) {
    std::error_code ec;
    fs::remove(temp_so, ec);
    std::string how = r.term_signal ? "was killed by signal " + std::to_string(r.term_signal)
                                    : "failed with exit code " + std::to_string(r.exit_code);
    KILN_FAIL("compiling generated C++ ", how, "; the source is kept at ", src.string(), "\ncommand: ",
              join(argv, " "), "\n", first_lines(r.output, 40),
              "(a kiln code generator bug if the source came from kiln: please report it with the source file)");
  }
  publish_file(temp_so, cache_.entry_path(key));
  std::string error;
  auto mod = LoadedModule::try_open(cache_.entry_path(key), key, isa, error);
  KILN_CHECK(mod, "the freshly compiled kernel module ", cache_.entry_path(key).string(), " does not load: ", error,
             "\n(source: ", src.string(), ")");
  return mod;
}

std::shared_ptr<LoadedModule> CppJit::get_or_build(const std::string& key, const std::string& source,
                                                   const CompileOptions& options) {
  JitIsa isa = options.isa.value_or(jit_isa());
  if (auto mod = find_loaded_or_on_disk(key, isa)) return mod;

  std::promise<std::shared_ptr<LoadedModule>> promise;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (auto it = loaded_.find(key); it != loaded_.end()) return it->second;  // built meanwhile
    if (auto it = in_flight_.find(key); it != in_flight_.end()) {
      auto pending = it->second;
      lock.unlock();
      ++memory_hits_;
      return pending.get();  // another thread is compiling this key; share its result (or error)
    }
    in_flight_.emplace(key, promise.get_future().share());
  }
  try {
    auto mod = build(key, source, isa, flags(options));
    std::lock_guard<std::mutex> lock(mu_);
    loaded_.emplace(key, mod);
    in_flight_.erase(key);
    promise.set_value(mod);
    return mod;
  } catch (...) {
    // Failures are not remembered: a later call compiles again (and fails
    // again, with the same message) rather than hiding behind a stale error.
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_.erase(key);
    promise.set_exception(std::current_exception());
    throw;
  }
}

std::shared_ptr<LoadedModule> CppJit::compile(const std::string& source, const CompileOptions& options) {
  return get_or_build(cache_key(source, options), source, options);
}

std::vector<std::shared_ptr<LoadedModule>> CppJit::compile_many(const std::vector<std::string>& sources,
                                                                const CompileOptions& options) {
  const size_t n = sources.size();
  std::vector<std::shared_ptr<LoadedModule>> out(n);
  std::vector<std::string> keys(n);
  std::vector<size_t> misses;
  JitIsa isa = options.isa.value_or(jit_isa());
  // Hits first, on this thread: a warm start starts no threads.
  for (size_t i = 0; i < n; ++i) {
    keys[i] = cache_key(sources[i], options);
    out[i] = find_loaded_or_on_disk(keys[i], isa);
    if (!out[i]) misses.push_back(i);
  }
  if (misses.empty()) return out;

  std::vector<std::exception_ptr> errors(n);
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t m; (m = next.fetch_add(1)) < misses.size();) {
      size_t i = misses[m];
      try {
        out[i] = get_or_build(keys[i], sources[i], options);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  size_t threads = std::min<size_t>(misses.size(), static_cast<size_t>(compile_jobs()));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return out;
}

JitStats CppJit::stats() const {
  JitStats s;
  s.compiles = compiles_;
  s.compiler_invocations = compiler_invocations_;
  s.disk_hits = disk_hits_;
  s.memory_hits = memory_hits_;
  s.corrupt_entries = corrupt_;
  s.compile_seconds = static_cast<double>(compile_ns_.load()) * 1e-9;
  return s;
}

std::shared_ptr<LoadedModule> compile_cpp(const std::string& source, const CompileOptions& options) {
  return CppJit::global().compile(source, options);
}

std::vector<std::shared_ptr<LoadedModule>> compile_cpp_many(const std::vector<std::string>& sources,
                                                            const CompileOptions& options) {
  return CppJit::global().compile_many(sources, options);
}

}  // namespace kiln::compiler::codegen
