// Meta tensors: shapes, dtypes, devices and strides without memory.
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "ops/meta_mode.h"

namespace kiln {
namespace {

TEST(Meta, OpsOnMetaTensorsRunShapeRulesOnly) {
  Tensor x = Tensor::meta({8, 3, 32, 32}, DType::Float32, Device::cpu());
  Tensor w = randn({16, 3, 3, 3});  // real weights join meta inputs
  EXPECT_TRUE(x.is_meta());
  EXPECT_FALSE(w.is_meta());
  Tensor y = relu(conv2d(x, w, Tensor(), Conv2dParams{{1, 1}, {1, 1}}));
  EXPECT_TRUE(y.is_meta());
  EXPECT_EQ(y.shape(), (Shape{8, 16, 32, 32}));
  EXPECT_EQ(y.strides(), contiguous_strides({8, 16, 32, 32}));
  Tensor z = add(y.to(DType::BFloat16), 1.0);
  EXPECT_EQ(z.dtype(), DType::BFloat16);
  auto [m, idx] = max_pool2d_with_indices(y, {2, 2});
  EXPECT_EQ(m.shape(), (Shape{8, 16, 16, 16}));
  EXPECT_EQ(idx.dtype(), DType::Int64);
  // Views keep the meta storage and compute strides.
  Tensor t = y.transpose(1, 3);
  EXPECT_TRUE(t.is_meta());
  EXPECT_EQ(t.strides(), (Shape{16 * 32 * 32, 1, 32, 32 * 32}));
  EXPECT_TRUE(t.shares_storage(y));
}

TEST(Meta, ShapeErrorsAreTheOpsErrors) {
  Tensor a = Tensor::meta({2, 3}, DType::Float32, Device::cpu());
  Tensor b = Tensor::meta({4, 5}, DType::Float32, Device::cpu());
  try {
    matmul(a, b);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("matmul"), std::string::npos) << e.what();
  }
}

TEST(Meta, ReadingDataIsAClearErrorAndPrintingSaysMeta) {
  Tensor a = Tensor::meta({2, 3}, DType::Float32, Device::cpu());
  try {
    (void)a.data<float>();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("meta tensor"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)sum(a).item(), Error);
  EXPECT_EQ(a.str(), "tensor(..., size=[2, 3], dtype=float32, meta)");
}

TEST(Meta, InPlaceUpdateOfARealTensorFromAMetaOneIsAnError) {
  Tensor p = zeros({3});
  Tensor g = Tensor::meta({3}, DType::Float32, Device::cpu());
  EXPECT_THROW(p.add_(g), Error);
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{0, 0, 0}));
}

TEST(Meta, MetaModeRunsAWholeModelWithoutMemory) {
  auto model = models::resnet18();
  model->eval();
  Tensor x = randn({4, 3, 32, 32});
  size_t before = allocator_for(DeviceType::CPU).bytes_in_use();
  Tensor y;
  {
    MetaMode meta;
    ModeGuard g(meta);
    y = model->forward(x);
  }
  EXPECT_TRUE(y.is_meta());
  EXPECT_EQ(y.shape(), (Shape{4, 10}));
  EXPECT_EQ(allocator_for(DeviceType::CPU).bytes_in_use(), before);
}

TEST(Meta, MetaCudaTensorsNeedNoGpu) {
  Tensor a = Tensor::meta({2, 3}, DType::Float32, Device::cuda());
  Tensor b = exp(a).sum({1});
  EXPECT_TRUE(b.is_meta());
  EXPECT_EQ(b.device(), Device::cuda());
  EXPECT_EQ(b.shape(), (Shape{2}));
}

TEST(Meta, MaterializeGivesAMetaStorageRealMemory) {
  Tensor a = Tensor::meta({2, 3}, DType::Float32, Device::cpu());
  Tensor v = a.t();
  Tensor real = arange(0, 6).to(DType::Float32).view({2, 3});
  a.impl()->storage->materialize(real.impl_ptr()->storage);
  EXPECT_FALSE(a.is_meta());
  EXPECT_EQ(v.contiguous().to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
}

}  // namespace
}  // namespace kiln
