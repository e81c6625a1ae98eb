// kiln::autocast: the policy table's dtypes (one test per list), the casts as
// autograd ops (float32 master gradients), the per-scope weight-cast cache,
// nesting, and backward() stepping aside. CPU here; tests/backend runs the
// CUDA side and tests/models the zoo.
#include <gtest/gtest.h>

#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "ops/autocast_policy.h"
#include "ops/dispatch_mode.h"
#include "testing/compare.h"

namespace kiln {
namespace {

constexpr DType kBf16 = DType::BFloat16;
constexpr DType kF32 = DType::Float32;

Tensor randn_of(const Shape& s, uint64_t seed, DType dt = kF32) {
  Generator g(seed);
  return randn(s, {}, &g).to(dt);
}

// Counts the cast ops a scope makes (pushed below autocast, so it sees the
// casts autocast inserts).
struct CastCounter final : DispatchMode {
  int casts = 0;
  const char* mode_name() const override { return "cast_counter"; }
  Tensors handle(OpId id, Tensors& in, const Attrs& a, const NextMode& next) override {
    if (id == OpId::cast) ++casts;
    return next(id, in, a);
  }
};

// ---- the lower-precision list: matrix products run in the autocast dtype ----

TEST(Autocast, LowerPrecisionOpsRunInTheAutocastDtype) {
  Tensor x = randn_of({4, 3, 8, 8}, 1), w = randn_of({5, 3, 3, 3}, 2), b = randn_of({5}, 3);
  Tensor a = randn_of({6, 7}, 4), m = randn_of({7, 2}, 5), lw = randn_of({2, 7}, 6), lb = randn_of({2}, 7);
  for (DType low : {DType::BFloat16, DType::Float16}) {
    autocast ac(low);
    EXPECT_EQ(conv2d(x, w, b).dtype(), low);
    EXPECT_EQ(matmul(a, m).dtype(), low);
    EXPECT_EQ(linear(a, lw, lb).dtype(), low);
    EXPECT_EQ(addmm(randn_of({6, 2}, 8), a, m).dtype(), low);
  }
  // The same kernel on the cast inputs: exactly what autocast computes.
  Tensor want = conv2d(x.to(kBf16), w.to(kBf16), b.to(kBf16));
  autocast ac(kBf16);
  EXPECT_TENSOR_CLOSE(conv2d(x, w, b), want, 0.0, 0.0);
}

TEST(Autocast, LowerPrecisionLeavesFloat64Alone) {
  autocast ac(kBf16);
  Tensor a = randn_of({3, 4}, 1, DType::Float64), b = randn_of({4, 2}, 2, DType::Float64);
  EXPECT_EQ(matmul(a, b).dtype(), DType::Float64);
}

// ---- the float32 list: 16-bit inputs are cast up ----

TEST(Autocast, Float32OpsCastSixteenBitInputsUp) {
  Tensor h = randn_of({4, 10}, 1, kBf16);
  Tensor y = from_vector(std::vector<int64_t>{1, 0, 9, 3}, {4});
  autocast ac(kBf16);
  EXPECT_EQ(softmax(h, 1).dtype(), kF32);
  EXPECT_EQ(log_softmax(h, 1).dtype(), kF32);
  EXPECT_EQ(cross_entropy(h, y).dtype(), kF32);
  EXPECT_EQ(nll_loss(log_softmax(h, 1), y).dtype(), kF32);
  EXPECT_EQ(sum(h).dtype(), kF32);
  EXPECT_EQ(mean(h, {1}).dtype(), kF32);
  EXPECT_EQ(var(h, {1}).dtype(), kF32);
  EXPECT_EQ(exp(h).dtype(), kF32);
  EXPECT_EQ(log(abs(h)).dtype(), kF32);
  EXPECT_EQ(rsqrt(abs(h)).dtype(), kF32);
  EXPECT_EQ(pow(h, 2.0).dtype(), kF32);
  // The value is the float32 op on the bf16 values: no rounding of the output.
  EXPECT_TENSOR_CLOSE(sum(h), sum(h.to(kF32)), 0.0, 0.0);
}

// ---- the promote list: the widest input dtype ----

TEST(Autocast, PromoteOpsRunInTheWidestInputDtype) {
  Tensor h = randn_of({2, 3}, 1, kBf16), f = randn_of({2, 3}, 2);
  autocast ac(kBf16);
  Tensor c = cat({h, f}, 0);
  EXPECT_EQ(c.dtype(), kF32);
  EXPECT_TENSOR_CLOSE(c, cat({h.to(kF32), f}, 0), 0.0, 0.0);
  EXPECT_EQ(stack({f, h}, 0).dtype(), kF32);
  Tensor idx = from_vector(std::vector<int64_t>{1, 0}, {2});
  EXPECT_EQ(index_add(f, 0, idx, h).dtype(), kF32);
  EXPECT_EQ(where(gt(f, 0.0), h, f).dtype(), kF32);
  // All 16-bit: stays 16-bit.
  EXPECT_EQ(cat({h, h}, 1).dtype(), kBf16);
}

// ---- as-is: activations keep their dtype, batch norm takes float32 params ----

TEST(Autocast, OtherOpsRunAsTheyCome) {
  Tensor h = randn_of({4, 3, 6, 6}, 1, kBf16);
  autocast ac(kBf16);
  EXPECT_EQ(relu(h).dtype(), kBf16);
  EXPECT_EQ(max_pool2d(h, {2, 2}).dtype(), kBf16);
  EXPECT_EQ(adaptive_avg_pool2d(h, {2, 2}).dtype(), kBf16);  // an avg_pool2d of 3x3 windows
  // A global average pool decomposes into mean, on the float32 list.
  EXPECT_EQ(adaptive_avg_pool2d(h, {1, 1}).dtype(), kF32);
  EXPECT_EQ(add(h, h).dtype(), kBf16);
  EXPECT_EQ(add(h, randn_of({6}, 2)).dtype(), kF32);  // type promotion, as without autocast
  EXPECT_EQ(mul(h, 0.5).dtype(), kBf16);              // a number does not widen
  Tensor w = ones({3}), b = zeros({3}), rm = zeros({3}), rv = ones({3});
  Tensor y = batch_norm(h, w, b, rm, rv, true, 0.1, 1e-5);
  EXPECT_EQ(y.dtype(), kBf16);
  EXPECT_EQ(rm.dtype(), kF32);
  EXPECT_GT(amax(abs(rm)).item(), 0.0);  // the float32 running stats were updated
}

TEST(Autocast, EveryOpHasAPolicyAndTheListsAreTheDocumentedOnes) {
  EXPECT_EQ(autocast_policy(OpId::conv2d), AutocastPolicy::LowerPrecision);
  EXPECT_EQ(autocast_policy(OpId::linear), AutocastPolicy::LowerPrecision);
  EXPECT_EQ(autocast_policy(OpId::softmax), AutocastPolicy::Float32);
  EXPECT_EQ(autocast_policy(OpId::cross_entropy), AutocastPolicy::Float32);
  EXPECT_EQ(autocast_policy(OpId::cat), AutocastPolicy::Promote);
  EXPECT_EQ(autocast_policy(OpId::batch_norm), AutocastPolicy::AsIs);
  EXPECT_EQ(autocast_policy(OpId::add_), AutocastPolicy::AsIs);  // optimizer updates untouched
  int counts[4] = {};
  for (int i = 0; i < kNumOps; ++i) ++counts[static_cast<int>(autocast_policy(static_cast<OpId>(i)))];
  EXPECT_EQ(counts[0] + counts[1] + counts[2] + counts[3], kNumOps);
  EXPECT_EQ(counts[static_cast<int>(AutocastPolicy::LowerPrecision)], 4);
  EXPECT_STREQ(autocast_policy_name(AutocastPolicy::Float32), "float32");
}

// ---- autograd: casts carry float32 gradients to master weights ----

TEST(Autocast, MasterWeightGradientsAreFloat32AndMatchFloat32Training) {
  Tensor x = randn_of({16, 32}, 1), w = randn_of({8, 32}, 2).mul_(0.2), b = randn_of({8}, 3);
  Tensor y = from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7}, {16});
  auto grads = [&](bool amp) {
    Tensor wl = w.clone().requires_grad_(), bl = b.clone().requires_grad_();
    Tensor loss;
    {
      std::optional<autocast> ac;
      if (amp) ac.emplace(kBf16);
      Tensor logits = linear(relu(x), wl, bl);
      EXPECT_EQ(logits.dtype(), amp ? kBf16 : kF32);
      loss = cross_entropy(logits, y);
    }
    EXPECT_EQ(loss.dtype(), kF32);
    loss.backward();
    return std::make_pair(wl.grad(), bl.grad());
  };
  auto [gw32, gb32] = grads(false);
  auto [gw16, gb16] = grads(true);
  ASSERT_TRUE(gw16.defined() && gb16.defined());
  EXPECT_EQ(gw16.dtype(), kF32);
  EXPECT_EQ(gb16.dtype(), kF32);
  // bfloat16 keeps 8 bits: products and logits are good to about 2^-8
  // relative, so gradients to about 2% of their largest magnitude.
  const double scale_w = amax(abs(gw32)).item(), scale_b = amax(abs(gb32)).item();
  EXPECT_LE(amax(abs(sub(gw16, gw32))).item(), 2e-2 * scale_w);
  EXPECT_LE(amax(abs(sub(gb16, gb32))).item(), 2e-2 * scale_b);
}

TEST(Autocast, BackwardInsideTheScopeRunsInTheForwardsDtypes) {
  Tensor x = randn_of({2, 3, 6, 6}, 1), w0 = randn_of({4, 3, 3, 3}, 2), b0 = randn_of({4}, 3);
  // Casts made by backward() when it runs inside or outside the scope: the
  // same (the forward's cast nodes sending gradients back), because autocast
  // steps aside in backward; were it active, conv2d's bias gradient (a sum,
  // on the float32 list) would cast its bf16 input up.
  auto run = [&](bool backward_inside) {
    Tensor w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
    CastCounter counter;
    Tensor loss;
    {
      autocast ac(kBf16);
      loss = sum(conv2d(x, w, b));
      if (backward_inside) {
        ModeGuard g(counter);
        loss.backward();
      }
    }
    if (!backward_inside) {
      ModeGuard g(counter);
      loss.backward();
    }
    EXPECT_EQ(w.grad().dtype(), kF32);
    EXPECT_EQ(b.grad().dtype(), kF32);
    return std::make_tuple(counter.casts, w.grad(), b.grad());
  };
  auto [casts_in, gw_in, gb_in] = run(true);
  auto [casts_out, gw_out, gb_out] = run(false);
  EXPECT_EQ(casts_in, casts_out);
  EXPECT_TENSOR_CLOSE(gw_in, gw_out, 0.0, 0.0);
  EXPECT_TENSOR_CLOSE(gb_in, gb_out, 0.0, 0.0);
}

