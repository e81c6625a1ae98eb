// split_compile.h: a graph's kernels spread over translation units that
// compile in parallel, then found by name across the modules.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "compiler/codegen/cpp/math_prelude.h"
#include "compiler/codegen/cpp/split_compile.h"
#include "cpp_jit_testing.h"
#include "kiln/error.h"

namespace kiln::compiler::codegen {
namespace {

using kiln::testing::ScopedEnv;
using kiln::testing::ScratchDir;

// Kernel k adds k (its length varies with k, to exercise the balancing).
std::vector<std::string> add_kernels(int n) {
  std::vector<std::string> v;
  for (int k = 0; k < n; ++k) {
    v.push_back("// kernel " + std::to_string(k) + std::string(static_cast<size_t>(k) * 40, '-') +
                "\nextern \"C\" void add_" + std::to_string(k) +
                "(int64_t n, float* y) {\n#pragma omp simd\n  for (int64_t i = 0; i < n; ++i) y[i] += " +
                std::to_string(k) + ".0f;\n}\n");
  }
  return v;
}

TEST(CppJitSplit, UnitsHoldEveryPieceOnceInOrderWithPreludeAndEpilogue) {
  std::vector<std::string> pieces = {"A;", "BB;", "CCC;", "DDDD;", "EEEEE;"};
  for (int units : {1, 2, 3, 5, 9}) {
    std::vector<std::string> tus = split_translation_units("<", pieces, ">", units);
    EXPECT_EQ(tus.size(), static_cast<size_t>(std::min(units, 5))) << units;
    std::string joined;
    for (const std::string& t : tus) {
      ASSERT_GE(t.size(), 3u);
      EXPECT_EQ(t.front(), '<');
      EXPECT_EQ(t.back(), '>');
      EXPECT_GT(t.size(), 2u) << "an empty unit for units=" << units;
      joined += t.substr(1, t.size() - 2);
    }
    EXPECT_EQ(joined, "A;BB;CCC;DDDD;EEEEE;") << units;
  }
  std::vector<std::string> two = split_translation_units("", pieces, "", 2);
  EXPECT_EQ(two[0], "A;BB;CCC;");  // 9 of 20 bytes: nearer half than 14 with the next piece
  EXPECT_EQ(split_translation_units("p", {}, "e", 4), std::vector<std::string>{"pe"});
}

TEST(CppJitSplit, KernelsFromEveryUnitAreFoundAndCorrect) {
  ScratchDir dir;
  CppJit jit(dir.path());
  ScopedEnv three_jobs("KILN_COMPILE_JOBS", "3");
  // The namespace around the functions, as the renderer writes it.
  ModuleSet set = compile_cpp_split(jit_math_prelude() + "namespace kiln_generated {\n", add_kernels(7),
                                    "}  // namespace kiln_generated\n", {}, &jit);
  EXPECT_EQ(set.modules().size(), 3u);
  EXPECT_EQ(jit.stats().compiles, 3);
  for (int k = 0; k < 7; ++k) {
    std::vector<float> y(50, 1.f);
    set.symbol<void (*)(int64_t, float*)>("add_" + std::to_string(k))(50, y.data());
    EXPECT_EQ(y[49], 1.f + static_cast<float>(k)) << k;
  }
  try {
    set.symbol<void (*)()>("add_7");
    FAIL() << "a missing kernel was found";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'add_7'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln::compiler::codegen
