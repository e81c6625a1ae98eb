// optim::GradScaler (include/kiln/grad_scaler.h): torch.amp.GradScaler's
// rules with the scale kept on the host.
#include "kiln/grad_scaler.h"

#include <cmath>
#include <vector>

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
  // The largest |g| of each gradient, then the largest of those: inf or NaN
  // anywhere makes it inf or NaN (amax lets NaN win), and a maximum never
  // overflows as a sum could. One read back per device.
  std::vector<Tensor> maxima;
  for (const Tensor& p : opt.params()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    g.mul_(inv);
    Tensor m = amax(abs(g));
    if (!maxima.empty() && m.device() != maxima[0].device()) m = m.to(maxima[0].device());
    maxima.push_back(m);
  }
  const bool any = !maxima.empty();
  for (const Tensor& m : maxima) {
    if (m.dtype() == maxima[0].dtype()) continue;
    for (Tensor& x : maxima) x = x.to(DType::Float64);  // mixed dtypes: one that holds them all
    break;
  }
  Tensor total = any ? amax(stack(maxima)) : Tensor();
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
