// The C++ backend against the reference Interpreter: generated kernels for
// pointwise ops, reductions and views, extern nodes on the eager kernels,
// random graphs over several shapes, and graphs captured from real code.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <random>

#include "capture_checks.h"
#include "compiler/backend/cpp_executable.h"
#include "compiler/capture/compiled_state.h"
#include "compiler/codegen/cpp/render_cpp.h"
#include "compiler/graph/printer.h"
#include "graph_builder.h"
#include "kiln/compile.h"
#include "testing/scoped_env.h"

namespace kiln::compiler {
namespace {

using testing::GraphBuilder;

// Runs `g` on the C++ backend and on the Interpreter; float32 within 1e-5
// relative.
void expect_matches_interpreter(const Graph& g, const Tensors& inputs) {
  CppExecutable exe(g);
  Tensors want = interpret(g, inputs), got = exe.run(inputs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TENSOR_CLOSE(got[i], want[i], 1e-5, 1e-6) << "output " << i << "\n" << print(exe.program()) << exe.source();
}

Attrs dims_attrs(std::vector<int64_t> dims, bool keepdim) {
  return Attrs().set("dims", std::move(dims)).set("keepdim", keepdim);
}

TEST(CppBackend, FusedChainRunsAsOneKernel) {
  GraphBuilder b;
  ValueId x = b.input(randn({64, 33})), a = b.input(randn({64, 33})), c = b.input(randn({33}));
  ValueId r = b.op(OpId::relu, {b.op(OpId::add, {b.op(OpId::mul, {x, a}), c})});
  b.output(r);
  CppExecutable exe(b.g);
  EXPECT_EQ(exe.program().kernels.size(), 1u);
  EXPECT_NE(exe.source().find("// k0: #3 mul -> %3; #4 add -> %4; #5 relu -> %5;"), std::string::npos) << exe.source();
  expect_matches_interpreter(b.g, b.example_inputs);
}

TEST(CppBackend, EveryLoweredPointwiseOpMatches) {
  Tensor x = randn({5, 7}), y = add(rand({5, 7}), 0.5);  // y > 0 for log, sqrt, pow
  struct Case { OpId op; int inputs; Attrs attrs; };
  std::vector<Case> cases = {
      {OpId::add, 2, {}}, {OpId::sub, 2, {}}, {OpId::mul, 2, {}}, {OpId::div, 2, {}}, {OpId::maximum, 2, {}},
      {OpId::minimum, 2, {}}, {OpId::neg, 1, {}}, {OpId::exp, 1, {}}, {OpId::abs, 1, {}}, {OpId::sign, 1, {}},
      {OpId::relu, 1, {}}, {OpId::gelu, 1, Attrs().set("approximate", std::string("none"))},
      {OpId::gelu, 1, Attrs().set("approximate", std::string("tanh"))},
      {OpId::gelu_backward, 2, Attrs().set("approximate", std::string("none"))}, {OpId::sigmoid, 1, {}},
      {OpId::tanh, 1, {}}, {OpId::erf, 1, {}}, {OpId::clamp, 1, Attrs().set("min", -0.5).set("max", 0.5)},
      {OpId::eq, 2, {}}, {OpId::lt, 2, {}}, {OpId::ge, 2, {}}, {OpId::relu_backward, 2, {}}};
  for (const Case& c : cases) {
    GraphBuilder b;
    std::vector<ValueId> in = {b.input(x)};
    if (c.inputs == 2) in.push_back(b.input(y));
    b.output(b.op(c.op, in, c.attrs));
    SCOPED_TRACE(op_name(c.op));
    expect_matches_interpreter(b.g, b.example_inputs);
  }
  for (OpId op : {OpId::log, OpId::sqrt, OpId::rsqrt}) {
    GraphBuilder b;
    b.output(b.op(op, {b.input(y)}));
    SCOPED_TRACE(op_name(op));
    expect_matches_interpreter(b.g, b.example_inputs);
  }
  {
    GraphBuilder b;  // relu's derivative at relu's outputs (zeros where x < 0), fused with the relu
    ValueId xi = b.input(x);
    b.output(b.op(OpId::relu_backward, {b.input(y), b.op(OpId::relu, {xi})}));
    SCOPED_TRACE("relu_backward(y, relu(x))");
    expect_matches_interpreter(b.g, b.example_inputs);
  }
  GraphBuilder b;  // where over a bool mask made by a comparison, pow, a cast
  ValueId xi = b.input(x), yi = b.input(y);
  ValueId mask = b.op(OpId::gt, {xi, yi});
  ValueId w = b.op(OpId::where, {mask, b.op(OpId::pow, {yi, xi}), xi});
  b.output(b.op(OpId::cast, {b.op(OpId::logical_not, {mask})}, Attrs().set("dtype", DType::Float32)));
  b.output(w);
  b.output(mask);
  expect_matches_interpreter(b.g, b.example_inputs);
}

TEST(CppBackend, ReductionsOverEveryDimChoice) {
  Tensor x = randn({4, 5, 6});
  for (OpId op : {OpId::sum, OpId::mean, OpId::amax, OpId::amin})
    for (std::vector<int64_t> dims : {std::vector<int64_t>{}, {0}, {1}, {2}, {0, 2}, {-1, -2}})
      for (bool keepdim : {false, true}) {
        GraphBuilder b;
        ValueId in = b.input(x);
        b.output(b.op(op, {b.op(OpId::exp, {in})}, dims_attrs(dims, keepdim)));
        SCOPED_TRACE(std::string(op_name(op)) + " dims " + shape_str(dims) + (keepdim ? " keepdim" : ""));
        expect_matches_interpreter(b.g, b.example_inputs);
      }
}

TEST(CppBackend, VarianceByWelfordMatches) {
  Tensor x = add(mul(randn({6, 7, 9}), 3.0), 100.0);  // a large mean: a one-pass sum of squares would cancel
  for (std::vector<int64_t> dims : {std::vector<int64_t>{}, {0}, {1, 2}, {-1}})
    for (int64_t correction : {0, 1})
      for (bool keepdim : {false, true}) {
        GraphBuilder b;
        b.output(b.op(OpId::var, {b.input(x)}, dims_attrs(dims, keepdim).set("correction", correction)));
        SCOPED_TRACE("dims " + shape_str(dims) + " correction " + std::to_string(correction));
        expect_matches_interpreter(b.g, b.example_inputs);
      }
  GraphBuilder b;  // the symbolic batch as the reduced dim
  ValueId in = b.input(randn({5, 4}), /*symbolic_dims=*/1);
  b.output(b.op(OpId::var, {in}, dims_attrs({0}, false).set("correction", int64_t{1})));
  CppExecutable exe(b.g);
  for (int64_t batch : {5, 2, 1, 40}) {
    Tensors args = {randn({batch, 4})};
    EXPECT_TENSOR_CLOSE(exe.run(args)[0], interpret(b.g, args)[0], 1e-5, 1e-6) << "batch " << batch;
  }
}

TEST(CppBackend, RecomputedValuesMatchBitForBit) {
  // max-pool's backward pattern: a mask of where a recomputed gelu equals
  // the max of it. Each consumer computes gelu again (vectorized or not):
  // every copy must round alike or the mask loses its ones. (The airbench
  // train step below is what caught SIMD math variants breaking this.)
  struct Case { Shape shape; std::vector<int64_t> dims; };
  for (const Case& c : {Case{{8, 64, 3, 3}, {2, 3}}, Case{{256, 33}, {1}}}) {
    GraphBuilder b;
    ValueId x = b.input(randn(c.shape));
    ValueId y = b.op(OpId::gelu, {x}, Attrs().set("approximate", std::string("none")));
    ValueId m = b.op(OpId::amax, {y}, dims_attrs(c.dims, true));
    ValueId mask = b.op(OpId::eq, {y, m});
    b.output(mask);
    b.output(b.op(OpId::sum, {b.op(OpId::cast, {mask}, Attrs().set("dtype", DType::Float32))}, dims_attrs(c.dims, false)));
    SCOPED_TRACE(shape_str(c.shape));
    expect_matches_interpreter(b.g, b.example_inputs);
  }
}

// A reduction over a few elements per output (airbench's global max-pool over
// 3x3) puts its lanes over the outputs, each lane reducing its own output,
// instead of over the 9 reduced elements with a reduction across lanes for
// every output (render_cpp.cpp, few_reduced_elements).
TEST(CppBackend, ReductionsOverFewElementsPutLanesOverTheOutputs) {
  for (OpId op : {OpId::amax, OpId::sum, OpId::mean}) {
    GraphBuilder b;
    ValueId x = b.input(randn({8, 64, 3, 3}));
    ValueId y = b.op(OpId::gelu, {x}, Attrs().set("approximate", std::string("none")));
    b.output(b.op(op, {y}, dims_attrs({2, 3}, false)));
    CppExecutable exe(b.g);
    const std::string& src = exe.source();
    SCOPED_TRACE(op_name(op));
    EXPECT_NE(src.find("for (int64_t i0 = 0; i0 < (512); i0 += kv::kLanes)"), std::string::npos) << src;
    EXPECT_NE(src.find("kv::load_strided(b0 + (9*i0 + r0), 9, n_)"), std::string::npos) << src;
    EXPECT_EQ(src.find("kv::lane("), std::string::npos) << src;  // no reduction across lanes
    expect_matches_interpreter(b.g, b.example_inputs);
  }
  GraphBuilder b;  // 16 elements per output fill the lanes: over the reduced loop, as before
  b.output(b.op(OpId::amax, {b.input(randn({8, 64, 4, 4}))}, dims_attrs({2, 3}, false)));
  CppExecutable exe(b.g);
  EXPECT_NE(exe.source().find("kv::lane("), std::string::npos) << exe.source();
  expect_matches_interpreter(b.g, b.example_inputs);
}

// Eval batch norm folded into a convolution's weight: w * (gamma / sqrt(var
// + eps)) per output channel. The per-channel part is computed once per row,
// before the vector loop over the row's elements (it ran for every chunk of
// lanes, ~0.4 ms of airbench's 2.6 ms eval forward at batch 1), with the
// interpreter's bits.
TEST(CppBackend, PerRowComputationsRunBeforeTheVectorLoop) {
  GraphBuilder b;
  ValueId w = b.input(randn({24, 8, 3, 3})), var = b.input(add(rand({24}), 0.1)), gamma = b.input(randn({24}));
  ValueId scale = b.op(OpId::mul, {gamma, b.op(OpId::rsqrt, {b.op(OpId::add, {var, b.input(full({}, 1e-5))})})});
  b.output(b.op(OpId::mul, {w, b.op(OpId::view, {scale}, Attrs().set("shape", Shape{24, 1, 1, 1}))}));
  CppExecutable exe(b.g);
  ASSERT_EQ(exe.program().kernels.size(), 1u) << print(exe.program());
  const std::string& src = exe.source();
  const size_t lane_loop = src.find("+= kv::kLanes"), sqrt_at = src.find("kv::sqrt(");
  ASSERT_NE(lane_loop, std::string::npos) << src;
  ASSERT_NE(sqrt_at, std::string::npos) << src;
  EXPECT_LT(sqrt_at, lane_loop) << src;
  Tensors want = interpret(b.g, b.example_inputs), got = exe.run(b.example_inputs);
  EXPECT_EQ(std::memcmp(got[0].data<float>(), want[0].data<float>(), sizeof(float) * 24 * 72), 0)
      << print(exe.program()) << src;
}

// A 0-dim number is read once before the loops (hoisted); the max and min
// combining steps still see the accumulator and the value, not the number.
TEST(CppBackend, ReductionsOfValuesWithAHoistedNumber) {
  for (OpId op : {OpId::amax, OpId::amin, OpId::sum}) {
    GraphBuilder b;
    ValueId x = b.input(randn({6, 40})), s = b.input(scalar_tensor(0.25));
    ValueId y = b.op(OpId::mul, {x, s});
    b.output(b.op(op, {y}, dims_attrs({1}, false)));
    b.output(b.op(op, {y}, dims_attrs({0}, false)));
    CppExecutable exe(b.g);
    EXPECT_NE(exe.source().find("const kv::vf h"), std::string::npos) << exe.source();
    SCOPED_TRACE(op_name(op));
    expect_matches_interpreter(b.g, b.example_inputs);
  }
}

TEST(CppBackend, LargeSumsRunInParallelAndStayClose) {
  GraphBuilder b;
  ValueId x = b.input(randn({300, 257}));
  b.output(b.op(OpId::sum, {x}, dims_attrs({}, false)));
  b.output(b.op(OpId::mean, {x}, dims_attrs({1}, false)));
  b.output(b.op(OpId::sigmoid, {x}));
  CppExecutable exe(b.g);
  // Three independent kernels: one parallel region, whose loops are shared
  // out among its threads (parallel_regions.h).
  EXPECT_EQ(exe.program().regions.size(), 1u) << print(exe.program());
  EXPECT_NE(exe.source().find("#pragma omp for schedule(static) nowait"), std::string::npos) << exe.source();
  // The full sum has no output loop to share: one thread runs it.
  const std::string& src = exe.source();
  size_t full_sum = src.find("// k0: #1 sum");
  ASSERT_NE(full_sum, std::string::npos) << src;
  EXPECT_NE(src.substr(full_sum, src.find("\n}\n", full_sum) - full_sum).find("#pragma omp single nowait"),
            std::string::npos) << src;
  expect_matches_interpreter(b.g, b.example_inputs);
  std::optional<kiln::testing::ScopedEnv> off(std::in_place, "KILN_DISABLE_PASSES", "parallel_regions");
  CppExecutable alone(b.g);  // alone: one parallel for each
  off.reset();
  EXPECT_TRUE(alone.program().regions.empty());
  EXPECT_NE(alone.source().find("#pragma omp parallel for"), std::string::npos) << alone.source();
  expect_matches_interpreter(b.g, b.example_inputs);
}

TEST(CppBackend, TransposedInputAndViews) {
  GraphBuilder b;
  Tensor xt = randn({6, 4}).transpose(0, 1);  // a non-contiguous input
  ValueId x = b.input(xt), y = b.input(randn({4, 6}));
  ValueId p = b.op(OpId::permute, {y}, Attrs().set("dims", std::vector<int64_t>{1, 0}));
  ValueId s = b.op(OpId::slice, {x}, Attrs().set("dim", int64_t{1}).set("start", int64_t{1}).set(
                                         "end", int64_t{6}).set("step", int64_t{2}));  // [4, 3]
  ValueId v = b.op(OpId::view, {b.op(OpId::exp, {y})}, Attrs().set("shape", Shape{2, 12}));
  ValueId sel = b.op(OpId::select, {x}, Attrs().set("dim", int64_t{0}).set("index", int64_t{-1}));  // [6]
  b.output(b.op(OpId::add, {x, b.op(OpId::permute, {p}, Attrs().set("dims", std::vector<int64_t>{1, 0}))}));
  b.output(b.op(OpId::mul, {s, s}));
  b.output(b.op(OpId::neg, {v}));
  b.output(b.op(OpId::sum, {b.op(OpId::mul, {x, sel})}, dims_attrs({0}, false)));
  b.output(p);  // a view as a graph output runs eagerly
  expect_matches_interpreter(b.g, b.example_inputs);
}

// bfloat16 (autocast's activations) in generated kernels: loads widen,
// each node's result is rounded as the eager op rounds it, so a fused chain
// of bfloat16 ops gives eager's bits, through tails (37 columns), a
// transposed (strided) input, numbers, masks and a 0-dim integer input (a
// C++ 0 made a graph input, as in where(x > 0, g, 0)). Nothing is left to the eager kernels.
TEST(CppBackend, BFloat16ChainsMatchEagerBitForBit) {
  GraphBuilder b;
  auto bf16 = Attrs().set("dtype", DType::BFloat16);
  ValueId x = b.input(mul(randn({5, 37}), 3.0));
  ValueId y = b.input(randn({37}).to(DType::BFloat16));
  ValueId t = b.input(randn({37, 5}).to(DType::BFloat16));
  ValueId zero = b.input(scalar_tensor(int64_t{0}));
  ValueId xb = b.op(OpId::cast, {x}, bf16);
  ValueId g = b.op(OpId::gelu, {b.op(OpId::relu, {xb})}, Attrs().set("approximate", std::string("none")));
  ValueId sum = b.op(OpId::add, {g, y});
  ValueId scaled = b.op(OpId::mul, {sum, b.constant(scalar_tensor(0.1))});
  ValueId tt = b.op(OpId::permute, {t}, Attrs().set("dims", std::vector<int64_t>{1, 0}));
  ValueId masked = b.op(OpId::where, {b.op(OpId::gt, {tt, zero}), scaled, zero});
  b.output(masked);
  b.output(b.op(OpId::cast, {b.op(OpId::sigmoid, {masked})}, Attrs().set("dtype", DType::Float32)));
  CppExecutable exe(b.g);
  for (const lower::Step& step : exe.program().steps)
    EXPECT_TRUE(step.kind != lower::Step::Kind::Extern) << print(exe.program());
  EXPECT_NE(exe.source().find("kv::bf16_t"), std::string::npos) << exe.source();
  Tensors want = interpret(b.g, b.example_inputs), got = exe.run(b.example_inputs);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].dtype(), DType::BFloat16);
  for (size_t i = 0; i < got.size(); ++i) {
    Tensor a = got[i].contiguous(), w = want[i].contiguous();
    ASSERT_EQ(a.nbytes(), w.nbytes());
    EXPECT_EQ(std::memcmp(a.data_ptr(), w.data_ptr(), a.nbytes()), 0) << "output " << i << "\n" << exe.source();
  }
  // A sum of bfloat16 values: float32 accumulators in another order than
  // eager's, one rounding of the result.
  GraphBuilder r;
  ValueId v = r.input(randn({8, 100}).to(DType::BFloat16));
  r.output(r.op(OpId::sum, {r.op(OpId::relu, {v})}, dims_attrs({1}, false)));
  CppExecutable sums(r.g);
  EXPECT_EQ(sums.program().kernels.size(), 1u);
  EXPECT_TENSOR_CLOSE(sums.run(r.example_inputs)[0].to(DType::Float32),
                      interpret(r.g, r.example_inputs)[0].to(DType::Float32), 1e-2, 1e-2);
}

TEST(CppBackend, SymbolicBatchSize) {
  GraphBuilder b;
  ValueId x = b.input(randn({3, 8, 5}), /*symbolic_dims=*/1);
  ValueId bias = b.input(randn({8, 1}));
  ValueId y = b.op(OpId::gelu, {b.op(OpId::add, {x, bias})}, Attrs().set("approximate", std::string("none")));
  b.output(b.op(OpId::mean, {y}, dims_attrs({0, 2}, true)));
  b.output(y);
  CppExecutable exe(b.g);
  for (int64_t batch : {3, 1, 17}) {
    Tensors in = {randn({batch, 8, 5}), b.example_inputs[1]};
    Tensors want = interpret(b.g, in), got = exe.run(in);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[1].shape(), (Shape{batch, 8, 5}));
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TENSOR_CLOSE(got[i], want[i], 1e-5, 1e-6) << "batch " << batch;
  }
}

