// Shape arithmetic (broadcasting, dim wrapping, strides) and every view op:
// resulting shape/strides/offset, storage shared with the base, values.
// Tensors are filled through data<float>() so these tests need only the view
// family (to_vector of a float tensor goes through copy, defined in views.cpp).
#include <numeric>

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "testing/errors.h"

namespace kiln {
namespace {

// 0, 1, 2, ... in a new contiguous float32 tensor.
Tensor iota(const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::Float32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(i);
  return t;
}

std::vector<float> vals(const Tensor& t) { return t.to_vector<float>(); }
std::vector<float> fl(std::initializer_list<float> v) { return v; }

::testing::AssertionResult layout_is(const Tensor& t, const Shape& shape, const Shape& strides, int64_t offset) {
  if (t.shape() != shape || t.strides() != strides || t.offset() != offset)
    return ::testing::AssertionFailure() << "got shape " << shape_str(t.shape()) << " strides "
                                         << shape_str(t.strides()) << " offset " << t.offset() << ", expected "
                                         << shape_str(shape) << " " << shape_str(strides) << " " << offset;
  return ::testing::AssertionSuccess();
}

// ---- shape arithmetic ----
TEST(Shape, NumelAndStr) {
  EXPECT_EQ(numel_of({2, 3, 4}), 24);
  EXPECT_EQ(numel_of({}), 1);
  EXPECT_EQ(numel_of({3, 0}), 0);
  EXPECT_EQ(shape_str({2, 3, 4}), "[2, 3, 4]");
  EXPECT_EQ(shape_str({}), "[]");
}

TEST(Shape, ContiguousStrides) {
  EXPECT_EQ(contiguous_strides({2, 3, 4}), (Shape{12, 4, 1}));
  EXPECT_EQ(contiguous_strides({5}), (Shape{1}));
  EXPECT_EQ(contiguous_strides({}), (Shape{}));
  EXPECT_EQ(contiguous_strides({2, 0, 3}), (Shape{3, 3, 1}));  // as torch.empty(2, 0, 3).stride()
  EXPECT_EQ(contiguous_strides({1, 1}), (Shape{1, 1}));
}

TEST(Shape, BroadcastShapes) {
  EXPECT_EQ(broadcast_shapes({3, 1, 5}, {4, 5}, "t"), (Shape{3, 4, 5}));
  EXPECT_EQ(broadcast_shapes({4, 5}, {3, 1, 5}, "t"), (Shape{3, 4, 5}));
  EXPECT_EQ(broadcast_shapes({}, {2, 3}, "t"), (Shape{2, 3}));
  EXPECT_EQ(broadcast_shapes({}, {}, "t"), (Shape{}));
  EXPECT_EQ(broadcast_shapes({0}, {1}, "t"), (Shape{0}));
  EXPECT_EQ(broadcast_shapes({2, 1}, {1, 3}, "t"), (Shape{2, 3}));
  EXPECT_EQ(broadcast_shapes({1}, {7}, "t"), (Shape{7}));
  EXPECT_KILN_ERROR(broadcast_shapes({2, 3}, {4}, "myop"), "myop", "[2, 3]", "[4]");
  EXPECT_KILN_ERROR(broadcast_shapes({0}, {2}, "myop"), "myop", "[0]", "[2]");
}

TEST(Shape, WrapDim) {
  EXPECT_EQ(wrap_dim(-1, 3, "t"), 2);
  EXPECT_EQ(wrap_dim(-3, 3, "t"), 0);
  EXPECT_EQ(wrap_dim(2, 3, "t"), 2);
  EXPECT_EQ(wrap_dim(0, 0, "t"), 0);  // a 0-dim tensor accepts 0 and -1, as torch
  EXPECT_EQ(wrap_dim(-1, 0, "t"), 0);
  EXPECT_KILN_ERROR(wrap_dim(3, 3, "myop"), "myop", "3");
  EXPECT_KILN_ERROR(wrap_dim(-4, 3, "myop"), "myop", "-4");
  EXPECT_KILN_ERROR(wrap_dim(1, 0, "myop"), "myop");
}

TEST(Shape, WrapDims) {
  EXPECT_EQ(wrap_dims({-1, 0}, 3, "t"), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(wrap_dims({}, 3, "t"), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(wrap_dims({}, 0, "t"), (std::vector<int64_t>{}));
  EXPECT_EQ(wrap_dims({2, 1}, 3, "t"), (std::vector<int64_t>{1, 2}));
  EXPECT_KILN_ERROR(wrap_dims({0, -3}, 3, "myop"), "myop", "twice");
  EXPECT_KILN_ERROR(wrap_dims({5}, 3, "myop"), "myop", "5");
}

// ---- tensor layout basics ----
TEST(Views, EmptyIsContiguous) {
  Tensor t = Tensor::empty({2, 3, 4});
  EXPECT_TRUE(layout_is(t, {2, 3, 4}, {12, 4, 1}, 0));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.stride(0), 12);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_TRUE(t.is_leaf());
  EXPECT_FALSE(t.requires_grad());
}

// ---- view ----
TEST(Views, ViewWithInferredSize) {
  Tensor x = iota({2, 3, 4});
  Tensor v = x.view({-1, 4});
  EXPECT_TRUE(layout_is(v, {6, 4}, {4, 1}, 0));
  EXPECT_TRUE(v.shares_storage(x));
  EXPECT_EQ(vals(v), vals(x));
  Tensor w = x.view({4, -1});
  EXPECT_TRUE(layout_is(w, {4, 6}, {6, 1}, 0));
  Tensor s = x.view({24});
  EXPECT_TRUE(layout_is(s, {24}, {1}, 0));
  Tensor u = x.view({2, 1, 3, 4});
  EXPECT_EQ(u.shape(), (Shape{2, 1, 3, 4}));
  EXPECT_EQ(vals(u), vals(x));
  // 0-dim <-> one element
  Tensor one = iota({1});
  EXPECT_EQ(one.view({}).dim(), 0);
  EXPECT_EQ(one.view({}).view({1, 1}).shape(), (Shape{1, 1}));
}

TEST(Views, ViewSharesStorageBothWays) {
  Tensor x = iota({2, 3});
  Tensor v = x.view({3, 2});
  x.data<float>()[5] = 100.0f;
  EXPECT_EQ(vals(v)[5], 100.0f);
  v.data<float>()[0] = -1.0f;
  EXPECT_EQ(vals(x)[0], -1.0f);
}

TEST(Views, ViewOfNonContiguousWhereLayoutAllows) {
  Tensor x = iota({2, 3, 4});
  Tensor p = x.permute({1, 0, 2});  // [3, 2, 4] strides [4, 12, 1]
  Tensor v = p.view({3, 2, 2, 2});  // splitting the last dim is fine
  EXPECT_TRUE(layout_is(v, {3, 2, 2, 2}, {4, 12, 2, 1}, 0));
  EXPECT_EQ(vals(v), vals(p));
  // slicing the first dim keeps the rest contiguous
  Tensor s = x.slice(0, 1, 2);
  Tensor sv = s.view({12});
  EXPECT_TRUE(layout_is(sv, {12}, {1}, 12));
  EXPECT_EQ(vals(sv)[0], 12.0f);
}

TEST(Views, ViewOfNonViewableLayoutThrows) {
  Tensor x = iota({3, 4});
  Tensor t = x.t();  // [4, 3] strides [1, 4]
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_KILN_ERROR(t.view({12}), "view", "[4, 3]", "[12]", "reshape", "contiguous");
  Tensor p = iota({2, 3, 4}).permute({1, 0, 2});
  EXPECT_KILN_ERROR(p.view({3, 8}), "view", "[3, 2, 4]", "reshape", "contiguous");
}

TEST(Views, ViewBadSizesThrow) {
  Tensor x = iota({2, 3});
  EXPECT_KILN_ERROR(x.view({4, 2}), "view", "[2, 3]", "[4, 2]");
  EXPECT_KILN_ERROR(x.view({-1, -1}), "view", "-1");
  EXPECT_KILN_ERROR(x.view({-1, 4}), "view", "[2, 3]");
  EXPECT_KILN_ERROR(x.view({-2, -3}), "view");
}

// ---- reshape ----
TEST(Views, ReshapeOfContiguousIsAView) {
  Tensor x = iota({2, 3, 4});
  Tensor r = x.reshape({4, -1});
  EXPECT_TRUE(layout_is(r, {4, 6}, {6, 1}, 0));
  EXPECT_TRUE(r.shares_storage(x));
}

TEST(Views, ReshapeOfNonContiguousCopies) {
  Tensor x = iota({2, 3, 4});
  Tensor t = x.transpose(0, 1);  // [3, 2, 4]
  Tensor r = t.reshape({6, 4});
  EXPECT_EQ(r.shape(), (Shape{6, 4}));
  EXPECT_TRUE(r.is_contiguous());
  EXPECT_FALSE(r.shares_storage(x));
  std::vector<float> expect;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 4; ++k) expect.push_back(static_cast<float>(j * 12 + i * 4 + k));
  EXPECT_EQ(vals(r), expect);
  EXPECT_EQ(vals(t), expect);
  // viewable non-contiguous layouts stay views
  Tensor v = t.reshape({3, 2, 2, 2});
  EXPECT_TRUE(v.shares_storage(x));
}

// ---- permute / transpose ----
TEST(Views, Permute) {
  Tensor x = iota({2, 3, 4});
  Tensor p = x.permute({2, 0, 1});
  EXPECT_TRUE(layout_is(p, {4, 2, 3}, {1, 12, 4}, 0));
  EXPECT_TRUE(p.shares_storage(x));
  EXPECT_FALSE(p.is_contiguous());
  std::vector<float> expect;
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) expect.push_back(static_cast<float>(i * 12 + j * 4 + k));
  EXPECT_EQ(vals(p), expect);
  EXPECT_TRUE(layout_is(x.permute({-1, 0, 1}), {4, 2, 3}, {1, 12, 4}, 0));
  EXPECT_TRUE(layout_is(x.permute({0, 1, 2}), {2, 3, 4}, {12, 4, 1}, 0));
  EXPECT_KILN_ERROR(x.permute({0, 0, 1}), "permute");
  EXPECT_KILN_ERROR(x.permute({0, 1}), "permute", "[2, 3, 4]");
}

TEST(Views, Transpose) {
  Tensor x = iota({2, 3, 4});
  EXPECT_TRUE(layout_is(x.transpose(0, 2), {4, 3, 2}, {1, 4, 12}, 0));
  EXPECT_TRUE(layout_is(x.transpose(-1, -2), {2, 4, 3}, {12, 1, 4}, 0));
  EXPECT_TRUE(x.transpose(1, 1).is_contiguous());
  Tensor m = iota({2, 3});
  EXPECT_EQ(vals(m.t()), fl({0, 3, 1, 4, 2, 5}));
  EXPECT_TRUE(m.t().shares_storage(m));
  EXPECT_EQ(vals(m.t().t()), vals(m));
  EXPECT_KILN_ERROR(x.transpose(0, 3), "transpose", "3");
}

// ---- slice ----
TEST(Views, SliceWithStep) {
  Tensor x = iota({10});
  Tensor s = x.slice(0, 2, 8, 2);
  EXPECT_TRUE(layout_is(s, {3}, {2}, 2));
  EXPECT_TRUE(s.shares_storage(x));
  EXPECT_EQ(vals(s), fl({2, 4, 6}));
  EXPECT_EQ(vals(x.slice(0, 1, 10, 3)), fl({1, 4, 7}));
  EXPECT_EQ(vals(x.slice(0, 0, 10, 4)), fl({0, 4, 8}));
}

TEST(Views, SliceNegativeAndClamped) {
  Tensor x = iota({10});
  EXPECT_EQ(vals(x.slice(0, -3, 100)), fl({7, 8, 9}));
  EXPECT_EQ(vals(x.slice(0, -100, 3)), fl({0, 1, 2}));
  EXPECT_EQ(vals(x.slice(0, 2, -5)), fl({2, 3, 4}));
  EXPECT_EQ(vals(x.slice(0, -4, -1)), fl({6, 7, 8}));
  Tensor e = x.slice(0, 8, 2);  // end before start: empty, as x[8:2]
  EXPECT_EQ(e.shape(), (Shape{0}));
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(x.slice(0, 20, 30).shape(), (Shape{0}));
  EXPECT_KILN_ERROR(x.slice(0, 0, 5, 0), "slice", "step");
  EXPECT_KILN_ERROR(x.slice(1, 0, 5), "slice", "1");
}

TEST(Views, SliceInnerDimAndSliceOfSlice) {
  Tensor x = iota({3, 4});
  Tensor s = x.slice(1, 1, 4, 2);
  EXPECT_TRUE(layout_is(s, {3, 2}, {4, 2}, 1));
  EXPECT_EQ(vals(s), fl({1, 3, 5, 7, 9, 11}));
  Tensor ss = s.slice(0, 1, 3);
  EXPECT_TRUE(layout_is(ss, {2, 2}, {4, 2}, 5));
  EXPECT_EQ(vals(ss), fl({5, 7, 9, 11}));
  Tensor neg = x.slice(-1, -2, 4);
  EXPECT_EQ(vals(neg), fl({2, 3, 6, 7, 10, 11}));
  // a write through the slice lands in the base
  ss.data<float>()[0] = 50.0f;
  EXPECT_EQ(vals(x)[5], 50.0f);
}

// ---- select ----
TEST(Views, Select) {
  Tensor x = iota({2, 3, 4});
  Tensor s = x.select(1, 2);
  EXPECT_TRUE(layout_is(s, {2, 4}, {12, 1}, 8));
  EXPECT_TRUE(s.shares_storage(x));
  EXPECT_EQ(vals(s), fl({8, 9, 10, 11, 20, 21, 22, 23}));
  EXPECT_TRUE(layout_is(x.select(1, -1), {2, 4}, {12, 1}, 8));
  EXPECT_TRUE(layout_is(x.select(-1, 3), {2, 3}, {12, 4}, 3));
  EXPECT_TRUE(layout_is(x[1], {3, 4}, {4, 1}, 12));
  Tensor scalar = x[1][2][3];
  EXPECT_EQ(scalar.dim(), 0);
  EXPECT_EQ(scalar.item(), 23.0);
  EXPECT_KILN_ERROR(x.select(0, 2), "select", "2", "[2, 3, 4]");
  EXPECT_KILN_ERROR(x.select(1, -4), "select", "-4");
  EXPECT_KILN_ERROR(x.select(3, 0), "select", "3");
  EXPECT_KILN_ERROR(scalar.select(0, 0), "select");
}

// ---- expand ----
TEST(Views, Expand) {
  Tensor x = iota({3, 1});
  Tensor e = x.expand({2, 3, 4});
  EXPECT_TRUE(layout_is(e, {2, 3, 4}, {0, 1, 0}, 0));
  EXPECT_TRUE(e.shares_storage(x));
  std::vector<float> expect;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 4; ++c) expect.push_back(static_cast<float>(b));
  EXPECT_EQ(vals(e), expect);
  EXPECT_TRUE(layout_is(x.expand({-1, 5}), {3, 5}, {1, 0}, 0));
  EXPECT_TRUE(layout_is(x.expand({3, 1}), {3, 1}, {1, 1}, 0));
  Tensor s = iota({1}).view({});
  EXPECT_TRUE(layout_is(s.expand({2, 2}), {2, 2}, {0, 0}, 0));
  EXPECT_KILN_ERROR(x.expand({2, 4}), "expand", "[3, 1]", "[2, 4]");
  EXPECT_KILN_ERROR(x.expand({3}), "expand", "[3, 1]");
  EXPECT_KILN_ERROR(x.expand({-1, 3, 1}), "expand");
}

