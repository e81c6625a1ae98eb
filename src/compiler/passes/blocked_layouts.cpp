// nChw16c values between the convolutions (blocked_layouts.h).
#include "compiler/passes/blocked_layouts.h"

#include <algorithm>
#include <string>
#include <vector>

#include "compiler/graph/rewrite.h"
#include "ops/blocked_layout.h"
#include "ops/conv_fused.h"
#include "ops/op_def.h"

namespace kiln::compiler {
namespace {

// One place where a node reads or writes a value (input or output `index`).
struct Port {
  bool output;
  size_t index;
  bool indices = false;  // a max-pool's int64 indices (other ports of named groups are float32)
};
constexpr size_t kNone = std::string::npos;

// A set of a node's ports that take the layout together, named by the
// attribute that says so ("" for pointwise ops, whose operands simply have
// the blocked shape, of any dtype), and the port that must be blocked for
// it to be (none: needs.index == kNone).
struct PortGroup {
  const char* attr;
  std::vector<Port> ports;
  Port needs{false, kNone};
  bool padded = false;  // its ports may hold a value of channels not a multiple of 16 (padded_blocked_shape)
};

// Whether the value at port p of group grp has the dtype the group's op takes blocked.
bool dtype_fits(const PortGroup& grp, Port p, DType d) {
  if (grp.attr[0] == '\0') return true;
  return d == (p.indices ? DType::Int64 : DType::Float32);
}

bool padded_channels(const ValueType& t) { return t.shape.size() == 4 && t.shape[1] % kChannelBlock != 0; }

// Which sides of a plain conv2d node take padded nChw16c values as they are
// (asked only where one of them has channels not a multiple of 16).
PaddedBlockedSides padded_sides(const Graph& g, const Node& n) {
  const ValueType& x = g.type(n.inputs[0]);
  if (!padded_channels(x) && !padded_channels(g.type(n.outputs[0]))) return {};
  if (x.dtype != DType::Float32 || x.device != Device::cpu() || x.symbolic_dims != 0) return {};
  const bool bias = n.inputs.size() > 2 && n.inputs[2] != kNoValue;
  return conv2d_keeps_padded_blocked(x.shape, g.type(n.inputs[1]).shape, bias, n.attrs);
}

// The port groups of node n that can hold nChw16c values; every other port
// of the node cannot.
std::vector<PortGroup> port_groups(const Graph& g, const Node& n) {
  if (n.kind != NodeKind::Op || !n.attr_inputs.empty()) return {};
  auto in = [](size_t i) { return Port{false, i}; };
  auto out = [](size_t i) { return Port{true, i}; };
  switch (n.op) {
    case OpId::conv2d: {  // with a residual (input 3), that takes the output's layout
      const PaddedBlockedSides padded = padded_sides(g, n);
      if (n.inputs.size() > 3 && n.inputs[3] != kNoValue)
        return {{"in_layout", {in(0)}, {false, kNone}, padded.src}, {"out_layout", {out(0), in(3)}}};
      return {{"in_layout", {in(0)}, {false, kNone}, padded.src}, {"out_layout", {out(0)}, {false, kNone}, padded.dst}};
    }
    case OpId::conv2d_backward_input: return {{"grad_out_layout", {in(0)}}, {"grad_input_layout", {out(0)}}};
    case OpId::conv2d_backward_weight: return {{"grad_out_layout", {in(0)}}, {"input_layout", {in(1)}}};
    case OpId::max_pool2d: {  // a padded input pools into a plain output (the attribute channels says how many)
      std::vector<PortGroup> r{{"input_layout", {in(0)}, {false, kNone}, true}, {"output_layout", {out(0)}, in(0)}};
      if (g.type(n.outputs[1]).shape.size() == 4) r[1].ports.push_back({true, 1, true});  // the indices, when made
      return r;
    }
    case OpId::max_pool2d_backward:
      return {{"grad_input_layout", {out(0)}}, {"grad_output_layout", {in(0), {false, 1, true}}, out(0)}};
    case OpId::batch_norm:  // with a fused residual (input 5), that too
      if (n.inputs.size() > 5 && n.inputs[5] != kNoValue) return {{"layout", {in(0), in(5), out(0)}}};
      return {{"layout", {in(0), out(0)}}};
    case OpId::batch_norm_backward: return {{"layout", {in(0), in(1), out(0)}}};
    default: break;
  }
  // A pointwise op means the same on blocked operands when each tensor
  // operand has its output's shape (those join the group) or is a single
  // broadcast value.
  if (op_kind(n.op) != OpKind::Pointwise || n.outputs.size() != 1) return {};
  PortGroup grp{"", {out(0)}};
  const Shape& shape = g.type(n.outputs[0]).shape;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (n.inputs[i] == kNoValue) continue;
    const Shape& s = g.type(n.inputs[i]).shape;
    if (s == shape) grp.ports.push_back(in(i));
    else if (std::any_of(s.begin(), s.end(), [](int64_t d) { return d != 1; })) return {};
  }
  return {grp};
}

// A contiguous 4-D NCHW value with no symbolic dim but the batch: what
// nChw16c can hold (padded where the channels are not a multiple of 16).
bool blockable(const ValueType& t) {
  return t.device == Device::cpu() && t.shape.size() == 4 && t.shape[1] > 0 &&
         (t.symbolic_dims & ~uint64_t{1}) == 0 && t.strides == contiguous_strides(t.shape);
}

ValueId value_at(const Node& n, Port p) { return p.output ? n.outputs[p.index] : n.inputs[p.index]; }

}  // namespace