// ---- the weight-cast cache ----

TEST(Autocast, ParametersAreCastOncePerScopeUntilTheyChange) {
  Tensor w = randn_of({4, 8}, 1).requires_grad_();
  Tensor x1 = randn_of({2, 8}, 2), x2 = randn_of({2, 8}, 3);
  CastCounter counter;
  ModeGuard g(counter);
  // The casts one call makes.
  auto casts_of = [&](auto&& call) {
    const int before = counter.casts;
    call();
    return counter.casts - before;
  };
  {
    autocast ac(kBf16);
    Tensor y1;
    EXPECT_EQ(casts_of([&] { y1 = linear(x1, w); }), 2);  // x1 and w
    EXPECT_EQ(casts_of([&] { linear(x2, w); }), 1);       // x2; w's cast reused
    {
      NoGradGuard ng;
      w.mul_(0.5);  // as an optimizer step: a new version, so a new cast
    }
    Tensor y3;
    EXPECT_EQ(casts_of([&] { y3 = linear(x1, w); }), 2);
    EXPECT_TENSOR_CLOSE(y3, mul(y1, 0.5), 1e-2, 1e-2);
    sum(y3).backward();  // consumes the cast's graph: the next use recasts
    Tensor y4;
    EXPECT_EQ(casts_of([&] { y4 = linear(x1, w); }), 2);
    w.set_grad(Tensor());
    sum(y4).backward();  // and backward through the fresh cast works
    EXPECT_EQ(w.grad().dtype(), kF32);
    EXPECT_GT(amax(abs(w.grad())).item(), 0.0);
  }
  {
    autocast ac(kBf16, true, /*cache=*/false);
    EXPECT_EQ(casts_of([&] { linear(x1, w); }), 2);
    EXPECT_EQ(casts_of([&] { linear(x2, w); }), 2);
  }
}