// ---- squeeze / unsqueeze ----
TEST(Views, Squeeze) {
  Tensor x = iota({1, 3, 1, 2});
  EXPECT_TRUE(layout_is(x.squeeze(), {3, 2}, {2, 1}, 0));
  EXPECT_TRUE(layout_is(x.squeeze(2), {1, 3, 2}, {6, 2, 1}, 0));
  EXPECT_TRUE(layout_is(x.squeeze(-2), {1, 3, 2}, {6, 2, 1}, 0));
  EXPECT_TRUE(layout_is(x.squeeze(1), {1, 3, 1, 2}, {6, 2, 2, 1}, 0));  // size 3: unchanged
  EXPECT_TRUE(x.squeeze().shares_storage(x));
  EXPECT_EQ(vals(x.squeeze()), vals(x));
  EXPECT_EQ(iota({1, 1}).squeeze().dim(), 0);
  EXPECT_KILN_ERROR(x.squeeze(4), "squeeze", "4");
}

TEST(Views, Unsqueeze) {
  Tensor x = iota({3, 4});
  EXPECT_TRUE(layout_is(x.unsqueeze(0), {1, 3, 4}, {12, 4, 1}, 0));
  EXPECT_TRUE(layout_is(x.unsqueeze(1), {3, 1, 4}, {4, 4, 1}, 0));
  EXPECT_TRUE(layout_is(x.unsqueeze(2), {3, 4, 1}, {4, 1, 1}, 0));
  EXPECT_TRUE(layout_is(x.unsqueeze(-1), {3, 4, 1}, {4, 1, 1}, 0));
  EXPECT_TRUE(layout_is(x.unsqueeze(-3), {1, 3, 4}, {12, 4, 1}, 0));
  EXPECT_TRUE(x.unsqueeze(1).shares_storage(x));
  EXPECT_TRUE(x.unsqueeze(1).is_contiguous());
  EXPECT_EQ(iota({1}).view({}).unsqueeze(0).shape(), (Shape{1}));
  EXPECT_KILN_ERROR(x.unsqueeze(3), "unsqueeze", "3");
  EXPECT_KILN_ERROR(x.unsqueeze(-4), "unsqueeze", "-4");
}

