// Residual adds into the convolution before them (fuse_conv_residual.h).
#include "compiler/passes/fuse_conv_residual.h"

#include <optional>
#include <string>
#include <unordered_map>

#include "compiler/graph/rebuilder.h"
#include "compiler/graph/rewrite.h"
#include "ops/conv_fused.h"

namespace kiln::compiler {
namespace {

// What one add absorbs: the convolution, the other operand, and the relu after it.
struct Fusion {
  int conv = -1;
  ValueId residual = kNoValue;
  int relu = -1;  // -1: none
};

class Matcher {
 public:
  explicit Matcher(const Graph& g) : g_(g), facts_(g) {}

  std::optional<Fusion> match(int add_index) const {
    const Node& an = g_.nodes[static_cast<size_t>(add_index)];
    if (!plain_op(an, OpId::add) || an.inputs.size() != 2 || !an.attrs.items().empty()) return std::nullopt;
    for (int k = 0; k < 2; ++k)
      if (std::optional<Fusion> f = match_operand(an, an.inputs[static_cast<size_t>(k)],
                                                  an.inputs[static_cast<size_t>(1 - k)]))
        return f;
    return std::nullopt;
  }

 private:
  // The add's operand y as a convolution's output, r the residual.
  std::optional<Fusion> match_operand(const Node& an, ValueId y, ValueId r) const {
    if (y == r || !facts_.private_value(y) || facts_.readers(y).size() != 1) return std::nullopt;
    const Node& conv = g_.producer(y);
    if (!plain_op(conv, OpId::conv2d) || conv.inputs.size() > 3 || conv.attrs.has("activation")) return std::nullopt;
    if (conv.attrs.has("algorithm") && conv.attrs.s("algorithm") != "auto") return std::nullopt;
    const ValueType& ty = g_.type(y);
    const ValueType& tr = g_.type(r);
    if (ty.dtype != DType::Float32 || ty.device != Device::cpu() || tr.shape != ty.shape || tr.dtype != ty.dtype ||
        tr.device != ty.device || tr.strides != ty.strides || facts_.mutated(r))
      return std::nullopt;
    for (ValueId v : conv.inputs)
      if (v != kNoValue && facts_.mutated(v)) return std::nullopt;  // could change before the add
    Fusion f;
    f.conv = g_.values[static_cast<size_t>(y)].node;
    f.residual = r;
    const ValueId s = an.outputs[0];
    if (facts_.mutated(s)) return std::nullopt;
    if (facts_.private_value(s) && facts_.readers(s).size() == 1) {
      const int k = facts_.readers(s)[0];
      if (plain_op(g_.nodes[static_cast<size_t>(k)], OpId::relu) &&
          !facts_.mutated(g_.nodes[static_cast<size_t>(k)].outputs[0]))
        f.relu = k;
    }
    const bool bias = conv.inputs.size() > 2 && conv.inputs[2] != kNoValue;
    if (!conv2d_residual_post_op_pays(g_.type(conv.inputs[0]).shape, g_.type(conv.inputs[1]).shape, bias,
                                      conv2d_params(conv.attrs), f.relu >= 0 ? "relu" : ""))
      return std::nullopt;
    return f;
  }

  const Graph& g_;
  ReadFacts facts_;
};

}  // namespace

int fuse_conv_residuals(Graph& g) {
  const Matcher matcher(g);
  std::unordered_map<int, Fusion> fused;  // add node -> what it absorbs
  std::vector<bool> dropped(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    std::optional<Fusion> f = matcher.match(static_cast<int>(i));
    if (!f) continue;  // of two convolutions into one add (a downsampling block), the first operand's takes it
    dropped[static_cast<size_t>(f->conv)] = true;
    if (f->relu >= 0) dropped[static_cast<size_t>(f->relu)] = true;
    fused.emplace(static_cast<int>(i), *f);
  }
  if (fused.empty()) return 0;
  Graph out;
  {
    Rebuilder rb(g, out);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      auto it = fused.find(static_cast<int>(i));
      if (it == fused.end()) {
        if (!dropped[i]) rb.copy_node(n);
        continue;
      }
      const Fusion& f = it->second;
      const Node& conv = g.nodes[static_cast<size_t>(f.conv)];
      rb.begin(conv);
      std::vector<ValueId> ins;
      for (ValueId v : conv.inputs) ins.push_back(rb.mapped(v));
      ins.resize(3, kNoValue);
      ins.push_back(rb.mapped(f.residual));
      Attrs attrs = conv.attrs;
      if (f.relu >= 0) attrs.set("activation", std::string("relu"));
      const ValueId y = rb.op(OpId::conv2d, std::move(ins), std::move(attrs));
      rb.set(f.relu >= 0 ? g.nodes[static_cast<size_t>(f.relu)].outputs[0] : n.outputs[0], y);
    }
    for (ValueId v : g.outputs) out.outputs.push_back(rb.mapped(v));
  }
  out.name = g.name;
  g = std::move(out);
  return static_cast<int>(fused.size());
}

}  // namespace kiln::compiler
