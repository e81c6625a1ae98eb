// Mixed precision on CUDA: the policy's dtypes, the zoo models' training
// step under autocast against the CPU's float32 step, float32 master
// gradients on the device, and the gradient scaler's skipped step there.
// Without a CUDA device each test skips with the reason.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "testing/compare.h"
#include "testing/zoo_step.h"

namespace kiln {
namespace {

using testing::scaled_error;
using testing::zoo_step;

const Device kCuda = Device::cuda(0);

#define SKIP_WITHOUT_CUDA() \
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason()

// The same bound as the CPU's bf16 autocast check (tests/models): 8
// significant bits; float16's 11 bits land well inside it.
constexpr double kLowPrecisionTolerance = 5e-2;

Tensor randn_on(const Shape& s, uint64_t seed, Device d) {
  Generator g(seed);
  return randn(s, {}, &g).to(d);
}

TEST(CudaAutocast, PolicyDtypesOnTheDevice) {
  SKIP_WITHOUT_CUDA();
  Tensor x = randn_on({4, 3, 8, 8}, 1, kCuda), w = randn_on({5, 3, 3, 3}, 2, kCuda);
  Tensor a = randn_on({6, 7}, 3, kCuda), lw = randn_on({2, 7}, 4, kCuda), lb = randn_on({2}, 5, kCuda);
  for (DType low : {DType::BFloat16, DType::Float16}) {
    autocast ac(low);
    Tensor y = conv2d(x, w);
    EXPECT_EQ(y.dtype(), low);
    EXPECT_EQ(y.device(), kCuda);
    EXPECT_EQ(linear(a, lw, lb).dtype(), low);
    EXPECT_EQ(softmax(y, 1).dtype(), DType::Float32);
    Tensor rm = zeros({5}).to(kCuda), rv = ones({5}).to(kCuda);
    Tensor bn = batch_norm(y, ones({5}).to(kCuda), zeros({5}).to(kCuda), rm, rv, true, 0.1, 1e-5);
    EXPECT_EQ(bn.dtype(), low);
    EXPECT_EQ(rm.dtype(), DType::Float32);
  }
}

// cuDNN and cuBLASLt on 16-bit operands with float32 accumulation against
// the CPU's float32 computation of the same 16-bit operands.
TEST(CudaAutocast, SixteenBitConvAndMatmulMatchTheCpu) {
  SKIP_WITHOUT_CUDA();
  Tensor x = randn_on({8, 16, 12, 12}, 1, Device::cpu()), w = randn_on({32, 16, 3, 3}, 2, Device::cpu());
  Tensor a = randn_on({64, 96}, 3, Device::cpu()), b = randn_on({96, 48}, 4, Device::cpu());
  for (DType low : {DType::BFloat16, DType::Float16}) {
    Tensor want_conv = conv2d(x.to(low).to(DType::Float32), w.to(low).to(DType::Float32));
    Tensor want_mm = matmul(a.to(low).to(DType::Float32), b.to(low).to(DType::Float32));
    autocast ac(low);
    Tensor got_conv = conv2d(x.to(kCuda), w.to(kCuda)), got_mm = matmul(a.to(kCuda), b.to(kCuda));
    // The only difference: the output's rounding to 16 bits (and the order of the float32 sums).
    EXPECT_LE(scaled_error(got_conv, want_conv), 1e-2) << dtype_name(low);
    EXPECT_LE(scaled_error(got_mm, want_mm), 1e-2) << dtype_name(low);
  }
}

// Pointwise ops on 16-bit tensors (autocast's activations): the CUDA loop
// reads and writes them directly, with float math and one rounding, as the
// CPU computes them; numbers stay float (never rounded to 16 bits).
// Contiguous, odd-sized (the vector loop's tail), offset (unaligned packs)
// and broadcast operands.
TEST(CudaAutocast, SixteenBitPointwiseOpsMatchTheCpu) {
  SKIP_WITHOUT_CUDA();
  using Fn = std::function<Tensor(const Tensor&, const Tensor&)>;
  const std::vector<std::pair<std::string, Fn>> ops = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, add(abs(b), 0.5)); }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
      {"relu", [](const Tensor& a, const Tensor&) { return relu(a); }},
      {"gelu", [](const Tensor& a, const Tensor&) { return gelu(a); }},
      {"sigmoid", [](const Tensor& a, const Tensor&) { return sigmoid(a); }},
      {"clamp", [](const Tensor& a, const Tensor&) { return clamp(a, -0.3, 0.7); }},
      {"mul_number", [](const Tensor& a, const Tensor&) { return mul(a, 0.1); }},
      {"add_number", [](const Tensor& a, const Tensor&) { return add(a, 1e-3); }},
      {"where", [](const Tensor& a, const Tensor& b) { return where(gt(a, b), a, b); }},
      {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b).to(a.dtype()); }},
  };
  for (DType low : {DType::BFloat16, DType::Float16}) {
    Tensor a = randn_on({37, 65}, 1, Device::cpu()).to(low), b = randn_on({37, 65}, 2, Device::cpu()).to(low);
    Tensor row = randn_on({65}, 3, Device::cpu()).to(low);
    struct Operands {
      std::string name;
      Tensor a, b;
    };
    const std::vector<Operands> operands = {
        {"dense", a, b},
        {"offset", a.reshape({-1}).slice(0, 1, 2000), b.reshape({-1}).slice(0, 3, 2002)},
        {"broadcast", a, row},
    };
    for (const auto& [op_name, f] : ops) {
      for (const Operands& o : operands) {
        Tensor want = f(o.a, o.b);
        Tensor got = f(o.a.to(kCuda), o.b.to(kCuda));
        EXPECT_EQ(got.dtype(), want.dtype()) << op_name << " " << o.name;
        // Within one 16-bit ulp: the float32 math may differ in its last bits
        // (CUDA's expf against the CPU's), which can move the rounding by one.
        const double tol = 2 * testing::rounding_of(low);
        EXPECT_TENSOR_CLOSE(got.to(Device::cpu()), want, tol, tol)
            << dtype_name(low) << " " << op_name << " " << o.name;
      }
    }
  }
}

