// The decompositions of ops that keep a fast eager kernel (softmax,
// log_softmax, batch_norm, nll_loss, gelu and their backward ops, relu_backward, linear;
// src/ops/decompositions.cpp) against the kernels: the same outputs, the
// same running-stat updates, the same gradients (autograd through the
// primitive ops against the ops' own derivatives), and only primitive ops
// inside (recorded with a dispatch mode).
//
// Tolerances: float32 outputs 1e-5 relative (1e-5 absolute near zero, where
// the kernel's x * scale + shift and the decomposition's (x - mean) * scale
// round differently); float64 1e-10; bfloat16 one rounding step (1e-2); float32
// gradients 1e-4 relative (the kernels accumulate in double).
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "ops/dispatch_mode.h"
#include "ops/meta_mode.h"
#include "ops/op_def.h"
#include "testing/compare.h"

namespace kiln {
namespace {

using testing::tensors_close;

Tensors run_decomposition(OpId id, TensorSpan inputs, const Attrs& attrs) {
  const OpDef& def = op_def(id);
  KILN_ASSERT(def.decompose != nullptr, op_name(id), " has no decomposition");
  return def.decompose(inputs, attrs);
}

struct Tol {
  double rtol, atol;
};
Tol output_tol(DType d) {
  if (d == DType::Float64) return {1e-10, 1e-10};
  if (d == DType::BFloat16 || d == DType::Float16) return {1e-2, 1e-2};
  return {1e-5, 1e-5};
}
Tol grad_tol(DType d) { return d == DType::Float64 ? Tol{1e-9, 1e-10} : Tol{1e-4, 1e-5}; }

Tensor random(const Shape& shape, DType dt, uint64_t seed, double scale = 1.0, double shift = 0.0) {
  Generator gen(seed);
  return add(mul(randn(shape, dtype(DType::Float64), &gen), scale), shift).to(dt);
}

// The kernel's outputs against the decomposition's, each output in turn.
void expect_same_outputs(OpId id, const Tensors& inputs, const Attrs& attrs, DType dt) {
  Tensors want = dispatch(id, inputs, attrs);
  Tensors got = run_decomposition(id, inputs, attrs);
  ASSERT_EQ(got.size(), want.size()) << op_name(id);
  Tol t = output_tol(dt);
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("output " + std::to_string(i));
    EXPECT_TRUE(tensors_close(got[i], want[i], t.rtol, t.atol));
  }
}

// Gradients of sum(out[0] * r) for the inputs listed in `wrt`, through the
// kernel (the op's derivative) and through the decomposition (autograd over
// its primitive ops).
Tensors grads_of(OpId id, const Tensors& inputs, const Attrs& attrs, const std::vector<int>& wrt, bool decomposed) {
  Tensors leaves;
  for (const Tensor& t : inputs) leaves.push_back(t.defined() ? t.detach().clone() : Tensor());
  for (int i : wrt) leaves[i].requires_grad_();
  Tensors out = decomposed ? run_decomposition(id, leaves, attrs) : dispatch(id, leaves, attrs);
  Tensor r = random(out[0].shape(), out[0].dtype(), 99);
  sum(mul(out[0], r)).backward();
  Tensors g;
  for (int i : wrt) g.push_back(leaves[i].grad());
  return g;
}
void expect_same_grads(OpId id, const Tensors& inputs, const Attrs& attrs, const std::vector<int>& wrt, DType dt) {
  Tensors want = grads_of(id, inputs, attrs, wrt, false);
  Tensors got = grads_of(id, inputs, attrs, wrt, true);
  Tol t = grad_tol(dt);
  for (size_t i = 0; i < wrt.size(); ++i) {
    SCOPED_TRACE("gradient of input " + std::to_string(wrt[i]));
    ASSERT_TRUE(got[i].defined());
    EXPECT_TRUE(tensors_close(got[i], want[i], t.rtol, t.atol));
  }
}

const std::vector<DType> kDtypes = {DType::Float32, DType::Float64, DType::BFloat16};

struct DimCase {
  Shape shape;
  int64_t dim;
};
const std::vector<DimCase> kSoftmaxCases = {
    {{4, 7}, 1}, {{4, 7}, 0}, {{1, 10}, -1}, {{2, 3, 5}, 1}, {{3, 4, 2, 2}, 1}, {{2, 5, 3}, 2}, {{6}, 0},
};

TEST(Decompositions, SoftmaxAndLogSoftmaxMatchKernels) {
  for (OpId id : {OpId::softmax, OpId::log_softmax}) {
    for (DType dt : kDtypes) {
      for (const DimCase& c : kSoftmaxCases) {
        SCOPED_TRACE(std::string(op_name(id)) + " " + dtype_name(dt) + shape_str(c.shape) + " dim " +
                     std::to_string(c.dim));
        Attrs a = Attrs().set("dim", c.dim);
        // Large values: the max subtraction keeps exp finite.
        Tensor x = random(c.shape, dt, 1, 30.0);
        expect_same_outputs(id, {x}, a, dt);
        if (dt != DType::BFloat16) expect_same_grads(id, {x}, a, {0}, dt);
      }
    }
  }
}

TEST(Decompositions, SoftmaxRowsWithInfinities) {
  const float inf = std::numeric_limits<float>::infinity();
  // A row with some -inf, a row of all -inf (NaN in both), a row with +inf.
  Tensor x = from_vector(std::vector<float>{1, -inf, 2, 0, -inf, -inf, -inf, -inf, 3, inf, 1, 2}, {3, 4});
  for (OpId id : {OpId::softmax, OpId::log_softmax}) {
    SCOPED_TRACE(op_name(id));
    expect_same_outputs(id, {x}, Attrs().set("dim", int64_t{1}), DType::Float32);
  }
}

TEST(Decompositions, SoftmaxBackwardOpsMatchKernels) {
  for (bool log : {false, true}) {
    OpId fwd = log ? OpId::log_softmax : OpId::softmax;
    OpId bwd = log ? OpId::log_softmax_backward : OpId::softmax_backward;
    for (DType dt : kDtypes) {
      for (const DimCase& c : kSoftmaxCases) {
        SCOPED_TRACE(std::string(op_name(bwd)) + " " + dtype_name(dt) + shape_str(c.shape));
        Attrs a = Attrs().set("dim", c.dim);
        Tensor y = dispatch1(fwd, {random(c.shape, dt, 2, 3.0)}, a);
        Tensor g = random(c.shape, dt, 3);
        expect_same_outputs(bwd, {g, y}, a, dt);
      }
    }
  }
}

// ---- batch_norm ----
struct BnCase {
  Shape shape;
  bool affine, stats;
};
const std::vector<BnCase> kBnCases = {
    {{4, 3}, true, true},       {{2, 3, 4, 4}, true, true}, {{1, 3, 5, 5}, true, true},
    {{5, 2, 3}, false, true},   {{3, 4, 2, 2}, false, false}, {{2, 3, 4, 4}, true, false},
};

Tensors bn_inputs(const BnCase& c, DType dt, bool training) {
  int64_t C = c.shape[1];
  Tensor x = random(c.shape, dt, 5, 2.0, 0.5);
  DType pd = dt == DType::Float64 ? DType::Float64 : DType::Float32;
  Tensor w = c.affine ? random({C}, pd, 6, 0.5, 1.0) : Tensor();
  Tensor b = c.affine ? random({C}, pd, 7) : Tensor();
  bool stats = c.stats || !training;  // eval needs running statistics
  Tensor rm = stats ? random({C}, pd, 8, 0.1) : Tensor();
  Tensor rv = stats ? add(abs(random({C}, pd, 9)), 0.5) : Tensor();
  return {x, w, b, rm, rv};
}
Attrs bn_attrs(bool training) { return Attrs().set("training", training).set("momentum", 0.1).set("eps", 1e-5); }

TEST(Decompositions, BatchNormMatchesKernelAndUpdatesRunningStats) {
  for (DType dt : kDtypes) {
    for (bool training : {true, false}) {
      for (const BnCase& c : kBnCases) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + shape_str(c.shape) + (training ? " train" : " eval") +
                     (c.affine ? " affine" : "") + (c.stats ? " stats" : ""));
        Tensors kin = bn_inputs(c, dt, training), din = bn_inputs(c, dt, training);
        Attrs a = bn_attrs(training);
        uint64_t v0 = din[3].defined() ? din[3].version() : 0;
        Tensors want = dispatch(OpId::batch_norm, kin, a);
        Tensors got = run_decomposition(OpId::batch_norm, din, a);
        ASSERT_EQ(got.size(), 3u);
        Tol t = output_tol(dt);
        for (int i = 0; i < 3; ++i) {
          SCOPED_TRACE("output " + std::to_string(i));
          EXPECT_TRUE(tensors_close(got[i], want[i], t.rtol, t.atol));
        }
        if (din[3].defined()) {
          // The running statistics are float32/64 buffers: float32 tolerance.
          EXPECT_TRUE(tensors_close(din[3], kin[3], 1e-5, 1e-6));
          EXPECT_TRUE(tensors_close(din[4], kin[4], 1e-5, 1e-6));
          // One visible write to each buffer in training, none in eval.
          EXPECT_EQ(din[3].version(), v0 + (training ? 1 : 0));
          EXPECT_EQ(din[3].version(), kin[3].version());
        }
      }
    }
  }
}

