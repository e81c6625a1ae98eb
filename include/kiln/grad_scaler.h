// Loss scaling for float16 mixed precision, as torch.amp.GradScaler.
//
// float16 holds magnitudes down to about 6e-8: small gradients of a float16
// forward (docs/autocast.md) flush to zero. Multiplying the loss by a large
// scale before backward() lifts them into range; the scaler divides the
// float32 master weights' gradients by it again before the optimizer steps,
// and skips the step when any gradient came out inf or NaN (the scale was too
// large), halving the scale. After `growth_interval` good steps in a row it
// doubles the scale, so it settles just under overflow.
//
//   optim::GradScaler scaler;                 // torch's defaults
//   {
//     kiln::autocast ac(DType::Float16);
//     loss = cross_entropy(model->forward(x), y);
//   }
//   opt.zero_grad();
//   scaler.scale(loss).backward();
//   scaler.step(opt);                         // unscales, skips on inf/NaN
//   scaler.update();
//
// bfloat16 has float32's range and needs no scaler; a disabled scaler
// (enabled(false)) passes everything through, so one loop serves both.
// Each step reads one number back from the device (whether any gradient
// overflowed), which the step's decision needs.
#pragma once
#include <cstdint>

#include "kiln/arg.h"
#include "kiln/optim.h"

namespace kiln::optim {

struct GradScalerOptions {
  KILN_ARG(double, init_scale) = 65536.0;
  KILN_ARG(double, growth_factor) = 2.0;
  KILN_ARG(double, backoff_factor) = 0.5;
  KILN_ARG(int64_t, growth_interval) = 2000;
  KILN_ARG(bool, enabled) = true;
};

class GradScaler {
 public:
  explicit GradScaler(const GradScalerOptions& o = {});

  // loss * scale (loss itself when disabled).
  Tensor scale(const Tensor& loss) const;
  // Divides every gradient of opt's parameters by the scale, in place, and
  // records whether any is inf or NaN. At most once per step (step() calls it
  // when you have not, e.g. before clipping gradients).
  void unscale_(Optimizer& opt);
  // Unscales if needed, then runs opt.step() unless a gradient overflowed.
  // Returns whether the optimizer stepped.
  bool step(Optimizer& opt);
  // Backs off (after an overflow) or grows the scale; call once per step,
  // after step().
  void update();

  double get_scale() const { return scale_; }
  bool is_enabled() const { return options_.enabled(); }
  // Whether the last unscale_ found an inf or NaN gradient.
  bool found_inf() const { return found_inf_; }
  int64_t skipped_steps() const { return skipped_; }

 private:
  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;  // good steps since the scale last changed
  int64_t skipped_ = 0;
  bool unscaled_ = false;       // unscale_ ran this step
  bool found_inf_ = false;
};

}  // namespace kiln::optim
