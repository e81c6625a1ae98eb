// bfloat16 regions that run in float32 anyway, computed in float32 (float32_regions.h).
#include "compiler/passes/float32_regions.h"

#include <string>
#include <vector>

#include "compiler/graph/rebuilder.h"
#include "compiler/graph/rewrite.h"
#include "compiler/passes/dead_code.h"
#include "ops/conv_fused.h"
#include "ops/matmul_precision.h"

namespace kiln::compiler {
namespace {

bool plain_op(const Node& n) { return n.kind == NodeKind::Op && n.attr_inputs.empty(); }
bool bf16_cpu(const ValueType& t) { return t.dtype == DType::BFloat16 && t.device == Device::cpu(); }

// The attributes blocked_layouts gives convolutions and pools: such a node
// computes in float32's nChw16c already (this pass runs first; the check
// keeps it correct on any graph).
bool has_layout_attr(const Node& n) {
  for (const char* a : {"in_layout", "out_layout", "grad_out_layout", "input_layout", "grad_input_layout",
                        "output_layout", "grad_output_layout", "layout"})
    if (n.attrs.has(a)) return true;
  return false;
}

bool has_bias(const Node& n) { return n.op == OpId::conv2d && n.inputs.size() > 2 && n.inputs[2] != kNoValue; }

bool is_convolution(OpId op) {
  return op == OpId::conv2d || op == OpId::conv2d_backward_input || op == OpId::conv2d_backward_weight;
}

// A CPU convolution or matrix product with bfloat16 operands and output and
// no layout attributes: a layer whose precision the ops chose per shape.
bool bf16_layer(const Graph& g, const Node& n) {
  if (!plain_op(n) || has_layout_attr(n)) return false;
  if (!is_convolution(n.op) && n.op != OpId::matmul && n.op != OpId::linear) return false;
  if (!bf16_cpu(g.type(n.outputs[0]))) return false;
  for (ValueId v : n.inputs)
    if (v != kNoValue && !bf16_cpu(g.type(v))) return false;
  return true;
}

// Whether a bfloat16 layer computes in float32: one this CPU runs in float32
// anyway (conv_bf16_runs_float32, matmul_bf16_runs_float32), or, asked
// `among_float32` (its operands float32 values), also one whose bfloat16
// kernel won its timing only by saving the casts it would need the other way
// there (conv_bf16_loses_among_float32, matmul_bf16_loses_among_float32).
bool float32_wins(const Graph& g, const Node& n, bool among_float32, Float32Regions which) {
  if (!bf16_layer(g, n)) return false;
  if (which == Float32Regions::Everywhere) return true;
  const ValueType& a = g.type(n.inputs[0]);
  const ValueType& b = g.type(n.inputs[1]);
  if (is_convolution(n.op))
    return among_float32 ? conv_bf16_loses_among_float32(n.op, a.shape, b.shape, has_bias(n), n.attrs)
                         : conv_bf16_runs_float32(n.op, a.shape, b.shape, has_bias(n), n.attrs);
  return among_float32 ? matmul_bf16_loses_among_float32(n.op, a.shape, a.strides, b.shape, b.strides)
                       : matmul_bf16_runs_float32(n.op, a.shape, a.strides, b.shape, b.strides);
}

// Ops that compute in whatever floating dtype their operands have and cost
// no more in float32 than around casts: inside a float32 region they run on
// its float32 values (max-pool keeps its values: rounding is monotone; batch
// norm computes its statistics in float32 either way), so the float32 passes
// after this one (fuse_norm_activation, blocked_layouts) see them too.
bool follows_operands(OpId op) {
  switch (op) {
    case OpId::relu:
    case OpId::relu_backward:
    case OpId::gelu:
    case OpId::gelu_backward:
    case OpId::max_pool2d:
    case OpId::max_pool2d_backward:
    case OpId::view:
    case OpId::reshape:
    case OpId::sum:
    case OpId::add:
    case OpId::batch_norm:
    case OpId::batch_norm_backward:
      return true;
    default:
      return false;
  }
}

// The nodes writing each storage (by alias root), in graph order.
class Writes {
 public:
  explicit Writes(const Graph& g) : by_root_(g.values.size()) {
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (size_t k : mutated_inputs(g.nodes[i]))
        by_root_[static_cast<size_t>(alias_root(g, g.nodes[i].inputs[k]))].push_back(static_cast<int>(i));
  }
  // Whether a node strictly between `after` and `before` writes `root`'s storage.
  bool between(ValueId root, int after, int before) const {
    for (int w : by_root_[static_cast<size_t>(root)])
      if (w > after && w < before) return true;
    return false;
  }

