// What a compiled function keeps between calls: its recorded variants, each
// a list of segments (graphs split at graph breaks) with the op calls replay
// checks against. Variants that took different branches after a break share
// the segments before it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compiler/aot/compiled_backward.h"
#include "compiler/capture/precision_trial.h"
#include "compiler/graph/graph.h"
#include "compiler/graph/interpreter.h"
#include "kiln/compile.h"

namespace kiln::compiler {

// Where an op call's input came from.
struct Binding {
  enum Kind : uint8_t { None, Value, External };
  Kind kind = None;
  int32_t index = -1;  // Value: a ValueId of this segment; External: a position in Graph::inputs
  bool operator==(const Binding&) const = default;
};

// One recorded op call, as replay checks it.
struct RecordedCall {
  OpId op{};
  Attrs attrs;                               // as recorded (free attributes included)
  std::vector<std::string_view> free_attrs;  // read from each call: step attributes, symbolic shapes
  std::vector<Binding> inputs;
  std::vector<ValueId> outputs;
  bool same_call(const RecordedCall& o) const;
};

struct Segment {
  Graph graph;       // as captured: what replay checks against
  Graph executable;  // after functionalization and the passes: what runs
  // The executable before execution_passes: what the ahead-of-time backward
  // splits (blocked layouts and fused batch-norm activations have no derivative).
  Graph differentiable;
  std::vector<RecordedCall> calls;
  bool has_backward = false;  // a backward pass was captured into this graph
  bool ends_in_break = false;
  // The read that broke the graph: what (item(), printing, data_ptr()), the
  // op whose result was read, and the user's source location.
  std::string break_what, break_op, break_where;
  std::unique_ptr<GraphExecutable> interpreter;  // options.backend's; built on first run, rebuilt when outputs change
  // A forward whose outputs need gradients and no captured backward: the
  // forward and backward graphs split ahead of time (built with
  // `interpreter` when grad mode is on); null when the split was refused
  // (aot_refused says why) and the eager tape runs over the graph's ops
  // instead.
  std::unique_ptr<AotRunner> aot;
  std::string aot_refused;
  // bf16 autocast: the graph in float32, timed against `interpreter` on the
  // first runs (precision_trial.h); null when there is nothing to time or
  // once the faster has taken `executable` and `interpreter`'s place.
  std::unique_ptr<PrecisionTrial> precision_trial;
  std::string precision;  // how its precision was chosen, for explain ("" when there was no choice)
  void reset_executables() {
    interpreter.reset();
    aot.reset();
    aot_refused.clear();
    precision_trial.reset();
    precision.clear();
  }
};

struct Variant {
  uint64_t key = 0;
  bool complete = false;  // a call ran it to the end
  std::vector<std::shared_ptr<Segment>> segments;
};

class CompiledState {
 public:
  explicit CompiledState(const CompileOptions& o) : options(o) {}
  CompileOptions options;
  std::vector<std::unique_ptr<Variant>> variants;
  CompileStats stats;
  // bench/compile_overhead sets time_graph_runs to split a call's time into
  // the graph's run and the rest (replay, guards, placeholders).
  bool time_graph_runs = false;
  int64_t graph_run_ns = 0;  // summed over Interpreter::run calls while timed
};

}  // namespace kiln::compiler