int keep_blocked_layouts(Graph& g) {
  const size_t nv = g.values.size();
  std::vector<std::vector<PortGroup>> groups(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) groups[i] = port_groups(g, g.nodes[i]);

  // Start from every value that may be blocked: blockable, not a graph
  // output, its storage never written in place, and every port that touches
  // it (its producer's and each reader's, none for an unread pool's indices)
  // in some group of its dtype.
  std::vector<bool> blocked(nv, false);
  for (size_t v = 0; v < nv; ++v) blocked[v] = blockable(g.values[v].type);
  for (ValueId v : g.outputs) blocked[static_cast<size_t>(v)] = false;
  const std::vector<bool> mutated = mutated_storage(g);
  for (size_t v = 0; v < nv; ++v)
    if (mutated[v]) blocked[v] = false;
  std::vector<int> grouped_ports(nv, 0), padded_ports(nv, 0), all_ports(nv, 0);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    for (ValueId v : n.inputs)
      if (v != kNoValue) ++all_ports[static_cast<size_t>(v)];
    for (ValueId v : n.outputs) ++all_ports[static_cast<size_t>(v)];
    for (const PortGroup& grp : groups[i])
      for (Port p : grp.ports)
        if (ValueId v = value_at(n, p); v != kNoValue && dtype_fits(grp, p, g.type(v).dtype)) {
          ++grouped_ports[static_cast<size_t>(v)];
          if (grp.padded) ++padded_ports[static_cast<size_t>(v)];
        }
  }
  // A padded value only between ports that keep its padding lanes zero and
  // read it without a reorder.
  for (size_t v = 0; v < nv; ++v)
    if (grouped_ports[v] != all_ports[v] || (padded_channels(g.values[v].type) && padded_ports[v] != all_ports[v]))
      blocked[v] = false;

  // A group is all blocked or none; a group that requires another port is
  // none without it. Each round only clears, so this ends.
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      for (const PortGroup& grp : groups[i]) {
        bool all = grp.needs.index == kNone || blocked[static_cast<size_t>(value_at(n, grp.needs))];
        for (Port p : grp.ports) all = all && blocked[static_cast<size_t>(value_at(n, p))];
        if (all) continue;
        for (Port p : grp.ports)
          if (std::vector<bool>::reference b = blocked[static_cast<size_t>(value_at(n, p))]; b) {
            b = false;
            changed = true;
          }
      }
    }
  }

  int made = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    for (const PortGroup& grp : groups[i])
      if (ValueId v = value_at(n, grp.ports[0]); grp.attr[0] != '\0' && blocked[static_cast<size_t>(v)]) {
        n.attrs.set(grp.attr, std::string(kNChw16c));
        if (n.op == OpId::max_pool2d && padded_channels(g.type(v))) n.attrs.set("channels", g.type(v).shape[1]);
      }
  }
  for (size_t v = 0; v < nv; ++v) {
    if (!blocked[v]) continue;
    ValueType& t = g.values[v].type;
    t.shape = padded_blocked_shape(t.shape, "blocked_layouts");
    t.strides = contiguous_strides(t.shape);
    t.symbolic_dims &= 1;
    ++made;
  }
  return made;
}

}  // namespace kiln::compiler
