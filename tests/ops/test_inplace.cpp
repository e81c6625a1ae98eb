// In-place ops against PyTorch goldens (tools/goldens/gen_pointwise.py) on
// both vector paths, plus aliasing, non-contiguous self, dtype rules and the
// autograd guard.
#include <functional>
#include <string>

#include "core/cpu_features.h"
#include "testing/golden.h"
#include "testing/isa.h"

namespace kiln {
namespace {

using ::kiln::testing::Goldens;

using testing::vec;

const Goldens& golden() { return testing::goldens("inplace"); }
// A fresh copy of a golden input (in-place ops must not change the goldens);
// "_T" names are the base of a transposed view, and stay non-contiguous.
Tensor fresh(const std::string& name) { return testing::with_golden_layout(name, golden()[name].clone()); }

class InplaceIsa : public testing::IsaTest {};
KILN_INSTANTIATE_ISA(InplaceIsa);

TEST_P(InplaceIsa, MatchesTorch) {
  Tensor o = golden()["other"], t1 = golden()["t1"], t2 = golden()["t2"], r = golden()["row"];
  Tensor s;
  s = fresh("self");
  EXPECT_TENSOR_CLOSE(add_(s, o, 0.3), golden()["add_(self,other,0.3)"]);
  s = fresh("self");
  EXPECT_TENSOR_CLOSE(s.add_(o), golden()["add_(self,other)"]);
  s = fresh("self");
  EXPECT_TENSOR_CLOSE(add_(s, r, -2.0), golden()["add_(self,row,-2)"]);
  s = fresh("self_T");
  add_(s, o, 0.3);
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_TENSOR_CLOSE(s, golden()["add_(self_T,other,0.3)"]);
  s = fresh("self");
  EXPECT_TENSOR_CLOSE(mul_(s, o), golden()["mul_(self,other)"]);
  s = fresh("self");
  EXPECT_TENSOR_CLOSE(mul_(s, r), golden()["mul_(self,row)"]);
  s = fresh("self");
  EXPECT_TENSOR_CLOSE(s.mul_(0.9), golden()["mul_(self,0.9)"]);
  s = fresh("self");
  EXPECT_TENSOR_CLOSE(addcmul_(s, t1, t2, 0.5), golden()["addcmul_(self,t1,t2,0.5)"]);
  s = fresh("self");
  EXPECT_TENSOR_CLOSE(addcmul_(s, t1, r), golden()["addcmul_(self,t1,row,1)"]);
  s = fresh("self");
  EXPECT_TENSOR_CLOSE(addcdiv_(s, t1, t2, -0.2), golden()["addcdiv_(self,t1,t2,-0.2)"]);
  s = fresh("self_T");
  EXPECT_TENSOR_CLOSE(addcdiv_(s, t1, t2, -0.2), golden()["addcdiv_(self_T,t1,t2,-0.2)"]);
  s = fresh("self");
  EXPECT_TENSOR_CLOSE(lerp_(s, o, 0.3), golden()["lerp_(self,other,0.3)"]);
  s = fresh("self");
  EXPECT_TENSOR_CLOSE(lerp_(s, o, 0.8), golden()["lerp_(self,other,0.8)"]);
  s = fresh("self");
  EXPECT_TENSOR_CLOSE(lerp_(s, r, 1.0), golden()["lerp_(self,row,1)"], 0.0, 0.0);  // exact at weight 1
  s = fresh("self");
  EXPECT_TENSOR_CLOSE(s.copy_(r), golden()["copy_(self,row)"], 0.0, 0.0);
}

TEST_P(InplaceIsa, OtherDtypes) {
  Tensor i = fresh("i"), j = golden()["j"], o = golden()["other"];
  EXPECT_TENSOR_CLOSE(add_(i, j, 3.0), golden()["add_(i,j,3)"], 0.0, 0.0);
  i = fresh("i");
  EXPECT_TENSOR_CLOSE(mul_(i, j), golden()["mul_(i,j)"], 0.0, 0.0);
  Tensor s = fresh("self");
  EXPECT_TENSOR_CLOSE(add_(s, j), golden()["add_(self,i)"]);
  Tensor s64 = fresh("self").to(DType::Float64);
  EXPECT_TENSOR_CLOSE(add_(s64, o, 0.5), golden()["add_(self64,self)"], 1e-12, 1e-12);
  Tensor s16 = fresh("self").to(DType::Float16);
  EXPECT_TENSOR_CLOSE(add_(s16, o.to(DType::Float16), 0.5), golden()["add_(self16,other)"], 1e-3, 1e-3);
}

TEST_P(InplaceIsa, LargeTensorsMatchOutOfPlace) {
  Generator gen(3);
  Tensor a = randn({300, 129}, {}, &gen), b = randn({300, 129}, {}, &gen);
  Tensor c = add(abs(b), 1.0);
  Tensor s = a.clone();
  EXPECT_TENSOR_CLOSE(add_(s, b, 0.1), add(a, mul(b, 0.1)));
  s = a.clone();
  EXPECT_TENSOR_CLOSE(addcdiv_(s, b, c, 0.01), add(a, div(mul(b, 0.01), c)));
  s = a.clone();
  EXPECT_TENSOR_CLOSE(addcmul_(s, b, c, -0.5), add(a, mul(mul(b, -0.5), c)));
  s = a.clone();
  EXPECT_TENSOR_CLOSE(lerp_(s, b, 0.25), add(a, mul(sub(b, a), 0.25)));
  s = a.clone();
  EXPECT_TENSOR_CLOSE(s.fill_(1.5), full({300, 129}, 1.5), 0.0, 0.0);
}

TEST(Inplace, FillAndCopyAnyLayout) {
  Tensor t = zeros({4, 6});
  Tensor col = t.slice(1, 2, 3);  // non-contiguous column
  col.fill_(7.0);
  std::vector<float> v = t.to_vector<float>();
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 6; ++c) EXPECT_EQ(v[r * 6 + c], c == 2 ? 7.0f : 0.0f);
  Tensor i = zeros({3}, dtype(DType::Int64));
  i.fill_(-4.0);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{-4, -4, -4}));
  Tensor b = zeros({2}, dtype(DType::Bool));
  b.fill_(1.0);
  EXPECT_EQ(b.to_vector<int64_t>(), (std::vector<int64_t>{1, 1}));
  // copy_ converts dtypes and broadcasts.
  Tensor d = zeros({2, 3}, dtype(DType::Float64));
  d.copy_(vec({1.0f, 2.0f, 3.0f}));
  EXPECT_EQ(d.to_vector<double>(), (std::vector<double>{1, 2, 3, 1, 2, 3}));
}