TEST(CppBackend, ExternNodesBetweenKernels) {
  GraphBuilder b;
  ValueId x = b.input(randn({2, 3, 8, 8})), w = b.input(randn({4, 3, 3, 3}));
  ValueId c = b.op(OpId::conv2d, {x, w, kNoValue}, testing::conv2d_attrs(1));
  ValueId r = b.op(OpId::relu, {c});
  ValueId pooled = b.ops(OpId::max_pool2d, {r}, testing::max_pool_attrs(2, 2))[0];
  b.output(b.op(OpId::mul, {pooled, pooled}));
  expect_matches_interpreter(b.g, b.example_inputs);
}

bool broadcastable(const Shape& a, const Shape& b) {
  for (size_t k = 1; k <= std::min(a.size(), b.size()); ++k) {
    int64_t x = a[a.size() - k], y = b[b.size() - k];
    if (x != y && x != 1 && y != 1) return false;
  }
  return true;
}

// Random graphs: chains of pointwise ops over broadcast inputs, views and
// reductions, on several shapes.
TEST(CppBackend, RandomGraphsMatchTheInterpreter) {
  std::mt19937 rng(1234);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  const std::vector<Shape> shapes = {{7}, {3, 5}, {4, 1, 6}, {2, 3, 4, 5}, {1, 33}};
  const OpId unary[] = {OpId::exp, OpId::neg, OpId::tanh, OpId::sigmoid, OpId::relu, OpId::abs, OpId::erf};
  const OpId binary[] = {OpId::add, OpId::sub, OpId::mul, OpId::maximum, OpId::minimum};
  for (int trial = 0; trial < 30; ++trial) {
    const Shape& shape = shapes[static_cast<size_t>(pick(static_cast<int>(shapes.size())))];
    GraphBuilder b;
    std::vector<ValueId> pool = {b.input(randn(shape))};
    // A broadcast operand: the trailing dims with some set to 1.
    Shape bshape(shape.begin() + pick(static_cast<int>(shape.size())), shape.end());
    for (int64_t& d : bshape)
      if (pick(2) == 0) d = 1;
    pool.push_back(b.input(randn(bshape)));
    for (int step = 0; step < 6; ++step) {
      int kind = pick(5);
      ValueId a = pool[static_cast<size_t>(pick(static_cast<int>(pool.size())))];
      // A copy: adding an op may grow the graph's value list and move its types.
      const ValueType t = b.g.type(a);
      if (kind <= 1) {
        pool.push_back(b.op(unary[pick(7)], {a}));
      } else if (kind == 2) {
        ValueId c = pool[static_cast<size_t>(pick(static_cast<int>(pool.size())))];
        const ValueType& tc = b.g.type(c);
        // Keep the pair broadcastable: both of the full shape or one the
        // broadcast operand.
        if (!broadcastable(t.shape, tc.shape)) continue;
        pool.push_back(b.op(binary[pick(5)], {a, c}));
      } else if (kind == 3 && t.shape.size() >= 2) {
        std::vector<int64_t> perm(t.shape.size());
        for (size_t d = 0; d < perm.size(); ++d) perm[d] = static_cast<int64_t>(perm.size() - 1 - d);
        ValueId p = b.op(OpId::permute, {a}, Attrs().set("dims", perm));
        pool.push_back(b.op(OpId::neg, {p}));
        b.output(pool.back());
      } else if (!t.shape.empty()) {
        OpId red[] = {OpId::sum, OpId::mean, OpId::amax};
        int64_t dim = pick(static_cast<int>(t.shape.size()));
        ValueId r = b.op(red[pick(3)], {a}, dims_attrs({dim}, true));
        if (t.shape == shape) pool.push_back(b.op(OpId::sub, {a, r}));  // broadcast back
        else b.output(r);
      }
    }
    b.output(pool.back());
    SCOPED_TRACE("trial " + std::to_string(trial) + "\n" + print(b.g));
    expect_matches_interpreter(b.g, b.example_inputs);
  }
}

