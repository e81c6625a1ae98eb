// Optimizer base and the state-dict checks the optimizers share.
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "optim/state.h"

namespace kiln::optim {

namespace {
void check_params(const std::vector<Tensor>& params_) {
  std::unordered_set<const TensorImpl*> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    KILN_CHECK(p.defined(), "optimizer: parameter ", i, " is an undefined tensor");
    KILN_CHECK(p.is_floating_point(), "optimizer: parameter ", i, " is ", dtype_name(p.dtype()),
               "; only floating-point tensors can be optimized");
    KILN_CHECK(p.is_leaf(), "optimizer: parameter ", i, " ", shape_str(p.shape()),
               " was computed by an op; optimizers update leaf tensors (module parameters)");
    KILN_CHECK(seen.insert(p.impl()).second, "optimizer: parameter ", i, " ", shape_str(p.shape()),
               " appears more than once in the list; pass each parameter once (module.parameters() does)");
  }
}
}  // namespace

Optimizer::Optimizer(std::vector<Tensor> params, double lr) : params_(std::move(params)), lr_(lr) {
  KILN_CHECK(lr >= 0, "optimizer: lr must be >= 0, got ", lr);
  check_params(params_);
}

void Optimizer::set_params(std::vector<Tensor> params) {
  check_params(params);
  std::unordered_map<const TensorImpl*, int64_t> old;
  for (size_t i = 0; i < params_.size(); ++i) old[params_[i].impl()] = static_cast<int64_t>(i);
  std::vector<int64_t> from(params.size(), -1);
  for (size_t i = 0; i < params.size(); ++i)
    if (auto it = old.find(params[i].impl()); it != old.end()) from[i] = it->second;
  params_ = std::move(params);
  reindex_state(from);
}

Tensor Optimizer::grad_of(size_t i, const char* opt) const {
  const Tensor& p = params_[i];
  Tensor g = p.grad();
  KILN_CHECK(!g.defined() || g.shape() == p.shape(), opt, ": parameter ", i, " has shape ", shape_str(p.shape()),
             " but its grad has shape ", shape_str(g.shape()));
  return g;
}

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.set_grad(Tensor());
}

namespace detail {

Tensor scalar_state(double v) { return full({}, v, dtype(DType::Float64)); }
Tensor int_state(int64_t v) { return full({}, static_cast<double>(v), dtype(DType::Int64)); }

ParsedState parse_state(const StateSpec& spec, const nn::TensorDict& state, const std::vector<Tensor>& params) {
  ParsedState out;
  std::vector<std::string> problems;
  std::unordered_set<std::string> seen;
  auto in = [](const std::vector<std::string>& v, const std::string& s) {
    for (const auto& x : v)
      if (x == s) return true;
    return false;
  };
  for (const auto& [key, t] : state) {
    if (!seen.insert(key).second) {
      problems.push_back("\"" + key + "\" appears twice");
      continue;
    }
    if (!t.defined()) {
      problems.push_back("\"" + key + "\" is an undefined tensor");
      continue;
    }
    if (in(spec.hyper, key)) {
      if (t.numel() != 1) problems.push_back("\"" + key + "\" must hold one number, got shape " + shape_str(t.shape()));
      else out.hyper[key] = t.item();
      continue;
    }
    size_t dot = key.rfind('.');
    std::string base = dot == std::string::npos ? key : key.substr(0, dot);
    bool is_buffer = in(spec.buffers, base), is_counter = in(spec.counters, base);
    if (!is_buffer && !is_counter) {
      problems.push_back("unexpected key \"" + key + "\"");
      continue;
    }
    std::string idx = key.substr(dot + 1);
    size_t i = 0;
    bool ok = !idx.empty() && idx.size() < 10 && idx.find_first_not_of("0123456789") == std::string::npos;
    if (ok) i = std::stoul(idx);
    if (!ok || i >= params.size()) {
      problems.push_back("\"" + key + "\" names parameter " + idx + ", but the optimizer has " +
                         std::to_string(params.size()) + " parameters");
      continue;
    }
    if (is_counter) {
      if (t.numel() != 1) problems.push_back("\"" + key + "\" must hold one number, got shape " + shape_str(t.shape()));
      else out.counters[base][i] = static_cast<int64_t>(t.item());
      continue;
    }
    if (t.shape() != params[i].shape()) {
      problems.push_back("\"" + key + "\" has shape " + shape_str(t.shape()) + ", but parameter " +
                         std::to_string(i) + " has shape " + shape_str(params[i].shape()));
      continue;
    }
    if (!t.is_floating_point()) {
      problems.push_back("\"" + key + "\" is " + std::string(dtype_name(t.dtype())) + ", expected floating point");
      continue;
    }
    out.buffers[base][i] = t.detach().to(params[i].dtype()).clone();
  }
  if (!problems.empty()) {
    std::ostringstream os;
    os << spec.opt << ".load_state_dict: the state does not fit this optimizer (" << params.size() << " parameters):";
    for (const auto& p : problems) os << "\n  " << p;
    os << "\n  Fix: load optimizer state saved for the same model and optimizer type (parameters in the same order)";
    KILN_FAIL(os.str());
  }
  return out;
}

}  // namespace detail
}  // namespace kiln::optim
