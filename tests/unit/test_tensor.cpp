// Tensor basics: factories, host round trips, copies and casts for every
// dtype, printing, devices, and the CPU caching allocator.
#include <cmath>
#include <cstdint>

#include <gtest/gtest.h>

#include "kiln/kiln.h"

namespace kiln {
namespace {

constexpr DType kAll[] = {DType::Bool,    DType::UInt8,    DType::Int32,   DType::Int64,
                          DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};

std::vector<double> dv(std::initializer_list<double> v) { return v; }

TEST(Tensor, UndefinedByDefault) {
  Tensor t;
  EXPECT_FALSE(t.defined());
  EXPECT_EQ(t.str(), "Tensor(undefined)");
}

// Metadata, data, grad and backward on an undefined Tensor (a parameter's
// grad before any backward) are a kiln::Error naming the call, never a null
// dereference; numel() is 0 and requires_grad() false, as in libtorch.
TEST(Tensor, UndefinedTensorCallsThrowKilnError) {
  Tensor t;
  EXPECT_EQ(t.numel(), 0);
  EXPECT_FALSE(t.requires_grad());
  auto says = [](auto&& f, const std::string& call) {
    try {
      f();
    } catch (const InternalError& e) {
      ADD_FAILURE() << call << ": InternalError " << e.what();
      return;
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("Tensor::" + call + " called on an undefined Tensor"), std::string::npos) << m;
      EXPECT_NE(m.find("t.defined()"), std::string::npos) << m;
      return;
    }
    ADD_FAILURE() << call << " did not throw";
  };
  says([&] { (void)t.shape(); }, "shape()");
  says([&] { (void)t.sizes(); }, "sizes()");
  says([&] { (void)t.strides(); }, "strides()");
  says([&] { (void)t.dim(); }, "dim()");
  says([&] { (void)t.size(0); }, "size()");
  says([&] { (void)t.stride(0); }, "stride()");
  says([&] { (void)t.dtype(); }, "dtype()");
  says([&] { (void)t.device(); }, "device()");
  says([&] { (void)t.nbytes(); }, "dtype()");
  says([&] { (void)t.is_contiguous(); }, "is_contiguous()");
  says([&] { (void)t.data_ptr(); }, "data_ptr()");
  says([&] { (void)t.data<float>(); }, "dtype()");
  says([&] { (void)t.item(); }, "item()");
  says([&] { (void)t.grad(); }, "grad()");
  says([&] { (void)t.grad_fn(); }, "grad_fn()");
  says([&] { (void)t.is_leaf(); }, "is_leaf()");
  says([&] { t.backward(); }, "backward()");
  says([&] { (void)t.detach(); }, "detach()");
  says([&] { t.requires_grad_(); }, "requires_grad_()");
  says([&] { t.set_grad(Tensor()); }, "set_grad()");
  says([&] { (void)t.version(); }, "version()");
  says([&] { (void)t.to_vector<float>(); }, "device()");
  says([&] { (void)t.sum(); }, "dtype()");

