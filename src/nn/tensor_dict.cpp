// TensorDict lookups: by name (a miss names the closest keys, since a typo
// or a missing "module." prefix is the usual cause) and by dotted prefix.
#include <algorithm>

#include "kiln/nn.h"

namespace kiln::nn {

namespace {
// Levenshtein distance (keys are short: the quadratic table is fine).
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// Up to three keys close to `name`: within a third of its length in edits,
// or holding it as a dotted suffix (a key saved with a prefix).
std::vector<std::string> close_keys(const TensorDict& d, const std::string& name) {
  std::vector<std::pair<size_t, std::string>> scored;
  size_t limit = std::max<size_t>(2, name.size() / 3);
  for (const auto& [k, t] : d) {
    size_t dist = edit_distance(k, name);
    bool suffix = k.size() > name.size() && k.ends_with("." + name);
    if (dist <= limit || suffix) scored.emplace_back(suffix ? 0 : dist, k);
  }
  std::stable_sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (size_t i = 0; i < scored.size() && i < 3; ++i) out.push_back(scored[i].second);
  return out;
}
}  // namespace

const Tensor* TensorDict::find(const std::string& name) const {
  for (const auto& [k, t] : *this)
    if (k == name) return &t;
  return nullptr;
}

const Tensor& TensorDict::at(const std::string& name) const {
  if (const Tensor* t = find(name)) return *t;
  std::string msg = "TensorDict: no key \"" + name + "\" among its " + std::to_string(size()) + " keys";
  std::vector<std::string> close = close_keys(*this, name);
  if (!close.empty()) {
    msg += "; did you mean ";
    for (size_t i = 0; i < close.size(); ++i) msg += (i ? ", \"" : "\"") + close[i] + "\"";
    msg += "?";
  } else {
    msg += "; check the name against keys() (state dict names are dotted module paths such as \"layer1.0.conv1.weight\")";
  }
  KILN_FAIL(msg);
}

Tensor& TensorDict::at(const std::string& name) {
  return const_cast<Tensor&>(static_cast<const TensorDict&>(*this).at(name));
}

TensorDict TensorDict::with_prefix(const std::string& prefix) const {
  std::string p = prefix.empty() || prefix.ends_with('.') ? prefix : prefix + ".";
  TensorDict out;
  for (const auto& [k, t] : *this)
    if (k.size() > p.size() && k.starts_with(p)) out.emplace_back(k.substr(p.size()), t);
  return out;
}

std::vector<std::string> TensorDict::keys() const {
  std::vector<std::string> out;
  out.reserve(size());
  for (const auto& [k, t] : *this) out.push_back(k);
  return out;
}

}  // namespace kiln::nn