TEST(Decompositions, BatchNormGradientsMatchKernel) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (bool training : {true, false}) {
      for (const BnCase& c : kBnCases) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + shape_str(c.shape) + (training ? " train" : " eval"));
        std::vector<int> wrt = {0};
        if (c.affine) wrt = {0, 1, 2};
        expect_same_grads(OpId::batch_norm, bn_inputs(c, dt, training), bn_attrs(training), wrt, dt);
      }
    }
  }
}

TEST(Decompositions, BatchNormBackwardMatchesKernel) {
  for (DType dt : kDtypes) {
    for (bool training : {true, false}) {
      for (const BnCase& c : kBnCases) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + shape_str(c.shape) + (training ? " train" : " eval"));
        Tensors in = bn_inputs(c, dt, training);
        Tensors fwd = dispatch(OpId::batch_norm, in, bn_attrs(training));
        Tensor go = random(c.shape, dt, 11);
        Attrs a = Attrs().set("training", training).set("eps", 1e-5);
        expect_same_outputs(OpId::batch_norm_backward, {go, in[0], in[1], fwd[1], fwd[2]}, a, dt);
      }
    }
  }
}

// ---- nll_loss ----
struct NllCase {
  Shape log_probs, target;
};
const std::vector<NllCase> kNllCases = {
    {{5}, {}}, {{6, 4}, {6}}, {{1, 4}, {1}}, {{3, 5, 2, 2}, {3, 2, 2}}, {{2, 3, 4}, {2, 4}},
};

