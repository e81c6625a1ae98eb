// AOT autograd for forward-only compiles: the joint graph, its split into
// forward and backward graphs, and the autograd node that runs the backward
// graph, against eager autograd.
#include <gtest/gtest.h>

#include "autograd/node.h"
#include "compiler/aot/compiled_backward.h"
#include "compiler/aot/joint.h"
#include "compiler/aot/partition.h"
#include "compiler/capture/compiled_state.h"
#include "compiler/graph/printer.h"
#include "compiler/graph/verifier.h"
#include "compiler/log.h"
#include "graph_builder.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "testing/compare.h"

namespace kiln::compiler {
namespace {

using testing::GraphBuilder;

int count_region(const Graph& g, Node::Region r) {
  int n = 0;
  for (const Node& node : g.nodes) n += node.kind == NodeKind::Op && node.region == r;
  return n;
}

TEST(AotJoint, MulSumGetsTheDerivativesOfItsOps) {
  GraphBuilder b;
  ValueId x = b.input(randn({3}).requires_grad_());
  ValueId w = b.input(randn({3}));
  ValueId m = b.op(OpId::mul, {x, w});
  b.output(b.op(OpId::sum, {m}, Attrs().set("dims", std::vector<int64_t>{}).set("keepdim", false)));
  std::optional<JointGraph> j = build_joint(b.g);
  ASSERT_TRUE(j.has_value());
  EXPECT_TRUE(verify(j->graph).empty()) << print(j->graph);
  EXPECT_EQ(j->num_primals, 2u);
  EXPECT_EQ(j->tangent_of, std::vector<size_t>{0});
  EXPECT_EQ(j->grad_of, std::vector<size_t>{0});  // only x requires grad
  EXPECT_EQ(count_region(j->graph, Node::Region::Forward), 2);
  EXPECT_GT(count_region(j->graph, Node::Region::Backward), 0);
  // d sum(x*w)/dx = w, broadcast by the tangent.
  Tensor xt = randn({3}), wt = randn({3});
  Tensors out = interpret(j->graph, Tensors{xt, wt, full({}, 2.0)});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TENSOR_CLOSE(out[1], mul(wt, 2.0), 1e-6, 1e-6);
}

TEST(AotJoint, AGraphWithoutGradientsIsRefusedWithAReason) {
  GraphBuilder b;
  ValueId x = b.input(randn({3}));
  b.output(b.op(OpId::neg, {x}));
  std::string why;
  EXPECT_FALSE(build_joint(b.g, &why).has_value());
  EXPECT_EQ(why, "no output needs a gradient");
}

// The partition decides what crosses from forward to backward: the forward
// graph returns the outputs and then exactly the saved values.
TEST(AotSplit, ForwardReturnsOutputsThenSavedValuesBackwardReturnsGradients) {
  GraphBuilder b;
  ValueId x = b.input(randn({4, 5}).requires_grad_());
  ValueId t = b.op(OpId::tanh, {x});
  ValueId e = b.op(OpId::exp, {t});
  b.output(b.op(OpId::sum, {e}, Attrs().set("dims", std::vector<int64_t>{1}).set("keepdim", false)));
  std::optional<ForwardBackward> fb = split_forward_backward(b.g);
  ASSERT_TRUE(fb.has_value());
  EXPECT_TRUE(verify(fb->forward).empty());
  EXPECT_TRUE(verify(fb->backward).empty());
  EXPECT_EQ(fb->forward.outputs.size(), fb->num_outputs + fb->num_saved);
  EXPECT_EQ(fb->backward.inputs.size(), fb->backward_primals.size() + fb->num_saved + 1);
  EXPECT_LE(fb->backward_primals.size(), 1u);
  EXPECT_EQ(fb->backward.outputs.size(), 1u);
  EXPECT_LE(fb->partition.saved_bytes, 2 * 4 * 5 * 4) << "at most tanh's and exp's outputs";
}

// Forward + loss.backward() outside the compiled function: the outputs'
// grad_fn is the compiled backward and every gradient equals eager's, with
// both graphs on the interpreter or on generated C++ kernels.
void check_compiled_forward_gradients(const std::string& backend, double tol) {
  manual_seed(5);
  auto a = models::airbench(0.25);
  manual_seed(5);
  auto bm = models::airbench(0.25);
  auto cb = compile(bm, CompileOptions().backend(backend));
  for (int step = 0; step < 2; ++step) {
    Tensor x = randn({4, 3, 32, 32});
    Tensor y = randint(0, 10, {4});
    Tensor la = cross_entropy(a->forward(x), y);
    Tensor out = cb(x);
    ASSERT_NE(out.grad_fn(), nullptr);
    EXPECT_STREQ(out.grad_fn()->name(), "CompiledBackward");
    Tensor lb = cross_entropy(out, y);
    EXPECT_TENSOR_CLOSE(lb, la, tol, tol);
    la.backward();
    lb.backward();
    auto pa = a->named_parameters(), pb = bm->named_parameters();
    for (size_t i = 0; i < pa.size(); ++i)
      EXPECT_TENSOR_CLOSE(pb[i].second.grad(), pa[i].second.grad(), tol, tol)
          << backend << " " << pa[i].first << " step " << step;
  }
  // The split keeps no more than eager autograd would.
  const Segment& s = *cb.state().variants.back()->segments.at(0);
  ASSERT_NE(s.aot, nullptr);
  EXPECT_LE(s.aot->graphs().partition.saved_bytes, eager_saved_bytes(s.executable));
}

TEST(AotBackward, CompiledForwardGradientsEqualEagerThroughTheBackwardGraph) {
  check_compiled_forward_gradients("interpreter", 1e-5);
}

TEST(AotBackward, CompiledForwardGradientsEqualEagerOnGeneratedKernels) {
  check_compiled_forward_gradients("cpp", 1e-4);
}

TEST(AotBackward, AnInputModifiedBeforeBackwardIsAnErrorNotAWrongGradient) {
  Tensor w = randn({3}).requires_grad_();
  auto f = compile([&](const Tensor& x) { return mul(x, w).sum(); });
  Tensor x = randn({3});
  Tensor loss = f(x);
  ASSERT_STREQ(loss.grad_fn()->name(), "CompiledBackward");
  x.add_(full({3}, 1.0));
  try {
    loss.backward();
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("modified in place after the forward ran"), std::string::npos) << e.what();
  }
}

// As eager autograd: modifying an input the backward does not read (x in
// sum(x * 2 + w): the gradient of w is ones) is fine, and the backward graph
// does not even take it.
TEST(AotBackward, AnInputTheBackwardDoesNotReadMayBeModifiedBeforeBackward) {
  Tensor w = randn({3}).requires_grad_();
  auto f = compile([&](const Tensor& x) { return add(mul(x, 2.0), w).sum(); });
  Tensor x = randn({3});
  Tensor loss = f(x);
  ASSERT_STREQ(loss.grad_fn()->name(), "CompiledBackward");
  x.add_(full({3}, 1.0));
  loss.backward();
  EXPECT_TENSOR_CLOSE(w.grad(), ones({3}), 0, 0);
  const Segment& s = *f.state().variants.back()->segments.at(0);
  ASSERT_NE(s.aot, nullptr);
  EXPECT_TRUE(s.aot->graphs().backward_primals.empty()) << print(s.aot->graphs().backward);
}

TEST(AotBackward, RetainGraphAllowsASecondBackwardWithoutItIsAnError) {
  Tensor w = randn({3}).requires_grad_();
  auto f = compile([&](const Tensor& x) { return mul(x, w).sum(); });
  Tensor x = randn({3});
  Tensor loss = f(x);
  loss.backward(Tensor(), /*retain_graph=*/true);
  loss.backward();
  EXPECT_TENSOR_CLOSE(w.grad(), mul(x, 2.0), 1e-6, 1e-6);
  EXPECT_THROW(loss.backward(), Error);
}

// Returning a view of an input that requires grad: the compiled backward
// would have to put a grad_fn on a view of the caller's own tensor, so the
// tape runs instead; the reason is logged and the gradients are still right.
TEST(AotBackward, ARefusedSplitKeepsTheTapeAndSaysWhy) {
  configure_logs("aot");
  Tensor w = randn({3}).requires_grad_();
  auto f = compile([&](const Tensor& x) { return std::make_pair(mul(x, w).sum(), w.reshape({3, 1})); });
  Tensor x = randn({3});
  auto [loss, view] = f(x);
  add(loss, view.sum()).backward();
  EXPECT_TENSOR_CLOSE(w.grad(), add(x, 1.0), 1e-6, 1e-6);
  bool said = false;
  for (const std::string& e : logged_events(LogCategory::Aot))
    said = said || e.find("keeps the eager tape for its backward: an output is an input or a view of one") !=
                       std::string::npos;
  EXPECT_TRUE(said);
  reset_logs();
}

}  // namespace
}  // namespace kiln::compiler
