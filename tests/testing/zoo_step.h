// One training step of a zoo model (forward, cross entropy, backward) on a
// fixed batch, optionally under kiln::autocast: its output and every
// parameter's gradient, for comparing devices and precisions
// (tests/models/test_autocast_models.cpp, tests/backend/test_autocast_cuda.cpp).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "testing/compare.h"

namespace kiln::testing {

struct ZooStep {
  Tensor out;
  std::vector<Tensor> grads;  // undefined where a parameter got none
};

// input_noise > 0 multiplies each input element by (1 + input_noise * N(0, 1)):
// a float32 step on an input perturbed by 16-bit rounding shows how much the
// network's own conditioning moves the gradients.
inline ZooStep zoo_step(const std::string& name, Device device, std::optional<DType> amp, double input_noise = 0,
                        int64_t batch = 16) {
  Generator gen(21);
  Tensor x = randn({batch, 3, 32, 32}, {}, &gen);
  Tensor y = randint(0, 10, {batch}, dtype(DType::Int64), &gen);
  if (input_noise > 0) x = mul(x, add(mul(randn({batch, 3, 32, 32}, {}, &gen), input_noise), 1.0));
  manual_seed(17);
  auto model = models::create(name);
  model->to(device);
  ZooStep r;
  Tensor loss;
  {
    std::optional<autocast> scope;
    if (amp) scope.emplace(*amp);
    r.out = model->forward(x.to(device));
    loss = cross_entropy(r.out, y.to(device));
  }
  loss.backward();
  for (const Tensor& p : model->parameters()) r.grads.push_back(p.grad());
  return r;
}

// ||a - ref|| / ||ref|| over every parameter's gradient together (float64, on
// the host).
inline double gradient_error(const ZooStep& a, const ZooStep& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    Tensor r = ref.grads[i].to(Device::cpu()).to(DType::Float64);
    Tensor d = sub(a.grads[i].to(Device::cpu()).to(DType::Float64), r);
    num += sum(mul(d, d)).item();
    den += sum(mul(r, r)).item();
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// The check both devices' autocast tests make of a 16-bit autocast step
// `low` against the float32 step `ref`: the output within `tol` of its
// largest magnitude; every gradient defined and float32; the whole gradient
// within tol, or within 3x of a float32 step whose input was perturbed by
// 16-bit rounding (`perturbed`): one training step's gradients at
// initialization move that much under such a perturbation, through ReLU and
// max-pool routing and batch statistics. Measured on the CPU at batch 16
// (tutorial, airbench, resnet18): perturbed float32 4.4%, 13%, 25%; bf16
// autocast 3.2%, 16%, 30%; outputs 0.5%, 1.2%, 2.4%.
inline void expect_autocast_step_close(const std::string& what, const ZooStep& low, const ZooStep& ref,
                                       const ZooStep& perturbed, DType low_dtype, double tol) {
  const double out_err = scaled_error(low.out, ref.out);
  EXPECT_LE(out_err, tol) << what << " output";
  ASSERT_EQ(low.grads.size(), ref.grads.size());
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    ASSERT_TRUE(low.grads[i].defined()) << what << " parameter " << i;
    EXPECT_EQ(low.grads[i].dtype(), DType::Float32) << what << " parameter " << i;
  }
  const double grad_err = gradient_error(low, ref), noise_err = gradient_error(perturbed, ref);
  EXPECT_LE(grad_err, std::max(tol, 3 * noise_err)) << what << " gradients";
  std::cout << what << " " << dtype_name(low_dtype) << " autocast vs float32: output " << out_err << ", gradients "
            << grad_err << " (float32 on an input perturbed by 16-bit rounding: " << noise_err << ")\n";
}

// The unit roundoff of a 16-bit float (half an ulp at 1): 2^-8 for bf16, 2^-11 for fp16.
inline double rounding_of(DType t) { return t == DType::Float16 ? 1.0 / 2048 : 1.0 / 256; }

}  // namespace kiln::testing
