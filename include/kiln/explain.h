// kiln::explain: what kiln::compile made of a function (docs/explain.md).
//
//   ExplainReport r = kiln::explain([&](const Tensor& x) { return model->forward(x); }, x);
//   std::cout << r.str();          // graphs, graph breaks with reasons, guards, op counts
//   nlohmann::json j = r.json();   // the same as one JSON object
//
// explain compiles the function with a fresh kiln::compile, calls it once
// (ExplainOptions::calls times) with the given arguments, and reports every
// graph it recorded: each segment of each variant (a graph break splits a
// variant into segments; a failed guard records another variant).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/arg.h"
#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/nn.h"

namespace kiln {

struct ExplainOptions {
  ExplainOptions() = default;
  KILN_ARG(CompileOptions, compile);  // what the fresh kiln::compile gets
  KILN_ARG(int, calls) = 1;           // calls with the same arguments (>= 1)
  KILN_ARG(bool, print) = false;      // print str() to stdout
};

struct ExplainGraph {
  std::string name;  // the graph's name; "@v<k>" appended when there are several variants
  int variant = 1;   // the first variant that holds this graph (1-based, in recording order)
  int segment = 0;   // its position in that variant (0 = before the first graph break)
  std::string text;  // the printed IR (compiler/graph/printer.h)
  std::string dot;   // Graphviz DOT (compiler/graph/dot.h)
  std::string executable;  // the printed IR of what runs: after functionalization and the passes
  int64_t num_ops = 0;
  bool has_backward = false;  // forward and backward (and the optimizer step) in one graph
  // bf16 autocast: which of the graph as autocast wrote it and the graph in
  // float32 runs, and why (compiler/capture/precision_trial.h); "" when the
  // graph has no bfloat16 layer to choose for.
  std::string precision;
  std::vector<std::string> inputs;  // each graph input's guard ("input 0: f32[8, 3] requires_grad=false")
};

// A kernel the cpp backend fused (src/compiler/schedule): the graph's ops it
// computes in one loop nest, and the bytes of their intermediate values it
// never writes to memory (at the capture shapes).
struct ExplainFusedKernel {
  std::string graph;              // the graph's name (ExplainGraph::name)
  std::string kernel;             // its name in the generated code: k0, k1, ...
  std::vector<std::string> ops;   // the ops it covers, in graph order ("mul", "add", "relu")
  int64_t bytes_not_written = 0;  // values of those ops that stay in registers
};

// Generated kernels that run as one OpenMP parallel region (one thread team
// started once, one barrier at the end): consecutive kernels that share no
// memory, such as the optimizer's updates of every parameter.
struct ExplainParallelRegion {
  std::string graph;                 // the graph's name (ExplainGraph::name)
  std::string region;                // its name in the generated code: r0, r1, ...
  std::vector<std::string> kernels;  // its kernels in order: k3, k4, ...
};

// A convolution of a compiled graph on the CPU (oneDNN): what it computes
// in and which kernel runs it, after the per-layer choices (bfloat16 against
// float32 under autocast; the algorithm under mode "max-autotune").
struct ExplainConvolution {
  std::string graph;      // the graph's name (ExplainGraph::name)
  std::string node;       // "%12 = conv2d_backward_weight(%7, %3)" without attributes
  std::string shapes;     // "f32[8, 64, 32, 32] x f32[64, 64, 3, 3]": its first two inputs
  std::string precision;  // ConvRun (ops/conv_fused.h)
  std::string algorithm;
  std::string impl;
};

struct ExplainBreak {
  std::string op;        // the op whose result was read ("sum"; "input" for a graph input)
  std::string reason;    // what read it: "item()", "data_ptr()", printing
  std::string location;  // the user's source location ("file.cpp:42 in f")
};

struct ExplainReport {
  std::vector<ExplainGraph> graphs;  // each distinct segment graph, variants in recording order
  std::vector<ExplainBreak> graph_breaks;
  std::vector<std::string> guards;   // input types, grad mode, recompile limit, dynamic dims
  std::map<std::string, int64_t> ops;  // op name -> nodes over all graphs
  int64_t calls = 0;
  int variants = 0;
  int recompiles = 0;
  bool fell_back = false;  // recompile limit reached: later calls run eagerly
  std::string fallback_reason;
  // Over the graphs of the last variant that hold a backward: bytes eager
  // autograd saves between forward and backward, and bytes the partitioned
  // forward hands to the backward (compiler/aot/saved_bytes.h). 0 when no
  // graph holds a backward.
  int64_t saved_bytes_eager = 0;
  int64_t saved_bytes_partitioned = 0;
  std::string backend;  // CompileOptions::backend of the compile
  // Backend "cpp": every generated kernel that covers more than one op, over
  // all graphs. Empty for the interpreter, which runs each op on its kernel.
  std::vector<ExplainFusedKernel> fused_kernels;
  std::vector<ExplainParallelRegion> parallel_regions;  // backend "cpp"
  std::vector<ExplainConvolution> convolutions;  // CPU graphs only

