// Convolutions of few output channels lowered to generated loops
// (compiler/lower/small_conv.h): which ones lower, the kernel's shape (lanes
// over the output width, one accumulator per output channel), and results
// against oneDNN's (the interpreter runs the eager conv2d).
#include <gtest/gtest.h>

#include "compiler/backend/cpp_executable.h"
#include "compiler/graph/printer.h"
#include "compiler/lower/small_conv.h"
#include "graph_builder.h"

namespace kiln::compiler {
namespace {

using testing::GraphBuilder;

struct ConvCase {
  Shape x, w;
  bool bias;
  bool relu;
  int64_t padding = 0;
};

GraphBuilder conv_graph(const ConvCase& c) {
  GraphBuilder b;
  std::vector<ValueId> in{b.input(randn(c.x)), b.input(randn(c.w))};
  if (c.bias) in.push_back(b.input(randn({c.w[0]})));
  Attrs a = testing::conv2d_attrs(c.padding);
  if (c.relu) a.set("activation", std::string("relu"));
  b.output(b.op(OpId::conv2d, in, a));
  return b;
}

TEST(SmallConv, FewOutputChannelsRunAsOneKernelWithAnAccumulatorPerChannel) {
  manual_seed(5);
  // The tutorial's first layer; a row of exactly 16; one of 18 (its last
  // chunk overlaps the first); one input channel and no bias.
  for (const ConvCase& c : {ConvCase{{2, 3, 32, 32}, {6, 3, 5, 5}, true, true},
                            ConvCase{{3, 2, 18, 18}, {4, 2, 3, 3}, true, false},
                            ConvCase{{1, 2, 20, 20}, {8, 2, 3, 3}, false, true},
                            ConvCase{{2, 1, 9, 21}, {2, 1, 2, 4}, false, false}}) {
    SCOPED_TRACE(shape_str(c.x) + " x " + shape_str(c.w));
    GraphBuilder b = conv_graph(c);
    ASSERT_TRUE(lower::lowers_as_small_conv(b.g, b.g.nodes.back()));
    CppExecutable exe(b.g);
    ASSERT_EQ(exe.program().kernels.size(), 1u) << print(exe.program());
    for (const lower::Step& s : exe.program().steps) EXPECT_NE(s.kind, lower::Step::Kind::Extern);
    const std::string& src = exe.source();
    const std::string last_acc = "acc0_" + std::to_string(c.w[0] - 1);
    EXPECT_NE(src.find("kv::vf " + last_acc + " = "), std::string::npos) << src;
    EXPECT_EQ(src.find("kv::lane("), std::string::npos) << src;  // lanes over outputs, no reduction across lanes
    Tensors want = interpret(b.g, b.example_inputs), got = exe.run(b.example_inputs);
    EXPECT_TENSOR_CLOSE(got[0], want[0], 1e-5, 1e-5);
  }
}

TEST(SmallConv, OtherConvolutionsStayOnOneDnn) {
  for (const ConvCase& c : {ConvCase{{2, 3, 32, 32}, {9, 3, 5, 5}, true, true},     // 9 output channels
                            ConvCase{{2, 3, 32, 32}, {6, 3, 3, 3}, true, true, 1},  // padding
                            ConvCase{{2, 8, 20, 20}, {6, 8, 5, 5}, true, true},     // 200 products per output
                            ConvCase{{2, 3, 12, 12}, {6, 3, 3, 3}, true, true}}) {  // 10 outputs per row
    SCOPED_TRACE(shape_str(c.x) + " x " + shape_str(c.w));
    GraphBuilder b = conv_graph(c);
    EXPECT_FALSE(lower::lowers_as_small_conv(b.g, b.g.nodes.back()));
  }
}

}  // namespace
}  // namespace kiln::compiler
