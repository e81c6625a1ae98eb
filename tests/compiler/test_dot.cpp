// DOT text and SVG rendering of graphs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "compiler/graph/dot.h"
#include "graph_builder.h"
#include "kiln/kiln.h"

namespace kiln::compiler {
namespace {

using testing::GraphBuilder;

GraphBuilder example_graph() {
  GraphBuilder b("step");
  ValueId x = b.input(randn({4, 5}), 1);
  ValueId w = b.input(randn({5, 3}));
  ValueId c = b.constant(scalar_tensor(0.5));
  int lr = b.scalar("lr", 0.1);
  ValueId y = b.op(OpId::relu, {b.op(OpId::mul, {b.op(OpId::matmul, {x, w}), c})});
  ValueId t = b.op(OpId::permute, {y}, Attrs().set("dims", std::vector<int64_t>{1, 0}));
  ValueId upd = b.op(OpId::add_, {w, b.op(OpId::matmul, {b.op(OpId::permute, {x}, Attrs().set("dims", std::vector<int64_t>{1, 0})), y})}, Attrs().set("alpha", 0.1),
                     {{"alpha", lr}});
  (void)upd;
  b.output(t);
  b.output(upd);
  return b;
}

TEST(GraphDot, OneNodePerGraphNodeWithTypesAndKinds) {
  GraphBuilder b = example_graph();
  std::string dot = to_dot(b.g);
  EXPECT_EQ(dot.rfind("digraph \"step\" {", 0), 0u) << dot;
  for (size_t i = 0; i < b.g.nodes.size(); ++i)
    EXPECT_NE(dot.find("  n" + std::to_string(i) + " [label="), std::string::npos) << dot;
  EXPECT_NE(dot.find("n0 [label=\"input 0\n%0: f32[s0, 5]\", shape=invhouse"), std::string::npos) << dot;
  EXPECT_NE(dot.find("n2 [label=\"constant\n%2: f32[]\", shape=note"), std::string::npos) << dot;
  EXPECT_NE(dot.find("[label=\"matmul\n%3: f32[s0, 3]\""), std::string::npos) << dot;
  EXPECT_NE(dot.find("s0 [label=\"$0 lr: f64\", shape=ellipse"), std::string::npos) << dot;
  EXPECT_NE(dot.find("s0 -> n9 [style=dashed, label=\"alpha\"]"), std::string::npos) << dot;
  EXPECT_NE(dot.find("n3 -> n4 [label=\"%3\"]"), std::string::npos) << dot;
  EXPECT_NE(dot.find("n6 -> outputs [label=\"0\"]"), std::string::npos) << dot;
  EXPECT_NE(dot.find("outputs [label=\"return\", shape=house"), std::string::npos) << dot;
}

TEST(GraphDot, QuotesInAttributesAreEscaped) {
  GraphBuilder b;
  ValueId x = b.input(randn({3}));
  b.output(b.op(OpId::gelu, {x}, Attrs().set("approximate", std::string("tanh"))));
  EXPECT_NE(to_dot(b.g).find("gelu\n{approximate=\\\"tanh\\\"}"), std::string::npos) << to_dot(b.g);
}

TEST(GraphDot, WritesAnSvgNamingEachOp) {
  GraphBuilder b = example_graph();
  std::filesystem::path dir = std::filesystem::temp_directory_path() / ("kiln_dot_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string path = (dir / "step.svg").string();
  write_svg(b.g, path);
  std::ifstream in(path);
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  std::string svg = ss.str();
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u) << svg.substr(0, 100);
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  for (const char* op : {"matmul", "mul", "relu", "permute", "add_", "constant", "input 0", "return"})
    EXPECT_NE(svg.find(std::string(">") + op), std::string::npos) << op;
  // Only the SVG is left: the temporary file was renamed.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()), 1);
  std::filesystem::remove_all(dir);
}

TEST(GraphDot, UnwritablePathIsAnError) {
  GraphBuilder b = example_graph();
  EXPECT_THROW(write_svg(b.g, "/nonexistent-dir/x/step.svg"), Error);
}

}  // namespace
}  // namespace kiln::compiler
