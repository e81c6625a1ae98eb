// nChw16c values between the convolutions (blocked_layouts.h).
#include "compiler/passes/blocked_layouts.h"

#include <algorithm>
#include <string>
#include <vector>

#include "compiler/graph/rebuilder.h"
#include "compiler/graph/rewrite.h"
#include "compiler/lower/small_conv.h"
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
  // A padded value costs it work per padding lane (pointwise kernels, a
  // pool's backward, a channel sum), where oneDNN's convolutions compute in
  // the padded layout anyway and the forward pool replaces a reorder that
  // read as much.
  bool padding_costs = false;
};

// Whether the value at port p of group grp has the dtype the group's op takes blocked.
bool dtype_fits(const PortGroup& grp, Port p, DType d) {
  if (grp.attr[0] == '\0') return true;
  return d == (p.indices ? DType::Int64 : DType::Float32);
}

bool padded_channels(const ValueType& t) { return t.shape.size() == 4 && t.shape[1] % kChannelBlock != 0; }

// Padding lanes per real channel past which ports that pay for padding lanes
// (PortGroup::padding_costs) keep a value NCHW: the tutorial's 6 channels in
// 16 lanes made its train step 6% slower (relu's backward, the pool's backward
// and the bias sum over 2.7x the elements), airbench's 24 in 32 did not.
constexpr double kMaxPaddedWork = 1.5;
bool padding_too_costly(const ValueType& t) {
  return padded_channels(t) &&
         static_cast<double>(channel_blocks(t.shape[1]) * kChannelBlock) > kMaxPaddedWork * static_cast<double>(t.shape[1]);
}

// Which sides of a plain convolution node (conv2d or its backward ops) take
// padded nChw16c values as they are (asked only where one of its
// activations has channels not a multiple of 16).
PaddedBlockedSides padded_sides(const Graph& g, const Node& n) {
  const ValueType& a = g.type(n.inputs[0]);
  const ValueType& b = g.type(n.inputs[1]);
  const ValueType& c = g.type(n.outputs[0]);
  if (!padded_channels(a) && !padded_channels(c) && !(n.op == OpId::conv2d_backward_weight && padded_channels(b)))
    return {};
  for (const ValueType* t : {&a, &b, &c})
    if (t->dtype != DType::Float32 || t->device != Device::cpu() || t->symbolic_dims != 0) return {};
  const bool bias = n.op == OpId::conv2d && n.inputs.size() > 2 && n.inputs[2] != kNoValue;
  return conv_keeps_padded_blocked(n.op, a.shape, b.shape, bias, n.attrs);
}

// Pointwise ops whose result is zero where their blocked operands are: the
// padding lanes of a padded value stay zero through them.
bool keeps_zero_padding(const Graph& g, const Node& n, const Shape& shape) {
  switch (n.op) {
    case OpId::relu:
    case OpId::gelu:
    case OpId::relu_backward:  // grad where the result is positive
    case OpId::gelu_backward:  // grad times gelu'(x)
    case OpId::neg: return true;
    case OpId::add:
    case OpId::sub:
    case OpId::mul:  // with every operand blocked (a broadcast value could be nonzero or infinite)
      return std::all_of(n.inputs.begin(), n.inputs.end(),
                         [&](ValueId v) { return v == kNoValue || g.type(v).shape == shape; });
    default: return false;
  }
}

// sum over dims 0, 2, 3 of a 4-D value to its channels (a bias gradient):
// over a blocked value the same dims give [C/16, 16] lanes, which
// sum_blocked_channels views as the channels.
bool is_channel_sum(const Graph& g, const Node& n) {
  if (n.op != OpId::sum || n.inputs.size() != 1 || !n.attr_inputs.empty()) return false;
  if (g.type(n.inputs[0]).shape.size() != 4 || (n.attrs.has("keepdim") && n.attrs.b("keepdim"))) return false;
  std::vector<int64_t> dims = n.attrs.ints("dims");
  std::sort(dims.begin(), dims.end());
  return dims == std::vector<int64_t>{0, 2, 3};
}