  // The case users hit: a parameter's grad before any backward.
  Tensor w = ones({2});
  w.requires_grad_();
  EXPECT_FALSE(w.grad().defined());
  says([&] { (void)w.grad().shape(); }, "shape()");
  says([&] { (void)w.grad().data<float>(); }, "dtype()");
  EXPECT_EQ(w.grad().numel(), 0);
}

TEST(Tensor, EmptyForEveryDType) {
  for (DType d : kAll) {
    Tensor t = Tensor::empty({2, 3}, d);
    EXPECT_EQ(t.dtype(), d);
    EXPECT_EQ(t.shape(), (Shape{2, 3}));
    EXPECT_EQ(t.strides(), (Shape{3, 1}));
    EXPECT_EQ(t.itemsize(), itemsize(d));
    EXPECT_EQ(t.nbytes(), 6 * itemsize(d));
    EXPECT_TRUE(t.device().is_cpu());
    EXPECT_EQ(t.is_floating_point(), is_floating(d));
    Tensor e = empty({4}, dtype(d));
    EXPECT_EQ(e.dtype(), d);
    EXPECT_EQ(e.shape(), (Shape{4}));
  }
  Tensor z = Tensor::empty({});
  EXPECT_EQ(z.dim(), 0);
  EXPECT_EQ(z.numel(), 1);
  Tensor n = Tensor::empty({0, 5});
  EXPECT_EQ(n.numel(), 0);
  EXPECT_EQ(n.to_vector<float>().size(), 0u);
}

TEST(Tensor, ZerosOnesFullForEveryDType) {
  for (DType d : kAll) {
    SCOPED_TRACE(dtype_name(d));
    Tensor z = zeros({2, 2}, dtype(d));
    EXPECT_EQ(z.dtype(), d);
    EXPECT_EQ(z.to_vector<double>(), dv({0, 0, 0, 0}));
    Tensor o = ones({3}, dtype(d));
    EXPECT_EQ(o.to_vector<double>(), dv({1, 1, 1}));
    Tensor f = full({2}, d == DType::Bool ? 1.0 : 5.0, dtype(d));
    EXPECT_EQ(f.to_vector<double>(), d == DType::Bool ? dv({1, 1}) : dv({5, 5}));
    EXPECT_EQ(zeros_like(f).to_vector<double>(), dv({0, 0}));
    EXPECT_EQ(ones_like(f).dtype(), d);
    EXPECT_EQ(ones_like(f).to_vector<double>(), dv({1, 1}));
    EXPECT_EQ(full_like(f, 1.0).to_vector<double>(), dv({1, 1}));
  }
  EXPECT_EQ(full({2}, 2.5).to_vector<double>(), dv({2.5, 2.5}));
  EXPECT_EQ(full({}, -1.5, dtype(DType::Float64)).item(), -1.5);
  EXPECT_EQ(zeros({}).dim(), 0);
  Tensor r = ones({2}, TensorOptions().with_requires_grad());
  EXPECT_TRUE(r.requires_grad());
  EXPECT_TRUE(r.is_leaf());
}

TEST(Tensor, Arange) {
  Tensor a = arange(5);
  EXPECT_EQ(a.dtype(), DType::Int64);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  Tensor b = arange(0, 1, 0.25, dtype(DType::Float32));
  EXPECT_EQ(b.dtype(), DType::Float32);
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{0, 0.25f, 0.5f, 0.75f}));
  EXPECT_EQ(arange(10, 0, -3).to_vector<int64_t>(), (std::vector<int64_t>{10, 7, 4, 1}));
  EXPECT_EQ(arange(2, 5, 1, dtype(DType::Float64)).to_vector<double>(), dv({2, 3, 4}));
  EXPECT_EQ(arange(0).numel(), 0);
  EXPECT_EQ(arange(3, dtype(DType::Int32)).dtype(), DType::Int32);
}

TEST(Tensor, FromVectorAndItem) {
  Tensor f = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(f.dtype(), DType::Float32);
  EXPECT_EQ(f.shape(), (Shape{2, 3}));
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(f[1][2].item(), 6.0);
  Tensor d = from_vector(std::vector<double>{0.1, -2.5}, {2});
  EXPECT_EQ(d.dtype(), DType::Float64);
  EXPECT_EQ(d.to_vector<double>(), dv({0.1, -2.5}));
  Tensor i = from_vector(std::vector<int64_t>{7, -8, 1LL << 40}, {3});
  EXPECT_EQ(i.dtype(), DType::Int64);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{7, -8, 1LL << 40}));
  EXPECT_EQ(i[2].item<int64_t>(), 1LL << 40);
  Tensor s = from_vector(std::vector<float>{3.5f}, {});
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item(), 3.5);
  EXPECT_EQ(s.item<float>(), 3.5f);
  Tensor conv = from_vector(std::vector<double>{1.5, 2.5}, {2}, dtype(DType::Float32));
  EXPECT_EQ(conv.dtype(), DType::Float32);
  EXPECT_EQ(conv.to_vector<float>(), (std::vector<float>{1.5f, 2.5f}));
  EXPECT_THROW(from_vector(std::vector<float>{1, 2, 3}, {2, 2}), Error);
  int32_t raw[3] = {4, 5, 6};
  Tensor b = from_blob(raw, {3}, DType::Int32);
  raw[0] = 0;  // copied, not aliased
  EXPECT_EQ(b.to_vector<int32_t>(), (std::vector<int32_t>{4, 5, 6}));
}

