// Shapes, strides and the index arithmetic shared by every op.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

namespace kiln {

using Shape = std::vector<int64_t>;

int64_t numel_of(const Shape& shape);
Shape contiguous_strides(const Shape& shape);
// "[2, 3, 4]"
std::string shape_str(const Shape& shape);
// PyTorch's broadcasting; throws kiln::Error naming `op` and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Wraps a negative dim and checks the range; throws kiln::Error naming `op`.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
// Normalizes a dim list (negatives wrapped, sorted, no repeats). Empty = all.
std::vector<int64_t> wrap_dims(const std::vector<int64_t>& dims, int64_t ndim, const char* op);

}  // namespace kiln