// ---- flatten ----
TEST(Views, Flatten) {
  Tensor x = iota({2, 3, 4});
  EXPECT_TRUE(layout_is(x.flatten(), {24}, {1}, 0));
  EXPECT_TRUE(layout_is(x.flatten(1), {2, 12}, {12, 1}, 0));
  EXPECT_TRUE(layout_is(x.flatten(0, 1), {6, 4}, {4, 1}, 0));
  EXPECT_TRUE(layout_is(x.flatten(-2, -1), {2, 12}, {12, 1}, 0));
  EXPECT_TRUE(layout_is(x.flatten(1, 1), {2, 3, 4}, {12, 4, 1}, 0));
  EXPECT_TRUE(x.flatten().shares_storage(x));
  Tensor t = x.transpose(0, 2);  // not viewable flat: copies
  Tensor f = t.flatten();
  EXPECT_EQ(f.shape(), (Shape{24}));
  EXPECT_FALSE(f.shares_storage(x));
  EXPECT_EQ(vals(f), vals(t));
  EXPECT_EQ(iota({1}).view({}).flatten().shape(), (Shape{1}));
  EXPECT_KILN_ERROR(x.flatten(2, 1), "flatten");
}

// ---- as_strided ----
TEST(Views, AsStrided) {
  Tensor x = iota({12});
  Tensor w = as_strided(x, {3, 3}, {1, 1}, 0);  // overlapping sliding windows
  EXPECT_TRUE(layout_is(w, {3, 3}, {1, 1}, 0));
  EXPECT_TRUE(w.shares_storage(x));
  EXPECT_EQ(vals(w), fl({0, 1, 2, 1, 2, 3, 2, 3, 4}));
  Tensor b = as_strided(x, {2, 2}, {4, 1}, 5);
  EXPECT_TRUE(layout_is(b, {2, 2}, {4, 1}, 5));
  EXPECT_EQ(vals(b), fl({5, 6, 9, 10}));
  EXPECT_EQ(vals(as_strided(x, {2, 2}, {0, 0}, 11)), fl({11, 11, 11, 11}));
  // as_strided's offset is absolute in the storage, as in torch
  Tensor s = x.slice(0, 4, 12);
  EXPECT_EQ(vals(as_strided(s, {2}, {1}, 0)), fl({0, 1}));
  EXPECT_KILN_ERROR(as_strided(x, {4, 4}, {4, 1}, 0), "as_strided", "[4, 4]");
  EXPECT_KILN_ERROR(as_strided(x, {2}, {1, 1}, 0), "as_strided");
}