// Targets in [0, C) with every third one set to `ignore` when it is a class.
Tensor targets(const Shape& shape, int64_t C, int64_t ignore, uint64_t seed) {
  Generator gen(seed);
  Tensor t = randint(0, C, shape, dtype(DType::Int64), &gen);
  if (ignore >= 0) {
    Tensor flat = t.reshape({-1});
    int64_t* p = flat.data<int64_t>();
    for (int64_t i = 0; i < flat.numel(); i += 3) p[i] = ignore;
  }
  return t;
}

Attrs nll_attrs(const std::string& reduction, int64_t ignore) {
  return Attrs().set("reduction", reduction).set("ignore_index", ignore);
}

TEST(Decompositions, NllLossAndBackwardMatchKernels) {
  for (DType dt : kDtypes) {
    for (const NllCase& c : kNllCases) {
      int64_t C = c.log_probs.size() == 1 ? c.log_probs[0] : c.log_probs[1];
      for (int64_t ignore : {int64_t{-100}, int64_t{1}}) {
        for (const char* red : {"none", "sum", "mean"}) {
          SCOPED_TRACE(std::string(dtype_name(dt)) + shape_str(c.log_probs) + " " + red + " ignore " +
                       std::to_string(ignore));
          Tensor lp = log_softmax(random(c.log_probs, dt, 21, 2.0), c.log_probs.size() == 1 ? 0 : 1);
          Tensor target = targets(c.target, C, ignore, 22);
          Attrs a = nll_attrs(red, ignore);
          expect_same_outputs(OpId::nll_loss, {lp, target}, a, dt);
          if (dt != DType::BFloat16) expect_same_grads(OpId::nll_loss, {lp, target}, a, {0}, dt);
          Tensor g = std::string(red) == "none" ? random(c.target, dt, 23) : random({}, dt, 23);
          Attrs b = a;
          b.set("input_shape", c.log_probs);
          expect_same_outputs(OpId::nll_loss_backward, {g, target}, b, dt);
        }
      }
    }
  }
}

