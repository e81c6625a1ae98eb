// batch_norm and batch_norm_backward against PyTorch goldens
// (tools/goldens/gen_nn.py: torch's native_batch_norm, training and eval,
// with running statistic updates) and finite-difference gradients in float64.
#include "ops/op_def.h"
#include "testing/golden.h"
#include "testing/gradcheck.h"

namespace kiln {
namespace {

Tensor gold(const std::string& c, const char* t) { return testing::goldens("nn")[c + "." + t]; }

struct BnCase {
  const char* name;
  bool training, affine, stats;
};
const std::vector<BnCase>& cases() {
  static const std::vector<BnCase> c = {
      {"bn_train", true, true, true},       {"bn_eval", false, true, true},
      {"bn_train_2d", true, true, true},    {"bn_eval_2d", false, true, true},
      {"bn_train_plain", true, false, false}, {"bn_train_big", true, true, true},
  };
  return c;
}

constexpr double kRtol = 1e-4, kAtol = 1e-5;

TEST(BatchNorm, GoldenForwardAndRunningStats) {
  for (const BnCase& c : cases()) {
    SCOPED_TRACE(c.name);
    Tensor w = c.affine ? gold(c.name, "w") : Tensor(), b = c.affine ? gold(c.name, "b") : Tensor();
    Tensor rm = c.stats ? gold(c.name, "rm").clone() : Tensor(), rv = c.stats ? gold(c.name, "rv").clone() : Tensor();
    uint64_t v0 = c.stats ? rm.version() : 0;
    Tensor y = batch_norm(gold(c.name, "x"), w, b, rm, rv, c.training, 0.1, 1e-5);
    EXPECT_TENSOR_CLOSE(y, gold(c.name, "y"), kRtol, kAtol);
    if (c.stats) {
      EXPECT_TENSOR_CLOSE(rm, gold(c.name, "rm_after"), kRtol, kAtol);
      EXPECT_TENSOR_CLOSE(rv, gold(c.name, "rv_after"), kRtol, kAtol);
      EXPECT_EQ(rm.version(), v0 + (c.training ? 1 : 0));
    }
  }
}

TEST(BatchNorm, GoldenSavedStatsAndBackwardOp) {
  for (const BnCase& c : cases()) {
    if (!c.training) continue;
    SCOPED_TRACE(c.name);
    Tensor x = gold(c.name, "x");
    Tensor w = c.affine ? gold(c.name, "w") : Tensor();
    Tensors out = dispatch(OpId::batch_norm, {x, w, Tensor(), Tensor(), Tensor()},
                           Attrs().set("training", true).set("momentum", 0.1).set("eps", 1e-5));
    EXPECT_TENSOR_CLOSE(out[1], gold(c.name, "save_mean"), kRtol, kAtol);
    EXPECT_TENSOR_CLOSE(out[2], gold(c.name, "save_invstd"), kRtol, kAtol);
    auto [gx, gw, gb] = batch_norm_backward(gold(c.name, "gy"), x, w, out[1], out[2], true, 1e-5);
    EXPECT_TENSOR_CLOSE(gx, gold(c.name, "gx"), kRtol, kAtol);
    if (c.affine) {
      EXPECT_TENSOR_CLOSE(gw, gold(c.name, "gw"), kRtol, 1e-4);
      EXPECT_TENSOR_CLOSE(gb, gold(c.name, "gb"), kRtol, 1e-4);
    }
  }
}

TEST(BatchNorm, GoldenAutograd) {
  for (const BnCase& c : cases()) {
    SCOPED_TRACE(c.name);
    Tensor x = gold(c.name, "x").detach().requires_grad_();
    Tensor w = c.affine ? gold(c.name, "w").detach().requires_grad_() : Tensor();
    Tensor b = c.affine ? gold(c.name, "b").detach().requires_grad_() : Tensor();
    Tensor rm = c.stats ? gold(c.name, "rm").clone() : Tensor(), rv = c.stats ? gold(c.name, "rv").clone() : Tensor();
    Tensor y = batch_norm(x, w, b, rm, rv, c.training, 0.1, 1e-5);
    y.backward(gold(c.name, "gy"));
    EXPECT_TENSOR_CLOSE(x.grad(), gold(c.name, "gx"), kRtol, kAtol);
    if (c.affine) {
      EXPECT_TENSOR_CLOSE(w.grad(), gold(c.name, "gw"), kRtol, 1e-4);
      EXPECT_TENSOR_CLOSE(b.grad(), gold(c.name, "gb"), kRtol, 1e-4);
    }
  }
}

Tensor rnd64(const Shape& s, uint64_t seed, double scale = 1.0, double shift = 0.0) {
  Generator gen(seed);
  Tensor t = randn(s, dtype(DType::Float64), &gen);
  return add(mul(t, scale), shift).detach().requires_grad_();
}

TEST(BatchNorm, GradcheckFloat64) {
  for (bool training : {true, false}) {
    for (const Shape& s : {Shape{3, 2, 3, 3}, Shape{6, 4}}) {
      SCOPED_TRACE(shape_str(s) + (training ? " training" : " eval"));
      int64_t C = s[1];
      Tensor x = rnd64(s, 1, 2.0, 0.5), w = rnd64({C}, 2, 0.3, 1.0), b = rnd64({C}, 3);
      Tensor rm, rv;
      {
        NoGradGuard ng;
        rm = mul(rnd64({C}, 4).detach(), 0.1);
        rv = add(abs(rnd64({C}, 5).detach()), 0.5);
      }
      auto f = [&](const std::vector<Tensor>& v) {
        // clones: each evaluation starts from the same running stats
        return batch_norm(v[0], v[1], v[2], rm.clone(), rv.clone(), training, 0.1, 1e-5);
      };
      EXPECT_GRADCHECK(f, (std::vector<Tensor>{x, w, b}));
      auto fplain = [&](const std::vector<Tensor>& v) {
        return batch_norm(v[0], Tensor(), Tensor(), training ? Tensor() : rm, training ? Tensor() : rv, training);
      };
      EXPECT_GRADCHECK(fplain, (std::vector<Tensor>{x}));
    }
  }
}

TEST(BatchNorm, ErrorsAreClear) {
  Tensor x = zeros({4, 3, 2, 2});
  EXPECT_THROW(batch_norm(x, zeros({4}), Tensor(), Tensor(), Tensor(), true), Error);  // weight size
  EXPECT_THROW(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false), Error);   // eval without stats
  EXPECT_THROW(batch_norm(zeros({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true), Error);  // one value
  EXPECT_THROW(batch_norm(zeros({4}), Tensor(), Tensor(), Tensor(), Tensor(), true), Error);     // 1-D
  EXPECT_THROW(batch_norm(x, Tensor(), Tensor(), zeros({3}), Tensor(), true), Error);            // one stat
  try {
    batch_norm(x, zeros({4}), Tensor(), Tensor(), Tensor(), true);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("batch_norm"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln
