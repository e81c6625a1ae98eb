#include "kiln/shape.h"

#include <algorithm>
#include <sstream>

#include "kiln/error.h"

namespace kiln {

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = acc;
    // Checked even past a zero-size dimension: a tensor with 0 elements still
    // gets strides, and an overflowed one would index garbage once it grows.
    KILN_CHECK(!__builtin_mul_overflow(acc, std::max<int64_t>(shape[i], 1), &acc), "shape ", shape_str(shape),
               ": its strides overflow int64 (the dimensions multiply past 2^63). Fix: use smaller dimensions; "
               "if the shape came from a file, the file is corrupt");
  }
  return strides;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t sa = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t sb = i < n - b.size() ? 1 : b[i - (n - b.size())];
    KILN_CHECK(sa == sb || sa == 1 || sb == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
               " do not broadcast (dim ", i, ": ", sa, " vs ", sb,
               "); make the sizes equal or 1, e.g. with unsqueeze/expand/reshape");
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t n = std::max<int64_t>(ndim, 1);  // a 0-dim tensor accepts dim 0 / -1
  KILN_CHECK(dim >= -n && dim < n, op, ": dim ", dim, " is out of range for a tensor with ", ndim,
             " dims; use a dim in [", -n, ", ", n - 1, "]");
  return dim < 0 ? dim + n : dim;
}

std::vector<int64_t> wrap_dims(const std::vector<int64_t>& dims, int64_t ndim, const char* op) {
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(wrap_dim(d, ndim, op));
  std::sort(out.begin(), out.end());
  KILN_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), op, ": dim list ", shape_str(dims),
             " names a dim twice; list each dim once");
  if (ndim == 0) out.clear();
  return out;
}

}  // namespace kiln
