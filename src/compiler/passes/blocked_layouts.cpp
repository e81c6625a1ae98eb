// nChw16c values between a convolution and its max-pool (blocked_layouts.h).
#include "compiler/passes/blocked_layouts.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "compiler/graph/rewrite.h"
#include "ops/blocked_layout.h"

namespace kiln::compiler {
namespace {

bool is_plain_op(const Node& n, OpId op) { return n.kind == NodeKind::Op && n.op == op && n.attr_inputs.empty(); }

// A float32 CPU NCHW value, contiguous, with channels a multiple of 16 and
// no symbolic dim but the batch: what nChw16c can hold.
bool blockable(const ValueType& t) {
  return t.dtype == DType::Float32 && t.device == Device::cpu() && t.shape.size() == 4 && t.shape[1] > 0 &&
         t.shape[1] % kChannelBlock == 0 && (t.symbolic_dims & ~uint64_t{1}) == 0 &&
         t.strides == contiguous_strides(t.shape);
}

struct Use {
  int node;
  size_t input;
};

}  // namespace

int keep_blocked_layouts(Graph& g) {
  std::vector<std::vector<Use>> uses(g.values.size());
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (size_t k = 0; k < g.nodes[i].inputs.size(); ++k)
      if (ValueId v = g.nodes[i].inputs[k]; v != kNoValue) uses[static_cast<size_t>(v)].push_back({static_cast<int>(i), k});
  std::vector<bool> is_output(g.values.size(), false);
  for (ValueId v : g.outputs) is_output[static_cast<size_t>(v)] = true;
  const std::vector<bool> mutated = mutated_storage(g);

  // Whether value v may become nChw16c with every reader one of `readers`
  // (reading it as input 0, without the attribute already).
  auto only_read_by = [&](ValueId v, std::initializer_list<OpId> readers, const char* attr) {
    const size_t vi = static_cast<size_t>(v);
    if (is_output[vi] || mutated[vi] || uses[vi].empty() || !blockable(g.type(v))) return false;
    return std::all_of(uses[vi].begin(), uses[vi].end(), [&](const Use& u) {
      const Node& n = g.nodes[static_cast<size_t>(u.node)];
      return u.input == 0 && n.kind == NodeKind::Op && n.attr_inputs.empty() && !n.attrs.has(attr) &&
             std::find(readers.begin(), readers.end(), n.op) != readers.end();
    });
  };
  auto make_blocked = [&](Node& producer, const char* producer_attr, const char* reader_attr) {
    const ValueId v = producer.outputs[0];
    producer.attrs.set(producer_attr, std::string(kNChw16c));
    for (const Use& u : uses[static_cast<size_t>(v)])
      g.nodes[static_cast<size_t>(u.node)].attrs.set(reader_attr, std::string(kNChw16c));
    ValueType& t = g.values[static_cast<size_t>(v)].type;
    t.shape = blocked_shape(t.shape, "blocked_layouts");
    t.strides = contiguous_strides(t.shape);
    t.symbolic_dims &= 1;
  };

  int made = 0;
  for (Node& n : g.nodes) {
    if (is_plain_op(n, OpId::conv2d) && !n.attrs.has("out_layout") &&
        only_read_by(n.outputs[0], {OpId::max_pool2d}, "input_layout")) {
      make_blocked(n, "out_layout", "input_layout");
      ++made;
    } else if (is_plain_op(n, OpId::max_pool2d_backward) && !n.attrs.has("grad_input_layout") &&
               only_read_by(n.outputs[0], {OpId::conv2d_backward_input, OpId::conv2d_backward_weight},
                            "grad_out_layout")) {
      make_blocked(n, "grad_input_layout", "grad_out_layout");
      ++made;
    }
  }
  return made;
}

}  // namespace kiln::compiler
