// The autocast policy table: for every op of ops.def, what mixed precision
// (kiln::autocast, include/kiln/autocast.h) does to its floating inputs.
// One table for every device: the CPU and CUDA run the same policy, so a
// model gives the same dtypes wherever it runs (docs/autocast.md).
#pragma once
#include <optional>

#include "ops/op_def.h"

namespace kiln {

enum class AutocastPolicy : uint8_t {
  // float32 (and 16-bit) inputs are cast to the autocast dtype: the op is a
  // matrix product that tensor cores and AVX-512 BF16 run fast in 16 bits,
  // accumulating in float32 (float64 inputs are left alone, as in PyTorch).
  LowerPrecision,
  // 16-bit inputs are cast up to float32: the op sums many terms or has a
  // range 16 bits cannot hold (exp, log, softmax, losses, reductions).
  Float32,
  // Every floating input is cast to the widest floating dtype among them:
  // the op needs its inputs in one dtype (cat, index_add...), and mixing a
  // 16-bit activation with a float32 tensor must not fail.
  Promote,
  // Runs on its inputs as they come: the op is exact or cheap in any dtype
  // (views, copies, pooling, relu), promotes by itself (binary pointwise
  // ops follow PyTorch's type promotion), takes 16-bit input with float32
  // parameters and statistics (batch norm), or is a backward, in-place,
  // factory or random op that autocast never sees in a forward pass.
  AsIs,
};

AutocastPolicy autocast_policy(OpId id);
const char* autocast_policy_name(AutocastPolicy p);

// The dtype an input of an op with policy `p` is cast to under autocast to
// `low` (BFloat16 or Float16), given `widest`, the widest floating dtype among
// the op's inputs (for Promote); nullopt: leave it as it is. Non-floating
// and float64 inputs are never cast by LowerPrecision and Float32.
std::optional<DType> autocast_target(AutocastPolicy p, DType input, DType low, DType widest);

}  // namespace kiln
