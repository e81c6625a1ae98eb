// Gradients against central finite differences, in float64.
#pragma once
#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/kiln.h"

namespace kiln::testing {

using TensorFn = std::function<Tensor(const std::vector<Tensor>&)>;

// For L = sum(f(inputs) * r) with a fixed random r, compares dL/dx from
// backward() with (L(x + eps) - L(x - eps)) / 2eps for every element of every
// input that requires grad. Inputs should be float64.
::testing::AssertionResult gradcheck(const TensorFn& f, const std::vector<Tensor>& inputs, double eps = 1e-6,
                                     double atol = 1e-5, double rtol = 1e-4);

// A gradcheck input: float64 standard normal values of `shape` drawn from
// Generator(seed), requiring grad.
inline Tensor randn_input(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, dtype(DType::Float64), &gen).requires_grad_();
}

}  // namespace kiln::testing

#define EXPECT_GRADCHECK(f, inputs, ...) EXPECT_TRUE(::kiln::testing::gradcheck((f), (inputs), ##__VA_ARGS__))
