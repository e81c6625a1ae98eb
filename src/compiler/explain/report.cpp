// kiln::explain's report (include/kiln/explain.h) from what capture recorded
// (compiler/capture/compiled_state.h): each distinct segment graph, its
// graph break, its inputs' guards, op counts and saved bytes.
#include <map>
#include <sstream>
#include <unordered_set>

#include "compiler/capture/compiled_state.h"
#include "compiler/aot/saved_bytes.h"
#include "compiler/backend/cpp_executable.h"
#include "compiler/lower/small_conv.h"
#include "compiler/explain/fused_kernels.h"
#include "compiler/graph/dot.h"
#include "compiler/graph/printer.h"
#include "ops/conv_fused.h"
#include "kiln/explain.h"

namespace kiln::detail {
namespace {

using compiler::Graph;
using compiler::Segment;
using compiler::ValueType;

// "input 0: f32[8, 3, 32, 32] requires_grad=false"; the type shows strides
// that are not the contiguous ones and a device other than the CPU (replay
// checks both).
std::string input_guard(const Graph& g, size_t k) {
  ValueType ty = g.type(g.inputs[k]);
  const bool requires_grad = ty.requires_grad;
  ty.requires_grad = false;  // said in words below, not as type_str's " grad"
  return "input " + std::to_string(k) + ": " + compiler::type_str(ty) +
         " requires_grad=" + (requires_grad ? "true" : "false");
}

// "$0 lr, $1 momentum", or for many "99 scalar inputs $0..$98 (alpha x86,
// value x13)": attributes read from every call.
std::string scalar_inputs_str(const Graph& g) {
  const size_t n = g.scalar_inputs.size();
  std::string s;
  if (n <= 8) {
    for (size_t i = 0; i < n; ++i) s += (i ? ", $" : "$") + std::to_string(i) + " " + g.scalar_inputs[i].name;
    return s;
  }
  std::map<std::string, int> by_name;
  for (const compiler::ScalarInput& in : g.scalar_inputs) ++by_name[in.name];
  s = std::to_string(n) + " scalar inputs $0..$" + std::to_string(n - 1) + " (";
  bool first = true;
  for (const auto& [name, count] : by_name) {
    s += (first ? "" : ", ") + name + " x" + std::to_string(count);
    first = false;
  }
  return s + ")";
}

// The CPU convolutions of `g` as they run now (after the calls explain made:
// the per-layer choices are taken on a layer's first call).
// `generated`: the graph runs on the cpp backend, where convolutions of few
// output channels are generated loops (compiler/lower/small_conv.h).
void add_convolutions(const Graph& g, const std::string& graph_name, bool generated,
                      std::vector<ExplainConvolution>& out) {
  for (const compiler::Node& n : g.nodes) {
    if (n.kind != compiler::NodeKind::Op) continue;
    if (n.op != OpId::conv2d && n.op != OpId::conv2d_backward_input && n.op != OpId::conv2d_backward_weight) continue;
    ValueType a = g.type(n.inputs[0]), b = g.type(n.inputs[1]);
    a.requires_grad = b.requires_grad = false;  // not what the list is about
    if (a.device != Device::cpu() || !n.attr_inputs.empty()) continue;
    ExplainConvolution c;
    c.graph = graph_name;
    std::ostringstream node;
    node << '%' << n.outputs[0] << " = " << op_name(n.op) << "(%" << n.inputs[0] << ", %" << n.inputs[1] << ')';
    c.node = node.str();
    c.shapes = compiler::type_str(a) + " x " + compiler::type_str(b);
    const bool bias = n.op == OpId::conv2d && n.inputs.size() > 2 && n.inputs[2] != compiler::kNoValue;
    if (generated && compiler::lower::lowers_as_small_conv(g, n)) {
      c.precision = "float32", c.algorithm = "generated loops", c.impl = "kiln (few output channels)";
      out.push_back(std::move(c));
      continue;
    }
    try {
      ConvRun r = describe_conv_run(n.op, a.shape, b.shape, bias, a.dtype, n.attrs);
      c.precision = r.precision, c.algorithm = r.algorithm, c.impl = r.impl;
    } catch (const Error& e) {
      c.impl = e.what();  // a symbolic batch size, say: nothing to ask oneDNN about
    }
    out.push_back(std::move(c));
  }
}

}  // namespace

ExplainReport explain_state(const compiler::CompiledState& state, const ExplainContext& context) {
  ExplainReport r;
  r.calls = state.stats.calls;
  r.variants = state.stats.variants;
  r.recompiles = state.stats.recompiles;
  r.fell_back = state.stats.fell_back;
  r.fallback_reason = state.stats.fallback_reason;
  r.backend = state.options.backend();
  const bool generated = r.backend == "cpp";

  // Variants share the segments before the point where they diverged: each
  // segment is reported once, under the first variant that holds it.
  std::unordered_set<const Segment*> seen;
  std::vector<std::string> scalars;  // per reported graph
  const bool several_variants = state.variants.size() > 1;
  for (size_t v = 0; v < state.variants.size(); ++v) {
    const auto& segments = state.variants[v]->segments;
    for (size_t k = 0; k < segments.size(); ++k) {
      const Segment& s = *segments[k];
      if (!seen.insert(&s).second) continue;
      const Graph& g = s.graph;
      ExplainGraph eg;
      eg.name = several_variants ? g.name + "@v" + std::to_string(v + 1) : g.name;
      eg.variant = static_cast<int>(v) + 1;
      eg.segment = static_cast<int>(k);
      eg.text = compiler::print(g);
      eg.dot = compiler::to_dot(g);
      if (!s.executable.nodes.empty()) eg.executable = compiler::print(s.executable);
      eg.num_ops = static_cast<int64_t>(g.num_ops());
      eg.has_backward = s.has_backward;
      eg.precision = s.precision;
      for (size_t i = 0; i < g.inputs.size(); ++i) eg.inputs.push_back(input_guard(g, i));
      for (const compiler::Node& node : g.nodes)
        if (node.kind == compiler::NodeKind::Op) ++r.ops[op_name(node.op)];
      if (s.ends_in_break) r.graph_breaks.push_back({s.break_op, s.break_what, s.break_where});
      // The cpp backend's fused kernels, as its scheduler made them.
      if (auto* cpp = dynamic_cast<const compiler::CppExecutable*>(s.interpreter.get())) {
        for (ExplainFusedKernel& f : fused_kernels(eg.name, cpp->program())) r.fused_kernels.push_back(std::move(f));
        for (ExplainParallelRegion& pr : parallel_regions(eg.name, cpp->program()))
          r.parallel_regions.push_back(std::move(pr));
      }
      // What ran: the graph after the passes (the forward and backward
      // graphs of an ahead-of-time split where there is one).
      if (s.aot) {
        add_convolutions(s.aot->graphs().forward, eg.name + "/forward", generated, r.convolutions);
        add_convolutions(s.aot->graphs().backward, eg.name + "/backward", generated, r.convolutions);
      } else {
        add_convolutions(s.executable.nodes.empty() ? g : s.executable, eg.name, generated, r.convolutions);
      }
      r.graphs.push_back(std::move(eg));
      scalars.push_back(scalar_inputs_str(g));
    }
  }

  // The guards: each graph's inputs (prefixed by the graph when there are
  // several) and the scalars it reads instead of guarding them.
  for (size_t i = 0; i < r.graphs.size(); ++i) {
    std::string prefix = r.graphs.size() > 1 ? r.graphs[i].name + ": " : "";
    for (const std::string& in : r.graphs[i].inputs) r.guards.push_back(prefix + in);
    if (!scalars[i].empty()) r.guards.push_back(prefix + scalars[i] + " read on every call, never guarded");
  }
  r.guards.push_back(std::string("grad mode: ") + (context.grad_mode ? "enabled" : "disabled"));
  if (context.module_training >= 0)
    r.guards.push_back(std::string("module mode: ") + (context.module_training ? "train()" : "eval()"));
  if (context.non_tensor_args > 0)
    r.guards.push_back("non-tensor arguments: " + std::to_string(context.non_tensor_args) + ", guarded by value");
  r.guards.push_back(state.options.dynamic()
                         ? "dynamic dims: dim 0 of the tensor arguments is the symbol s0 (the batch size); other "
                           "sizes reuse the graph"
                         : "dynamic dims: none; every input shape is guarded exactly");
  r.guards.push_back("recompile limit: " + std::to_string(state.options.recompile_limit()) + " variants");

  // Saved bytes of the last variant that captured a backward (the step
  // later calls replay, once the first call has created optimizer state).
  for (size_t v = state.variants.size(); v-- > 0;) {
    bool any = false;
    for (const auto& seg : state.variants[v]->segments) {
      if (!seg->has_backward) continue;
      any = true;
      compiler::SavedBytes b = compiler::saved_bytes(seg->graph);
      r.saved_bytes_eager += b.eager;
      r.saved_bytes_partitioned += b.partitioned;
    }
    if (any) break;
  }
  return r;
}

}  // namespace kiln::detail
