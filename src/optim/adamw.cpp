// torch.optim.AdamW (_single_tensor_adam with decoupled weight decay), step
// counted per parameter as torch does:
//   p *= 1 - lr*wd
//   m = beta1*m + (1-beta1)*g;  v = beta2*v + (1-beta2)*g*g
//   p -= lr/(1-beta1^t) * m / (sqrt(v)/sqrt(1-beta2^t) + eps)
#include <cmath>

#include "kiln/profile.h"
#include "optim/state.h"

namespace kiln::optim {

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& o) : Optimizer(std::move(params), o.lr()), options(o) {
  KILN_CHECK(o.eps() >= 0, "AdamW: eps must be >= 0, got ", o.eps());
  KILN_CHECK(o.beta1() >= 0 && o.beta1() < 1 && o.beta2() >= 0 && o.beta2() < 1,
             "AdamW: betas must be in [0, 1), got (", o.beta1(), ", ", o.beta2(), ")");
  KILN_CHECK(o.weight_decay() >= 0, "AdamW: weight_decay must be >= 0, got ", o.weight_decay());
  exp_avg_.resize(params_.size());
  exp_avg_sq_.resize(params_.size());
  param_steps_.assign(params_.size(), 0);
  zero_missing_state();
}

// The moments start as zeros, made here rather than in the first step (torch
// makes them lazily, with the same values): every step then runs the same
// ops, so a compiled train step is one graph from the first call on.
void AdamW::zero_missing_state() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (exp_avg_[i].defined() || !params_[i].requires_grad()) continue;  // frozen: no moments
    exp_avg_[i] = zeros_like(params_[i]);
    exp_avg_sq_[i] = zeros_like(params_[i]);
  }
}

void AdamW::reindex_state(const std::vector<int64_t>& from) {
  std::vector<Tensor> m(params_.size()), v(params_.size());
  std::vector<int64_t> steps(params_.size(), 0);
  for (size_t i = 0; i < params_.size(); ++i)
    if (from[i] >= 0 && params_[i].requires_grad()) {
      auto j = static_cast<size_t>(from[i]);
      m[i] = exp_avg_[j], v[i] = exp_avg_sq_[j], steps[i] = param_steps_[j];
    }
  exp_avg_ = std::move(m);
  exp_avg_sq_ = std::move(v);
  param_steps_ = std::move(steps);
  zero_missing_state();
}

int64_t AdamW::num_state_tensors() const {
  int64_t n = 0;
  for (size_t i = 0; i < exp_avg_.size(); ++i) n += exp_avg_[i].defined() + exp_avg_sq_[i].defined();
  return n;
}

void AdamW::step() {
  ProfileRange range("optimizer.step");
  NoGradGuard no_grad;
  const double lr = lr_, b1 = options.beta1(), b2 = options.beta2();
  ++step_;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor g = grad_of(i, "AdamW");
    if (!g.defined()) continue;
    if (!exp_avg_[i].defined()) {  // made without state (frozen then), trained now
      exp_avg_[i] = zeros_like(p);
      exp_avg_sq_[i] = zeros_like(p);
    }
    Tensor& m = exp_avg_[i];
    Tensor& v = exp_avg_sq_[i];
    const int64_t t = ++param_steps_[i];
    if (options.weight_decay() != 0) mul_(p, 1.0 - lr * options.weight_decay());
    lerp_(m, g, 1.0 - b1);
    mul_(v, b2);
    addcmul_(v, g, g, 1.0 - b2);
    const double bc1 = 1.0 - std::pow(b1, static_cast<double>(t));
    const double bc2_sqrt = std::sqrt(1.0 - std::pow(b2, static_cast<double>(t)));
    Tensor denom = sqrt(v);
    mul_(denom, 1.0 / bc2_sqrt);
    add_(denom, full({}, options.eps(), dtype(p.dtype())));
    addcdiv_(p, m, denom, -lr / bc1);
  }
}

nn::TensorDict AdamW::state_dict() const {
  nn::TensorDict d;
  d.emplace_back("lr", detail::scalar_state(lr_));
  d.emplace_back("beta1", detail::scalar_state(options.beta1()));
  d.emplace_back("beta2", detail::scalar_state(options.beta2()));
  d.emplace_back("eps", detail::scalar_state(options.eps()));
  d.emplace_back("weight_decay", detail::scalar_state(options.weight_decay()));
  d.emplace_back("step", detail::int_state(step_));
  for (size_t i = 0; i < params_.size(); ++i) {
    if (param_steps_[i] == 0) continue;  // zeros not yet used: torch has no state for it
    std::string s = std::to_string(i);
    d.emplace_back("step." + s, detail::int_state(param_steps_[i]));
    d.emplace_back("exp_avg." + s, exp_avg_[i]);
    d.emplace_back("exp_avg_sq." + s, exp_avg_sq_[i]);
  }
  return d;
}

void AdamW::load_state_dict(const nn::TensorDict& state) {
  detail::ParsedState s = detail::parse_state(
      {"AdamW", {"lr", "beta1", "beta2", "eps", "weight_decay", "step"}, {"exp_avg", "exp_avg_sq"}, {"step"}}, state,
      params_);
  // Each parameter's state is complete or absent.
  std::vector<std::string> problems;
  for (size_t i = 0; i < params_.size(); ++i) {
    int have = int(s.buffers["exp_avg"].count(i)) + int(s.buffers["exp_avg_sq"].count(i)) + int(s.counters["step"].count(i));
    if (have != 0 && have != 3)
      problems.push_back("parameter " + std::to_string(i) + " needs all of exp_avg." + std::to_string(i) +
                         ", exp_avg_sq." + std::to_string(i) + " and step." + std::to_string(i));
    else if (have == 3 && s.counters["step"][i] < 1)
      problems.push_back("step." + std::to_string(i) + " must be >= 1");
  }
  AdamWOptions o = options;
  if (s.hyper.count("lr")) o.lr(s.hyper["lr"]);
  if (s.hyper.count("beta1")) o.beta1(s.hyper["beta1"]);
  if (s.hyper.count("beta2")) o.beta2(s.hyper["beta2"]);
  if (s.hyper.count("eps")) o.eps(s.hyper["eps"]);
  if (s.hyper.count("weight_decay")) o.weight_decay(s.hyper["weight_decay"]);
  if (!(o.lr() >= 0 && o.eps() >= 0 && o.beta1() >= 0 && o.beta1() < 1 && o.beta2() >= 0 && o.beta2() < 1 &&
        o.weight_decay() >= 0))
    problems.push_back("invalid hyper-parameters");
  if (!problems.empty()) {
    std::string msg = "AdamW.load_state_dict: the state is inconsistent:";
    for (const auto& p : problems) msg += "\n  " + p;
    KILN_FAIL(msg);
  }
  options = o;
  lr_ = o.lr();
  step_ = s.hyper.count("step") ? static_cast<int64_t>(s.hyper["step"]) : 0;
  exp_avg_.assign(params_.size(), Tensor());
  exp_avg_sq_.assign(params_.size(), Tensor());
  param_steps_.assign(params_.size(), 0);
  for (auto& [i, t] : s.buffers["exp_avg"]) exp_avg_[i] = t;
  for (auto& [i, t] : s.buffers["exp_avg_sq"]) exp_avg_sq_[i] = t;
  for (auto& [i, n] : s.counters["step"]) param_steps_[i] = n;
  zero_missing_state();
}

}  // namespace kiln::optim
