// Optimizers, learning-rate schedules and an EMA of weights, as in torch.optim.
// Updates run in place under NoGradGuard on the parameters' own tensors.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kiln/nn.h"

namespace kiln::optim {

class Optimizer {
 public:
  Optimizer(std::vector<Tensor> params, double lr);
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  // Sets every parameter's grad to undefined (set_to_none).
  void zero_grad();
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  const std::vector<Tensor>& params() const { return params_; }
  // Replaces the parameter list (after Layer Fusion froze or tied some):
  // a parameter in both lists keeps its state, one that left loses it, and
  // state is made only for parameters that require grad.
  void set_params(std::vector<Tensor> params);
  // Parameters that hold optimizer state (momentum buffers, moments).
  virtual int64_t num_state_tensors() const = 0;
  // Per-parameter state ("momentum_buffer.3", "exp_avg.0", "step", ...) and
  // hyper-parameters, for checkpoints; load checks names and shapes.
  virtual nn::TensorDict state_dict() const = 0;
  virtual void load_state_dict(const nn::TensorDict& state) = 0;

 protected:
  // Parameter i's gradient (undefined: skip it this step), checked against
  // the parameter's shape; `opt` names the optimizer in the error.
  Tensor grad_of(size_t i, const char* opt) const;

  // Moves each parameter's state to its new index (from[i]: parameter i's
  // index in the old list, or -1), after params_ changed.
  virtual void reindex_state(const std::vector<int64_t>& from) = 0;

  std::vector<Tensor> params_;
  double lr_;
};

// Builder-style options, as nn's and libtorch's:
//   optim::SGD opt(params, optim::SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(5e-4));
struct SGDOptions {
  SGDOptions(double lr = 0.01) : lr_(lr) {}  // NOLINT: SGDOptions(0.1) reads well
  KILN_ARG(double, lr);
  KILN_ARG(double, momentum) = 0.0;
  KILN_ARG(double, dampening) = 0.0;
  KILN_ARG(double, weight_decay) = 0.0;
  KILN_ARG(bool, nesterov) = false;
  // With momentum, the float32 parameters on a CUDA device step in one launch
  // per 48 parameters (torch's foreach SGD), same arithmetic and roundings as
  // the six in-place ops per parameter that false (and the CPU) runs.
  KILN_ARG(bool, foreach) = true;
};

// torch.optim.SGD: d = g + wd*p; b = momentum*b + (1-dampening)*d (b = d at the
// first step); d = nesterov ? d + momentum*b : b; p -= lr*d.
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, const SGDOptions& o);
  void step() override;
  nn::TensorDict state_dict() const override;
  void load_state_dict(const nn::TensorDict& state) override;
  int64_t num_state_tensors() const override;
  SGDOptions options;

 private:
  bool steps_in_foreach(size_t i, const Tensor& g) const;
  void reindex_state(const std::vector<int64_t>& from) override;
  void zero_missing_buffers();
  std::vector<Tensor> momentum_buffers_;
  // Whether a parameter's buffer holds a step's momentum (a buffer made as
  // zeros in advance does not yet; state_dict leaves it out, as torch does).
  std::vector<bool> buffer_used_;
};

//   optim::AdamW opt(params, optim::AdamWOptions(3e-4).betas(0.9, 0.95).weight_decay(0.1));
struct AdamWOptions {
  AdamWOptions(double lr = 1e-3) : lr_(lr) {}  // NOLINT: AdamWOptions(1e-3) reads well
  KILN_ARG(double, lr);
  KILN_ARG(double, beta1) = 0.9;
  KILN_ARG(double, beta2) = 0.999;
  KILN_ARG(double, eps) = 1e-8;
  KILN_ARG(double, weight_decay) = 1e-2;
  auto& betas(double b1, double b2) { beta1_ = b1; beta2_ = b2; return *this; }
};

// torch.optim.AdamW (decoupled weight decay, bias-corrected moments).
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Tensor> params, const AdamWOptions& o);
  void step() override;
  nn::TensorDict state_dict() const override;
  void load_state_dict(const nn::TensorDict& state) override;
  int64_t num_state_tensors() const override;
  AdamWOptions options;

 private:
  void reindex_state(const std::vector<int64_t>& from) override;
  void zero_missing_state();
  int64_t step_ = 0;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;
  // Steps taken by each parameter (torch keeps one per parameter: a parameter
  // skipped for lack of a grad does not advance its bias correction).
  std::vector<int64_t> param_steps_;
};

// Learning-rate schedules: lr(step) for a step counter that the trainer
// advances once per optimizer step (per batch).
class LRSchedule {
 public:
  virtual ~LRSchedule() = default;
  virtual double lr_at(int64_t step) const = 0;
  // Sets opt's lr for `step`.
  void apply(Optimizer& opt, int64_t step) const { opt.set_lr(lr_at(step)); }
};

// lr * gamma^(step / step_size)
class StepLR : public LRSchedule {
 public:
  StepLR(double base_lr, int64_t step_size, double gamma = 0.1) : base_(base_lr), size_(step_size), gamma_(gamma) {}
  double lr_at(int64_t step) const override;

 private:
  double base_;
  int64_t size_;
  double gamma_;
};

// Linear warm-up from 0 over `warmup` steps, then cosine decay to min_lr at total_steps.
class CosineLR : public LRSchedule {
 public:
  CosineLR(double base_lr, int64_t total_steps, int64_t warmup = 0, double min_lr = 0.0)
      : base_(base_lr), total_(total_steps), warmup_(warmup), min_(min_lr) {}
  double lr_at(int64_t step) const override;

 private:
  double base_;
  int64_t total_, warmup_;
  double min_;
};

// Piecewise-linear through (step, lr) knots (one-cycle, airbench's triangle, warm-up).
class PiecewiseLinearLR : public LRSchedule {
 public:
  PiecewiseLinearLR(std::vector<int64_t> steps, std::vector<double> lrs);
  double lr_at(int64_t step) const override;

 private:
  std::vector<int64_t> steps_;
  std::vector<double> lrs_;
};

// Exponential moving average of a module's parameters and buffers:
// ema = decay * ema + (1 - decay) * value at each update() call.
class EMA {
 public:
  EMA(const nn::Module& model, double decay = 0.999);
  void update(const nn::Module& model);
  // Copies the averaged values into `model` (e.g. for evaluation).
  void copy_to(nn::Module& model) const;
  const nn::TensorDict& averaged() const { return shadow_; }

 private:
  double decay_;
  nn::TensorDict shadow_;
};

}  // namespace kiln::optim
