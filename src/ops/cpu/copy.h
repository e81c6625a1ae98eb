// Strided copy with dtype conversion: the one kernel behind copy, cast,
// contiguous, clone and copy_ on CPU.
#pragma once
#include "kiln/tensor.h"

namespace kiln::cpu {
// dst[i] = convert(src[i]) for every element; src broadcasts to dst's shape.
void copy_cast(const Tensor& src, const Tensor& dst);
}  // namespace kiln::cpu
