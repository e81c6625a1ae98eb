// EMA of a module's parameters and buffers: shadow = lerp(shadow, value, 1 - decay)
// for floating tensors; integer buffers (num_batches_tracked) are copied.
#include "kiln/optim.h"

namespace kiln::optim {

EMA::EMA(const nn::Module& model, double decay) : decay_(decay) {
  KILN_CHECK(decay >= 0 && decay <= 1, "EMA: decay must be in [0, 1], got ", decay);
  NoGradGuard no_grad;
  for (const auto& [name, t] : model.state_dict()) shadow_.emplace_back(name, t.detach().clone());
}

void EMA::update(const nn::Module& model) {
  nn::TensorDict now = model.state_dict();
  bool same = now.size() == shadow_.size();
  for (size_t i = 0; same && i < now.size(); ++i)
    same = now[i].first == shadow_[i].first && now[i].second.shape() == shadow_[i].second.shape();
  KILN_CHECK(same, "EMA.update: the model's state (", now.size(), " tensors) differs from the one the EMA was built ",
             "from (", shadow_.size(), " tensors) in names or shapes; build the EMA from this model");
  NoGradGuard no_grad;
  for (size_t i = 0; i < now.size(); ++i) {
    Tensor& s = shadow_[i].second;
    const Tensor v = now[i].second.detach();
    if (s.dtype() != v.dtype()) s = v.clone();  // the model was cast since: follow it
    else if (s.is_floating_point()) lerp_(s, v, 1.0 - decay_);
    else copy_(s, v);
  }
}

void EMA::copy_to(nn::Module& model) const { model.load_state_dict(shadow_); }

}  // namespace kiln::optim