// Graphs captured from real code by kiln::compile, run on the C++ backend.
template <class F>
void expect_captured_graphs_match(const Compiled<F>& compiled, const Tensors& args) {
  ASSERT_FALSE(compiled.state().variants.empty());
  for (const auto& variant : compiled.state().variants)
    for (const auto& segment : variant->segments) {
      const Graph& g = segment->executable;
      CppExecutable exe(g);
      EXPECT_GT(exe.program().kernels.size(), 0u) << print(g);
      Tensors want = interpret(g, args), got = exe.run(args);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_TENSOR_CLOSE(got[i], want[i], 1e-5, 1e-6) << print(g) << print(exe.program());
    }
}

TEST(CppBackend, CapturedGeluSoftmaxAndBatchNormApply) {
  manual_seed(3);
  Tensor x = randn({8, 16, 4, 4}), w = randn({16}), bias = randn({16});
  auto fn = compile([](const Tensor& x, const Tensor& w, const Tensor& bias) {
    // batch-norm apply with statistics computed by reductions
    Tensor mean = x.mean({0, 2, 3}, true);
    Tensor centered = sub(x, mean);
    Tensor var = mul(centered, centered).mean({0, 2, 3}, true);
    Tensor y = add(mul(mul(centered, rsqrt(add(var, 1e-5))), w.view({1, 16, 1, 1})), bias.view({1, 16, 1, 1}));
    Tensor g = gelu(y);
    return softmax(g.flatten(1), 1);
  });
  Tensor eager = fn(x, w, bias);
  // The C++ number eps is a graph input: a wrapped float64 number.
  Tensor eps = full({}, 1e-5, TensorOptions().with_dtype(DType::Float64));
  eps.impl()->wrapped_number = true;
  expect_captured_graphs_match(fn, {x, w, bias, eps});
}

}  // namespace
}  // namespace kiln::compiler