struct ZooCase {
  std::string model;
  DType dtype;
};
void PrintTo(const ZooCase& c, std::ostream* os) { *os << c.model << "_" << dtype_name(c.dtype); }

class CudaAutocastZoo : public ::testing::TestWithParam<ZooCase> {};

TEST_P(CudaAutocastZoo, StepMatchesTheCpusFloat32Step) {
  SKIP_WITHOUT_CUDA();
  const ZooCase c = GetParam();
  testing::ZooStep ref = zoo_step(c.model, Device::cpu(), std::nullopt);
  testing::ZooStep perturbed = zoo_step(c.model, Device::cpu(), std::nullopt, testing::rounding_of(c.dtype));
  testing::ZooStep gpu = zoo_step(c.model, kCuda, c.dtype);
  EXPECT_EQ(gpu.out.dtype(), c.dtype);
  EXPECT_EQ(gpu.out.device(), kCuda);
  for (const Tensor& g : gpu.grads) {
    if (g.defined()) {
      EXPECT_EQ(g.device(), kCuda);
    }
  }
  testing::expect_autocast_step_close(c.model + " (CUDA)", gpu, ref, perturbed, c.dtype, kLowPrecisionTolerance);
}

INSTANTIATE_TEST_SUITE_P(Models, CudaAutocastZoo,
                         ::testing::Values(ZooCase{"tutorial", DType::BFloat16}, ZooCase{"resnet18", DType::BFloat16},
                                           ZooCase{"airbench", DType::BFloat16}, ZooCase{"tutorial", DType::Float16},
                                           ZooCase{"airbench", DType::Float16}),
                         [](const ::testing::TestParamInfo<ZooCase>& i) {
                           return i.param.model + "_" + dtype_name(i.param.dtype);
                         });

TEST(CudaAutocast, GradScalerSkipsAnOverflowedStepOnTheDevice) {
  SKIP_WITHOUT_CUDA();
  Tensor w = randn_on({4, 8}, 1, kCuda).requires_grad_();
  Tensor x = randn_on({16, 8}, 2, kCuda);
  optim::SGD opt({w}, optim::SGDOptions(0.1));
  optim::GradScaler scaler;
  Tensor before = w.clone();
  Tensor loss;
  {
    autocast ac(DType::Float16);
    loss = sum(linear(x, w));
  }
  scaler.scale(loss).backward();
  {
    NoGradGuard ng;
    Tensor g = w.grad();
    g.slice(0, 0, 1).fill_(std::numeric_limits<double>::infinity());
  }
  EXPECT_FALSE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 32768.0);
  EXPECT_TENSOR_CLOSE(w.to(Device::cpu()), before.to(Device::cpu()), 0.0, 0.0);
}

}  // namespace
}  // namespace kiln
