// kiln cache --info / --clear, run as a user runs them, over a cache the
// test fills with one compiled kernel (docs/kernel-cache.md).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "compiler/codegen/cpp/jit_compiler.h"

namespace fs = std::filesystem;

namespace {

struct CacheRun {
  int rc = -1;
  std::string out;
};

CacheRun kiln_cache(const fs::path& cache, const std::string& args) {
  fs::path out = cache / "out.txt";
  std::string cmd = "env KILN_CACHE_DIR='" + cache.string() + "' '" + std::string(KILN_BIN) + "' cache " + args +
                    " >'" + out.string() + "' 2>&1";
  int status = std::system(cmd.c_str());
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ss.str()};
}

TEST(CliCache, InfoCountsTheCompiledKernelsAndClearRemovesThem) {
  fs::path cache = fs::temp_directory_path() / ("kiln_cli_cache_" + std::to_string(getpid()));
  fs::remove_all(cache);
  kiln::compiler::codegen::CppJit jit(cache);
  auto mod = jit.compile("extern \"C\" int forty_two() { return 42; }\n");
  ASSERT_EQ(mod->symbol<int (*)()>("forty_two")(), 42);
  // Two autotuning choices, as max-autotune writes them (ops/conv_autotune.h).
  fs::create_directories(cache / "autotune-v1");
  std::ofstream(cache / "autotune-v1" / "conv.tsv") << "cpu|isa1|threads2|onednn2.6.3 0:1,2,3,3:4,3,3\tdirect\n"
                                                    << "cpu|isa1|threads2|onednn2.6.3 1:1,2,3,3:4,3,3\tauto\n";

  CacheRun info = kiln_cache(cache, "--info");
  EXPECT_EQ(info.rc, 0) << info.out;
  EXPECT_NE(info.out.find("1 compiled modules, 1 sources, 0 temporary files"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find((cache / "cpp-v1").string()), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("builds for avx"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find(jit.compiler().version), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("2 convolution choices"), std::string::npos) << info.out;

  CacheRun clear = kiln_cache(cache, "--clear");
  EXPECT_EQ(clear.rc, 0) << clear.out;
  EXPECT_NE(clear.out.find("removed"), std::string::npos) << clear.out;
  EXPECT_FALSE(jit.cache().has_entry(mod->key()));
  EXPECT_FALSE(fs::exists(cache / "autotune-v1" / "conv.tsv")) << clear.out;
  EXPECT_NE(kiln_cache(cache, "").out.find("0 compiled modules"), std::string::npos);

  EXPECT_EQ(kiln_cache(cache, "--info --clear").rc, 2);  // one or the other
  fs::remove_all(cache);
}

}  // namespace
