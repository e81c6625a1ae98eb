// nn::Module: registration, traversal with torch's dotted names, train/eval,
// in-place dtype/device moves, state dicts and the print(model) tree.
#include <algorithm>
#include <set>
#include <sstream>
#include <unordered_set>

#include "kiln/nn.h"
#include "nn/repr.h"

namespace kiln::nn {

Tensor Module::forward(const Tensor&) {
  KILN_FAIL(type_name_, ": this module has no single-input forward(x); call its own forward method, or override ",
            "Module::forward(const Tensor&) in the subclass");
}

namespace {
void check_name(const std::string& owner, const std::string& kind, const std::string& name) {
  KILN_CHECK(!name.empty(), owner, ": register_", kind, ": the name is empty; give the ", kind, " a name");
  KILN_CHECK(name.find('.') == std::string::npos, owner, ": register_", kind, "(\"", name,
             "\"): names may not contain '.', which separates the levels of dotted names");
}
template <typename V>
bool has_name(const V& v, const std::string& name) {
  for (const auto& [n, _] : v)
    if (n == name) return true;
  return false;
}
std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}
}  // namespace

Tensor& Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  check_name(type_name_, "parameter", name);
  KILN_CHECK(!has_name(params_, name) && !has_name(buffers_, name) && !has_name(children_, name), type_name_,
             ": register_parameter(\"", name, "\"): the name is already taken by a parameter, buffer or submodule");
  if (t.defined()) {
    KILN_CHECK(t.is_leaf(), type_name_, ": register_parameter(\"", name,
               "\"): the tensor was computed by an op (it has a grad_fn); register t.detach() instead");
    t.requires_grad_(requires_grad);
  }
  params_.emplace_back(name, std::move(t));
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor t) {
  check_name(type_name_, "buffer", name);
  KILN_CHECK(!has_name(params_, name) && !has_name(buffers_, name) && !has_name(children_, name), type_name_,
             ": register_buffer(\"", name, "\"): the name is already taken by a parameter, buffer or submodule");
  buffers_.emplace_back(name, std::move(t));
  return buffers_.back().second;
}

void Module::register_module_impl(const std::string& name, std::shared_ptr<Module> m) {
  check_name(type_name_, "module", name);
  KILN_CHECK(m != nullptr, type_name_, ": register_module(\"", name, "\"): the module is null");
  KILN_CHECK(m.get() != this, type_name_, ": register_module(\"", name, "\"): a module cannot contain itself");
  KILN_CHECK(!has_name(params_, name) && !has_name(buffers_, name) && !has_name(children_, name), type_name_,
             ": register_module(\"", name, "\"): the name is already taken by a parameter, buffer or submodule");
  children_.emplace_back(name, std::move(m));
}

// ---- traversal ----
namespace {
// Pre-order walk as torch's named_modules (each module once).
void walk(const Module* m, const std::string& prefix, std::unordered_set<const Module*>& seen,
          std::vector<std::pair<std::string, const Module*>>& out) {
  if (!seen.insert(m).second) return;
  out.emplace_back(prefix, m);
  for (const auto& [name, child] : m->named_children()) walk(child.get(), join(prefix, name), seen, out);
}
std::vector<std::pair<std::string, const Module*>> all_modules(const Module* root, bool recurse) {
  std::vector<std::pair<std::string, const Module*>> out;
  if (!recurse) {
    out.emplace_back("", root);
    return out;
  }
  std::unordered_set<const Module*> seen;
  walk(root, "", seen, out);
  return out;
}
}  // namespace

TensorDict Module::named_parameters(bool recurse) const {
  TensorDict out;
  std::unordered_set<const TensorImpl*> seen;
  for (const auto& [prefix, m] : all_modules(this, recurse))
    for (const auto& [name, t] : m->params_)
      if (t.defined() && seen.insert(t.impl()).second) out.emplace_back(join(prefix, name), t);
  return out;
}

