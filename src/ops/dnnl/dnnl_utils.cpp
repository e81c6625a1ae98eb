#include "ops/dnnl/dnnl_utils.h"

#include <map>
#include <mutex>

namespace kiln::onednn {

dnnl::engine& cpu_engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

dnnl::stream& cpu_stream() {
  static dnnl::stream s(cpu_engine());
  return s;
}

namespace {
struct Cache {
  std::mutex mu;
  std::map<PrimitiveKey, std::shared_ptr<void>> entries;
};
Cache& cache() {
  static Cache* c = new Cache();  // lives to exit: tensors and primitives may outlive statics
  return *c;
}
}  // namespace

std::shared_ptr<void> cache_lookup(const PrimitiveKey& key) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.entries.find(key);
  return it == c.entries.end() ? nullptr : it->second;
}

void cache_insert(const PrimitiveKey& key, std::shared_ptr<void> entry) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.entries.emplace(key, std::move(entry));
}

size_t cache_size() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.entries.size();
}

Tensor buffer_for(const dnnl::memory::desc& md) {
  size_t n = md.get_size();
  return Tensor::empty({static_cast<int64_t>(n == 0 ? 1 : n)}, DType::UInt8);
}

dnnl::memory wrap(const dnnl::memory::desc& md, const Tensor& t) {
  return dnnl::memory(md, cpu_engine(), t.data_ptr());
}

dnnl::memory make_buffer(const dnnl::memory::desc& md, Tensor& holder) {
  holder = buffer_for(md);
  return wrap(md, holder);
}

Reorder Reorder::make(const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
  Reorder r;
  if (from == to) return r;
  r.needed = true;
  r.prim = dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), from, cpu_engine(), to));
  return r;
}

void Reorder::run(const dnnl::memory& from, const dnnl::memory& to) const {
  prim.execute(cpu_stream(), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
}

dnnl::memory::dims to_dims(const Shape& s) { return dnnl::memory::dims(s.begin(), s.end()); }

}  // namespace kiln::onednn
