// An eval max-pool and its batch norm as one generated kernel (fuse_pool_norm.h).
#include "compiler/passes/fuse_pool_norm.h"

#include <string>
#include <unordered_map>

#include "compiler/graph/rebuilder.h"
#include "compiler/graph/rewrite.h"
#include "compiler/passes/eval_norm.h"
#include "ops/blocked_layout.h"
#include "ops/pool_attrs.h"

namespace kiln::compiler {
namespace {

bool is_blocked(const Node& n, const char* attr) { return n.attrs.has(attr) && n.attrs.s(attr) == kNChw16c; }

// A node's output nothing reads (not a graph output either).
bool unread(const ReadFacts& facts, ValueId v) {
  return v == kNoValue || (facts.readers(v).empty() && facts.private_value(v));
}

// A 2x2, stride-2 window in floor mode, no padding, dilation or indices
// (absent attributes mean max_pool2d's defaults: stride = kernel_size).
bool plain_2x2_pool(const Node& pool) {
  const Attrs& a = pool.attrs;
  const std::vector<int64_t> two{2, 2};
  auto is = [&a](const char* name, const std::vector<int64_t>& value, bool absent_ok) {
    return a.has(name) ? a.ints(name) == value : absent_ok;
  };
  return is("kernel_size", two, false) && is("stride", two, true) && is("padding", {0, 0}, true) &&
         is("dilation", {1, 1}, true) && !(a.has("ceil_mode") && a.b("ceil_mode")) && !wants_max_pool_indices(a);
}

// The max_pool2d node that batch norm `bn` fuses with, or -1.
int fusable_pool(const Graph& g, const Node& bn, const ReadFacts& facts) {
  if (!plain_op(bn, OpId::batch_norm) || bn.attrs.b("training") || !is_blocked(bn, "layout")) return -1;
  if (bn.inputs.size() != 5 || bn.inputs[3] == kNoValue || bn.inputs[4] == kNoValue) return -1;
  if (!unread(facts, bn.outputs[1]) || !unread(facts, bn.outputs[2])) return -1;
  if (bn.attrs.has("activation") && bn.attrs.s("activation") != "relu" && bn.attrs.s("activation") != "gelu")
    return -1;
  const ValueId y = bn.inputs[0];
  const Node& pool = g.producer(y);
  if (!plain_op(pool, OpId::max_pool2d) || !plain_2x2_pool(pool)) return -1;
  if (!is_blocked(pool, "input_layout") || !is_blocked(pool, "output_layout") || pool.attrs.has("channels")) return -1;
  if (facts.readers(y).size() != 1 || !facts.private_value(y) || !unread(facts, pool.outputs[1]))
    return -1;  // the pool goes: its (empty, indices=false) second output must be unread too
  const ValueType& x = g.type(pool.inputs[0]);
  const ValueType& t = g.type(y);
  if (x.dtype != DType::Float32 || t.dtype != DType::Float32 || x.device != Device::cpu()) return -1;
  if (x.shape.size() != 5 || t.shape.size() != 5 || x.shape[4] != kChannelBlock) return -1;
  const int64_t channels = x.shape[1] * kChannelBlock;
  for (size_t k = 1; k < 5; ++k)
    if (ValueId v = bn.inputs[k];
        v != kNoValue && (g.type(v).dtype != DType::Float32 || g.type(v).shape != Shape{channels}))
      return -1;
  return g.values[static_cast<size_t>(y)].node;
}

}  // namespace

int fuse_pool_norms(Graph& g) {
  const ReadFacts facts(g);
  std::unordered_map<int, int> pool_of_bn;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (int p = fusable_pool(g, g.nodes[i], facts); p >= 0) pool_of_bn[static_cast<int>(i)] = p;
  return fuse_pairs(g, pool_of_bn, [&g](Rebuilder& rb, const Node& bn, const Node& pool) {
    const ValueId x = rb.mapped(pool.inputs[0]);
    const Shape& pooled = g.type(bn.inputs[0]).shape;  // [N, C/16, OH, OW, 16]
    // x[:, :, a::2, b::2, :], OH x OW of them: the window's element (a, b).
    auto window_element = [&](int64_t a, int64_t b) {
      auto every_other = [&](ValueId v, int64_t dim, int64_t start, int64_t count) {
        return rb.op(OpId::slice, {v}, Attrs().set("dim", dim).set("start", start).set("end", start + 2 * count - 1)
                                           .set("step", int64_t{2}));
      };
      return every_other(every_other(x, 2, a, pooled[2]), 3, b, pooled[3]);
    };
    ValueId m = rb.op(OpId::maximum, {rb.op(OpId::maximum, {window_element(0, 0), window_element(0, 1)}),
                                      rb.op(OpId::maximum, {window_element(1, 0), window_element(1, 1)})});
    const ValueId scale = eval_norm_scale(rb, g, bn);
    const ValueId shift = eval_norm_shift(rb, bn, scale, kNoValue);
    const Shape lanes{1, pooled[1], 1, 1, kChannelBlock};
    ValueId y = rb.op(OpId::add, {rb.op(OpId::mul, {m, rb.op(OpId::view, {scale}, Attrs().set("shape", lanes))}),
                                  rb.op(OpId::view, {shift}, Attrs().set("shape", lanes))});
    if (bn.attrs.has("activation")) {
      const std::string act = bn.attrs.s("activation");
      y = act == "relu" ? rb.op(OpId::relu, {y})
                        : rb.op(OpId::gelu, {y}, Attrs().set("approximate", std::string("none")));
    }
    return y;
  });
}

}  // namespace kiln::compiler