  // The human summary: counts, graph breaks with reasons, guards, op counts,
  // graphs: as captured, or with `as_run` as they run (each graph's
  // executable: after functionalization and the passes, so fused nodes and
  // blocked layouts show).
  std::string str(bool as_run = false) const;
  // One object: graphs [{name, variant, segment, text, dot, executable, num_ops, has_backward}],
  // graph_breaks [{op, reason, location}], guards [strings], ops {name: count},
  // calls, variants, recompiles, fell_back, saved_bytes_eager, saved_bytes_partitioned.
  // Include <nlohmann/json.hpp> to use it.
  nlohmann::json json() const;
};

namespace detail {

// What the guards of a call depend on besides the graph inputs.
struct ExplainContext {
  bool grad_mode = true;     // the mode the calls ran in
  int non_tensor_args = 0;   // arguments guarded by value
  int module_training = -1;  // a module's forward: its training flag (1/0); -1: a plain function
};
// The report of what `state` recorded.
ExplainReport explain_state(const compiler::CompiledState& state, const ExplainContext& context);
void print_report(const ExplainReport& report);

template <class F>
constexpr bool is_module_v = std::is_convertible_v<std::remove_cvref_t<F>, std::shared_ptr<nn::Module>>;

template <class F>
auto compile_for_explain(F fn, const CompileOptions& options) {
  if constexpr (is_module_v<F>) {
    return compile(std::shared_ptr<nn::Module>(std::move(fn)), options);
  } else {
    return compile(std::move(fn), options);
  }
}

template <class A>
constexpr int guarded_by_value() {
  using U = std::remove_cvref_t<A>;
  return std::is_arithmetic_v<U> || std::is_enum_v<U> || std::is_same_v<U, std::string> ? 1 : 0;
}

}  // namespace detail

// fn: a callable over tensors (and modules, optimizers... by reference), or a
// module (its forward, guarded on its training flag). The arguments are
// passed as lvalues on every call.
template <class F, class... Args>
ExplainReport explain(const ExplainOptions& options, F fn, Args&&... args) {
  KILN_CHECK(options.calls() >= 1, "explain: calls must be >= 1, got ", options.calls());
  detail::ExplainContext context;
  if constexpr (detail::is_module_v<F>) context.module_training = fn->is_training() ? 1 : 0;
  context.non_tensor_args = (detail::guarded_by_value<Args>() + ... + 0);
  auto compiled = detail::compile_for_explain(std::move(fn), options.compile());
  for (int i = 0; i < options.calls(); ++i) compiled(args...);
  context.grad_mode = grad_mode_enabled();
  ExplainReport report = detail::explain_state(compiled.state(), context);
  if (options.print()) detail::print_report(report);
  return report;
}

template <class F, class... Args>
  requires(!std::is_same_v<std::remove_cvref_t<F>, ExplainOptions> &&
           !std::is_same_v<std::remove_cvref_t<F>, CompileOptions>)
ExplainReport explain(F fn, Args&&... args) {
  return explain(ExplainOptions(), std::move(fn), std::forward<Args>(args)...);
}

template <class F, class... Args>
ExplainReport explain(const CompileOptions& options, F fn, Args&&... args) {
  return explain(ExplainOptions().compile(options), std::move(fn), std::forward<Args>(args)...);
}

}  // namespace kiln
