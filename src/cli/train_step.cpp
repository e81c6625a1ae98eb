// kiln train's step, eager or compiled (train_step.h).
#include "cli/train_step.h"

#include <chrono>
#include <cstdio>
#include <sstream>

namespace kiln::cli {
namespace {

using Clock = std::chrono::steady_clock;

// The autocast scope lives inside the step, so a compiled step records the
// casts autocast makes (a compiled function called inside a scope is an
// error: capture would record the ops before autocast casts them).
template <typename F>
auto with_autocast(const std::optional<DType>& dt, F&& what) {
  std::optional<autocast> scope;
  if (dt) scope.emplace(*dt);
  return what();
}

// Times the first call of `f` into `first_s`.
template <class F>
auto timing_first(double& first_s, F f) {
  return [&first_s, f = std::move(f)](const auto&... args) mutable {
    if (first_s >= 0) return f(args...);
    auto t0 = Clock::now();
    auto r = f(args...);
    first_s = std::chrono::duration<double>(Clock::now() - t0).count();
    return r;
  };
}

std::string stats_line(const char* what, const CompileStats& s, double first_s) {
  std::ostringstream o;
  o << what << " " << s.variants << (s.variants == 1 ? " graph" : " graphs") << ", " << s.graph_breaks
    << (s.graph_breaks == 1 ? " graph break" : " graph breaks") << ", " << s.recompiles << " recompiles";
  if (first_s >= 0) {
    char buf[48];
    std::snprintf(buf, sizeof buf, ", first call %.2f s", first_s);
    o << buf;
  }
  if (s.fell_back) o << "; runs eagerly: " << s.fallback_reason;
  if (!s.precision.empty()) o << "; precision " << s.precision;
  return o.str();
}

}  // namespace

TrainStep::TrainStep(std::shared_ptr<nn::Module> model, optim::Optimizer& opt, optim::GradScaler& scaler,
                     std::optional<DType> amp, double label_smoothing, const CompileChoice& choice, Device device)
    : compile_(choice) {
  nn::Module* m = model.get();
  auto step = [m, &opt, &scaler, amp, label_smoothing](const Tensor& x, const Tensor& y) {
    Tensor loss = with_autocast(amp, [&] { return cross_entropy(m->forward(x), y, label_smoothing); });
    opt.zero_grad();
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    return loss;
  };
  auto forward = [m, amp](const Tensor& x) { return with_autocast(amp, [&] { return m->forward(x); }); };
  if (!compile_.enabled) {
    train_ = timing_first(first_train_s_, step);
    logits_ = timing_first(first_eval_s_, forward);
    return;
  }
  if (compile_.backend.empty()) compile_.backend = device.is_cpu() ? "cpp" : "interpreter";
  CompileOptions co = CompileOptions().mode(compile_.mode).backend(compile_.backend);
  auto train_c = std::make_shared<Compiled<decltype(step)>>(compile(step, co.name("train_step")));
  auto eval_c = std::make_shared<Compiled<decltype(forward)>>(compile(forward, co.name("eval_forward")));
  train_ = timing_first(first_train_s_, [train_c](const Tensor& x, const Tensor& y) { return (*train_c)(x, y); });
  logits_ = timing_first(first_eval_s_, [eval_c](const Tensor& x) { return (*eval_c)(x); });
  train_stats_ = [train_c] { return train_c->stats(); };
  eval_stats_ = [eval_c] { return eval_c->stats(); };
}

Tensor TrainStep::train(const Tensor& x, const Tensor& y) { return train_(x, y); }
Tensor TrainStep::logits(const Tensor& x) { return logits_(x); }

std::string TrainStep::summary() const {
  if (!compile_.enabled) return "eager";
  std::ostringstream o;
  o << "compiled (mode " << compile_.mode << ", backend " << compile_.backend
    << "): " << stats_line("train step", train_stats_(), first_train_s_) << "; "
    << stats_line("eval forward", eval_stats_(), first_eval_s_);
  return o.str();
}

}  // namespace kiln::cli