TEST(Tensor, ItemForEveryDType) {
  for (DType d : kAll) {
    Tensor t = full({1, 1}, 1.0, dtype(d));
    EXPECT_EQ(t.item(), 1.0) << dtype_name(d);
  }
}

TEST(Tensor, DataPointerIsTyped) {
  Tensor t = zeros({3}, dtype(DType::Int32));
  EXPECT_NE(t.data<int32_t>(), nullptr);
  EXPECT_THROW(t.data<float>(), Error);
  Tensor s = from_vector(std::vector<float>{1, 2, 3, 4}, {4}).slice(0, 1, 4);
  EXPECT_EQ(s.data<float>()[0], 2.0f);  // element 0 of the view, offset applied
  Tensor base = s.detach();
  EXPECT_EQ(s.offset(), 1);
  EXPECT_EQ(static_cast<char*>(s.data_ptr()) - static_cast<char*>(base.impl()->storage->data()), 4);
}

TEST(Tensor, CloneCopies) {
  Tensor x = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor c = x.clone();
  EXPECT_FALSE(c.shares_storage(x));
  EXPECT_EQ(c.to_vector<float>(), x.to_vector<float>());
  c.data<float>()[0] = 9;
  EXPECT_EQ(x.to_vector<float>()[0], 1.0f);
  Tensor ct = x.t().clone();
  EXPECT_TRUE(ct.is_contiguous());
  EXPECT_EQ(ct.shape(), (Shape{3, 2}));
  EXPECT_EQ(ct.to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  for (DType d : kAll) {
    Tensor t = ones({2, 2}, dtype(d));
    Tensor tc = t.t().clone();
    EXPECT_EQ(tc.dtype(), d);
    EXPECT_EQ(tc.to_vector<double>(), dv({1, 1, 1, 1}));
  }
}

TEST(Tensor, Contiguous) {
  Tensor x = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(x.contiguous().impl(), x.impl());
  Tensor c = x.t().contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

// Values exactly representable in every dtype survive any cast.
TEST(Tensor, ToDTypeAllPairs) {
  const std::vector<double> v = {0, 1, 2, 5, 100, 3};
  for (DType from : kAll) {
    Tensor src = from_vector(v, {2, 3}).to(from);
    ASSERT_EQ(src.dtype(), from);
    for (DType to : kAll) {
      SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + dtype_name(to));
      Tensor dst = src.to(to);
      EXPECT_EQ(dst.dtype(), to);
      EXPECT_EQ(dst.shape(), (Shape{2, 3}));
      std::vector<double> expect = v;
      if (from == DType::Bool || to == DType::Bool)
        for (double& e : expect) e = e != 0 ? 1 : 0;
      EXPECT_EQ(dst.to_vector<double>(), expect);
      // a strided source converts too
      std::vector<double> te = {expect[0], expect[3], expect[1], expect[4], expect[2], expect[5]};
      EXPECT_EQ(src.t().to(to).to_vector<double>(), te);
    }
  }
}

TEST(Tensor, ToDTypeConversionRules) {
  Tensor f = from_vector(std::vector<float>{2.7f, -2.7f, 0.5f, 0.0f}, {4});
  EXPECT_EQ(f.to(DType::Int32).to_vector<int32_t>(), (std::vector<int32_t>{2, -2, 0, 0}));  // toward zero
  EXPECT_EQ(f.to(DType::Int64).to_vector<int64_t>(), (std::vector<int64_t>{2, -2, 0, 0}));
  EXPECT_EQ(f.to(DType::Bool).to_vector<double>(), dv({1, 1, 1, 0}));
  Tensor h = from_vector(std::vector<float>{0.1f, 65519.0f, 1e-5f}, {3}).to(DType::Float16);
  EXPECT_EQ(h.to_vector<float>(), (std::vector<float>{0.0999755859375f, 65504.0f, 1.0013580322265625e-05f}));
  Tensor bf = from_vector(std::vector<float>{0.1f, 3.14159265f}, {2}).to(DType::BFloat16);
  EXPECT_EQ(bf.to_vector<float>(), (std::vector<float>{0.10009765625f, 3.140625f}));
  EXPECT_EQ(f.to(DType::Float32).impl(), f.impl());  // same dtype: the same tensor, as torch
}

TEST(Tensor, ToSameDeviceIsNoop) {
  Tensor x = ones({2});
  EXPECT_EQ(x.to(Device::cpu()).impl(), x.impl());
}

TEST(Tensor, Device) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cuda"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda:1"), Device::cuda(1));
  EXPECT_EQ(Device::cuda(2).str(), "cuda:2");
  EXPECT_EQ(Device::cpu().str(), "cpu");
  EXPECT_THROW(Device::parse("gpu"), Error);
  EXPECT_THROW(Device::parse("cuda:x"), Error);
  EXPECT_THROW(Device::parse("cuda:-1"), Error);
}

