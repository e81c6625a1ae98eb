// Helpers shared by the Layer Fusion and fuse_modules tests.
#pragma once
#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "kiln/kiln.h"
#include "ops/dispatch_mode.h"
#include "testing/compare.h"

namespace kiln::testing {

// Counts the ops dispatched in its scope, by name; conv2d with a fused
// activation counts as "conv2d+<activation>".
class OpCounter : public DispatchMode {
 public:
  OpCounter() : guard_(*this) {}
  const char* mode_name() const override { return "op_counter"; }
  Tensors handle(OpId id, Tensors& inputs, const Attrs& attrs, const NextMode& next) override {
    std::string name = op_name(id);
    if (id == OpId::conv2d && attrs.has("activation")) name += "+" + attrs.s("activation");
    ++counts[name];
    return next(id, inputs, attrs);
  }
  int64_t operator[](const std::string& op) const {
    auto it = counts.find(op);
    return it == counts.end() ? 0 : it->second;
  }
  std::map<std::string, int64_t> counts;

 private:
  ModeGuard guard_;
};

}  // namespace kiln::testing
