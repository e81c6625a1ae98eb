// oneDNN glue shared by the extern ops (conv, matmul): the CPU engine and
// stream, a cache of built primitives keyed by everything that shapes them,
// and memory helpers that put oneDNN buffers in kiln tensors so that the
// caching allocator reuses them call after call.
#pragma once
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::onednn {

dnnl::engine& cpu_engine();
dnnl::stream& cpu_stream();

// Everything that determines a primitive: a kind tag first, then shapes,
// strides, parameters. Two calls with equal keys reuse one primitive.
using PrimitiveKey = std::vector<int64_t>;

enum class PrimitiveKind : int64_t { ConvForward = 1, ConvBackwardData, ConvBackwardWeights, Matmul };

// The explicit, documented cache of built primitives (building a conv
// primitive costs milliseconds; running a small one costs less). Entries
// live until exit; a training run has a few dozen distinct shapes.
std::shared_ptr<void> cache_lookup(const PrimitiveKey& key);
void cache_insert(const PrimitiveKey& key, std::shared_ptr<void> entry);
size_t cache_size();

template <typename Entry>
std::shared_ptr<Entry> cached(const PrimitiveKey& key, const std::function<std::shared_ptr<Entry>()>& build) {
  if (auto p = cache_lookup(key)) return std::static_pointer_cast<Entry>(p);
  std::shared_ptr<Entry> e = build();
  cache_insert(key, e);
  return e;
}

// A kiln tensor (uint8, from the caching allocator) large enough for `md`;
// keep it alive while the primitive that uses it runs.
Tensor buffer_for(const dnnl::memory::desc& md);
// A dnnl::memory over a kiln tensor's data (no copy).
dnnl::memory wrap(const dnnl::memory::desc& md, const Tensor& t);
// A dnnl::memory over a fresh buffer_for(md), which is returned in `holder`.
dnnl::memory make_buffer(const dnnl::memory::desc& md, Tensor& holder);

// A reorder between two layouts of one tensor, or nothing when they match.
struct Reorder {
  bool needed = false;
  dnnl::reorder prim;
  static Reorder make(const dnnl::memory::desc& from, const dnnl::memory::desc& to);
  void run(const dnnl::memory& from, const dnnl::memory& to) const;
};

dnnl::memory::dims to_dims(const Shape& s);

}  // namespace kiln::onednn