// ---- printing ----
TEST(TensorPrint, SmallFloat) {
  Tensor x = from_vector(std::vector<float>{1.5f, -2, 3, 4}, {2, 2});
  std::string s = x.str();
  EXPECT_EQ(s.rfind("tensor(", 0), 0u) << s;
  EXPECT_NE(s.find("1.5"), std::string::npos) << s;
  EXPECT_NE(s.find("-2"), std::string::npos) << s;
  EXPECT_NE(s.find('\n'), std::string::npos) << "rows on their own lines: " << s;
  EXPECT_EQ(s.find("..."), std::string::npos) << s;
  EXPECT_NE(s.find("float32"), std::string::npos) << s;
  EXPECT_EQ(s.back(), ')');
  std::ostringstream os;
  os << x;
  EXPECT_EQ(os.str(), s);
}

TEST(TensorPrint, IntsBoolsAndScalars) {
  std::string i = from_vector(std::vector<int64_t>{3, -7, 12}, {3}).str();
  EXPECT_NE(i.find("3"), std::string::npos) << i;
  EXPECT_NE(i.find("-7"), std::string::npos) << i;
  EXPECT_NE(i.find("int64"), std::string::npos) << i;
  EXPECT_EQ(i.find("."), std::string::npos) << "integers print without a decimal point: " << i;
  std::string s = full({}, 2.25).str();
  EXPECT_NE(s.find("2.25"), std::string::npos) << s;
  std::string e = zeros({0}).str();
  EXPECT_NE(e.find("[]"), std::string::npos) << e;
  std::string g = ones({2}, TensorOptions().with_requires_grad()).str();
  EXPECT_NE(g.find("requires_grad"), std::string::npos) << g;
  for (DType d : kAll) EXPECT_NE(ones({2}, dtype(d)).str().find(dtype_name(d)), std::string::npos);
}

TEST(TensorPrint, BigTensorIsSummarized) {
  Tensor big = arange(0, 10000, 1, dtype(DType::Float32)).view({100, 100});
  std::string s = big.str();
  EXPECT_NE(s.find("..."), std::string::npos);
  EXPECT_LT(s.size(), 3000u) << "a 100x100 tensor should print a summary, got " << s.size() << " chars";
  EXPECT_NE(s.find("9999"), std::string::npos) << "the last element is shown";
  Tensor long1d = arange(100000, dtype(DType::Int64));
  std::string l = long1d.str();
  EXPECT_LT(l.size(), 500u);
  EXPECT_NE(l.find("99999"), std::string::npos);
  EXPECT_NE(l.find("..."), std::string::npos);
}

