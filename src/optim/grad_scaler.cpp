// optim::GradScaler (include/kiln/grad_scaler.h): torch.amp.GradScaler's
// rules with the scale kept on the host.
#include "kiln/grad_scaler.h"

#include <cmath>

#include "kiln/ops.h"

namespace kiln::optim {

GradScaler::GradScaler(const GradScalerOptions& o) : options_(o), scale_(o.init_scale()) {
  KILN_CHECK(o.init_scale() > 0 && std::isfinite(o.init_scale()), "GradScaler: init_scale must be positive and "
             "finite, got ", o.init_scale());
  KILN_CHECK(o.growth_factor() > 1.0, "GradScaler: growth_factor must be > 1, got ", o.growth_factor());
  KILN_CHECK(o.backoff_factor() > 0.0 && o.backoff_factor() < 1.0, "GradScaler: backoff_factor must be in (0, 1), "
             "got ", o.backoff_factor());
  KILN_CHECK(o.growth_interval() > 0, "GradScaler: growth_interval must be positive, got ", o.growth_interval());
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!options_.enabled()) return loss;
  KILN_CHECK(loss.defined() && is_floating(loss.dtype()), "GradScaler::scale: the loss must be a floating tensor");
  return mul(loss, scale_);
}

void GradScaler::unscale_(Optimizer& opt) {
  if (!options_.enabled()) return;
  KILN_CHECK(!unscaled_, "GradScaler::unscale_ was already called since the last update(); call it at most once "
             "per step, before step()");
  NoGradGuard no_grad;
  const double inv = 1.0 / scale_;
  // The largest |g| of each gradient, summed in float64 on its device: inf or
  // NaN anywhere makes the sum inf or NaN, and float32 maxima never overflow
  // a float64 sum. One read back per device.
  Tensor total;
  bool any = false;
  for (const Tensor& p : opt.params()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    g.mul_(inv);
    Tensor m = amax(abs(g)).to(DType::Float64);
    if (any && m.device() != total.device()) m = m.to(total.device());
    total = any ? add(total, m) : m;
    any = true;
  }
  found_inf_ = any && !std::isfinite(total.item());
  unscaled_ = true;
}

bool GradScaler::step(Optimizer& opt) {
  if (!options_.enabled()) {
    opt.step();
    return true;
  }
  if (!unscaled_) unscale_(opt);
  if (found_inf_) {
    ++skipped_;
    return false;
  }
  opt.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled()) return;
  KILN_CHECK(unscaled_, "GradScaler::update: no step() (or unscale_) since the last update(); call "
             "scaler.step(optimizer) before scaler.update()");
  if (found_inf_) {
    scale_ *= options_.backoff_factor();
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == options_.growth_interval()) {
    scale_ *= options_.growth_factor();
    growth_tracker_ = 0;
  }
  unscaled_ = false;
}

}  // namespace kiln::optim
