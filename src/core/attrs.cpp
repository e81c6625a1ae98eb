#include "core/attrs.h"

#include <functional>
#include <sstream>

#include "kiln/shape.h"

namespace kiln {

Attrs& Attrs::set(std::string_view name, AttrValue value) {
  for (auto& [n, v] : items_) {
    if (n == name) {
      v = std::move(value);
      return *this;
    }
  }
  items_.emplace_back(name, std::move(value));
  return *this;
}

const AttrValue* Attrs::find(std::string_view name) const {
  for (const auto& [n, v] : items_)
    if (n == name) return &v;
  return nullptr;
}

double Attrs::f(std::string_view name) const {
  const AttrValue* v = find(name);
  KILN_ASSERT(v != nullptr, "missing attribute '", name, "'");
  if (const auto* i = std::get_if<int64_t>(v)) return static_cast<double>(*i);
  return get<double>(name);
}

std::string Attrs::str() const {
  std::ostringstream os;
  bool first = true;
  for (const auto& [n, v] : items_) {
    os << (first ? "" : ", ") << n << '=';
    first = false;
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::vector<int64_t>>) os << shape_str(x);
          else if constexpr (std::is_same_v<T, bool>) os << (x ? "true" : "false");
          else if constexpr (std::is_same_v<T, std::string>) os << '"' << x << '"';
          else os << x;
        },
        v);
  }
  return os.str();
}

size_t Attrs::hash() const {
  size_t h = 0;
  auto mix = [&](size_t x) { h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
  for (const auto& [n, v] : items_) {
    mix(std::hash<std::string_view>()(n));
    mix(v.index());
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
            for (int64_t e : x) mix(std::hash<int64_t>()(e));
          } else if constexpr (std::is_same_v<T, DType>) {
            mix(static_cast<size_t>(x));
          } else {
            mix(std::hash<T>()(x));
          }
        },
        v);
  }
  return h;
}

}  // namespace kiln