TEST(Decompositions, NllLossWithEveryTargetIgnored) {
  // "mean" over no kept target is NaN (0 / 0) and its gradient is zero.
  Tensor lp = log_softmax(random({4, 3}, DType::Float32, 31), 1);
  Tensor target = full({4}, 2, dtype(DType::Int64));
  Attrs a = nll_attrs("mean", 2);
  expect_same_outputs(OpId::nll_loss, {lp, target}, a, DType::Float32);
  EXPECT_TRUE(std::isnan(run_decomposition(OpId::nll_loss, std::vector<Tensor>{lp, target}, a)[0].item()));
  Attrs b = a;
  b.set("input_shape", Shape{4, 3});
  expect_same_outputs(OpId::nll_loss_backward, {scalar_tensor(1.0), target}, b, DType::Float32);
}

// ---- gelu ----
TEST(Decompositions, GeluAndGeluBackwardMatchKernels) {
  for (const char* approx : {"none", "tanh"}) {
    Attrs a = Attrs().set("approximate", std::string(approx));
    for (DType dt : kDtypes) {
      for (const Shape& shape : {Shape{7}, Shape{1, 5}, Shape{3, 4, 2}}) {
        SCOPED_TRACE(std::string(approx) + " " + dtype_name(dt) + shape_str(shape));
        Tensor x = random(shape, dt, 61, 3.0), g = random(shape, dt, 62);
        expect_same_outputs(OpId::gelu, {x}, a, dt);
        expect_same_outputs(OpId::gelu_backward, {g, x}, a, dt);
        if (dt != DType::BFloat16) {
          expect_same_grads(OpId::gelu, {x}, a, {0}, dt);
          expect_same_grads(OpId::gelu_backward, {g, x}, a, {0, 1}, dt);
        }
      }
    }
  }
}

// ---- relu_backward ----
TEST(Decompositions, ReluBackwardMatchesKernel) {
  for (DType dt : kDtypes) {
    for (auto [gs, ys] :
         {std::pair{Shape{7}, Shape{7}}, {Shape{3, 4, 2}, Shape{3, 4, 2}}, {Shape{3, 4, 2}, Shape{4, 2}}}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + shape_str(gs) + shape_str(ys));
      // relu's outputs: exact zeros where no gradient passes.
      Tensor g = random(gs, dt, 63), y = relu(random(ys, dt, 64));
      expect_same_outputs(OpId::relu_backward, {g, y}, {}, dt);
      if (dt != DType::BFloat16) expect_same_grads(OpId::relu_backward, {g, y}, {}, {0}, dt);
    }
  }
}

// ---- linear ----
// Its kernel (CPU: the matmul kernel and add_) and derivative against the
// matmul + add the compiler expands it into: batched, 1-D and bias-free.
TEST(Decompositions, LinearMatchesKernel) {
  for (DType dt : kDtypes) {
    for (const Shape& xs : {Shape{6, 4}, Shape{2, 3, 4}, Shape{4}}) {
      for (bool bias : {true, false}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + shape_str(xs) + (bias ? " bias" : ""));
        Tensors in{random(xs, dt, 65), random({5, 4}, dt, 66)};
        if (bias) in.push_back(random({5}, dt, 67));
        expect_same_outputs(OpId::linear, in, {}, dt);
        if (dt != DType::BFloat16)
          expect_same_grads(OpId::linear, in, {}, bias ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1}, dt);
      }
    }
  }
}

