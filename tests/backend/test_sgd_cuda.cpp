// SGD's one-launch CUDA step (SGDOptions::foreach, src/cuda/sgd.cu) against
// the six in-place ops per parameter it replaces (foreach false) and against
// the CPU. More than one launch's worth of parameters (48), NCHW and
// channels-last weights, one-element and empty parameters, a float64
// parameter (which stays on the per-op path), every combination of
// nesterov, weight decay and dampening. Skips without a device.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "testing/cuda_skip.h"

namespace kiln {
namespace {

const Device kCuda = Device::cuda(0);


// 53 parameters on the host: shapes from a ResNet, a few odd ones.
std::vector<Tensor> host_params(uint64_t seed) {
  std::vector<Shape> shapes;
  for (int i = 0; i < 12; ++i) {
    shapes.push_back({64, 32, 3, 3});
    shapes.push_back({64});
    shapes.push_back({64});
    shapes.push_back({10, 64});
  }
  shapes.push_back({1});
  shapes.push_back({0});
  shapes.push_back({1000, 3, 7, 7});
  shapes.push_back({7});
  shapes.push_back({3, 5});
  Generator g(seed);
  std::vector<Tensor> ps;
  for (const Shape& s : shapes) ps.push_back(randn(s, {}, &g));
  ps.push_back(randn({5, 3}, {}, &g).to(DType::Float64));
  return ps;
}

// Runs 3 SGD steps with made-up gradients on copies of `host` on `dev`;
// returns the parameters and momentum buffers, on the host.
std::vector<Tensor> run_steps(const std::vector<Tensor>& host, Device dev, const optim::SGDOptions& o,
                              bool channels_last) {
  std::vector<Tensor> params;
  for (const Tensor& h : host) {
    Tensor p = h.to(dev);
    if (channels_last && p.dim() == 4) p = contiguous(p, MemoryFormat::ChannelsLast);
    params.push_back(p.detach().requires_grad_(true));
  }
  optim::SGD opt(params, o);
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < params.size(); ++i) {
      Generator g(100 * static_cast<uint64_t>(step) + i);
      Tensor grad = randn(params[i].shape(), {}, &g).to(params[i].dtype()).to(dev);
      if (channels_last && grad.dim() == 4) grad = contiguous(grad, MemoryFormat::ChannelsLast);
      if (step == 1 && i == 3) continue;  // a parameter without a grad this step
      params[i].set_grad(grad);
    }
    opt.step();
    for (Tensor& p : params) p.set_grad(Tensor());
  }
  std::vector<Tensor> out;
  for (const Tensor& p : params) out.push_back(p.detach().to(Device::cpu()).contiguous());
  nn::TensorDict state = opt.state_dict();
  for (const auto& [name, t] : state)
    if (name.rfind("momentum_buffer.", 0) == 0) out.push_back(t.to(Device::cpu()).contiguous());
  return out;
}

TEST(CudaSgd, OneLaunchEqualsPerOpStepsBitForBitAndMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  const std::vector<Tensor> host = host_params(7);
  for (bool nesterov : {false, true})
    for (double wd : {0.0, 5e-4})
      for (double damp : {0.0, 0.1})
        for (bool cl : {false, true}) {
          if (nesterov && damp != 0) continue;  // torch's rule
          SCOPED_TRACE("nesterov " + std::to_string(nesterov) + ", weight decay " + std::to_string(wd) +
                       ", dampening " + std::to_string(damp) + ", channels-last " + std::to_string(cl));
          optim::SGDOptions o = optim::SGDOptions(0.1).momentum(0.9).weight_decay(wd).dampening(damp).nesterov(nesterov);
          std::vector<Tensor> fused = run_steps(host, kCuda, o, cl);
          std::vector<Tensor> per_op = run_steps(host, kCuda, optim::SGDOptions(o).foreach(false), cl);
          std::vector<Tensor> cpu = run_steps(host, Device::cpu(), o, false);
          ASSERT_EQ(fused.size(), per_op.size());
          ASSERT_EQ(fused.size(), cpu.size());
          for (size_t i = 0; i < fused.size(); ++i) {
            SCOPED_TRACE("tensor " + std::to_string(i) + " " + shape_str(fused[i].shape()));
            ASSERT_EQ(fused[i].shape(), per_op[i].shape());
            const size_t bytes = fused[i].nbytes();
            EXPECT_EQ(0, std::memcmp(fused[i].data_ptr(), per_op[i].data_ptr(), bytes));
            EXPECT_TRUE(allclose(fused[i], cpu[i], 1e-5, 1e-6));
          }
        }
}

// A capture must see every op of the step: under kiln::compile the update
// runs as in-place ops (the interpreter backend replays them), and the
// compiled step equals the eager one.
TEST(CudaSgd, CompiledStepSeesThePerOpUpdate) {
  SKIP_WITHOUT_CUDA();
  Tensor w = randn({4, 3}).to(kCuda).detach().requires_grad_(true);
  Tensor w_eager = w.detach().clone().requires_grad_(true);
  Tensor x = randn({5, 4}).to(kCuda);
  optim::SGD opt({w}, optim::SGDOptions(0.1).momentum(0.9));
  optim::SGD opt_eager({w_eager}, optim::SGDOptions(0.1).momentum(0.9));
  auto step = compile([&](const Tensor& in) {
    opt.zero_grad();
    matmul(in, w).sum().backward();
    opt.step();
    return w.detach().clone();
  });
  for (int i = 0; i < 3; ++i) {
    step(x);
    opt_eager.zero_grad();
    matmul(x, w_eager).sum().backward();
    opt_eager.step();
  }
  EXPECT_TRUE(allclose(w.detach().to(Device::cpu()), w_eager.detach().to(Device::cpu()), 1e-6, 1e-7));
}

}  // namespace
}  // namespace kiln
