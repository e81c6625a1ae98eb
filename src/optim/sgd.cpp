// torch.optim.SGD (_single_tensor_sgd), with the weight decay folded into the
// in-place updates so no temporary d_p is allocated:
//   d = g + wd*p
//   b = d (first step) | momentum*b + (1-dampening)*d
//   d = nesterov ? d + momentum*b : b
//   p -= lr*d
#include <array>
#include <map>
#include <string_view>
#include <vector>

#include "cuda/backend.h"
#include "ops/dispatch_mode.h"
#include "kiln/memory_format.h"
#include "kiln/profile.h"
#include "optim/state.h"

namespace kiln::optim {

SGD::SGD(std::vector<Tensor> params, const SGDOptions& o) : Optimizer(std::move(params), o.lr()), options(o) {
  KILN_CHECK(o.momentum() >= 0, "SGD: momentum must be >= 0, got ", o.momentum());
  KILN_CHECK(o.weight_decay() >= 0, "SGD: weight_decay must be >= 0, got ", o.weight_decay());
  KILN_CHECK(!o.nesterov() || (o.momentum() > 0 && o.dampening() == 0),
             "SGD: nesterov momentum needs momentum > 0 and dampening = 0 (got momentum ", o.momentum(),
             ", dampening ", o.dampening(), ")");
  momentum_buffers_.resize(params_.size());
  buffer_used_.assign(params_.size(), false);
  zero_missing_buffers();
}

// Without dampening, torch's first step (b = d) is the general update from a
// zero buffer (b = momentum * 0 + d), bit for bit; so the buffers start as
// zeros here and every step runs the same ops: a compiled train step is one
// graph from the first call on. With dampening they start in the first step.
void SGD::zero_missing_buffers() {
  if (options.momentum() == 0 || options.dampening() != 0) return;
  NoGradGuard no_grad;
  // A frozen parameter (Layer Fusion) gets no buffer: it never gets a grad.
  for (size_t i = 0; i < params_.size(); ++i)
    if (!momentum_buffers_[i].defined() && params_[i].requires_grad()) {
      // On CUDA in the parameter's layout (channels-last weights), so the
      // update kernels run over one dense range.
      momentum_buffers_[i] = zeros_like(params_[i]);
      if (params_[i].device().is_cuda())
        momentum_buffers_[i] = contiguous(momentum_buffers_[i], suggest_memory_format(params_[i]));
    }
}

void SGD::reindex_state(const std::vector<int64_t>& from) {
  std::vector<Tensor> buffers(params_.size());
  std::vector<bool> used(params_.size(), false);
  for (size_t i = 0; i < params_.size(); ++i)
    if (from[i] >= 0 && params_[i].requires_grad()) {
      buffers[i] = momentum_buffers_[static_cast<size_t>(from[i])];
      used[i] = buffer_used_[static_cast<size_t>(from[i])];
    }
  momentum_buffers_ = std::move(buffers);
  buffer_used_ = std::move(used);
  zero_missing_buffers();
}

int64_t SGD::num_state_tensors() const {
  int64_t n = 0;
  for (const Tensor& b : momentum_buffers_) n += b.defined();
  return n;
}

namespace {

// Whether the active dispatch modes let a step skip its per-op calls: not a
// mode that must see every op (a capture tracing the step, a meta run); a
// profile or autocast lose nothing by one launch.
bool modes_allow_foreach() {
  for (const DispatchMode* mode : active_modes()) {
    const std::string_view name = mode->mode_name();
    if (name != "profile" && name != "autocast") return false;
  }
  return true;
}

}  // namespace

// Whether parameter i takes the one-launch CUDA path: momentum with its
// buffer, p, grad and buffer float32 on one CUDA device in one dense layout.
bool SGD::steps_in_foreach(size_t i, const Tensor& g) const {
  const Tensor& p = params_[i];
  const Tensor& b = momentum_buffers_[i];
  if (options.momentum() == 0 || !b.defined() || !p.device().is_cuda()) return false;
  if (p.dtype() != DType::Float32 || g.dtype() != DType::Float32 || b.dtype() != DType::Float32) return false;
  if (g.device() != p.device() || b.device() != p.device()) return false;
  return p.strides() == g.strides() && p.strides() == b.strides() && is_contiguous(p, suggest_memory_format(p));
}

void SGD::step() {
  ProfileRange range("optimizer.step");
  NoGradGuard no_grad;
  const double lr = lr_, m = options.momentum(), wd = options.weight_decay(), damp = options.dampening();
  // Per CUDA device, the parameters that step in one launch (after the loop).
  std::map<int, std::array<std::vector<Tensor>, 3>> foreach;
  const bool may_foreach = options.foreach() && modes_allow_foreach();
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor g = grad_of(i, "SGD");
    if (!g.defined()) continue;
    if (may_foreach && steps_in_foreach(i, g)) {
      auto& lists = foreach[p.device().index];
      lists[0].push_back(p), lists[1].push_back(g), lists[2].push_back(momentum_buffers_[i]);
      buffer_used_[i] = true;
      continue;
    }
    if (m == 0) {
      if (wd != 0) mul_(p, 1.0 - lr * wd);
      add_(p, g, -lr);
      continue;
    }
    Tensor& b = momentum_buffers_[i];
    if (!b.defined()) {
      b = g.detach().to(p.dtype()).clone();
      if (wd != 0) add_(b, p, wd);
    } else {
      mul_(b, m);
      add_(b, g, 1.0 - damp);
      if (wd != 0) add_(b, p, wd * (1.0 - damp));
    }
    buffer_used_[i] = true;
    if (options.nesterov()) {
      // p -= lr * (g + wd*p + m*b)
      if (wd != 0) mul_(p, 1.0 - lr * wd);
      add_(p, g, -lr);
      add_(p, b, -lr * m);
    } else {
      add_(p, b, -lr);
    }
  }
  for (auto& [device, lists] : foreach)
    cuda::sgd_step(lists[0], lists[1], lists[2], {lr, m, damp, wd, options.nesterov()});
}