// ---- scopes ----

TEST(Autocast, ScopesNestAndADisabledScopeRunsInFullPrecision) {
  Tensor a = randn_of({3, 4}, 1), b = randn_of({4, 5}, 2);
  EXPECT_EQ(autocast_dtype(), std::nullopt);
  {
    autocast outer(kBf16);
    EXPECT_EQ(autocast_dtype(), kBf16);
    {
      autocast off(kBf16, /*enabled=*/false);
      EXPECT_EQ(autocast_dtype(), std::nullopt);
      EXPECT_EQ(matmul(a, b).dtype(), kF32);
    }
    {
      autocast inner(DType::Float16);
      EXPECT_EQ(matmul(a, b).dtype(), DType::Float16);
    }
    EXPECT_EQ(matmul(a, b).dtype(), kBf16);
  }
  EXPECT_EQ(matmul(a, b).dtype(), kF32);
  EXPECT_EQ(autocast_dtype(), std::nullopt);
}

TEST(Autocast, MetaTensorsGetThePolicysDtypes) {
  autocast ac(kBf16);
  Tensor x = Tensor::meta({2, 3, 8, 8}, kF32, Device::cpu()), w = Tensor::meta({4, 3, 3, 3}, kF32, Device::cpu());
  Tensor y = conv2d(x, w);
  EXPECT_TRUE(y.is_meta());
  EXPECT_EQ(y.dtype(), kBf16);
  EXPECT_EQ(softmax(y, 1).dtype(), kF32);
}

// ---- with kiln::compile ----

TEST(Autocast, AScopeInsideACompiledFunctionIsCaptured) {
  Tensor x = randn_of({2, 3, 8, 8}, 1), w = randn_of({4, 3, 3, 3}, 2);
  auto f = [&](const Tensor& a) {
    autocast ac(kBf16);
    Tensor y = conv2d(a, w);
    return std::make_pair(y, sum(softmax(y, 1), {1}));
  };
  auto compiled = compile([&](const Tensor& a) { return f(a).second; });
  auto [y_eager, want] = f(x);
  EXPECT_EQ(y_eager.dtype(), kBf16);
  // The same casts ran, except where the convolution runs in float32 anyway
  // (bfloat16 measured slower for it): softmax then reads its float32 result
  // unrounded (the float32_regions pass), and the sums of its rows differ
  // from eager's in float32's last bits.
  for (int call = 0; call < 2; ++call) {  // the trace, then a replay
    Tensor got = compiled(x);
    EXPECT_EQ(got.dtype(), kF32);
    EXPECT_TENSOR_CLOSE(got, want, 0.0, 1e-6);
  }
}

TEST(Autocast, ACompiledFunctionCalledInsideAScopeIsAClearError) {
  Tensor x = randn_of({2, 3, 8, 8}, 1), w = randn_of({4, 3, 3, 3}, 2);
  auto compiled = compile([&](const Tensor& a) { return conv2d(a, w); });
  try {
    autocast ac(kBf16);
    compiled(x);
    FAIL() << "expected a kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Put the scope inside the compiled function"), std::string::npos) << e.what();
  }
  // Nothing is left behind: the compiled function and eager ops still run.
  EXPECT_TRUE(active_modes().empty());
  EXPECT_TENSOR_CLOSE(compiled(x), conv2d(x, w), 1e-6, 1e-6);
}

TEST(Autocast, BadDtypesAreClearErrors) {
  try {
    autocast ac(DType::Float32);
    FAIL() << "autocast(Float32) should throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bfloat16 or float16"), std::string::npos) << e.what();
  }
  EXPECT_EQ(parse_autocast_dtype("bf16"), kBf16);
  EXPECT_EQ(parse_autocast_dtype("fp16"), DType::Float16);
  EXPECT_THROW(parse_autocast_dtype("fp8"), Error);
}

}  // namespace
}  // namespace kiln
