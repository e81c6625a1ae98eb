// Fusing ReLU/GELU and their backward into batch norm (fuse_norm_activation.h).
#include "compiler/passes/fuse_norm_activation.h"

#include <optional>
#include <string>
#include <unordered_map>

#include "compiler/graph/rebuilder.h"
#include "compiler/graph/rewrite.h"

namespace kiln::compiler {
namespace {

// The activation name node `n` fuses as ("relu" | "gelu"), or nullptr.
const char* activation_name(const Node& n) {
  if (plain_op(n, OpId::relu)) return "relu";
  if (plain_op(n, OpId::gelu) && n.attrs.s("approximate") == "none") return "gelu";
  return nullptr;
}

// What one batch norm fuses: its activation node and, per backward it
// absorbs, the activation-backward node and the batch_norm_backward node;
// or, for batch norm -> add -> activation, the add node and its other operand.
struct Fusion {
  int act = -1;
  std::string name;
  std::vector<std::pair<int, int>> backward;  // (activation backward node, batch_norm_backward node)
  int add = -1;                  // the residual add, where the fused node goes (its operands exist there)
  ValueId residual = kNoValue;   // the add's other operand
};

class Matcher {
 public:
  explicit Matcher(const Graph& g) : g_(g), facts_(g) {}

  // The fusion for batch norm node `bn`, or nullopt.
  std::optional<Fusion> match(int bn_index) const {
    const Node& bn = g_.nodes[static_cast<size_t>(bn_index)];
    if (!plain_op(bn, OpId::batch_norm) || bn.attrs.has("activation") || bn.attrs.has("layout")) return std::nullopt;
    const ValueId y = bn.outputs[0];
    const ValueType& t = g_.type(y);
    if (t.dtype != DType::Float32 || t.device != Device::cpu() || !private_value(y)) return std::nullopt;
    if (std::optional<Fusion> f = match_residual(bn_index)) return f;
    Fusion f;
    for (int r : readers(y))
      if (const char* name = activation_name(g_.nodes[static_cast<size_t>(r)]); name && f.act < 0) {
        f.act = r;
        f.name = name;
      }
    if (f.act < 0) return std::nullopt;
    const ValueId z = g_.nodes[static_cast<size_t>(f.act)].outputs[0];
    if (facts_.mutated(z)) return std::nullopt;
    // Every other reader of y must be gelu's backward into this norm's backward.
    for (int r : readers(y)) {
      if (r == f.act) continue;
      const int bb = f.name == "gelu" ? fusable_backward(bn, r, y) : -1;
      if (bb < 0) return std::nullopt;
      f.backward.emplace_back(r, bb);
    }
    // relu's backward reads relu's output instead; fuse where it can.
    if (f.name == "relu")
      for (int r : readers(z))
        if (int bb = fusable_backward(bn, r, z); bb >= 0) f.backward.emplace_back(r, bb);
    return f;
  }

 private:
  // y read by one add of a same-shape, same-type operand r, whose sum only a
  // relu reads (ResNet's block tail: its backward reads the relu's output, so
  // nothing needs y or the sum later). The fused node goes where the add was,
  // where r exists; nothing between may read the statistics or the running
  // buffers the batch norm updates.
  std::optional<Fusion> match_residual(int bn_index) const {
    const Node& bn = g_.nodes[static_cast<size_t>(bn_index)];
    const ValueId y = bn.outputs[0];
    if (readers(y).size() != 1) return std::nullopt;
    const int add = readers(y)[0];
    const Node& an = g_.nodes[static_cast<size_t>(add)];
    if (!plain_op(an, OpId::add) || an.inputs.size() != 2 || !an.attrs.items().empty()) return std::nullopt;
    const ValueId r = an.inputs[0] == y ? an.inputs[1] : an.inputs[0];
    if (r == y || g_.type(r).shape != g_.type(y).shape || g_.type(r).dtype != DType::Float32 ||
        g_.type(r).device != Device::cpu() || g_.type(r).strides != g_.type(y).strides)
      return std::nullopt;
    const ValueId s = an.outputs[0];
    if (!private_value(s) || readers(s).size() != 1) return std::nullopt;
    const Node& relu = g_.nodes[static_cast<size_t>(readers(s)[0])];
    if (!plain_op(relu, OpId::relu) || facts_.mutated(relu.outputs[0])) return std::nullopt;
    auto read_between = [&](ValueId v) {
      if (v == kNoValue) return false;
      for (int k : readers(v))
        if (k > bn_index && k < add) return true;
      return false;
    };
    for (ValueId v : {bn.outputs[1], bn.outputs[2], bn.inputs[3], bn.inputs[4]})
      if (read_between(v)) return std::nullopt;
    Fusion f;
    f.act = readers(s)[0];
    f.name = "relu";
    f.add = add;
    f.residual = r;
    return f;
  }

  const std::vector<int>& readers(ValueId v) const { return facts_.readers(v); }
  bool private_value(ValueId v) const { return facts_.private_value(v); }