// The port groups of node n that can hold nChw16c values; every other port
// of the node cannot.
std::vector<PortGroup> port_groups(const Graph& g, const Node& n) {
  if (n.kind != NodeKind::Op || !n.attr_inputs.empty()) return {};
  auto in = [](size_t i) { return Port{false, i}; };
  auto out = [](size_t i) { return Port{true, i}; };
  switch (n.op) {
    case OpId::conv2d: {  // with a residual (input 3), that takes the output's layout
      if (lower::lowers_as_small_conv(g, n)) return {};  // generated loops over NCHW, not oneDNN
      const PaddedBlockedSides padded = padded_sides(g, n);
      if (n.inputs.size() > 3 && n.inputs[3] != kNoValue)
        return {{"in_layout", {in(0)}, {false, kNone}, padded.src}, {"out_layout", {out(0), in(3)}}};
      return {{"in_layout", {in(0)}, {false, kNone}, padded.src}, {"out_layout", {out(0)}, {false, kNone}, padded.dst}};
    }
    case OpId::conv2d_backward_input: {
      const PaddedBlockedSides padded = padded_sides(g, n);
      return {{"grad_out_layout", {in(0)}, {false, kNone}, padded.dst},
              {"grad_input_layout", {out(0)}, {false, kNone}, padded.src}};
    }
    case OpId::conv2d_backward_weight: {
      const PaddedBlockedSides padded = padded_sides(g, n);
      return {{"grad_out_layout", {in(0)}, {false, kNone}, padded.dst},
              {"input_layout", {in(1)}, {false, kNone}, padded.src}};
    }
    case OpId::max_pool2d: {  // a padded input pools into a plain output (the attribute channels says how many)
      std::vector<PortGroup> r{{"input_layout", {in(0)}, {false, kNone}, true}, {"output_layout", {out(0)}, in(0)}};
      if (g.type(n.outputs[1]).shape.size() == 4) r[1].ports.push_back({true, 1, true});  // the indices, when made
      return r;
    }
    case OpId::max_pool2d_backward:  // a padded output from an NCHW grad_out (its padding lanes zero-filled)
      return {{"grad_input_layout", {out(0)}, {false, kNone}, true, true},
              {"grad_output_layout", {in(0), {false, 1, true}}, out(0)}};
    case OpId::sum:
      if (is_channel_sum(g, n)) return {{"", {in(0)}, {false, kNone}, true, true}};
      return {};
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
  const Shape& shape = g.type(n.outputs[0]).shape;
  PortGroup grp{"", {out(0)}, {false, kNone}, keeps_zero_padding(g, n, shape), true};
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

// Each marked channel sum now reads a blocked [N, C/16, H, W, 16] value: it
// becomes the sum over the same dims ([C/16, 16], lane by lane), viewed as
// the channels and, where padded, sliced to the first C.
void sum_blocked_channels(Graph& g, const std::vector<bool>& marked) {
  if (std::none_of(marked.begin(), marked.end(), [](bool b) { return b; })) return;
  Graph out;
  {
    Rebuilder rb(g, out);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      if (!marked[i]) {
        rb.copy_node(n);
        continue;
      }
      rb.begin(n);
      const ValueId x = rb.mapped(n.inputs[0]);
      const int64_t lanes = rb.type(x).shape[1] * kChannelBlock, channels = g.type(n.outputs[0]).shape[0];
      ValueId s = rb.op(OpId::view, {rb.op(OpId::sum, {x}, n.attrs)}, Attrs().set("shape", Shape{lanes}));
      if (channels != lanes)
        s = rb.op(OpId::slice, {s}, Attrs().set("dim", int64_t{0}).set("start", int64_t{0}).set("end", channels)
                                        .set("step", int64_t{1}));
      rb.set(n.outputs[0], s);
    }
    for (ValueId v : g.outputs) out.outputs.push_back(rb.mapped(v));
  }
  out.name = g.name;
  g = std::move(out);
}

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
  std::vector<int> grouped_ports(nv, 0), padded_ports(nv, 0), costly_ports(nv, 0), all_ports(nv, 0);
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
          if (grp.padding_costs) ++costly_ports[static_cast<size_t>(v)];
        }
  }
  // A padded value only between ports that keep its padding lanes zero and
  // read it without a reorder.
  for (size_t v = 0; v < nv; ++v)
    if (grouped_ports[v] != all_ports[v] || (padded_channels(g.values[v].type) && padded_ports[v] != all_ports[v]) ||
        (padding_too_costly(g.values[v].type) && costly_ports[v] > 0))
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
  std::vector<bool> channel_sums(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    channel_sums[i] = is_channel_sum(g, g.nodes[i]) && blocked[static_cast<size_t>(g.nodes[i].inputs[0])];
  for (size_t v = 0; v < nv; ++v) {
    if (!blocked[v]) continue;
    ValueType& t = g.values[v].type;
    t.shape = padded_blocked_shape(t.shape, "blocked_layouts");
    t.strides = contiguous_strides(t.shape);
    t.symbolic_dims &= 1;
    ++made;
  }
  sum_blocked_channels(g, channel_sums);
  return made;
}

}  // namespace kiln::compiler