 private:
  std::vector<std::vector<int>> by_root_;
};

// A bfloat16 value's float32 counterpart in the new graph: the float32 value
// it was cast from (root: that value's storage, `since`: the cast's node) or
// the float32 result this pass computed in its place (root kNoValue).
struct Wide {
  ValueId value = kNoValue;
  ValueId root = kNoValue;
  int since = -1;
};

Attrs without(const Attrs& a, std::string_view name) {
  Attrs out;
  for (const auto& [k, v] : a.items())
    if (k != name) out.set(k, v);
  return out;
}

class Widener {
 public:
  Widener(const Graph& g, Graph& out, Float32Regions which)
      : g_(g),
        which_(which),
        rb_(g, out),
        mutated_(mutated_storage(g)),
        writes_(g),
        wide_(g.values.size()),
        cast_up_(g.values.size(), kNoValue) {}

  int run() {
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node& n = g_.nodes[i];
      at_ = static_cast<int>(i);
      if (float32_wins(g_, n, false, which_) || loses_among_float32(n)) {
        product(n);
      } else if (plain_op(n) && n.op == OpId::cast) {
        cast(n);
      } else if (!follows(n) || !widen(n)) {
        rb_.copy_node(n);
      }
    }
    return widened_;
  }
  ValueId mapped(ValueId v) const { return rb_.mapped(v); }

 private:
  bool available(ValueId v) const {
    const Wide& w = wide_[static_cast<size_t>(v)];
    return w.value != kNoValue && (w.root == kNoValue || !writes_.between(w.root, w.since, at_));
  }
  // The float32 value of bfloat16 `v` at the current node: its counterpart,
  // or `v` cast up (what the bfloat16 op did inside on every call), once
  // for all the float32 readers of a value never written in place.
  ValueId float32_of(ValueId v) {
    if (available(v)) return wide_[static_cast<size_t>(v)].value;
    const size_t i = static_cast<size_t>(v);
    if (cast_up_[i] != kNoValue && !mutated_[i]) return cast_up_[i];
    cast_up_[i] = rb_.op(OpId::cast, {rb_.mapped(v)}, Attrs().set("dtype", DType::Float32));
    return cast_up_[i];
  }
  // `old` (bfloat16) is now float32 value `f`, rounded for its readers.
  void round(ValueId old, ValueId f) {
    rb_.set(old, rb_.op(OpId::cast, {f}, Attrs().set("dtype", DType::BFloat16)));
    if (!mutated_[static_cast<size_t>(old)]) wide_[static_cast<size_t>(old)] = {f, kNoValue, -1};
  }

  void product(const Node& n) {
    rb_.begin(n);
    std::vector<ValueId> ins;
    for (ValueId v : n.inputs) ins.push_back(v == kNoValue ? kNoValue : float32_of(v));
    Attrs attrs = n.attrs;
    std::string act;
    // The bfloat16 op ran a float32 layer's activation after the convolution
    // where the post-op would cost oneDNN its algorithm (GELU on Winograd):
    // so does the float32 graph, as a node of its own.
    if (n.op == OpId::conv2d && attrs.has("activation") &&
        !conv2d_post_op_pays(g_.type(n.inputs[0]).shape, g_.type(n.inputs[1]).shape, has_bias(n),
                             conv2d_params(attrs), attrs.s("activation"))) {
      act = attrs.s("activation");
      attrs = without(attrs, "activation");
    }
    ValueId y = rb_.op(n.op, std::move(ins), std::move(attrs));
    if (act == "relu") y = rb_.op(OpId::relu, {y});
    if (act == "gelu") y = rb_.op(OpId::gelu, {y}, Attrs().set("approximate", std::string("none")));
    round(n.outputs[0], y);
    ++widened_;
  }

  // A layer float32_wins among float32 values whose operands are all
  // float32 values here.
  bool loses_among_float32(const Node& n) const {
    if (!float32_wins(g_, n, true, which_)) return false;
    for (ValueId v : n.inputs)
      if (v != kNoValue && !available(v)) return false;
    return true;
  }

