// kiln cache [--info] | --clear: what the compiled-kernel cache and the
// autotuning table hold, and emptying them (docs/kernel-cache.md). Clearing
// is always safe: a later run compiles and measures what it needs again.
#include <cstdio>

#include "cli/commands.h"
#include "compiler/codegen/cpp/host_isa.h"
#include "compiler/codegen/cpp/jit_compiler.h"
#include "ops/conv_autotune.h"

namespace kiln::cli {

int run_cache(const CacheCmdOptions& o) {
  using compiler::codegen::CppJit;
  using compiler::codegen::KernelCache;
  CppJit& jit = CppJit::global();
  const KernelCache& cache = jit.cache();
  if (o.clear) {
    long long n = cache.clear();
    std::printf("removed %lld files from %s\n", n, cache.dir().c_str());
    if (conv_autotune::clear()) std::printf("removed %s\n", conv_autotune::table_path().c_str());
    return 0;
  }
  KernelCache::Info i = cache.info();
  std::printf("kernel cache %s (KILN_CACHE_DIR)\n  %lld compiled modules, %lld sources, %lld temporary files, %.1f MB\n",
              cache.dir().c_str(), static_cast<long long>(i.entries), static_cast<long long>(i.sources),
              static_cast<long long>(i.temps), static_cast<double>(i.bytes) / 1e6);
  // What new entries are built with: a different compiler or ISA means other keys.
  std::printf("  builds for %s (KILN_CPU_ISA) with %s: %s\n", compiler::codegen::jit_isa().name().c_str(),
              jit.compiler().path.c_str(), jit.compiler().version.c_str());
  std::printf("autotuning table %s (max-autotune)\n  %lld convolution choices\n", conv_autotune::table_path().c_str(),
              static_cast<long long>(conv_autotune::table_entries()));
  return 0;
}

}  // namespace kiln::cli
