// A kernel-cache directory of its own for one test (KILN_CACHE_DIR), emptied
// afterwards, with the in-memory autotuning table forgotten on both ends (as
// a new process would start): the tests of per-layer choices.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>

#include "ops/conv_autotune.h"
#include "testing/scoped_env.h"

namespace kiln::compiler::testing {

class ScopedCacheDir {
 public:
  ScopedCacheDir()
      : dir_(std::filesystem::temp_directory_path() / ("kiln_autotune_" + std::to_string(::getpid()))),
        env_("KILN_CACHE_DIR", dir_.string()) {
    std::filesystem::remove_all(dir_);
    conv_autotune::reset_for_tests();
  }
  ~ScopedCacheDir() {
    conv_autotune::reset_for_tests();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::filesystem::path table() const { return dir_ / "autotune-v1" / "conv.tsv"; }

 private:
  std::filesystem::path dir_;
  kiln::testing::ScopedEnv env_;
};

}  // namespace kiln::compiler::testing
