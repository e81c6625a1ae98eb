// Which graph value a tensor stands for while a compiler pass traces ops on
// meta tensors (decomposition, the joint forward+backward).
//
// Found by the tensor's identity first, then by its storage and view:
// autograd saves detached tensors, new TensorImpls over the same storage and
// view as the value recorded. Every bound tensor is kept alive, so a freed
// tensor's address is never reused for another while the map lives.
#pragma once
#include <string>
#include <unordered_map>

#include "compiler/graph/graph.h"

namespace kiln::compiler {

class TensorValues {
 public:
  void bind(const Tensor& t, ValueId v) {
    by_impl_[t.impl()] = v;
    by_view_[view_key(t)] = v;
    keep_.push_back(t);
  }
  // kNoValue when the tensor was never bound.
  ValueId find(const Tensor& t) const {
    auto it = by_impl_.find(t.impl());
    if (it != by_impl_.end()) return it->second;
    auto vt = by_view_.find(view_key(t));
    return vt != by_view_.end() ? vt->second : kNoValue;
  }

 private:
  // Storage, offset, dtype, sizes and strides as text. Appended piece by
  // piece: GCC 12 warns falsely (-Wrestrict) on "x" + std::to_string(...).
  static std::string view_key(const Tensor& t) {
    std::string k;
    auto number = [&k](int64_t v, char sep) {
      k += std::to_string(v);
      k += sep;
    };
    number(static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.impl()->storage.get())), '@');
    number(t.offset(), ':');
    number(static_cast<int64_t>(t.dtype()), '|');
    for (int64_t d : t.shape()) number(d, ',');
    k += '/';
    for (int64_t s : t.strides()) number(s, ',');
    return k;
  }
  std::unordered_map<const TensorImpl*, ValueId> by_impl_;
  std::unordered_map<std::string, ValueId> by_view_;
  Tensors keep_;
};

}  // namespace kiln::compiler