// ---- contiguous / clone ----
TEST(Views, ContiguousOfContiguousIsSameTensor) {
  Tensor x = iota({2, 3});
  Tensor c = x.contiguous();
  EXPECT_EQ(c.impl(), x.impl());
}

TEST(Views, ContiguousOfNonContiguousCopies) {
  Tensor x = iota({2, 3, 4});
  Tensor p = x.permute({2, 0, 1});
  Tensor c = p.contiguous();
  EXPECT_TRUE(layout_is(c, {4, 2, 3}, {6, 3, 1}, 0));
  EXPECT_FALSE(c.shares_storage(x));
  EXPECT_EQ(vals(c), vals(p));
  Tensor e = iota({3, 1}).expand({3, 4});
  Tensor ec = e.contiguous();
  EXPECT_TRUE(layout_is(ec, {3, 4}, {4, 1}, 0));
  EXPECT_EQ(vals(ec), fl({0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}));
  Tensor s = iota({10}).slice(0, 1, 10, 3);
  Tensor sc = s.contiguous();
  EXPECT_TRUE(layout_is(sc, {3}, {1}, 0));
  EXPECT_EQ(vals(sc), fl({1, 4, 7}));
}

TEST(Views, IsContiguousIgnoresSizeOneDims) {
  Tensor x = iota({3, 1, 4});
  EXPECT_TRUE(x.is_contiguous());
  EXPECT_TRUE(as_strided(x, {3, 1, 4}, {4, 99, 1}, 0).is_contiguous());
  EXPECT_FALSE(x.transpose(0, 2).is_contiguous());
  EXPECT_TRUE(iota({0, 3}).is_contiguous());
}

TEST(Views, ChainOfViewsComposesOffsets) {
  Tensor x = iota({4, 5, 6});
  Tensor v = x.select(0, 2).slice(1, 1, 5, 2).transpose(0, 1).unsqueeze(0);  // [1, 2, 5]
  EXPECT_EQ(v.shape(), (Shape{1, 2, 5}));
  EXPECT_EQ(v.offset(), 2 * 30 + 1);
  std::vector<float> expect;
  for (int c = 1; c < 5; c += 2)
    for (int b = 0; b < 5; ++b) expect.push_back(static_cast<float>(60 + b * 6 + c));
  EXPECT_EQ(vals(v), expect);
}

}  // namespace
}  // namespace kiln