nn::TensorDict SGD::state_dict() const {
  nn::TensorDict d;
  d.emplace_back("lr", detail::scalar_state(lr_));
  d.emplace_back("momentum", detail::scalar_state(options.momentum()));
  d.emplace_back("dampening", detail::scalar_state(options.dampening()));
  d.emplace_back("weight_decay", detail::scalar_state(options.weight_decay()));
  d.emplace_back("nesterov", detail::scalar_state(options.nesterov() ? 1.0 : 0.0));
  for (size_t i = 0; i < momentum_buffers_.size(); ++i)
    if (momentum_buffers_[i].defined() && buffer_used_[i]) d.emplace_back("momentum_buffer." + std::to_string(i), momentum_buffers_[i]);
  return d;
}

void SGD::load_state_dict(const nn::TensorDict& state) {
  detail::ParsedState s = detail::parse_state(
      {"SGD", {"lr", "momentum", "dampening", "weight_decay", "nesterov"}, {"momentum_buffer"}, {}}, state, params_);
  SGDOptions o = options;
  if (s.hyper.count("lr")) o.lr(s.hyper["lr"]);
  if (s.hyper.count("momentum")) o.momentum(s.hyper["momentum"]);
  if (s.hyper.count("dampening")) o.dampening(s.hyper["dampening"]);
  if (s.hyper.count("weight_decay")) o.weight_decay(s.hyper["weight_decay"]);
  if (s.hyper.count("nesterov")) o.nesterov(s.hyper["nesterov"] != 0);
  KILN_CHECK(o.lr() >= 0 && o.momentum() >= 0 && o.weight_decay() >= 0 &&
                 (!o.nesterov() || (o.momentum() > 0 && o.dampening() == 0)),
             "SGD.load_state_dict: the saved hyper-parameters are invalid (lr ", o.lr(), ", momentum ", o.momentum(),
             ", dampening ", o.dampening(), ", weight_decay ", o.weight_decay(), ", nesterov ", o.nesterov(), ")");
  options = o;
  lr_ = o.lr();
  momentum_buffers_.assign(params_.size(), Tensor());
  buffer_used_.assign(params_.size(), false);
  for (auto& [i, t] : s.buffers["momentum_buffer"]) {
    momentum_buffers_[i] = t;
    buffer_used_[i] = true;
  }
  zero_missing_buffers();
}

}  // namespace kiln::optim