  // The batch_norm_backward node that activation-backward node `k` (reading
  // `saved`, y for gelu or relu's output for relu) feeds alone, when it is
  // `bn`'s backward; else -1.
  int fusable_backward(const Node& bn, int k, ValueId saved) const {
    const Node& kn = g_.nodes[static_cast<size_t>(k)];
    const bool gelu = plain_op(kn, OpId::gelu_backward) && kn.attrs.s("approximate") == "none";
    if (!gelu && !plain_op(kn, OpId::relu_backward)) return -1;
    if (kn.inputs.size() != 2 || kn.inputs[1] != saved || kn.inputs[0] == saved) return -1;
    const ValueId gy = kn.outputs[0];
    if (!private_value(gy) || readers(gy).size() != 1) return -1;
    const int bb = readers(gy)[0];
    const Node& b = g_.nodes[static_cast<size_t>(bb)];
    if (!plain_op(b, OpId::batch_norm_backward) || b.attrs.has("activation") || b.attrs.has("layout")) return -1;
    if (b.inputs.size() != 5 || b.inputs[0] != gy || b.inputs[1] != bn.inputs[0] || b.inputs[2] != bn.inputs[1] ||
        b.inputs[3] != bn.outputs[1] || b.inputs[4] != bn.outputs[2])
      return -1;
    return bb;
  }

  const Graph& g_;
  ReadFacts facts_;
};

}  // namespace

int fuse_norm_activations(Graph& g) {
  const Matcher matcher(g);
  std::unordered_map<int, Fusion> fused;          // batch_norm node -> what it absorbs
  std::unordered_map<int, int> norm_at;           // node where a fused batch_norm goes -> the batch_norm node
  std::unordered_map<int, int> norm_of_backward;  // fused batch_norm_backward node -> its batch_norm node
  std::vector<bool> dropped(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    std::optional<Fusion> f = matcher.match(static_cast<int>(i));
    // An add of two batch norms (ResNet's downsampling block): the first takes it.
    if (!f || (f->add >= 0 && norm_at.count(f->add))) continue;
    dropped[i] = true;  // emitted at norm_at
    norm_at[f->add >= 0 ? f->add : static_cast<int>(i)] = static_cast<int>(i);
    if (f->add >= 0) dropped[static_cast<size_t>(f->add)] = true;
    dropped[static_cast<size_t>(f->act)] = true;
    for (auto [k, bb] : f->backward) {
      dropped[static_cast<size_t>(k)] = true;
      norm_of_backward[bb] = static_cast<int>(i);
    }
    fused.emplace(static_cast<int>(i), std::move(*f));
  }
  if (fused.empty()) return 0;
  Graph out;
  {
    Rebuilder rb(g, out);
    auto mapped = [&](const std::vector<ValueId>& vs) {
      std::vector<ValueId> r;
      for (ValueId v : vs) r.push_back(rb.mapped(v));
      return r;
    };
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      if (auto at = norm_at.find(static_cast<int>(i)); at != norm_at.end()) {
        const Node& bn = g.nodes[static_cast<size_t>(at->second)];
        const Fusion& f = fused.at(at->second);
        rb.begin(bn);
        std::vector<ValueId> ins = mapped(bn.inputs);
        if (f.residual != kNoValue) {
          ins.resize(5, kNoValue);
          ins.push_back(rb.mapped(f.residual));
        }
        Attrs attrs = bn.attrs;
        attrs.set("activation", f.name);
        const std::vector<ValueId> outs = rb.ops(OpId::batch_norm, std::move(ins), std::move(attrs));
        // act(y [+ residual]) in the activation's place (y is gone); the statistics as they were.
        rb.set(g.nodes[static_cast<size_t>(f.act)].outputs[0], outs[0]);
        rb.set(bn.outputs[1], outs[1]);
        rb.set(bn.outputs[2], outs[2]);
        continue;
      }
      if (dropped[i]) continue;  // emitted inside a batch norm's node
      if (auto it = norm_of_backward.find(static_cast<int>(i)); it != norm_of_backward.end()) {
        const Node& bn = g.nodes[static_cast<size_t>(it->second)];
        const Node& k = g.producer(n.inputs[0]);  // the activation's backward
        rb.begin(n);
        std::vector<ValueId> ins = mapped(n.inputs);
        ins[0] = rb.mapped(k.inputs[0]);    // the activation's grad_out
        ins.push_back(rb.mapped(bn.inputs[2]));  // bias, to recompute y
        Attrs attrs = n.attrs;
        attrs.set("activation", fused.at(it->second).name);
        const std::vector<ValueId> outs = rb.ops(OpId::batch_norm_backward, std::move(ins), std::move(attrs));
        for (size_t o = 0; o < outs.size(); ++o) rb.set(n.outputs[o], outs[o]);
        continue;
      }
      rb.copy_node(n);
    }
    for (ValueId v : g.outputs) out.outputs.push_back(rb.mapped(v));
  }
  out.name = g.name;
  g = std::move(out);
  return static_cast<int>(fused.size());
}

}  // namespace kiln::compiler