TensorDict Module::named_buffers(bool recurse) const {
  TensorDict out;
  std::unordered_set<const TensorImpl*> seen;
  for (const auto& [prefix, m] : all_modules(this, recurse))
    for (const auto& [name, t] : m->buffers_)
      if (t.defined() && seen.insert(t.impl()).second) out.emplace_back(join(prefix, name), t);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [_, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const { return children_; }

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [_, m] : children_) out.push_back(m);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules(const std::string& prefix) {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  std::shared_ptr<Module> self;
  try {
    self = shared_from_this();
  } catch (const std::bad_weak_ptr&) {
    // A module on the stack: hand out a non-owning pointer to it.
    self = std::shared_ptr<Module>(std::shared_ptr<Module>(), this);
  }
  std::unordered_set<const Module*> seen;
  std::function<void(const std::shared_ptr<Module>&, const std::string&)> rec =
      [&](const std::shared_ptr<Module>& m, const std::string& p) {
        if (!seen.insert(m.get()).second) return;
        out.emplace_back(p, m);
        for (const auto& [name, child] : m->children_) rec(child, join(p, name));
      };
  rec(self, prefix);
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [_, m] : children_) m->train(on);
}

// ---- moving tensors in place ----
namespace {
// Makes `t` hold `value`'s data (same TensorImpl object, so every handle to it,
// such as an optimizer's, sees the move).
void replace_data(const Tensor& t, const Tensor& value) {
  if (value.impl() == t.impl()) return;
  TensorImpl* impl = t.impl();
  impl->storage = value.impl()->storage;
  impl->shape = value.impl()->shape;
  impl->strides = value.impl()->strides;
  impl->offset = value.impl()->offset;
  impl->dtype = value.impl()->dtype;
  // No version bump: the old storage, which a recorded graph may have saved,
  // keeps its values, so that graph's backward stays right.
}

template <typename Convert>
void convert_all(const Module& root, bool floating_only, Convert convert) {
  NoGradGuard no_grad;
  std::vector<Tensor> all;
  for (auto& [_, t] : root.named_parameters()) all.push_back(t);
  for (auto& [_, t] : root.named_buffers()) all.push_back(t);
  // Compute every new value first, so a failure leaves the module unchanged.
  std::vector<std::pair<Tensor, Tensor>> moves;
  for (const Tensor& t : all) {
    if (floating_only && !t.is_floating_point()) continue;
    moves.emplace_back(t, convert(t.detach()));
    if (t.grad().defined()) moves.emplace_back(t.grad(), convert(t.grad().detach()));
  }
  for (auto& [t, v] : moves) replace_data(t, v);
}
}  // namespace

void Module::to(Device device) {
  convert_all(*this, false, [&](const Tensor& t) { return t.to(device); });
}

void Module::to(DType dtype) {
  KILN_CHECK(is_floating(dtype), type_name_, ".to(", dtype_name(dtype),
             "): modules convert their floating-point parameters and buffers only to a floating dtype");
  convert_all(*this, true, [&](const Tensor& t) { return t.to(dtype).contiguous(); });
}

void Module::to(MemoryFormat format) {
  convert_all(*this, true, [&](const Tensor& t) { return t.dim() == 4 ? contiguous(t, format) : t; });
}

void Module::zero_grad() {
  for (auto& [_, t] : named_parameters()) t.set_grad(Tensor());
}

// ---- state dicts ----
TensorDict Module::state_dict() const {
  // torch's order: each module's parameters, then its buffers, then its
  // children's; detached (sharing storage), as torch's keep_vars=False.
  TensorDict out;
  std::function<void(const Module&, const std::string&)> rec = [&](const Module& m, const std::string& prefix) {
    for (const auto& [n, t] : m.params_)
      if (t.defined()) out.emplace_back(join(prefix, n), t.detach());
    for (const auto& [n, t] : m.buffers_)
      if (t.defined()) out.emplace_back(join(prefix, n), t.detach());
    for (const auto& [name, child] : m.children_) rec(*child, join(prefix, name));
  };
  rec(*this, "");
  return out;
}

