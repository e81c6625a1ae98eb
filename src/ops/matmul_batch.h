// matmul's operands with batch dims, as the 3-D [B, R, C] that oneDNN (CPU)
// and cuBLASLt (CUDA) multiply: one definition for both backends.
#pragma once
#include "kiln/tensor.h"

namespace kiln {

// [batch..., R, C] broadcast to `batch` and viewed as 3-D [B, R, C] (a copy
// only when the batch dims cannot be merged).
inline Tensor as_batched3(const Tensor& t, const Shape& batch) {
  int64_t R = t.shape()[t.dim() - 2], C = t.shape()[t.dim() - 1];
  Shape full = batch;
  full.push_back(R);
  full.push_back(C);
  Tensor e = t.shape() == full ? t : t.expand(full);
  return e.reshape({numel_of(batch), R, C});
}

}  // namespace kiln
