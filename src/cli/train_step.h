// One training step and one evaluation forward for `kiln train` and
// `kiln demo`, run eagerly or, with --compile, as kiln::compile'd functions:
// the whole step (forward, loss, backward, optimizer update) is one compiled
// function, and the evaluation forward another (docs/training.md).
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "kiln/kiln.h"

namespace kiln::cli {

// What --compile asks for; enabled false: eager.
struct CompileChoice {
  bool enabled = false;
  std::string mode = "default";  // default | reduce-overhead | max-autotune
  std::string backend;           // cpp | interpreter; empty: cpp on the CPU, interpreter elsewhere
};

class TrainStep {
 public:
  // The step reads `opt` and `scaler` on every call: make a new TrainStep
  // when the optimizer is replaced. `amp`: the autocast dtype, or none.
  TrainStep(std::shared_ptr<nn::Module> model, optim::Optimizer& opt, optim::GradScaler& scaler,
            std::optional<DType> amp, double label_smoothing, const CompileChoice& choice, Device device);
  TrainStep(const TrainStep&) = delete;  // the timed calls point at this object's fields
  TrainStep& operator=(const TrainStep&) = delete;

  // One optimizer step on (x, y); returns the loss (not yet read).
  Tensor train(const Tensor& x, const Tensor& y);
  // Eval-mode logits; the caller puts the model in eval mode under NoGradGuard.
  Tensor logits(const Tensor& x);

  bool compiled() const { return compile_.enabled; }
  // One line for the end of training: "compiled (mode default, backend cpp):
  // train step 1 graph, 0 graph breaks, 0 recompiles, first call 1.93 s; eval ...".
  std::string summary() const;
  // Seconds of the first train call (compiled: capture and compile included).
  double first_train_call_s() const { return first_train_s_; }

 private:
  CompileChoice compile_;
  std::function<Tensor(const Tensor&, const Tensor&)> train_;
  std::function<Tensor(const Tensor&)> logits_;
  std::function<CompileStats()> train_stats_, eval_stats_;
  double first_train_s_ = -1, first_eval_s_ = -1;
};

}  // namespace kiln::cli
