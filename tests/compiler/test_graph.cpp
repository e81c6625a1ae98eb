// The graph IR: building, value types, the printer and the verifier.
#include <gtest/gtest.h>

#include "compiler/graph/graph.h"
#include "compiler/graph/printer.h"
#include "compiler/graph/verifier.h"
#include "graph_builder.h"
#include "kiln/kiln.h"

namespace kiln::compiler {
namespace {

using testing::GraphBuilder;

TEST(GraphIR, ValueTypeOfTensor) {
  Tensor x = randn({2, 3}).requires_grad_();
  ValueType t = ValueType::of(x.t());
  EXPECT_EQ(t.shape, (Shape{3, 2}));
  EXPECT_EQ(t.strides, (Shape{1, 3}));
  EXPECT_EQ(t.dtype, DType::Float32);
  EXPECT_TRUE(t.device.is_cpu());
  EXPECT_TRUE(t.requires_grad);  // a view of a tensor that requires grad
  EXPECT_FALSE(ValueType::of(x.detach()).requires_grad);
  EXPECT_EQ(t.symbolic_dims, 0u);
}

TEST(GraphIR, TypeStr) {
  EXPECT_EQ(type_str(ValueType::contiguous({8, 3, 32, 32}, DType::Float32, Device::cpu(), 1)), "f32[s0, 3, 32, 32]");
  EXPECT_EQ(type_str(ValueType::contiguous({}, DType::Float64)), "f64[]");
  EXPECT_EQ(type_str(ValueType::contiguous({4}, DType::Int64)), "i64[4]");
  EXPECT_EQ(type_str(ValueType::contiguous({2, 2}, DType::Bool, Device::cuda(1))), "bool[2, 2]@cuda:1");
  EXPECT_EQ(type_str(ValueType::of(randn({2, 3}).t())), "f32[3, 2]{strides=[1, 3]}");
  ValueType g = ValueType::contiguous({5}, DType::BFloat16);
  g.requires_grad = true;
  EXPECT_EQ(type_str(g), "bf16[5] grad");
}

TEST(GraphIR, BuilderKeepsIdsAndBackReferences) {
  Graph g;
  ValueId x = g.add_input(ValueType::contiguous({2, 3}));
  int lr = g.add_scalar_input("lr", 0.1);
  ValueId c = g.add_constant(scalar_tensor(2.0));
  std::vector<ValueId> y = g.add_op(OpId::mul, {}, {x, c}, {ValueType::contiguous({2, 3})});
  g.outputs = {y[0]};
  EXPECT_EQ(x, 0);
  EXPECT_EQ(lr, 0);
  EXPECT_EQ(c, 1);
  EXPECT_EQ(y, std::vector<ValueId>{2});
  EXPECT_EQ(g.inputs, std::vector<ValueId>{0});
  EXPECT_EQ(g.num_ops(), 1u);
  EXPECT_EQ(g.nodes.size(), 3u);
  EXPECT_EQ(g.producer(y[0]).op, OpId::mul);
  EXPECT_EQ(g.values[2].node, 2);
  EXPECT_EQ(g.producer(c).kind, NodeKind::Constant);
  EXPECT_EQ(g.producer(x).input_index, 0);
  EXPECT_TRUE(verify(g).empty());
}

TEST(GraphPrinter, ConvAndScalarInputAndLocation) {
  GraphBuilder b("step");
  ValueId x = b.input(randn({2, 3, 8, 8}), /*symbolic_dims=*/1);
  ValueId w = b.input(randn({4, 3, 3, 3}));
  int lr = b.scalar("lr", -0.1);
  ValueId y = b.op(OpId::conv2d, {x, w, kNoValue},
                   Attrs().set("stride", std::vector<int64_t>{1, 1}).set("padding", std::vector<int64_t>{1, 1}).set(
                       "dilation", std::vector<int64_t>{1, 1}).set("groups", int64_t{1}));
  ValueId s = b.op(OpId::sum, {y}, Attrs().set("dims", std::vector<int64_t>{0, 2, 3}).set("keepdim", false));
  ValueId u = b.op(OpId::view, {s}, Attrs().set("shape", std::vector<int64_t>{4, 1, 1, 1}));
  ValueId e = b.op(OpId::expand, {u}, Attrs().set("shape", std::vector<int64_t>{4, 3, 3, 3}));
  ValueId upd = b.op(OpId::add_, {w, e}, Attrs().set("alpha", 1.0), {{"alpha", lr}}, "file.cpp:12");
  b.output(y);
  b.output(upd);
  EXPECT_EQ(print(b.g),
            "graph step(%0: f32[s0, 3, 8, 8], %1: f32[4, 3, 3, 3]; $0 lr: f64) {\n"
            "  %2: f32[s0, 4, 8, 8] = conv2d(%0, %1, None) {stride=[1, 1], padding=[1, 1], dilation=[1, 1], groups=1}\n"
            "  %3: f32[4] = sum(%2) {dims=[0, 2, 3], keepdim=false}\n"
            "  %4: f32[4, 1, 1, 1] = view(%3) {shape=[4, 1, 1, 1]}\n"
            "  %5: f32[4, 3, 3, 3]{strides=[1, 0, 0, 0]} = expand(%4) {shape=[4, 3, 3, 3]}\n"
            "  %6: f32[4, 3, 3, 3] = add_(%1, %5) {alpha=$0}   # file.cpp:12\n"
            "  return (%2, %6)\n"
            "}\n");
  EXPECT_TRUE(verify(b.g).empty());
}

TEST(GraphPrinter, ConstantsMultipleOutputsAndAttrOnlyFromScalar) {
  GraphBuilder b;
  ValueId x = b.input(randn({1, 1, 4, 4}));
  ValueId two = b.constant(scalar_tensor(2.0));
  ValueId big = b.constant(zeros({16}));
  ValueId v = b.constant(from_vector(std::vector<float>{1, 2.5f, -3}, {3}));
  int seed = b.scalar("seed", int64_t{7});
  std::vector<ValueId> mp = b.ops(OpId::max_pool2d, {x},
                                  testing::max_pool_attrs(2, 2));
  ValueId m = b.op(OpId::mul, {mp[0], two});
  b.g.nodes.back().attr_inputs = {{"seed", seed}};  // printed even though attrs lacks it
  b.output(m);
  b.output(mp[1]);
  b.output(big);
  b.output(v);
  EXPECT_EQ(print(b.g),
            "graph graph(%0: f32[1, 1, 4, 4]; $0 seed: i64) {\n"
            "  %1: f32[] = constant(2)\n"
            "  %2: f32[16] = constant(...)\n"
            "  %3: f32[3] = constant([1, 2.5, -3])\n"
            "  %4: f32[1, 1, 2, 2], %5: i64[1, 1, 2, 2] = max_pool2d(%0) {kernel_size=[2, 2], stride=[2, 2], "
            "padding=[0, 0], dilation=[1, 1], ceil_mode=false}\n"
            "  %6: f32[1, 1, 2, 2] = mul(%4, %1) {seed=$0}\n"
            "  return (%6, %5, %2, %3)\n"
            "}\n");
}

TEST(GraphPrinter, GraphWithoutTensorInputs) {
  Graph g;
  g.name = "lr_only";
  g.add_scalar_input("lr", 0.5);
  ValueId c = g.add_constant(scalar_tensor(1.0));
  g.outputs = {c};
  EXPECT_EQ(print(g), "graph lr_only($0 lr: f64) {\n  %0: f32[] = constant(1)\n  return (%0)\n}\n");
}

bool mentions(const std::vector<std::string>& problems, const std::string& text) {
  for (const std::string& p : problems)
    if (p.find(text) != std::string::npos) return true;
  return false;
}

GraphBuilder small_graph() {
  GraphBuilder b;
  ValueId x = b.input(randn({2, 3}));
  ValueId y = b.op(OpId::relu, {x});
  ValueId z = b.op(OpId::add, {y, x});
  b.output(z);
  return b;
}

TEST(GraphVerifier, AcceptsAWellFormedGraph) { EXPECT_EQ(verify(small_graph().g), std::vector<std::string>{}); }

TEST(GraphVerifier, UseBeforeDefinition) {
  GraphBuilder b = small_graph();
  std::swap(b.g.nodes[1], b.g.nodes[2]);  // add before relu
  std::vector<std::string> p = verify(b.g);
  EXPECT_TRUE(mentions(p, "node 1 (add): input %1 is used before it is defined")) << ::testing::PrintToString(p);
  EXPECT_TRUE(mentions(p, "%2 says it is output 0 of node 2, but it is output 0 of node 1"));
}

TEST(GraphVerifier, ValueDefinedTwiceOrNever) {
  GraphBuilder b = small_graph();
  b.g.nodes[2].outputs[0] = 1;  // add redefines relu's value; %2 is orphaned
  std::vector<std::string> p = verify(b.g);
  EXPECT_TRUE(mentions(p, "node 2 (add): redefines %1 (defined by node 1)")) << ::testing::PrintToString(p);
  EXPECT_TRUE(mentions(p, "%2 is defined by no node"));
}

TEST(GraphVerifier, OutOfRangeIds) {
  GraphBuilder b = small_graph();
  b.g.nodes[1].inputs[0] = 17;
  b.g.outputs.push_back(-3);
  b.g.inputs.push_back(2);
  std::vector<std::string> p = verify(b.g);
  EXPECT_TRUE(mentions(p, "node 1 (relu): input %17 does not exist (3 values)")) << ::testing::PrintToString(p);
  EXPECT_TRUE(mentions(p, "graph output 1 is %-3, which does not exist"));
  EXPECT_TRUE(mentions(p, "graph input 1 (%2) is not defined by input node 1"));
}

TEST(GraphVerifier, InputNodesMatchGraphInputs) {
  GraphBuilder b = small_graph();
  b.g.nodes[0].input_index = 3;
  std::vector<std::string> p = verify(b.g);
  EXPECT_TRUE(mentions(p, "node 0 (input): input index 3 out of range (1 inputs)")) << ::testing::PrintToString(p);
  EXPECT_TRUE(mentions(p, "graph input 0 (%0) is not defined by input node 0"));
}

TEST(GraphVerifier, AttrInputsNeedAScalarInput) {
  GraphBuilder b = small_graph();
  b.g.nodes[2].attr_inputs = {{"alpha", 0}};
  std::vector<std::string> p = verify(b.g);
  EXPECT_TRUE(mentions(p, "node 2 (add): attribute 'alpha' reads scalar input $0 but the graph has 0"))
      << ::testing::PrintToString(p);
}

TEST(GraphVerifier, OutputCountAndCompositeOps) {
  GraphBuilder b = small_graph();
  b.g.nodes[1].op = OpId::transpose;  // composite: capture decomposes it
  b.g.values.push_back({ValueType::contiguous({2, 3}), 2, 1});
  b.g.nodes[2].outputs.push_back(3);  // add gives one output
  std::vector<std::string> p = verify(b.g);
  EXPECT_TRUE(mentions(p, "node 1 (transpose): composite op in a graph")) << ::testing::PrintToString(p);
  EXPECT_TRUE(mentions(p, "node 2 (add): has 2 outputs but add gives 1"));
}

TEST(GraphVerifier, TypesRederivedWithShapeRules) {
  GraphBuilder b;
  ValueId x = b.input(arange(6).view({1, 1, 2, 3}));  // int64
  ValueId y = b.op(OpId::mul, {x, b.constant(scalar_tensor(2.5))});  // times a wrapped number: float32
  ValueId t = b.op(OpId::permute, {y}, Attrs().set("dims", std::vector<int64_t>{0, 1, 3, 2}));
  std::vector<ValueId> mp = b.ops(OpId::max_pool2d, {t},
                                  testing::max_pool_attrs(2, 1));
  int v = b.scalar("v", 0.5);
  ValueId c = b.op(OpId::clamp, {mp[0]}, Attrs().set("min", 0.0), {{"min", v}});
  b.output(c);
  b.output(mp[1]);
  EXPECT_EQ(verify(b.g), std::vector<std::string>{});

  GraphBuilder wrong = b;
  wrong.g.values[static_cast<size_t>(y)].type.dtype = DType::Int64;          // mul gives float32
  wrong.g.values[static_cast<size_t>(mp[1])].type.shape = {1, 1, 2, 2};      // pooling gives [1, 1, 2, 1]
  std::vector<std::string> p = verify(wrong.g);
  EXPECT_TRUE(mentions(p, "node 2 (mul): output %2 is recorded as i64[1, 1, 2, 3] but the op gives f32[1, 1, 2, 3]"))
      << ::testing::PrintToString(p);
  EXPECT_TRUE(mentions(p, "node 4 (max_pool2d): output %5 is recorded as i64[1, 1, 2, 2] but the op gives i64[1, 1, 2, 1]"));
  // The permuted value now claims a type its producer cannot give: its own
  // node is reported, and pooling's rule sees the recorded (wrong) type.
  GraphBuilder wrong_view = b;
  wrong_view.g.values[static_cast<size_t>(t)].type = ValueType::contiguous({1, 1, 3, 3});
  p = verify(wrong_view.g);
  EXPECT_TRUE(mentions(p, "node 3 (permute): output %3 is recorded as f32[1, 1, 3, 3] but the op gives f32[1, 1, 3, 2]"))
      << ::testing::PrintToString(p);
  EXPECT_TRUE(mentions(p, "node 4 (max_pool2d): output %4 is recorded as f32[1, 1, 2, 1]"));
}

TEST(GraphVerifier, ConstantsMatchTheirRecordedType) {
  Graph g;
  ValueId c = g.add_constant(ones({2, 3}));
  g.outputs = {c};
  EXPECT_EQ(verify(g), std::vector<std::string>{});
  g.values[0].type.dtype = DType::Float64;
  EXPECT_EQ(verify(g), std::vector<std::string>{"node 0 (constant): %0 is recorded as f64[2, 3] but the tensor is f32[2, 3]"});
}

TEST(GraphVerifier, ShapeRuleRejectingTheInputsIsAProblem) {
  Graph g;
  ValueId a = g.add_input(ValueType::contiguous({2, 3}));
  ValueId b = g.add_input(ValueType::contiguous({4, 5}));
  g.outputs = g.add_op(OpId::matmul, {}, {a, b}, {ValueType::contiguous({2, 5})});
  std::vector<std::string> p = verify(g);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("node 2 (matmul): its shape rule rejects the recorded inputs: "), std::string::npos) << p[0];
}

TEST(GraphVerifier, VerifyOrThrowNamesTheStage) {
  GraphBuilder b = small_graph();
  b.g.nodes[1].inputs[0] = 17;
  try {
    verify_or_throw(b.g, "my_pass");
    FAIL() << "expected InternalError";
  } catch (const InternalError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("after my_pass"), std::string::npos) << msg;
    EXPECT_NE(msg.find("input %17 does not exist"), std::string::npos) << msg;
  }
  EXPECT_NO_THROW(verify_or_throw(small_graph().g, "capture"));
}

}  // namespace
}  // namespace kiln::compiler