// ---- the table ----

// Records the ops a scope calls (and lets them run).
class RecordOps : public DispatchMode {
 public:
  const char* mode_name() const override { return "record_ops"; }
  Tensors handle(OpId id, Tensors& inputs, const Attrs& attrs, const NextMode& next) override {
    seen.insert(id);
    return next(id, inputs, attrs);
  }
  std::set<OpId> seen;
};

// What a decomposition may call: ops the code generators handle directly.
bool is_primitive(OpId id) {
  switch (op_kind(id)) {
    case OpKind::Pointwise:
    case OpKind::Reduction:
    case OpKind::View:
    case OpKind::Factory:
    case OpKind::Inplace:
      return true;
    case OpKind::Composite:  // reshape etc.: their parts are recorded too
      return true;
    default:  // and matmul: an extern every backend keeps (linear decomposes into it)
      return id == OpId::copy || id == OpId::gather || id == OpId::scatter_add || id == OpId::one_hot ||
             id == OpId::index_select || id == OpId::cat || id == OpId::matmul;
  }
}

const std::vector<OpId> kDecomposed = {OpId::softmax,          OpId::log_softmax,          OpId::softmax_backward,
                                       OpId::log_softmax_backward, OpId::batch_norm,       OpId::batch_norm_backward,
                                       OpId::nll_loss,         OpId::nll_loss_backward,    OpId::gelu,
                                       OpId::gelu_backward,    OpId::relu_backward,    OpId::linear};

// Representative inputs for each op of kDecomposed.
std::pair<Tensors, Attrs> sample_call(OpId id) {
  Tensor x = random({2, 3, 4}, DType::Float32, 41);
  Attrs dim = Attrs().set("dim", int64_t{1});
  switch (id) {
    case OpId::softmax:
    case OpId::log_softmax:
      return {{x}, dim};
    case OpId::softmax_backward:
    case OpId::log_softmax_backward:
      return {{x, softmax(x, 1)}, dim};
    case OpId::batch_norm:
      return {bn_inputs({{2, 3, 4}, true, true}, DType::Float32, true), bn_attrs(true)};
    case OpId::batch_norm_backward: {
      Tensors in = bn_inputs({{2, 3, 4}, true, true}, DType::Float32, true);
      Tensors f = dispatch(OpId::batch_norm, in, bn_attrs(true));
      return {{x, in[0], in[1], f[1], f[2]}, Attrs().set("training", true).set("eps", 1e-5)};
    }
    case OpId::nll_loss:
      return {{log_softmax(x, 1), targets({2, 4}, 3, 1, 42)}, nll_attrs("mean", 1)};
    case OpId::nll_loss_backward:
      return {{scalar_tensor(1.0), targets({2, 4}, 3, 1, 42)}, nll_attrs("mean", 1).set("input_shape", Shape{2, 3, 4})};
    case OpId::gelu:
      return {{x}, Attrs().set("approximate", std::string("none"))};
    case OpId::gelu_backward:
      return {{x, x}, Attrs().set("approximate", std::string("tanh"))};
    case OpId::relu_backward:
      return {{x, relu(x)}, {}};
    case OpId::linear:
      return {{x, random({5, 4}, DType::Float32, 43), random({5}, DType::Float32, 44)}, {}};
    default:
      KILN_FAIL("no sample call for ", op_name(id));
  }
}