namespace kiln::compiler {
namespace {

// kiln::compile with backend("cpp"): whole models, forward and train step.
TEST(CppBackendCompile, ModelForwardMatchesEager) {
  manual_seed(11);
  auto model = models::create("airbench", 0.25);
  model->eval();
  NoGradGuard no_grad;
  auto forward = compile(model, CompileOptions().backend("cpp").name("airbench_eval"));
  for (int i = 0; i < 2; ++i) {
    Tensor x = randn({4, 3, 32, 32});
    EXPECT_TENSOR_CLOSE(forward(x), model->forward(x), 1e-4, 1e-5) << "call " << i;
  }
}

// A zoo model's compiled train step (SGD with momentum and weight decay) on
// one backend: the losses of three steps and the state afterwards
// (parameters, batch-norm running statistics).
std::pair<std::vector<double>, nn::TensorDict> train_three_steps(const std::string& model_name,
                                                                 const std::string& backend,
                                                                 MemoryFormat format = MemoryFormat::Contiguous) {
  manual_seed(12);
  auto model = models::create(model_name, model_name == "airbench" ? 0.25 : 1.0);
  model->to(format);
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.05).momentum(0.9).weight_decay(5e-4));
  auto step = kiln::testing::compile_train_step(model, opt, CompileOptions().fullgraph(true).backend(backend).name("train_step"));
  manual_seed(13);
  std::vector<double> losses;
  for (int i = 0; i < 3; ++i) {
    Tensor x = contiguous(randn({8, 3, 32, 32}), format);
    losses.push_back(step(x, randint(0, 10, {8})).item());
  }
  nn::TensorDict state;
  for (const auto& [name, t] : model->state_dict()) state.emplace_back(name, t.detach().clone());
  return {losses, state};
}