  // An op of follows_operands with a bfloat16 operand that has a float32
  // counterpart here (its other bfloat16 operands are cast up: a residual
  // add of a bfloat16 branch keeps the float32 stream float32; its other
  // floating operands are float32 already: batch norm's parameters and
  // statistics), and whose bfloat16 outputs are never written in place.
  bool follows(const Node& n) const {
    if (!plain_op(n) || has_layout_attr(n) || !follows_operands(n.op)) return false;
    bool any = false;
    for (ValueId v : n.inputs) {
      if (v == kNoValue || !is_floating(g_.type(v).dtype)) continue;
      const ValueType& t = g_.type(v);
      if (t.device != Device::cpu()) return false;
      if (t.dtype == DType::Float32) continue;
      if (t.dtype != DType::BFloat16) return false;
      any = any || available(v);
    }
    for (ValueId o : n.outputs) {
      const ValueType& t = g_.type(o);
      if (t.dtype == DType::BFloat16 && mutated_[static_cast<size_t>(o)]) return false;
    }
    return any;
  }
  // `n` on the float32 counterparts; false (the node emitted is left for
  // dead_code) where its shape rule does not give float32 outputs for the
  // bfloat16 ones and the same dtypes for the others, of the same shapes (an
  // op with a dtype of its own).
  bool widen(const Node& n) {
    rb_.begin(n);
    std::vector<ValueId> ins;
    for (ValueId v : n.inputs)
      ins.push_back(v == kNoValue ? kNoValue : g_.type(v).dtype == DType::BFloat16 ? float32_of(v) : rb_.mapped(v));
    const std::vector<ValueId> outs = rb_.ops(n.op, std::move(ins), n.attrs);
    if (outs.size() != n.outputs.size()) return false;
    for (size_t o = 0; o < outs.size(); ++o) {
      const ValueType& was = g_.type(n.outputs[o]);
      const ValueType& now = rb_.type(outs[o]);
      const DType want = was.dtype == DType::BFloat16 ? DType::Float32 : was.dtype;
      if (now.dtype != want || now.shape != was.shape) return false;
    }
    for (size_t o = 0; o < outs.size(); ++o) {
      if (g_.type(n.outputs[o]).dtype == DType::BFloat16) round(n.outputs[o], outs[o]);
      else rb_.set(n.outputs[o], outs[o]);
    }
    ++widened_;
    return true;
  }

  // A cast down from float32 makes a counterpart; a cast up of a value with
  // one reads it instead (the rounding in between dropped).
  void cast(const Node& n) {
    const ValueId x = n.inputs[0], y = n.outputs[0];
    const ValueType& from = g_.type(x);
    const ValueType& to = g_.type(y);
    if (to.dtype == DType::Float32 && bf16_cpu(from) && available(x)) {
      const ValueType& w = rb_.type(wide_[static_cast<size_t>(x)].value);
      if (w.shape == to.shape && w.strides == to.strides && w.symbolic_dims == to.symbolic_dims &&
          w.device == to.device) {
        rb_.set(y, wide_[static_cast<size_t>(x)].value);
        return;
      }
    }
    rb_.copy_node(n);
    if (bf16_cpu(to) && from.dtype == DType::Float32 && !mutated_[static_cast<size_t>(y)])
      wide_[static_cast<size_t>(y)] = {rb_.mapped(x), alias_root(g_, x), at_};
  }

  const Graph& g_;
  Float32Regions which_;
  Rebuilder rb_;
  std::vector<bool> mutated_;
  Writes writes_;
  std::vector<Wide> wide_;
  std::vector<ValueId> cast_up_;  // per bfloat16 value without a counterpart: its cast up, once made
  int at_ = 0;
  int widened_ = 0;
};

}  // namespace

int count_bfloat16_layers(const Graph& g) {
  int n = 0;
  for (const Node& node : g.nodes) n += bf16_layer(g, node) ? 1 : 0;
  return n;
}

int compute_float32_regions(Graph& g, Float32Regions which) {
  // A region starts at a layer that runs float32 anyway, or at one whose
  // bfloat16 only saves casts (when its operands turn out to be float32).
  bool any = false;
  for (const Node& n : g.nodes) any = any || float32_wins(g, n, true, which);  // true also where it runs float32 anyway
  if (!any) return 0;
  Graph out;
  int widened = 0;
  {
    Widener w(g, out, which);
    widened = w.run();
    for (ValueId v : g.outputs) out.outputs.push_back(w.mapped(v));
  }
  out.name = g.name;
  g = std::move(out);
  eliminate_dead_code(g);
  return widened;
}

}  // namespace kiln::compiler
