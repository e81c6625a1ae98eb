// Decomposition to primitives: the expanded graph computes what the
// kernels compute, with their effects, and keeps nothing decomposable.
#include <gtest/gtest.h>

#include "capture_checks.h"
#include "compiler/aot/decompose.h"
#include "compiler/aot/functionalize.h"
#include "compiler/capture/compiled_state.h"
#include "compiler/graph/interpreter.h"
#include "compiler/graph/printer.h"
#include "compiler/graph/verifier.h"
#include "compiler/passes/pipeline.h"
#include "graph_builder.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "testing/compare.h"

namespace kiln::compiler {
namespace {

using testing::GraphBuilder;

int count_op(const Graph& g, OpId id) {
  int n = 0;
  for (const Node& node : g.nodes) n += node.kind == NodeKind::Op && node.op == id;
  return n;
}
int count_decomposable(const Graph& g) {
  int n = 0;
  for (const Node& node : g.nodes) n += node.kind == NodeKind::Op && op_def(node.op).decompose != nullptr;
  return n;
}

Tensors clone_all(const Tensors& ts) {
  Tensors r;
  for (const Tensor& t : ts) r.push_back(t.clone());
  return r;
}

TEST(Decompose, SoftmaxBecomesAmaxExpSumDiv) {
  GraphBuilder b;
  Tensor x = randn({4, 5});
  ValueId xv = b.input(x);
  b.output(b.op(OpId::softmax, {xv}, Attrs().set("dim", int64_t{1})));
  Graph before = b.g;
  EXPECT_EQ(decompose(b.g), 1);
  EXPECT_TRUE(verify(b.g).empty()) << print(b.g);
  EXPECT_EQ(count_op(b.g, OpId::softmax), 0);
  EXPECT_EQ(count_op(b.g, OpId::amax), 1);
  EXPECT_EQ(count_op(b.g, OpId::exp), 1);
  EXPECT_EQ(count_op(b.g, OpId::sum), 1);
  EXPECT_EQ(count_op(b.g, OpId::div), 1);
  EXPECT_TENSOR_CLOSE(interpret(b.g, Tensors{x})[0], interpret(before, Tensors{x})[0], 1e-6, 1e-6);
}

TEST(Decompose, TrainingBatchNormWritesTheRunningStatisticsWithCopies) {
  GraphBuilder b;
  Tensor x = randn({4, 3, 5, 5}), w = rand({3}), bias = randn({3}), rm = randn({3}), rv = add(rand({3}), 0.5);
  ValueId xv = b.input(x), wv = b.input(w), bv = b.input(bias), rmv = b.input(rm.clone()), rvv = b.input(rv.clone());
  Attrs a = Attrs().set("training", true).set("momentum", 0.1).set("eps", 1e-5);
  std::vector<ValueId> outs = b.ops(OpId::batch_norm, {xv, wv, bv, rmv, rvv}, a);
  b.output(outs[0]);
  Graph before = b.g;
  EXPECT_EQ(decompose(b.g), 1);
  EXPECT_TRUE(verify(b.g).empty()) << print(b.g);
  EXPECT_EQ(count_op(b.g, OpId::batch_norm), 0);
  EXPECT_EQ(count_op(b.g, OpId::copy_), 2) << print(b.g);  // running mean and variance
  Tensors kernel_in{x, w, bias, rm.clone(), rv.clone()}, dec_in{x, w, bias, rm.clone(), rv.clone()};
  Tensor y_kernel = interpret(before, kernel_in)[0];
  Tensor y_dec = interpret(b.g, dec_in)[0];
  EXPECT_TENSOR_CLOSE(y_dec, y_kernel, 1e-5, 1e-5);
  EXPECT_TENSOR_CLOSE(dec_in[3], kernel_in[3], 1e-6, 1e-6);
  EXPECT_TENSOR_CLOSE(dec_in[4], kernel_in[4], 1e-6, 1e-6);
  // Functionalized, the writes become copy-backs into the two inputs.
  Graph f = b.g;
  functionalize(f);
  EXPECT_TRUE(verify(f).empty()) << print(f);
  Tensors f_in{x, w, bias, rm.clone(), rv.clone()};
  EXPECT_TENSOR_CLOSE(interpret(f, f_in)[0], y_kernel, 1e-5, 1e-5);
  EXPECT_TENSOR_CLOSE(f_in[4], kernel_in[4], 1e-6, 1e-6);
}

TEST(Decompose, APredicateKeepsTheOpsABackendPrefers) {
  GraphBuilder b;
  ValueId xv = b.input(randn({2, 6}));
  ValueId g = b.op(OpId::gelu, {xv}, Attrs().set("approximate", std::string("none")));
  b.output(b.op(OpId::log_softmax, {g}, Attrs().set("dim", int64_t{1})));
  DecomposeOptions keep_softmax;
  keep_softmax.expand = [](const Node& n) { return n.op != OpId::log_softmax; };
  EXPECT_EQ(decompose(b.g, keep_softmax), 1);
  EXPECT_EQ(count_op(b.g, OpId::gelu), 0);
  EXPECT_EQ(count_op(b.g, OpId::log_softmax), 1);
}

TEST(Decompose, ASymbolicBatchDimKeepsTheOpWhole) {
  GraphBuilder b;
  ValueId xv = b.input(randn({4, 3}), /*symbolic_dims=*/1);
  b.output(b.op(OpId::softmax, {xv}, Attrs().set("dim", int64_t{1})));
  EXPECT_FALSE(decomposable(b.g, b.g.nodes.back()));
  EXPECT_EQ(decompose(b.g), 0);
}

// Random values for a graph's inputs: floats in [0.5, 1.5) (variances stay
// positive), integers in [0, 10) (class targets).
Tensors inputs_for(const Graph& g) {
  Tensors r;
  for (ValueId v : g.inputs) {
    const ValueType& t = g.type(v);
    if (is_floating(t.dtype))
      r.push_back(add(rand(t.shape, dtype(t.dtype)), 0.5));
    else
      r.push_back(randint(0, 10, t.shape));
  }
  return r;
}

// A whole airbench train step (batch norm, GELU, cross entropy, their
// backward ops, SGD): decomposed, functionalized and optimized, it leaves the
// same loss, parameters and buffers as the graph with the kernels.
TEST(Decompose, AirbenchTrainStepEqualsTheKernelGraph) {
  manual_seed(4);
  auto model = models::airbench(0.25);
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(5e-4));
  auto step = kiln::testing::compile_train_step(model, opt);
  step(randn({4, 3, 32, 32}), randint(0, 10, {4}));
  const Graph& captured = step.state().variants.back()->segments.at(0)->graph;
  ASSERT_GT(count_decomposable(captured), 0);
  Graph kernels = captured, primitives = captured;
  functionalize(kernels);
  run_passes(kernels, default_passes());
  int expanded = decompose(primitives);
  EXPECT_GE(expanded, count_decomposable(captured));
  EXPECT_EQ(count_decomposable(primitives), 0) << print(primitives);
  EXPECT_TRUE(verify(primitives).empty());
  functionalize(primitives);
  run_passes(primitives, default_passes());
  EXPECT_TRUE(verify(primitives).empty());

  manual_seed(9);
  Tensors in = inputs_for(captured);
  Tensors a = clone_all(in), b = clone_all(in);
  Tensors out_a = interpret(kernels, a), out_b = interpret(primitives, b);
  ASSERT_EQ(out_a.size(), out_b.size());
  for (size_t i = 0; i < out_a.size(); ++i) EXPECT_TENSOR_CLOSE(out_b[i], out_a[i], 1e-4, 1e-5) << "output " << i;
  for (size_t i = 0; i < in.size(); ++i) EXPECT_TENSOR_CLOSE(b[i], a[i], 1e-4, 1e-5) << "input " << i << " after the step";
}

}  // namespace
}  // namespace kiln::compiler