LoadStateDictResult Module::load_state_dict(const TensorDict& state, bool strict) {
  // The live tensors under their state-dict names (copies go into these).
  TensorDict own;
  std::function<void(const Module&, const std::string&)> rec = [&](const Module& m, const std::string& prefix) {
    for (const auto& [n, t] : m.params_)
      if (t.defined()) own.emplace_back(join(prefix, n), t);
    for (const auto& [n, t] : m.buffers_)
      if (t.defined()) own.emplace_back(join(prefix, n), t);
    for (const auto& [name, child] : m.children_) rec(*child, join(prefix, name));
  };
  rec(*this, "");
  std::map<std::string, const Tensor*> given;
  std::vector<std::string> duplicates, unexpected, missing, mismatched;
  for (const auto& [name, t] : state) {
    if (!given.emplace(name, &t).second) duplicates.push_back(name);
  }
  std::set<std::string> own_names;
  for (const auto& [name, t] : own) {
    own_names.insert(name);
    auto it = given.find(name);
    if (it == given.end()) {
      missing.push_back(name);
      continue;
    }
    const Tensor& src = *it->second;
    if (!src.defined()) {
      mismatched.push_back("\"" + name + "\": the checkpoint's tensor is undefined");
    } else if (src.shape() != t.shape()) {
      mismatched.push_back("\"" + name + "\": copying a tensor of shape " + shape_str(src.shape()) +
                           " from the checkpoint, the shape in the current model is " + shape_str(t.shape()));
    }
  }
  for (const auto& [name, t] : state)
    if (!own_names.count(name)) unexpected.push_back(name);

  auto quoted_list = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", \"" : "\"") + v[i] + "\"";
    return s;
  };
  bool fail = !mismatched.empty() || !duplicates.empty() || (strict && (!missing.empty() || !unexpected.empty()));
  if (fail) {
    std::ostringstream os;
    os << "load_state_dict: error(s) loading a state dict into " << type_name_ << ":";
    if (strict && !missing.empty())
      os << "\n  missing key(s) (" << missing.size() << "): " << quoted_list(missing);
    if (strict && !unexpected.empty())
      os << "\n  unexpected key(s) (" << unexpected.size() << "): " << quoted_list(unexpected);
    if (!duplicates.empty()) os << "\n  key(s) given more than once: " << quoted_list(duplicates);
    for (const auto& m : mismatched) os << "\n  size mismatch for " << m;
    os << "\n  Fix: load a checkpoint saved from the same model architecture and width";
    if (strict && (!missing.empty() || !unexpected.empty()))
      os << ", or pass strict=false to load only the matching keys (shape mismatches are always errors)";
    KILN_FAIL(os.str());
  }
  NoGradGuard no_grad;
  for (auto& [name, t] : own) {
    auto it = given.find(name);
    if (it == given.end()) continue;
    Tensor dst = t;
    copy_(dst, *it->second);
  }
  return {missing, unexpected};
}

void Module::replace_parameter(const std::string& name, Tensor t) {
  for (auto& [n, p] : params_)
    if (n == name) {
      KILN_CHECK(!p.defined() || !t.defined() || p.shape() == t.shape(), type_name_, ": replace_parameter(\"", name,
                 "\"): the new tensor has shape ", shape_str(t.shape()), " but the parameter has shape ",
                 shape_str(p.shape()));
      p = std::move(t);
      return;
    }
  KILN_FAIL(type_name_, ": replace_parameter(\"", name, "\"): no parameter of that name in this module (",
            "children's parameters are replaced on the child)");
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& t : parameters()) n += t.numel();
  return n;
}

// ---- printing ----
std::string Module::str() const {
  std::string extra = extra_repr(*this);
  if (children_.empty()) return type_name_ + "(" + extra + ")";
  std::vector<std::string> lines;
  if (!extra.empty()) {
    std::istringstream is(extra);
    for (std::string l; std::getline(is, l);) lines.push_back(l);
  }
  for (const auto& [name, child] : children_) {
    std::string s = child->str();
    // indent continuation lines of the child by two spaces, as torch's _addindent
    std::string indented;
    for (char c : s) {
      indented += c;
      if (c == '\n') indented += "  ";
    }
    lines.push_back("(" + name + "): " + indented);
  }
  std::string out = type_name_ + "(";
  for (const auto& l : lines) out += "\n  " + l;
  return out + "\n)";
}

std::string own_parameter_summary(const Module& m) {
  // For modules kiln does not know: their own parameters and buffers with shapes.
  std::string s;
  auto add = [&](const TensorDict& d) {
    for (const auto& [n, t] : d) {
      if (!s.empty()) s += ", ";
      s += n + "=" + shape_str(t.shape());
    }
  };
  add(m.named_parameters(false));
  add(m.named_buffers(false));
  return s;
}

}  // namespace kiln::nn
