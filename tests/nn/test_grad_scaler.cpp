// optim::GradScaler: scaled losses give the unscaled step exactly (power-of-2
// scales), an inf or NaN gradient skips the step (parameters untouched) and
// halves the scale, good steps grow it, and float16 autocast training with
// it follows float32 training.
#include <gtest/gtest.h>

#include <limits>

#include "kiln/kiln.h"
#include "testing/compare.h"

namespace kiln {
namespace {

struct Problem {
  Tensor w, b, x;
  Tensor y;
  Problem() {
    Generator g(5);
    w = randn({3, 6}, {}, &g).requires_grad_();
    b = randn({3}, {}, &g).requires_grad_();
    x = randn({10, 6}, {}, &g);
    y = from_vector(std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0}, {10});
  }
  Tensor loss() const { return cross_entropy(linear(x, w, b), y); }
};

TEST(GradScaler, ScaledStepEqualsThePlainStep) {
  Problem plain, scaled;
  optim::SGD opt_plain({plain.w, plain.b}, optim::SGDOptions(0.1).momentum(0.9));
  optim::SGD opt_scaled({scaled.w, scaled.b}, optim::SGDOptions(0.1).momentum(0.9));
  optim::GradScaler scaler;
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  for (int step = 0; step < 3; ++step) {
    opt_plain.zero_grad();
    plain.loss().backward();
    opt_plain.step();
    opt_scaled.zero_grad();
    Tensor l = scaler.scale(scaled.loss());
    l.backward();
    EXPECT_TRUE(scaler.step(opt_scaled));
    scaler.update();
  }
  // Multiplying by 2^16 and dividing again is exact in float32.
  EXPECT_TENSOR_CLOSE(scaled.w, plain.w, 1e-6, 1e-7);
  EXPECT_TENSOR_CLOSE(scaled.b, plain.b, 1e-6, 1e-7);
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.skipped_steps(), 0);
}

TEST(GradScaler, AnInfOrNanGradientSkipsTheStepAndHalvesTheScale) {
  for (double bad : {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    Problem p;
    optim::SGD opt({p.w, p.b}, optim::SGDOptions(0.1).momentum(0.9));
    optim::GradScaler scaler;
    Tensor w_before = p.w.clone(), b_before = p.b.clone();
    opt.zero_grad();
    scaler.scale(p.loss()).backward();
    {
      NoGradGuard ng;
      Tensor gb = p.b.grad();
      gb.slice(0, 1, 2).fill_(bad);  // one overflowed element
    }
    EXPECT_FALSE(scaler.step(opt));
    EXPECT_TRUE(scaler.found_inf());
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), 32768.0);
    EXPECT_EQ(scaler.skipped_steps(), 1);
    EXPECT_TENSOR_CLOSE(p.w, w_before, 0.0, 0.0);  // parameters untouched
    EXPECT_TENSOR_CLOSE(p.b, b_before, 0.0, 0.0);
    // The next, finite step runs.
    opt.zero_grad();
    scaler.scale(p.loss()).backward();
    EXPECT_TRUE(scaler.step(opt));
    scaler.update();
    EXPECT_GT(amax(abs(sub(p.w, w_before))).item(), 0.0);
  }
}

TEST(GradScaler, GrowsAfterTheGrowthIntervalOfGoodSteps) {
  Problem p;
  optim::SGD opt({p.w, p.b}, optim::SGDOptions(0.01));
  optim::GradScaler scaler(optim::GradScalerOptions().init_scale(8.0).growth_interval(3));
  std::vector<double> scales;
  for (int step = 0; step < 7; ++step) {
    opt.zero_grad();
    scaler.scale(p.loss()).backward();
    scaler.step(opt);
    scaler.update();
    scales.push_back(scaler.get_scale());
  }
  EXPECT_EQ(scales, (std::vector<double>{8, 8, 16, 16, 16, 32, 32}));
}

TEST(GradScaler, DisabledPassesThrough) {
  Problem p;
  optim::SGD opt({p.w, p.b}, optim::SGDOptions(0.1));
  optim::GradScaler scaler(optim::GradScalerOptions().enabled(false));
  Tensor l = p.loss();
  EXPECT_TRUE(scaler.scale(l).impl() == l.impl());
  l.backward();
  Tensor w_before = p.w.clone();
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  EXPECT_GT(amax(abs(sub(p.w, w_before))).item(), 0.0);
}

TEST(GradScaler, MisuseIsAClearError) {
  EXPECT_THROW(optim::GradScaler(optim::GradScalerOptions().backoff_factor(1.5)), Error);
  EXPECT_THROW(optim::GradScaler(optim::GradScalerOptions().init_scale(0)), Error);
  Problem p;
  optim::SGD opt({p.w, p.b}, optim::SGDOptions(0.1));
  optim::GradScaler scaler;
  EXPECT_THROW(scaler.update(), Error);  // update() before step()
  scaler.scale(p.loss()).backward();
  scaler.unscale_(opt);
  EXPECT_THROW(scaler.unscale_(opt), Error);  // twice in one step
}

// float16 autocast with loss scaling: a few SGD steps follow float32's.
TEST(GradScaler, Float16AutocastTrainingFollowsFloat32) {
  Problem p16, p32;
  optim::SGD opt16({p16.w, p16.b}, optim::SGDOptions(0.1));
  optim::SGD opt32({p32.w, p32.b}, optim::SGDOptions(0.1));
  optim::GradScaler scaler;
  for (int step = 0; step < 5; ++step) {
    Tensor l16;
    {
      autocast ac(DType::Float16);
      l16 = p16.loss();
    }
    EXPECT_EQ(l16.dtype(), DType::Float32);
    opt16.zero_grad();
    scaler.scale(l16).backward();
    EXPECT_EQ(p16.w.grad().dtype(), DType::Float32);
    scaler.step(opt16);
    scaler.update();
    opt32.zero_grad();
    p32.loss().backward();
    opt32.step();
  }
  EXPECT_EQ(scaler.skipped_steps(), 0);
  // float16 keeps 11 bits: weights after 5 steps within ~1e-2 of float32's.
  EXPECT_TENSOR_CLOSE(p16.w, p32.w, 1e-2, 1e-2);
  EXPECT_TENSOR_CLOSE(p16.b, p32.b, 1e-2, 1e-2);
}

}  // namespace
}  // namespace kiln