// The tutorial's and airbench's three steps on the cpp backend (in `format`)
// against the interpreter backend's in NCHW: losses within `loss_rtol`, the
// state within 1e-4.
void expect_cpp_train_steps_match(MemoryFormat format, double loss_rtol) {
  for (const char* name : {"tutorial", "airbench"}) {
    SCOPED_TRACE(name);
    auto [want_losses, want_state] = train_three_steps(name, "interpreter");
    auto [got_losses, got_state] = train_three_steps(name, "cpp", format);
    for (size_t i = 0; i < want_losses.size(); ++i)
      EXPECT_NEAR(got_losses[i], want_losses[i], loss_rtol * std::abs(want_losses[i])) << "step " << i;
    ASSERT_EQ(got_state.size(), want_state.size());
    for (size_t i = 0; i < got_state.size(); ++i)
      EXPECT_TENSOR_CLOSE(got_state[i].second, want_state[i].second, 1e-4, 1e-5) << got_state[i].first;
  }
}

TEST(CppBackendCompile, TrainStepsMatchTheInterpreterBackend) {
  expect_cpp_train_steps_match(MemoryFormat::Contiguous, 1e-5);
}

// Channels-last weights and batches (kiln bench --channels-last): generated
// kernels read such inputs through a contiguous copy, made while the capture
// runs its graph. The copy was captured as a graph op instead, and the run
// recursed into itself until the stack overflowed.
TEST(CppBackendCompile, ChannelsLastTrainStepsMatchTheInterpreterBackend) {
  expect_cpp_train_steps_match(MemoryFormat::ChannelsLast, 1e-4);
}

TEST(CppBackendCompile, UnknownBackendIsAnError) {
  EXPECT_THROW(compile([](const Tensor& x) { return x; }, CompileOptions().backend("metal")), Error);
}

}  // namespace
}  // namespace kiln::compiler

namespace kiln::compiler {
namespace {

TEST(CppBackendDump, LoopsAndKernelsGoToStderr) {
  GraphBuilder b("dumped");
  ValueId x = b.input(randn({4, 8}));
  b.output(b.op(OpId::relu, {b.op(OpId::neg, {x})}));
  kiln::testing::ScopedEnv env("KILN_DUMP", "loops,kernels");
  ::testing::internal::CaptureStderr();
  CppExecutable exe(b.g);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("// ---- loops of graph dumped (1 kernels) ----\n" + lower::print(exe.program())), std::string::npos)
      << err;
  EXPECT_NE(err.find("// ---- kernels of graph dumped ----\n" + exe.source()), std::string::npos) << err;
  EXPECT_NE(exe.source().find("// k0: #1 neg -> %1; #2 relu -> %2;\nextern \"C\" void kiln_k0("), std::string::npos)
      << exe.source();
}

TEST(CppBackendDump, QuietWithoutKilnDump) {
  GraphBuilder b;
  b.output(b.op(OpId::exp, {b.input(randn({3}))}));
  kiln::testing::ScopedEnv env("KILN_DUMP", "passes");
  ::testing::internal::CaptureStderr();
  CppExecutable exe(b.g);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace kiln::compiler
