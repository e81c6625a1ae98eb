// Channels-last (MemoryFormat::ChannelsLast): the layout API, and results in
// that layout equal to the NCHW results — on the CPU (whose kernels take
// channels-last inputs and write contiguous outputs) and on CUDA, where
// conv, batch norm, pooling and pointwise ops keep the layout, forward and
// backward. The CUDA cases skip without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "testing/cuda_skip.h"
#include "testing/zoo_step.h"

namespace kiln {
namespace {

using testing::scaled_error;

const Device kCuda = Device::cuda(0);


Tensor randn_seeded(const Shape& s, uint64_t seed) {
  Generator g(seed);
  return randn(s, {}, &g);
}

bool is_cl(const Tensor& t) { return suggest_memory_format(t) == MemoryFormat::ChannelsLast; }

TEST(ChannelsLast, LayoutApi) {
  Tensor x = randn_seeded({2, 3, 4, 5}, 1);
  EXPECT_EQ(suggest_memory_format(x), MemoryFormat::Contiguous);
  EXPECT_FALSE(is_contiguous(x, MemoryFormat::ChannelsLast));
  Tensor y = contiguous(x, MemoryFormat::ChannelsLast);
  EXPECT_EQ(y.strides(), (Shape{60, 1, 15, 3}));
  EXPECT_EQ(y.shape(), x.shape());
  EXPECT_TRUE(is_contiguous(y, MemoryFormat::ChannelsLast));
  EXPECT_FALSE(y.is_contiguous());
  EXPECT_TRUE(is_cl(y));
  EXPECT_TRUE(allclose(y, x, 0.0, 0.0));
  // Already channels-last: the tensor itself; back to NCHW: a contiguous copy.
  EXPECT_EQ(contiguous(y, MemoryFormat::ChannelsLast).impl(), y.impl());
  Tensor z = contiguous(y, MemoryFormat::Contiguous);
  EXPECT_TRUE(z.is_contiguous());
  EXPECT_TRUE(allclose(z, x, 0.0, 0.0));
  // [N, C, 1, 1] is dense in both formats, and suggests contiguous.
  Tensor p = randn_seeded({4, 6, 1, 1}, 2);
  EXPECT_TRUE(is_contiguous(p, MemoryFormat::ChannelsLast));
  EXPECT_EQ(suggest_memory_format(contiguous(p, MemoryFormat::ChannelsLast)), MemoryFormat::Contiguous);
  // Only 4-d tensors have a channels-last layout.
  EXPECT_THROW(contiguous(randn_seeded({2, 3, 4}, 3), MemoryFormat::ChannelsLast), Error);
  EXPECT_EQ(channels_last_strides({8, 16, 2, 3}), (Shape{96, 1, 48, 16}));
  Tensor e = empty({2, 3, 4, 5}, DType::BFloat16, Device::cpu(), MemoryFormat::ChannelsLast);
  EXPECT_EQ(e.strides(), (Shape{60, 1, 15, 3}));
  EXPECT_THROW(empty_strided({2, 3}, {1, 1}, DType::Float32, Device::cpu()), Error);
}

TEST(ChannelsLast, CopyIsDifferentiable) {
  Tensor x = randn_seeded({2, 3, 4, 5}, 4).requires_grad_();
  Tensor w = randn_seeded({2, 3, 4, 5}, 5);
  sum(mul(contiguous(x, MemoryFormat::ChannelsLast), w)).backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_TRUE(allclose(x.grad(), w, 0.0, 0.0));
}

struct ZooRun {
  Tensor out;
  std::vector<Tensor> grads;
};

// One training-mode forward and backward of a zoo model, NCHW or with the
// batch and the 4-d weights channels-last; optionally under bf16 autocast.
// perturbation > 0: the input times (1 + perturbation * noise), the
// rounding-sized change that measures how much the network amplifies it.
ZooRun zoo_run(const std::string& name, Device device, bool channels_last, bool bf16, double perturbation = 0,
               DType dt = DType::Float32) {
  manual_seed(17);
  auto model = models::create(name, name == "airbench" ? 0.25 : 1.0);
  model->to(dt);
  model->to(device);
  if (channels_last) model->to(MemoryFormat::ChannelsLast);
  Tensor x = randn_seeded({8, 3, 32, 32}, 21);
  if (perturbation > 0) x = mul(x, add(mul(randn_seeded({8, 3, 32, 32}, 23), perturbation), 1.0));
  x = x.to(dt).to(device);
  Tensor y = clamp(mul(sigmoid(randn_seeded({8}, 22)), 10.0).to(DType::Int64), 0.0, 9.0).to(device);
  if (channels_last) x = contiguous(x, MemoryFormat::ChannelsLast);
  ZooRun r;
  Tensor loss;
  {
    std::optional<autocast> ac;
    if (bf16) ac.emplace(DType::BFloat16);
    r.out = model->forward(x);
    loss = cross_entropy(r.out, y);
  }
  loss.backward();
  for (const Tensor& p : model->parameters()) {
    r.grads.push_back(p.grad());
    // Gradients come back in their parameter's layout.
    if (channels_last && device.is_cuda() && p.dim() == 4 && p.shape()[2] * p.shape()[3] > 1) {
      EXPECT_TRUE(is_cl(p.grad())) << name << " parameter " << shape_str(p.shape());
    }
  }
  return r;
}

// The channels-last run against the NCHW run. perturbation 0: within
// `tol` of each other. Else both against a reference (float64 for float32
// runs, float32 for bf16 ones): the channels-last run's error within `tol`
// or 3x the larger of the NCHW run's error and that of an NCHW run on an
// input perturbed by `perturbation` (NHWC cuDNN algorithms sum in other
// orders; batch norm over 8 images amplifies rounding in ResNet-18's
// gradients by orders of magnitude, as CudaZoo in test_backend_ops.cpp
// measures the CUDA-against-CPU errors).
void expect_same_runs(const std::string& name, Device device, bool bf16, double tol, double perturbation) {
  ZooRun a = zoo_run(name, device, false, bf16), b = zoo_run(name, device, true, bf16);
  if (perturbation == 0) {
    EXPECT_LE(scaled_error(b.out, a.out), tol) << name << " output";
    ASSERT_EQ(a.grads.size(), b.grads.size());
    for (size_t i = 0; i < a.grads.size(); ++i)
      EXPECT_LE(scaled_error(b.grads[i], a.grads[i]), tol) << name << " gradient of parameter " << i;
    return;
  }
  ZooRun p = zoo_run(name, device, false, bf16, perturbation);
  ZooRun ref = zoo_run(name, device, false, false, 0, bf16 ? DType::Float32 : DType::Float64);
  auto check = [&](const Tensor& got, const Tensor& nchw, const Tensor& pert, const Tensor& want,
                   const std::string& what) {
    ASSERT_TRUE(got.defined() && nchw.defined() && pert.defined() && want.defined()) << name << " " << what;
    const double nchw_err = scaled_error(nchw, want), pert_err = scaled_error(pert, want);
    EXPECT_LE(scaled_error(got, want), std::max({tol, 3 * nchw_err, 3 * pert_err}))
        << name << " " << what << " " << shape_str(want.shape()) << ": NCHW error " << nchw_err
        << ", perturbed NCHW error " << pert_err;
  };
  check(b.out, a.out, p.out, ref.out, "output");
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i)
    check(b.grads[i], a.grads[i], p.grads[i], ref.grads[i], "gradient of parameter " + std::to_string(i));
}

class ChannelsLastZoo : public ::testing::TestWithParam<std::string> {};

// CPU: channels-last inputs and weights through the CPU kernels give the
// NCHW run's values.
TEST_P(ChannelsLastZoo, CpuMatchesNchw) { expect_same_runs(GetParam(), Device::cpu(), false, 1e-5, 0.0); }

// CUDA float32: NHWC cuDNN algorithms sum in other orders (FMA math, no
// TF32), so a float32-rounding bound; batch norm over 8 images amplifies.
TEST_P(ChannelsLastZoo, CudaMatchesNchw) {
  SKIP_WITHOUT_CUDA();
  expect_same_runs(GetParam(), kCuda, false, 1e-3, 1e-5);
}

// CUDA bf16 autocast: 8 significant bits, the zoo's low-precision bound.
TEST_P(ChannelsLastZoo, CudaBf16MatchesNchw) {
  SKIP_WITHOUT_CUDA();
  expect_same_runs(GetParam(), kCuda, true, 5e-2, 4e-3);
}

INSTANTIATE_TEST_SUITE_P(Models, ChannelsLastZoo, ::testing::Values("tutorial", "resnet18", "airbench"));

// Each op on CUDA with channels-last inputs: the output keeps the layout
// (no hidden NCHW copy) and equals the NCHW result; so do the gradients.
TEST(ChannelsLastCuda, OpsKeepTheLayout) {
  SKIP_WITHOUT_CUDA();
  for (DType dt : {DType::Float32, DType::BFloat16}) {
    const double tol = dt == DType::Float32 ? 1e-4 : 2e-2;
    Tensor x = randn_seeded({4, 16, 12, 12}, 7).to(dt).to(kCuda);
    Tensor w = randn_seeded({8, 16, 3, 3}, 8).to(dt).to(kCuda);
    Tensor xc = contiguous(x, MemoryFormat::ChannelsLast), wc = contiguous(w, MemoryFormat::ChannelsLast);
    auto check = [&](const Tensor& got, const Tensor& want, const char* what) {
      EXPECT_TRUE(is_cl(got)) << what << " " << dtype_name(dt) << " strides " << shape_str(got.strides());
      EXPECT_LE(scaled_error(got, want), tol) << what << " " << dtype_name(dt);
    };
    Conv2dParams p;
    p.padding = {1, 1};
    check(conv2d(xc, wc, Tensor(), p), conv2d(x, w, Tensor(), p), "conv2d");
    check(conv2d(xc, w, Tensor(), p), conv2d(x, w, Tensor(), p), "conv2d (NCHW weight)");
    Tensor go = randn_seeded({4, 8, 12, 12}, 9).to(dt).to(kCuda);
    Tensor goc = contiguous(go, MemoryFormat::ChannelsLast);
    check(conv2d_backward_input(goc, wc, x.shape(), p), conv2d_backward_input(go, w, x.shape(), p),
          "conv2d_backward_input");
    Tensor gw = conv2d_backward_weight(goc, xc, w.shape(), p);
    check(gw, conv2d_backward_weight(go, x, w.shape(), p), "conv2d_backward_weight");
    check(relu(xc), relu(x), "relu");
    check(add(xc, xc), add(x, x), "add");
    Tensor bias = randn_seeded({1, 16, 1, 1}, 10).to(dt).to(kCuda);
    check(mul(xc, bias), mul(x, bias), "mul (broadcast)");
    check(xc.to(DType::Float32), x.to(DType::Float32), "cast");
    check(max_pool2d(xc, {2, 2}), max_pool2d(x, {2, 2}), "max_pool2d");
    check(max_pool2d(xc, {3, 3}, {2, 2}, {1, 1}), max_pool2d(x, {3, 3}, {2, 2}, {1, 1}), "max_pool2d 3x3/2");
    check(avg_pool2d(xc, {2, 2}), avg_pool2d(x, {2, 2}), "avg_pool2d");
    EXPECT_LE(scaled_error(mean(xc, {2, 3}), mean(x, {2, 3})), tol) << "mean over H, W";
    Tensor g = randn_seeded({16}, 11).to(kCuda), b = randn_seeded({16}, 12).to(kCuda);
    Tensor rm = zeros({16}).to(kCuda), rv = ones({16}).to(kCuda), rm2 = zeros({16}).to(kCuda),
           rv2 = ones({16}).to(kCuda);
    if (dt == DType::BFloat16) {
      g = g.to(dt), b = b.to(dt);
    }
    check(batch_norm(xc, g, b, rm, rv, true), batch_norm(x, g, b, rm2, rv2, true), "batch_norm");
    EXPECT_LE(scaled_error(rm, rm2), 1e-5) << "running_mean";
    EXPECT_LE(scaled_error(rv, rv2), 1e-5) << "running_var";
    // Gradients through pooling, batch norm and relu come back channels-last.
    auto grads = [&](const Tensor& input) {
      Tensor leaf = input.detach().requires_grad_();
      Tensor h = relu(batch_norm(max_pool2d(leaf, {2, 2}), g, b, Tensor(), Tensor(), true));
      Tensor h2 = avg_pool2d(h, {2, 2});
      sum(mul(h2, h2)).backward();
      return leaf.grad();
    };
    check(grads(xc), grads(x), "gradient through max_pool2d, batch_norm, relu, avg_pool2d");
  }
}

// Channels-last batch norm on CUDA against the CPU's NCHW result, forward
// (y, running and saved statistics) and backward, over the channel counts
// that pick each of its paths: 16-byte vectors of channels or one channel a
// thread (C % (16 / element size)), one or several channel groups a block
// (more than 32 vectors of channels), grid strides that keep each thread's
// channels or not (C and the block size), and an operand 16-byte misaligned.
TEST(ChannelsLastCuda, BatchNormMatchesCpuForEveryChannelCount) {
  SKIP_WITHOUT_CUDA();
  struct Case {
    Shape shape;
    bool misaligned;
  };
  const std::vector<Case> cases = {{{4, 3, 5, 5}, false},  {{2, 12, 7, 7}, false}, {{2, 96, 5, 5}, false},
                                   {{2, 320, 3, 3}, false}, {{3, 64, 4, 4}, true},  {{2, 1000, 2, 2}, false}};
  for (DType dt : {DType::Float32, DType::BFloat16}) {
    // Outputs round to dt; the statistics and weight gradients are float64
    // sums of the same inputs on both sides.
    const double tol = dt == DType::Float32 ? 1e-5 : 2e-2, tol_stats = dt == DType::Float32 ? 1e-5 : 1e-4;
    for (const Case& k : cases) {
      const int64_t N = k.shape[0], C = k.shape[1], H = k.shape[2], W = k.shape[3];
      const std::string what = shape_str(k.shape) + (k.misaligned ? " misaligned " : " ") + dtype_name(dt);
      Tensor x = add(mul(randn_seeded(k.shape, 21), 2.0), 0.5).to(dt), go = randn_seeded(k.shape, 22).to(dt);
      Tensor w = randn_seeded({C}, 23), b = randn_seeded({C}, 24);
      // The CUDA operands channels-last; misaligned: one element into a buffer.
      auto cuda_cl = [&](const Tensor& t) {
        if (!k.misaligned) return contiguous(t.to(kCuda), MemoryFormat::ChannelsLast);
        Tensor flat = zeros({N * C * H * W + 1}, dtype(dt).with_device(kCuda));
        Tensor nhwc = flat.slice(0, 1, N * C * H * W + 1).view({N, H, W, C}).permute({0, 3, 1, 2});
        nhwc.copy_(t.to(kCuda));
        return nhwc;
      };
      Tensor xc = cuda_cl(x), goc = cuda_cl(go);
      ASSERT_TRUE(is_cl(xc)) << what;
      ASSERT_EQ(k.misaligned, reinterpret_cast<uintptr_t>(xc.data_ptr()) % 16 != 0) << what;
      Tensor rm = zeros({C}), rv = ones({C}), rmc = rm.to(kCuda), rvc = rv.to(kCuda);
      Tensor y = batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5);
      Tensor yc = batch_norm(xc, w.to(kCuda), b.to(kCuda), rmc, rvc, true, 0.1, 1e-5);
      EXPECT_LE(scaled_error(yc.to(Device::cpu()), y), tol) << "y " << what;
      EXPECT_LE(scaled_error(rmc.to(Device::cpu()), rm), tol_stats) << "running_mean " << what;
      EXPECT_LE(scaled_error(rvc.to(Device::cpu()), rv), tol_stats) << "running_var " << what;
      const double eps = 1e-5;
      Tensor xf = x.to(DType::Float32);
      Tensor save_mean = mean(xf, {0, 2, 3}), save_invstd = rsqrt(add(var(xf, {0, 2, 3}, 0), eps));
      auto [gx, gw, gb] = batch_norm_backward(go, x, w, save_mean, save_invstd, true, eps);
      auto [gxc, gwc, gbc] =
          batch_norm_backward(goc, xc, w.to(kCuda), save_mean.to(kCuda), save_invstd.to(kCuda), true, eps);
      EXPECT_TRUE(is_cl(gxc)) << what;
      EXPECT_LE(scaled_error(gxc.to(Device::cpu()), gx), tol) << "grad_x " << what;
      EXPECT_LE(scaled_error(gwc.to(Device::cpu()), gw), tol_stats) << "grad_weight " << what;
      EXPECT_LE(scaled_error(gbc.to(Device::cpu()), gb), tol_stats) << "grad_bias " << what;
    }
  }
}

