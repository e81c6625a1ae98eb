// CPU reduction kernels shared by the reduce, loss and norm families.
//
// Every reduction is run as passes over a contiguous [outer, R, inner] view:
// the input's dims are coalesced into alternating kept/reduced groups and the
// innermost reduced group is reduced at a time (inner == 1: along contiguous
// rows; inner > 1: down columns, vectorized along inner), so neither
// "sum over the last dim" nor "sum over dims (0, 2, 3) of NCHW" walks
// elements with per-element index arithmetic.
#pragma once
#include <cstdint>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::cpu {

enum class ReduceOp { Sum, Max, Min };

// out (contiguous, numel = product of the kept sizes) = op over `dims` of x.
// dims: sorted, unique, wrapped. Sum of bool/integers accumulates in int64;
// float32 sums accumulate in float lanes over short blocks and in float64
// across blocks. out's dtype may differ from x's (values are converted).
void reduce(const Tensor& x, const std::vector<int64_t>& dims, ReduceOp op, const Tensor& out);

// Index of the first maximum along `dim` (NaN counts as the maximum, as in
// PyTorch); out is int64 with the kept dims.
void argmax(const Tensor& x, int64_t dim, const Tensor& out);

// Variance over `dims` with the divisor max(N - correction, 0) (two passes
// per row in float64).
void variance(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction, const Tensor& out);

// A contiguous, autograd-free version of t (t itself when it already is).
Tensor contiguous_nograd(const Tensor& t);

}  // namespace kiln::cpu
