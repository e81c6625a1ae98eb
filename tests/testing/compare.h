// Comparing tensors in tests: where and by how much two tensors differ, so a
// failed check says more than "not close".
#pragma once
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/kiln.h"

namespace kiln::testing {

// The largest absolute and relative errors of `actual` against `expected`
// (same shape; compared in float64) and where they occur. NaN against NaN
// and equal infinities count as equal; any other NaN is an infinite error.
struct TensorError {
  double max_abs = 0;
  Shape max_abs_index;  // the element's index, one entry per dim
  double max_rel = 0;   // |a - e| / |e| (infinite where e is 0 and a is not)
  Shape max_rel_index;
  double actual_at_abs = 0, expected_at_abs = 0;
  int64_t count = 0;  // elements compared
  // "max abs error 0.5 at [1, 2] (3.5 vs expected 3), max rel error 0.25 at [0, 1]"
  std::string str() const;
};
TensorError tensor_error(const Tensor& actual, const Tensor& expected);
// The same over host values laid out row-major in `shape`.
TensorError tensor_error(const std::vector<double>& actual, const std::vector<double>& expected, const Shape& shape);

// max |actual - expected| / max |expected|, on the host in float64: the error
// relative to the output's scale (the absolute error where expected is all
// zeros). One definition for every test (two inline ones of this name in one
// binary would break the one-definition rule).
double scaled_error(const Tensor& actual, const Tensor& expected);

// Checks same shape and dtype and |a - e| <= atol + rtol * |e| everywhere; the
// failure message counts the elements out of tolerance and gives tensor_error.
::testing::AssertionResult tensors_close(const Tensor& actual, const Tensor& expected, double rtol = 1e-5,
                                         double atol = 1e-6);

}  // namespace kiln::testing

#define EXPECT_TENSOR_CLOSE(actual, expected, ...) \
  EXPECT_TRUE(::kiln::testing::tensors_close((actual), (expected), ##__VA_ARGS__))
