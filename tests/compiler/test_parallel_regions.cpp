// Parallel regions (schedule/parallel_regions.h): before/expected loop
// programs, and the generated region run against the interpreter.
#include <gtest/gtest.h>

#include <algorithm>

#include "compiler/backend/cpp_executable.h"
#include "compiler/codegen/cpp/render_cpp.h"
#include "compiler/graph/interpreter.h"
#include "compiler/lower/lower_graph.h"
#include "compiler/lower/merge_loops.h"
#include "compiler/schedule/fuse_horizontal.h"
#include "compiler/schedule/fuse_vertical.h"
#include "compiler/schedule/hoist_fills.h"
#include "compiler/schedule/parallel_regions.h"
#include "compiler/schedule/store_copy_backs.h"
#include "kiln/profile.h"
#include "graph_builder.h"
#include "testing/compare.h"

namespace kiln::compiler::schedule {
namespace {

using lower::LoopProgram;
using testing::GraphBuilder;

constexpr int64_t kBig = codegen::kParallelThreshold;  // loop iterations that start the thread team

// The kernel names of each region, "k0 k1;k2 k3".
std::string regions(const LoopProgram& p) {
  std::string s;
  for (const std::vector<int>& r : p.regions) {
    if (!s.empty()) s += ";";
    for (size_t j = 0; j < r.size(); ++j) s += (j ? " " : "") + p.kernels.at(static_cast<size_t>(r[j])).name;
  }
  return s;
}

TEST(ParallelRegions, IndependentKernelsShareOneRegion) {
  GraphBuilder b;
  ValueId x = b.input(randn({kBig})), w = b.input(randn({kBig + 16}));
  b.output(b.op(OpId::exp, {x}));
  b.output(b.op(OpId::neg, {w}));
  LoopProgram p = lower::lower_graph(b.g);
  ASSERT_EQ(p.kernels.size(), 2u);
  EXPECT_EQ(group_parallel_regions(p, kBig), 1);
  EXPECT_EQ(regions(p), "k0 k1");
  EXPECT_EQ(print(p),
            "region r0 (one parallel region): k0 k1\n"
            "kernel k0 covers #2 {\n"
            "  for i0 in [0, 32768):\n"
            "    t0 = exp(%0[i0])\n"
            "    %2[i0] = t0\n"
            "}\n"
            "kernel k1 covers #3 {\n"
            "  for i0 in [0, 32784):\n"
            "    t0 = neg(%1[i0])\n"
            "    %3[i0] = t0\n"
            "}\n");
}

TEST(ParallelRegions, AKernelReadingAnEarlierStoreStartsANewRun) {
  GraphBuilder b;
  ValueId x = b.input(randn({kBig})), w = b.input(randn({kBig}));
  ValueId e = b.op(OpId::exp, {x});
  b.output(b.op(OpId::neg, {w}));
  b.output(b.op(OpId::relu, {e}));  // reads k0's store: must wait for it
  b.output(b.op(OpId::abs, {x}));
  LoopProgram p = lower::lower_graph(b.g);  // unfused: one kernel per node
  ASSERT_EQ(p.kernels.size(), 4u);
  EXPECT_EQ(group_parallel_regions(p, kBig), 2);
  EXPECT_EQ(regions(p), "k0 k1;k2 k3") << print(p);
}

TEST(ParallelRegions, SmallKernelsAndSymbolicExtentsStayAlone) {
  {
    GraphBuilder b;  // one kernel big enough to split: nothing to share a team start with
    ValueId x = b.input(randn({kBig})), w = b.input(randn({64}));
    b.output(b.op(OpId::exp, {x}));
    b.output(b.op(OpId::neg, {w}));
    LoopProgram p = lower::lower_graph(b.g);
    EXPECT_EQ(group_parallel_regions(p, kBig), 0) << print(p);
  }
  {
    GraphBuilder b;  // a symbolic batch: the loop's extent is known at run time only
    ValueId x = b.input(randn({kBig, 2}), 1), w = b.input(randn({kBig}));
    b.output(b.op(OpId::exp, {x}));
    b.output(b.op(OpId::neg, {w}));
    LoopProgram p = lower::lower_graph(b.g);
    EXPECT_EQ(group_parallel_regions(p, kBig), 0) << print(p);
  }
}

// Two parameters' SGD steps with momentum, of different shapes (two
// kernels fuse_horizontal does not join), copied back in place.
struct TwoParameterSgd {
  GraphBuilder b;
  // A 0-d float32 fill (how a functionalized step holds its learning rate).
  ValueId scalar(double v) {
    return b.op(OpId::full, {},
                Attrs().set("shape", Shape{}).set("dtype", DType::Float32).set("device", std::string("cpu")).set("value", v));
  }
  std::vector<ValueId> grads;
  TwoParameterSgd() {
    manual_seed(3);
    for (int64_t n : {kBig, kBig + 48}) {
      ValueId buf = b.input(randn({n})), grad = b.input(randn({n})), w = b.input(randn({n}));
      ValueId lr = scalar(-0.1), mu = scalar(0.9);
      ValueId m = b.op(OpId::add, {b.op(OpId::mul, {buf, mu}), grad});
      ValueId nw = b.op(OpId::add, {w, b.op(OpId::mul, {m, lr})});
      b.op(OpId::copy_, {w, nw});
      b.op(OpId::copy_, {buf, m});
      grads.push_back(grad);
    }
    b.output(b.op(OpId::neg, {grads[0]}));
  }
};

TEST(ParallelRegions, TheUpdateOfAllParametersIsOneRegionAndMatchesTheInterpreter) {
  TwoParameterSgd sgd;
  LoopProgram p = lower::lower_graph(sgd.b.g);
  fuse_vertical(p);
  hoist_fills(p);
  fuse_horizontal(p);
  EXPECT_EQ(store_copy_backs(p), 4);
  lower::merge_loops(p);
  EXPECT_EQ(group_parallel_regions(p, kBig), 1) << print(p);
  EXPECT_EQ(p.regions.size(), 1u);
  EXPECT_EQ(p.regions[0].size(), 2u) << print(p);
  // The generated region: one OpenMP region calling both update kernels,
  // which share out their loops without a barrier between them.
  std::string src = codegen::render_cpp(p);
  EXPECT_NE(src.find("extern \"C\" void kiln_r0(void* const* const* bufs, const int64_t* sizes) {\n#pragma omp parallel\n"),
            std::string::npos);
  EXPECT_NE(src.find("#pragma omp for schedule(static) nowait"), std::string::npos);
  // Run: outputs and the updated inputs as the interpreter leaves them.
  Tensors want, got;
  for (const Tensor& t : sgd.b.example_inputs) {
    want.push_back(t.clone());
    got.push_back(t.clone());
  }
  CppExecutable exe(sgd.b.g);
  ASSERT_EQ(exe.program().regions.size(), 1u) << print(exe.program());
  EXPECT_TENSOR_CLOSE(exe.run(got)[0], interpret(sgd.b.g, want)[0], 0, 0);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TENSOR_CLOSE(got[i], want[i], 1e-6, 1e-7) << "input " << i;
}

// The profile's range names of one run ("graph/r0", "graph/k1", ...), sorted.
std::vector<std::string> ranges_run(const CppExecutable& exe, TensorSpan inputs) {
  Profile profile;
  exe.run(inputs);
  profile.stop();
  std::vector<std::string> names;
  for (const RangeStats& r : profile.range_stats()) names.push_back(r.name);
  std::sort(names.begin(), names.end());
  return names;
}

TEST(ParallelRegions, RunsKernelByKernelWhereMemoryOverlapsAtRunTime) {
  // The first parameter's memory inside the second's (a slice of it): the
  // capture never passes aliased parameters, but if memory is shared the
  // region must not race. The kernels run one by one, in order, and leave
  // what the interpreter leaves for the same aliasing.
  TwoParameterSgd sgd;
  CppExecutable exe(sgd.b.g);
  ASSERT_EQ(exe.program().regions.size(), 1u);
  Tensors fresh;
  for (const Tensor& t : sgd.b.example_inputs) fresh.push_back(t.clone());
  EXPECT_EQ(ranges_run(exe, fresh), std::vector<std::string>{"graph/r0"});

  auto aliased = [&] {
    Tensors in;
    for (const Tensor& t : sgd.b.example_inputs) in.push_back(t.clone());
    in[2] = in[5].slice(0, 0, kBig);  // parameter 0 inside parameter 1
    return in;
  };
  Tensors want = aliased(), got = aliased();
  EXPECT_EQ(ranges_run(exe, got), (std::vector<std::string>{"graph/k0", "graph/k1"}));
  interpret(sgd.b.g, want);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TENSOR_CLOSE(got[i], want[i], 1e-6, 1e-7) << "input " << i;
}

}  // namespace
}  // namespace kiln::compiler::schedule
