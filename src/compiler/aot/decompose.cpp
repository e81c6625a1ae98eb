#include "compiler/aot/decompose.h"

#include "compiler/graph/rebuilder.h"
#include "compiler/graph/tensor_values.h"
#include "ops/dispatch_mode.h"

namespace kiln::compiler {
namespace {

// Appends every op a decomposition calls to the graph being rebuilt and
// answers with meta tensors of the recorded types; the op never runs.
class RecordIntoGraph final : public DispatchMode {
 public:
  explicit RecordIntoGraph(Rebuilder& rb) : rb_(rb) {}
  const char* mode_name() const override { return "decompose"; }

  Tensors handle(OpId id, Tensors& inputs, const Attrs& attrs, const NextMode& next) override {
    if (op_kind(id) == OpKind::Composite) return next(id, inputs, attrs);  // its parts come back here
    std::vector<ValueId> ins;
    for (const Tensor& t : inputs) ins.push_back(value_of(t));
    std::vector<ValueId> outs = rb_.ops(id, ins, attrs);
    Tensors result;
    for (size_t k = 0; k < outs.size(); ++k) {
      // An in-place op returns its target: later reads of that tensor read
      // the op's output value (SSA, as capture records it).
      Tensor t = k == 0 && op_kind(id) == OpKind::Inplace ? inputs[0] : rb_.type(outs[k]).meta();
      bind(t, outs[k]);
      result.push_back(t);
    }
    return result;
  }

  void bind(const Tensor& t, ValueId v) { values_.bind(t, v); }
  ValueId value_of(const Tensor& t) {
    if (!t.defined()) return kNoValue;
    if (ValueId v = values_.find(t); v != kNoValue) return v;
    KILN_ASSERT(!t.is_meta(), "decompose: a decomposition read a meta tensor that is not one of its inputs");
    ValueId v = rb_.constant(t);
    bind(t, v);
    return v;
  }

 private:
  Rebuilder& rb_;
  TensorValues values_;
};

// One pass over the graph: expands each selected node once (ops a
// decomposition calls that decompose further wait for the next round).
int expand_once(Graph& g, const DecomposeOptions& options) {
  Graph out;
  int expanded = 0;
  {
    Rebuilder rb(g, out);
    for (const Node& n : g.nodes) {
      if (!decomposable(g, n) || (options.expand && !options.expand(n))) {
        rb.copy_node(n);
        continue;
      }
      rb.begin(n);
      RecordIntoGraph rec(rb);
      Tensors metas;
      for (ValueId v : n.inputs) {
        if (v == kNoValue) {
          metas.emplace_back();
          continue;
        }
        metas.push_back(g.type(v).meta());
        rec.bind(metas.back(), rb.mapped(v));
      }
      Tensors results;
      {
        ModeGuard guard(rec);
        results = op_def(n.op).decompose(metas, n.attrs);
      }
      KILN_ASSERT(results.size() == n.outputs.size(), "decompose: '", op_name(n.op), "' gave ", results.size(),
                  " outputs, the op has ", n.outputs.size());
      for (size_t k = 0; k < results.size(); ++k) rb.set(n.outputs[k], rec.value_of(results[k]));
      // Inputs the decomposition wrote (copy_ into running statistics): later
      // reads read the written value.
      for (size_t k = 0; k < metas.size(); ++k)
        if (metas[k].defined()) {
          ValueId now = rec.value_of(metas[k]);
          if (now != rb.mapped(n.inputs[k])) rb.set(n.inputs[k], now);
        }
      ++expanded;
    }
    for (ValueId o : g.outputs) out.outputs.push_back(rb.mapped(o));
  }
  g = std::move(out);
  return expanded;
}

}  // namespace

bool decomposable(const Graph& g, const Node& n) {
  if (n.kind != NodeKind::Op || op_kind(n.op) == OpKind::Composite || op_def(n.op).decompose == nullptr) return false;
  if (!n.attr_inputs.empty()) return false;  // the decomposition would bake in this step's value
  for (ValueId v : n.inputs)
    if (v != kNoValue && g.type(v).symbolic_dims != 0) return false;  // it may compute with the size
  return true;
}

int decompose(Graph& g, const DecomposeOptions& options) {
  FreshModeStack own;  // the recording mode sees only the decompositions' ops
  int total = 0;
  // cross_entropy's log_softmax and nll_loss arrive whole from capture; a
  // decomposition calling another decomposable op is expanded next round.
  for (int round = 0; round < 8; ++round) {
    int n = expand_once(g, options);
    total += n;
    if (n == 0) return total;
  }
  KILN_ASSERT(false, "decompose: decompositions still expanding after 8 rounds (a cycle?)");
  return total;
}

}  // namespace kiln::compiler