TEST(Decompositions, TableEveryListedOpDecomposesIntoPrimitivesOnly) {
  for (OpId id : kDecomposed) {
    SCOPED_TRACE(op_name(id));
    EXPECT_NE(op_def(id).decompose, nullptr);
    EXPECT_NE(op_kind(id), OpKind::Composite) << "these keep their eager kernels";
    auto [inputs, attrs] = sample_call(id);
    RecordOps rec;
    {
      ModeGuard guard(rec);
      run_decomposition(id, inputs, attrs);
    }
    EXPECT_FALSE(rec.seen.empty());
    EXPECT_EQ(rec.seen.count(id), 0u) << "a decomposition calls its own op";
    for (OpId seen : rec.seen) EXPECT_TRUE(is_primitive(seen)) << op_name(id) << " calls " << op_name(seen);
  }
}

// Capture traces decompositions on meta tensors: they must run without
// memory and give the op's own output shapes and dtypes.
TEST(Decompositions, RunOnMetaTensorsWithTheOpsOutputTypes) {
  for (OpId id : kDecomposed) {
    SCOPED_TRACE(op_name(id));
    auto [real, attrs] = sample_call(id);
    Tensors inputs;
    for (const Tensor& t : real)
      inputs.push_back(t.defined() && t.dim() > 0 ? Tensor::meta(t.shape(), t.dtype(), t.device()) : t);
    Tensors want = meta_outputs(id, inputs, attrs);
    Tensors got;
    {
      MetaMode meta;
      ModeGuard guard(meta);
      got = run_decomposition(id, inputs, attrs);
    }
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(got[i].is_meta()) << "output " << i;
      EXPECT_EQ(got[i].shape(), want[i].shape()) << "output " << i;
      EXPECT_EQ(got[i].dtype(), want[i].dtype()) << "output " << i;
    }
  }
}

// Expands every op that has a decomposition (Composite ops expand in
// dispatch; their parts come back here): the computation the compiler will
// see after its decomposition pass.
class ExpandDecompositions : public DispatchMode {
 public:
  const char* mode_name() const override { return "expand_decompositions"; }
  Tensors handle(OpId id, Tensors& inputs, const Attrs& attrs, const NextMode& next) override {
    seen.insert(id);
    const OpDef& def = op_def(id);
    if (def.decompose != nullptr && op_kind(id) != OpKind::Composite) {
      expanded.insert(id);
      return def.decompose(inputs, attrs);  // primitives only (the table test)
    }
    return next(id, inputs, attrs);
  }
  std::set<OpId> seen, expanded;
};

TEST(Decompositions, CrossEntropyDecomposesIntoPrimitives) {
  for (double smoothing : {0.0, 0.1}) {
    for (const char* red : {"mean", "sum", "none"}) {
      SCOPED_TRACE(std::string(red) + " label_smoothing " + std::to_string(smoothing));
      Tensor logits = random({5, 4, 3}, DType::Float32, 51, 3.0);
      Tensor target = targets({5, 3}, 4, -1, 52);
      auto run = [&](bool expand, std::set<OpId>* seen) {
        Tensor leaf = logits.detach().clone().requires_grad_();
        ExpandDecompositions mode;
        Tensor loss;
        if (expand) {
          ModeGuard guard(mode);
          loss = cross_entropy(leaf, target, smoothing, red);
        } else {
          loss = cross_entropy(leaf, target, smoothing, red);
        }
        sum(mul(loss, random(loss.shape(), DType::Float32, 53))).backward();
        if (seen) {
          *seen = mode.seen;
          EXPECT_TRUE(mode.expanded.count(OpId::log_softmax));
          EXPECT_TRUE(mode.expanded.count(OpId::nll_loss));
        }
        return std::pair{loss, leaf.grad()};
      };
      std::set<OpId> seen;
      auto [want, want_grad] = run(false, nullptr);
      auto [got, got_grad] = run(true, &seen);
      EXPECT_TRUE(tensors_close(got, want, 1e-5, 1e-6));
      EXPECT_TRUE(tensors_close(got_grad, want_grad, 1e-4, 1e-6));
      for (OpId id : seen)
        EXPECT_TRUE(is_primitive(id) || std::count(kDecomposed.begin(), kDecomposed.end(), id))
            << "cross_entropy reaches " << op_name(id) << ", which has no decomposition";
    }
  }
}

}  // namespace
}  // namespace kiln
