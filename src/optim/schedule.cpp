// Learning-rate schedules as closed forms of the step counter.
#include <cmath>
#include <numbers>

#include "kiln/optim.h"

namespace kiln::optim {

double StepLR::lr_at(int64_t step) const {
  KILN_CHECK(size_ > 0, "StepLR: step_size must be positive, got ", size_);
  KILN_CHECK(step >= 0, "StepLR: step must be >= 0, got ", step);
  return base_ * std::pow(gamma_, static_cast<double>(step / size_));
}

double CosineLR::lr_at(int64_t step) const {
  KILN_CHECK(total_ > 0 && warmup_ >= 0 && warmup_ <= total_, "CosineLR: need 0 <= warmup (", warmup_,
             ") <= total_steps (", total_, ") and total_steps > 0");
  KILN_CHECK(step >= 0, "CosineLR: step must be >= 0, got ", step);
  if (step < warmup_) return base_ * static_cast<double>(step) / static_cast<double>(warmup_);
  if (total_ == warmup_) return min_;
  double t = std::min(1.0, static_cast<double>(step - warmup_) / static_cast<double>(total_ - warmup_));
  return min_ + (base_ - min_) * (1.0 + std::cos(std::numbers::pi * t)) / 2.0;
}

PiecewiseLinearLR::PiecewiseLinearLR(std::vector<int64_t> steps, std::vector<double> lrs)
    : steps_(std::move(steps)), lrs_(std::move(lrs)) {
  KILN_CHECK(!steps_.empty() && steps_.size() == lrs_.size(), "PiecewiseLinearLR: needs as many steps as lrs (got ",
             steps_.size(), " and ", lrs_.size(), "), at least one");
  for (size_t i = 1; i < steps_.size(); ++i)
    KILN_CHECK(steps_[i] > steps_[i - 1], "PiecewiseLinearLR: steps must increase strictly, got ", steps_[i - 1],
               " then ", steps_[i]);
}

double PiecewiseLinearLR::lr_at(int64_t step) const {
  // np.interp: flat before the first knot and after the last.
  if (step <= steps_.front()) return lrs_.front();
  if (step >= steps_.back()) return lrs_.back();
  size_t i = 1;
  while (steps_[i] < step) ++i;
  double f = static_cast<double>(step - steps_[i - 1]) / static_cast<double>(steps_[i] - steps_[i - 1]);
  return lrs_[i - 1] + f * (lrs_[i] - lrs_[i - 1]);
}

}  // namespace kiln::optim