// ---- the CPU caching allocator ----
TEST(Allocator, ReusesAFreedBlock) {
  Allocator& a = allocator_for(DeviceType::CPU);
  const size_t n = 123456;
  void* p = a.allocate(n);
  ASSERT_NE(p, nullptr);
  size_t in_use = a.bytes_in_use();
  size_t cached_before = a.bytes_cached();
  a.deallocate(p, n);
  EXPECT_GT(a.bytes_cached(), cached_before);
  EXPECT_GE(a.bytes_cached() - cached_before, n);
  EXPECT_LT(a.bytes_in_use(), in_use);
  size_t cached_after_free = a.bytes_cached();
  void* q = a.allocate(n);
  EXPECT_EQ(q, p) << "the freed block should be handed out again";
  EXPECT_LT(a.bytes_cached(), cached_after_free);
  EXPECT_EQ(a.bytes_cached(), cached_before);
  a.deallocate(q, n);
}

TEST(Allocator, SixtyFourByteAligned) {
  Allocator& a = allocator_for(DeviceType::CPU);
  std::vector<std::pair<void*, size_t>> blocks;
  for (size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{63}, size_t{64}, size_t{65}, size_t{511}, size_t{513},
                   size_t{4097}, size_t{1} << 20, (size_t{1} << 20) + 1, size_t{3} << 22}) {
    void* p = a.allocate(n);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << n << " bytes";
    if (n > 0) static_cast<char*>(p)[n - 1] = 1;  // writable to the end
    blocks.emplace_back(p, n);
  }
  for (auto [p, n] : blocks) a.deallocate(p, n);
  for (DType d : {DType::UInt8, DType::Float32, DType::Float64}) {
    Tensor t = Tensor::empty({7, 3}, d);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64, 0u);
  }
}

TEST(Allocator, TensorStorageReturnsToCache) {
  Allocator& a = allocator_for(DeviceType::CPU);
  void* first;
  {
    Tensor t = Tensor::empty({1000, 37});
    first = t.data_ptr();
  }
  Tensor u = Tensor::empty({1000, 37});
  EXPECT_EQ(u.data_ptr(), first);
  size_t in_use = a.bytes_in_use();
  { Tensor v = u.view({37000}); }  // a view holds the storage, does not allocate
  EXPECT_EQ(a.bytes_in_use(), in_use);
}

TEST(Allocator, EmptyCacheReleasesBlocks) {
  Allocator& a = allocator_for(DeviceType::CPU);
  void* p = a.allocate(5000);
  a.deallocate(p, 5000);
  EXPECT_GT(a.bytes_cached(), 0u);
  a.empty_cache();
  EXPECT_EQ(a.bytes_cached(), 0u);
}

// ---- random (seeding only; distributions are the factory family's tests) ----
TEST(Tensor, RandomIsSeedable) {
  Generator g1(42), g2(42);
  Tensor a = randn({16}, {}, &g1), b = randn({16}, {}, &g2);
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  Tensor c = randn({16}, {}, &g1);
  EXPECT_NE(a.to_vector<float>(), c.to_vector<float>());
  manual_seed(7);
  Tensor d = rand({8});
  manual_seed(7);
  EXPECT_EQ(rand({8}).to_vector<float>(), d.to_vector<float>());
}

// Found by fuzz/idx_fuzz.cpp: an IDX file declaring [0, 2^32-1, 2^32-253] made
// contiguous_strides overflow int64 (UBSan; garbage strides in release).
TEST(Tensor, ShapeWhoseStridesOverflowIsAnError) {
  EXPECT_THROW(
      {
        try {
          Tensor::empty({0, 1, 4294967295LL, 4294967043LL});
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("overflow int64"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  EXPECT_EQ(Tensor::empty({0, 1, 65536, 65536}).numel(), 0);  // large but representable: fine
}

}  // namespace
}  // namespace kiln
