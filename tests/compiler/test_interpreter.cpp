// The interpreter against the same ops run eagerly.
#include <gtest/gtest.h>

#include "compiler/graph/interpreter.h"
#include "graph_builder.h"
#include "kiln/kiln.h"
#include "ops/dispatch_mode.h"
#include "testing/compare.h"

namespace kiln::compiler {
namespace {

using testing::GraphBuilder;

Attrs shape_attr(const char* name, Shape s) { return Attrs().set(name, std::move(s)); }

TEST(Interpreter, MatmulAddRelu) {
  GraphBuilder b;
  ValueId x = b.input(randn({4, 5}));
  ValueId w = b.input(randn({5, 3}));
  ValueId bias = b.input(randn({3}));
  ValueId y = b.op(OpId::relu, {b.op(OpId::add, {b.op(OpId::matmul, {x, w}), bias})});
  b.output(y);
  Tensor xs = randn({4, 5}), ws = randn({5, 3}), bs = randn({3});
  Tensors out = interpret(b.g, Tensors{xs, ws, bs});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TENSOR_CLOSE(out[0], relu(add(matmul(xs, ws), bs)));
}

TEST(Interpreter, ViewChainSharesStorage) {
  GraphBuilder b;
  ValueId x = b.input(randn({2, 3, 4}));
  ValueId p = b.op(OpId::permute, {x}, shape_attr("dims", {2, 0, 1}));
  ValueId s = b.op(OpId::slice, {p}, Attrs().set("dim", int64_t{0}).set("start", int64_t{1}).set("end", int64_t{3}).set(
                                         "step", int64_t{1}));
  ValueId v = b.op(OpId::select, {s}, Attrs().set("dim", int64_t{1}).set("index", int64_t{1}));
  b.output(v);
  Tensor xs = randn({2, 3, 4});
  Tensor out = interpret(b.g, Tensors{xs})[0];
  Tensor expected = xs.permute({2, 0, 1}).slice(0, 1, 3).select(1, 1);
  EXPECT_TENSOR_CLOSE(out, expected);
  EXPECT_EQ(out.strides(), expected.strides());
  EXPECT_TRUE(out.shares_storage(xs));
}

TEST(Interpreter, MultiOutputOps) {
  GraphBuilder b;
  Tensor x0 = randn({2, 3, 6, 6});
  ValueId x = b.input(x0);
  std::vector<ValueId> mp = b.ops(OpId::max_pool2d, {x},
                                  testing::max_pool_attrs(2, 2));
  ValueId wt = b.input(ones({3})), bs = b.input(zeros({3}));
  std::vector<ValueId> bn = b.ops(OpId::batch_norm, {mp[0], wt, bs, kNoValue, kNoValue},
                                  Attrs().set("training", true).set("momentum", 0.1).set("eps", 1e-5));
  b.output(bn[0]);
  b.output(mp[1]);
  Tensor xs = randn({2, 3, 6, 6}), ws = randn({3}), bss = randn({3});
  Tensors out = interpret(b.g, Tensors{xs, ws, bss});
  auto [pooled, indices] = max_pool2d_with_indices(xs, {2, 2}, {2, 2}, {0, 0}, {1, 1}, false);
  EXPECT_TENSOR_CLOSE(out[0], batch_norm(pooled, ws, bss, Tensor(), Tensor(), true));
  EXPECT_EQ(out[1].to_vector<int64_t>(), indices.to_vector<int64_t>());
}

TEST(Interpreter, ScalarInputAttributeChangesPerRun) {
  GraphBuilder b;
  ValueId p = b.input(randn({3}));
  ValueId g = b.input(randn({3}));
  int lr = b.scalar("lr", -0.1);
  ValueId upd = b.op(OpId::add_, {p, g}, Attrs().set("alpha", -0.1), {{"alpha", lr}});
  b.output(upd);
  Interpreter run(b.g);
  for (double alpha : {-0.5, 2.0}) {
    Tensor param = randn({3}), grad = randn({3});
    Tensor expected = param.clone();
    expected.add_(grad, alpha);
    std::vector<AttrValue> scalars{alpha};
    Tensors out = run.run(Tensors{param, grad}, scalars);
    EXPECT_TENSOR_CLOSE(param, expected);  // updated in place
    EXPECT_TRUE(out[0].shares_storage(param));
  }
  // An integer value is accepted for a float scalar; a string is not.
  Tensor param = zeros({3}), grad = ones({3});
  std::vector<AttrValue> two{int64_t{2}};
  run.run(Tensors{param, grad}, two);
  EXPECT_TENSOR_CLOSE(param, full({3}, 2.0));
  std::vector<AttrValue> bad{std::string("fast")};
  EXPECT_THROW(run.run(Tensors{param, grad}, bad), Error);
}

TEST(Interpreter, InputsAndConstantsComeBackAsThemselves) {
  GraphBuilder b;
  Tensor c = randn({2});
  ValueId x = b.input(randn({2}));
  ValueId k = b.constant(c);
  b.output(x);
  b.output(k);
  b.output(b.op(OpId::mul, {x, k}));
  Tensor xs = randn({2});
  Tensors out = interpret(b.g, Tensors{xs});
  EXPECT_EQ(out[0].impl(), xs.impl());
  EXPECT_EQ(out[1].impl(), c.impl());
  EXPECT_TENSOR_CLOSE(out[2], mul(xs, c));
}

TEST(Interpreter, SymbolicBatchDim) {
  GraphBuilder b;
  ValueId x = b.input(randn({4, 3}), /*symbolic_dims=*/1);
  ValueId y = b.input(randn({4, 3}), /*symbolic_dims=*/1);
  b.output(b.op(OpId::sub, {x, y}));
  Tensor x7 = randn({7, 3}), y7 = randn({7, 3});
  EXPECT_TENSOR_CLOSE(interpret(b.g, Tensors{x7, y7})[0], sub(x7, y7));
  try {
    interpret(b.g, Tensors{randn({7, 3}), randn({5, 3})});
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("input 1 is f32[5, 3] but the graph expects f32[s0, 3] (s0 is 7"),
              std::string::npos)
        << e.what();
  }
}

TEST(Interpreter, InputMismatchesNameTheInputAndBothTypes) {
  GraphBuilder b;
  ValueId x = b.input(randn({2, 3}));
  b.output(b.op(OpId::neg, {x}));
  auto message = [&](Tensors in) -> std::string {
    try {
      interpret(b.g, in);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(message({randn({2, 4})}).find("input 0 is f32[2, 4] but the graph expects f32[2, 3]"), std::string::npos);
  EXPECT_NE(message({zeros({2, 3}, dtype(DType::Float64))}).find("input 0 is f64[2, 3] but the graph expects f32[2, 3]"),
            std::string::npos);
  EXPECT_NE(message({}).find("got 0 inputs but the graph takes 1 (f32[2, 3])"), std::string::npos);
  EXPECT_NE(message({Tensor()}).find("input 0 is undefined"), std::string::npos);
}

// The interpreter goes through dispatch: a mode the caller pushed sees each node.
class CountingMode : public DispatchMode {
 public:
  std::vector<OpId> seen;
  const char* mode_name() const override { return "counting"; }
  Tensors handle(OpId id, Tensors& inputs, const Attrs& attrs, const NextMode& next) override {
    seen.push_back(id);
    return next(id, inputs, attrs);
  }
};

TEST(Interpreter, DispatchModesSeeEachNode) {
  GraphBuilder b;
  ValueId x = b.input(randn({2, 2}));
  b.output(b.op(OpId::exp, {b.op(OpId::matmul, {x, x})}));
  CountingMode mode;
  Tensors in{randn({2, 2})};
  {
    ModeGuard guard(mode);
    interpret(b.g, in);
  }
  EXPECT_EQ(mode.seen, (std::vector<OpId>{OpId::matmul, OpId::exp}));
}

// Remembers each op's first output weakly and, when relu runs, whether exp's
// output is still alive.
class LifetimeMode : public DispatchMode {
 public:
  std::weak_ptr<TensorImpl> exp_out;
  bool exp_alive_at_relu = true;
  const char* mode_name() const override { return "lifetime"; }
  Tensors handle(OpId id, Tensors& inputs, const Attrs& attrs, const NextMode& next) override {
    if (id == OpId::relu) exp_alive_at_relu = !exp_out.expired();
    Tensors out = next(id, inputs, attrs);
    if (id == OpId::exp) exp_out = out[0].impl_ptr();
    return out;
  }
};

TEST(Interpreter, FreesIntermediatesAfterTheirLastUse) {
  GraphBuilder b;
  ValueId x = b.input(randn({8}));
  ValueId e = b.op(OpId::exp, {x});
  b.output(b.op(OpId::relu, {b.op(OpId::neg, {e})}));
  LifetimeMode mode;
  Tensors in{randn({8})};
  Interpreter run(b.g);
  {
    ModeGuard guard(mode);
    run.run(in);
  }
  EXPECT_FALSE(mode.exp_alive_at_relu);
  EXPECT_TRUE(mode.exp_out.expired());
}

TEST(Interpreter, RecordsAutogradWhenTheCallerWantsIt) {
  GraphBuilder b;
  ValueId x = b.input(randn({3}).requires_grad_());
  b.output(b.op(OpId::sum, {b.op(OpId::mul, {x, x})}, Attrs().set("dims", std::vector<int64_t>{}).set("keepdim", false)));
  Tensor xs = randn({3}).requires_grad_();
  Tensor loss = interpret(b.g, Tensors{xs})[0];
  loss.backward();
  EXPECT_TENSOR_CLOSE(xs.grad(), mul(xs.detach(), scalar_tensor(2.0)));
}

}  // namespace
}  // namespace kiln::compiler
