// Helpers for tests of the float32 kernels, which exist once per instruction
// set (AVX2 and AVX-512 builds of the same code): a fixture that runs each
// test under each set, and a small vector builder.
#pragma once
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/cpu_features.h"
#include "kiln/kiln.h"

namespace kiln::testing {

// True when the host can run the AVX-512 kernels.
inline bool hardware_has_avx512() {
  try {
    set_cpu_isa_override(CpuIsa::Avx512);
    clear_cpu_isa_override();
    return true;
  } catch (const Error&) {
    return false;
  }
}

// TEST_P fixtures derive from this and are instantiated with KILN_INSTANTIATE_ISA.
class IsaTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  void SetUp() override {
    if (GetParam() == CpuIsa::Avx512 && !hardware_has_avx512()) GTEST_SKIP() << "CPU has no AVX-512";
    set_cpu_isa_override(GetParam());
  }
  void TearDown() override { clear_cpu_isa_override(); }
};

// A 1-D float32 tensor from values.
inline Tensor vec(std::vector<float> v) {
  Shape shape{static_cast<int64_t>(v.size())};
  return from_vector(v, shape);
}

}  // namespace kiln::testing

#define KILN_INSTANTIATE_ISA(Fixture)                                                         \
  INSTANTIATE_TEST_SUITE_P(Isa, Fixture, ::testing::Values(::kiln::CpuIsa::Avx2, ::kiln::CpuIsa::Avx512), \
                           [](const ::testing::TestParamInfo<::kiln::CpuIsa>& i) {           \
                             return std::string(::kiln::cpu_isa_name(i.param));              \
                           })
