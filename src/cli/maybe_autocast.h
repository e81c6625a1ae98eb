// An autocast scope for a command's --autocast value: none for "", else the
// dtype it names (bf16, fp16). Wraps a step's forward and loss.
#pragma once
#include <optional>
#include <string>

#include "kiln/autocast.h"

namespace kiln::cli {

struct MaybeAutocast {
  explicit MaybeAutocast(const std::string& dtype) {
    if (!dtype.empty()) scope.emplace(parse_autocast_dtype(dtype));
  }
  std::optional<autocast> scope;
};

}  // namespace kiln::cli
