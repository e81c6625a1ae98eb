#include "kiln/memory_format.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "kiln/ops.h"
#include "ops/op_def.h"

namespace kiln {

const char* memory_format_name(MemoryFormat format) {
  return format == MemoryFormat::ChannelsLast ? "channels_last" : "contiguous";
}

Shape channels_last_strides(const Shape& shape) {
  KILN_CHECK(shape.size() == 4, "channels-last layout: needs a 4-d [N, C, H, W] shape, got ", shape_str(shape),
             "; use MemoryFormat::Contiguous for other ranks");
  Shape nhwc = contiguous_strides({shape[0], shape[2], shape[3], shape[1]});
  return {nhwc[0], nhwc[3], nhwc[1], nhwc[2]};
}

bool is_dense_in(const Shape& shape, const Shape& strides, MemoryFormat format) {
  const int64_t n = static_cast<int64_t>(shape.size());
  if (format == MemoryFormat::ChannelsLast && n != 4) return false;
  // An empty tensor holds no element to lay out: dense in every format (as
  // torch's is_contiguous), whatever strides its views left it.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return true;
  static constexpr int64_t kNhwc[4] = {0, 2, 3, 1};  // NCHW dims in NHWC memory order
  int64_t expected = 1;
  for (int64_t k = n - 1; k >= 0; --k) {
    const int64_t d = format == MemoryFormat::ChannelsLast ? kNhwc[k] : k;
    if (shape[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

bool is_contiguous(const Tensor& t, MemoryFormat format) {
  if (format == MemoryFormat::Contiguous) return t.is_contiguous();
  return is_dense_in(t.shape(), t.strides(), format);
}

MemoryFormat suggest_memory_format(const Tensor& t) {
  if (t.dim() == 4 && !t.is_contiguous() && is_dense_in(t.shape(), t.strides(), MemoryFormat::ChannelsLast))
    return MemoryFormat::ChannelsLast;
  return MemoryFormat::Contiguous;
}

Tensor contiguous(const Tensor& x, MemoryFormat format) {
  if (format == MemoryFormat::Contiguous) return contiguous(x);
  return dispatch1(OpId::contiguous, {x}, Attrs().set("memory_format", std::string(memory_format_name(format))));
}

Tensor empty(const Shape& shape, DType dtype, Device device, MemoryFormat format) {
  if (format == MemoryFormat::Contiguous) return Tensor::empty(shape, dtype, device);
  return empty_strided(shape, channels_last_strides(shape), dtype, device);
}

Tensor empty_strided(const Shape& shape, const Shape& strides, DType dtype, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  if (strides.empty()) return t;
  KILN_CHECK(strides.size() == shape.size(), "empty_strided: ", shape.size(), " sizes but ", strides.size(),
             " strides");
  // Dense: some order of the dims gives contiguous strides over it. A
  // zero-size dim counts as 1, as contiguous_strides and
  // channels_last_strides count it, so an empty channels-last tensor is made.
  std::vector<size_t> order(shape.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return strides[a] > strides[b]; });
  int64_t expected = 1;
  for (size_t k = order.size(); k-- > 0;) {
    const size_t d = order[k];
    if (shape[d] == 1) continue;
    KILN_CHECK(strides[d] == expected, "empty_strided: strides ", shape_str(strides), " do not lay shape ",
               shape_str(shape), " out densely; pass a permutation of contiguous strides");
    expected *= std::max<int64_t>(shape[d], 1);
  }
  t.impl()->strides = strides;
  return t;
}

}  // namespace kiln