TEST(Inplace, OverlappingInputsAreReadBeforeWritten) {
  Tensor t = vec({1.0f, 2.0f, 3.0f, 4.0f});
  Tensor head = t.slice(0, 1, 4), tail = t.slice(0, 0, 3);
  add_(head, tail);  // t[1:] += t[:-1] with the old values
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 3, 5, 7}));
  Tensor u = vec({1.0f, 2.0f});
  add_(u, u);  // same view: elementwise, no copy needed
  EXPECT_EQ(u.to_vector<float>(), (std::vector<float>{2, 4}));
  Tensor w = vec({1.0f, 2.0f, 3.0f});
  w.slice(0, 1, 3).copy_(w.slice(0, 0, 2));
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{1, 1, 2}));
}

TEST(Inplace, ErrorsNameTheProblem) {
  auto message = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  Tensor a = ones({2, 3});
  Tensor i = ones({2, 3}, dtype(DType::Int64));
  EXPECT_NE(message([&] { add_(a, ones({4, 2, 3})); }).find("shape"), std::string::npos);
  EXPECT_NE(message([&] { add_(i, a); }).find("cannot be stored"), std::string::npos);
  EXPECT_NE(message([&] { add_(i, i, 0.5); }).find("whole"), std::string::npos);
  EXPECT_NE(message([&] { mul_(i, 0.5); }).find("cannot be stored"), std::string::npos);
  EXPECT_NE(message([&] { lerp_(i, i, 0.5); }).find("floating"), std::string::npos);
  EXPECT_NE(message([&] { addcdiv_(i, i, i); }).find("integer division"), std::string::npos);
  Tensor p = ones({2}).requires_grad_();
  EXPECT_NE(message([&] { p.add_(ones({2})); }).find("requires grad"), std::string::npos);
  {
    NoGradGuard ng;
    p.add_(ones({2}), 2.0);  // optimizer-style update
  }
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{3, 3}));
}

}  // namespace
}  // namespace kiln