// Training with channels-last in steady state: no cudaMalloc, as NCHW.
TEST(ChannelsLastCuda, TrainingSteadyStateMakesNoCudaMalloc) {
  SKIP_WITHOUT_CUDA();
  manual_seed(5);
  auto model = models::create("airbench", 0.25);
  model->to(kCuda);
  model->to(MemoryFormat::ChannelsLast);
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.05).momentum(0.9).nesterov(true));
  Tensor x = contiguous(randn_seeded({32, 3, 32, 32}, 6).to(kCuda), MemoryFormat::ChannelsLast);
  Tensor y = clamp(mul(sigmoid(randn_seeded({32}, 7)), 10.0).to(DType::Int64), 0.0, 9.0).to(kCuda);
  auto step = [&] {
    opt.zero_grad();
    Tensor loss;
    {
      autocast ac(DType::BFloat16);
      loss = cross_entropy(model->forward(x), y, 0.2);
    }
    loss.backward();
    opt.step();
  };
  step();
  step();
  cuda::synchronize();
  cuda::AllocatorStats before = cuda::allocator_stats();
  for (int i = 0; i < 5; ++i) step();
  cuda::synchronize();
  cuda::AllocatorStats after = cuda::allocator_stats();
  EXPECT_EQ(after.num_cuda_mallocs, before.num_cuda_mallocs);
  EXPECT_EQ(after.num_cuda_frees, before.num_cuda_frees);
}

}  // namespace
}  // namespace kiln
