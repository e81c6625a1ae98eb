// Helpers shared by the optimizers' state_dict()/load_state_dict().
#pragma once
#include <map>
#include <string>

#include "kiln/optim.h"

namespace kiln::optim::detail {

// A 0-dim float64 / int64 tensor holding a hyper-parameter or counter.
Tensor scalar_state(double v);
Tensor int_state(int64_t v);

// Checks a loaded state dict against an optimizer: every key must be one of
// `hyper` (0-dim), or "<buffer>.<i>" for a buffer in `buffers` and a parameter
// index i with the parameter's shape (or "<counter>.<i>" 0-dim for `counters`).
// Lists every problem in one kiln::Error naming `opt`.
struct StateSpec {
  const char* opt;
  std::vector<std::string> hyper;
  std::vector<std::string> buffers;
  std::vector<std::string> counters;
};
struct ParsedState {
  std::map<std::string, double> hyper;
  // buffer name -> parameter index -> tensor (converted to the parameter's dtype)
  std::map<std::string, std::map<size_t, Tensor>> buffers;
  std::map<std::string, std::map<size_t, int64_t>> counters;
};
ParsedState parse_state(const StateSpec& spec, const nn::TensorDict& state, const std::vector<Tensor>& params);

}  // namespace kiln::optim::detail
