// Non-tensor arguments of an op call (dims, strides, scalars, flags, dtypes),
// by name. Kept as a small ordered list: calls have a handful of attributes,
// and the compiler hashes and compares them for guards.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/error.h"

namespace kiln {

using AttrValue = std::variant<int64_t, double, bool, std::vector<int64_t>, DType, std::string>;

class Attrs {
 public:
  Attrs() = default;
  // Names must be string literals (they are kept as views).
  Attrs& set(std::string_view name, AttrValue value);
  bool has(std::string_view name) const { return find(name) != nullptr; }

  int64_t i(std::string_view name) const { return get<int64_t>(name); }
  double f(std::string_view name) const;  // accepts an int64 too
  bool b(std::string_view name) const { return get<bool>(name); }
  const std::vector<int64_t>& ints(std::string_view name) const { return get<std::vector<int64_t>>(name); }
  DType dtype(std::string_view name) const { return get<DType>(name); }
  const std::string& s(std::string_view name) const { return get<std::string>(name); }

  template <typename T>
  const T& get(std::string_view name) const {
    const AttrValue* v = find(name);
    KILN_ASSERT(v != nullptr, "missing attribute '", name, "'");
    const T* p = std::get_if<T>(v);
    KILN_ASSERT(p != nullptr, "attribute '", name, "' has another type");
    return *p;
  }

  const std::vector<std::pair<std::string_view, AttrValue>>& items() const { return items_; }
  std::string str() const;  // "stride=[1, 1], padding=[0, 0]"
  size_t hash() const;
  bool operator==(const Attrs& o) const { return items_ == o.items_; }

 private:
  const AttrValue* find(std::string_view name) const;
  std::vector<std::pair<std::string_view, AttrValue>> items_;
};

}  // namespace kiln
