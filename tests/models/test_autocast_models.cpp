// The zoo models under bf16 autocast on the CPU: one training step's output
// and parameter gradients against the float32 step (same weights, same
// batch), within bfloat16's tolerance, and every gradient float32.
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "testing/zoo_step.h"

namespace kiln {
namespace {

// bfloat16 keeps 8 significant bits; the outputs measured here are within
// 0.5% (tutorial) to 2.4% (resnet18) of float32's.
constexpr double kBf16Tolerance = 5e-2;

class AutocastZoo : public ::testing::TestWithParam<std::string> {};

TEST_P(AutocastZoo, Bf16StepMatchesFloat32OnCpu) {
  const std::string name = GetParam();
  const DType bf16 = DType::BFloat16;
  testing::ZooStep ref = testing::zoo_step(name, Device::cpu(), std::nullopt);
  testing::ZooStep perturbed = testing::zoo_step(name, Device::cpu(), std::nullopt, testing::rounding_of(bf16));
  testing::ZooStep low = testing::zoo_step(name, Device::cpu(), bf16);
  EXPECT_EQ(low.out.dtype(), bf16);  // the classifier is a linear layer
  testing::expect_autocast_step_close(name + " (CPU)", low, ref, perturbed, bf16, kBf16Tolerance);
}

INSTANTIATE_TEST_SUITE_P(Models, AutocastZoo, ::testing::Values("tutorial", "resnet18", "airbench"));

}  // namespace
}  // namespace kiln
