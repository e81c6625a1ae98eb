// The test helper that reports where and by how much two tensors differ.
#include <cmath>

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "testing/compare.h"

namespace kiln {
namespace {

// The helper reports the worst absolute and relative errors and their index.
TEST(TensorError, ReportsLargestErrorsAndWhere) {
  Tensor e = from_vector(std::vector<double>{1, 2, 100, 0, 5, 6}, {2, 3});
  Tensor a = from_vector(std::vector<double>{1, 2.5, 103, 0, 5, 6}, {2, 3});
  testing::TensorError r = testing::tensor_error(a, e);
  EXPECT_DOUBLE_EQ(r.max_abs, 3.0);
  EXPECT_EQ(r.max_abs_index, (Shape{0, 2}));
  EXPECT_DOUBLE_EQ(r.max_rel, 0.25);
  EXPECT_EQ(r.max_rel_index, (Shape{0, 1}));
  EXPECT_EQ(r.str(), "max abs error 3 at [0, 2] (103 vs expected 100), max rel error 0.25 at [0, 1]");

  // NaN against NaN is equal; NaN against a number is an infinite error.
  Tensor n = from_vector(std::vector<double>{NAN, 1, NAN}, {3});
  Tensor m = from_vector(std::vector<double>{NAN, 1, 2}, {3});
  testing::TensorError rn = testing::tensor_error(n, m);
  EXPECT_TRUE(std::isinf(rn.max_abs));
  EXPECT_EQ(rn.max_abs_index, (Shape{2}));
  EXPECT_EQ(testing::tensor_error(m, m).max_abs, 0.0);

  // The failure message of the allclose-style check carries it.
  ::testing::AssertionResult res = testing::tensors_close(a, e);
  ASSERT_FALSE(res);
  EXPECT_NE(std::string(res.message()).find("2 of 6 elements differ"), std::string::npos) << res.message();
  EXPECT_NE(std::string(res.message()).find("max abs error 3 at [0, 2]"), std::string::npos) << res.message();
}

}  // namespace
}  // namespace kiln
