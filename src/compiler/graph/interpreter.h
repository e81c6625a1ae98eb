// Runs a graph with the eager kernels: the reference every later backend is
// tested against (DESIGN.md, "Data flow").
//
// Each op node goes through kiln::dispatch, so the dispatch modes the caller
// left visible (a profiler, autograd while grad mode is on) see every node
// as if the ops ran eagerly; the caller decides about grad mode. Inputs are
// checked against the graph's types (a symbolic dim s0 takes any size, the
// same everywhere it appears); attributes read from scalar inputs take the
// values passed for this run; each intermediate is freed after its last use.
#pragma once
#include <span>
#include <vector>

#include "compiler/graph/executable.h"
#include "compiler/graph/graph.h"

namespace kiln::compiler {

// A graph prepared for repeated runs: the last use of each value is found
// once. The graph must outlive the Interpreter and not change while it lives.
class Interpreter : public GraphExecutable {
 public:
  explicit Interpreter(const Graph& g);
  // `scalars` gives one value per Graph::scalar_inputs entry; empty means
  // the examples seen at capture.
  Tensors run(TensorSpan inputs, std::span<const AttrValue> scalars = {}) const override;
  // What run() checks and reads first (other backends share them): a
  // kiln::Error for inputs that do not fit the graph; the scalar inputs'
  // values for this run.
  void check_inputs(TensorSpan inputs) const;
  std::vector<AttrValue> scalar_values(std::span<const AttrValue> scalars) const;

 private:

  const Graph& g_;
  std::vector<std::vector<ValueId>> free_after_;  // per node: values read for the last time there
};

// Runs one op node on its input tensors with the eager kernels, attributes
// read from `scalars` (one value per scalar input); outputs keep the
// wrapped-number flag of their types.
Tensors run_node(const Graph& g, const Node& n, Tensors args, std::span<const AttrValue> scalars);

// One run (builds an Interpreter; hold one to run a graph many times).
Tensors interpret(const Graph& g, TensorSpan inputs, std::span<const AttrValue> scalars = {});

// Whether a tensor fits a value type (shape honouring the symbolic dim,
// dtype, device); `s0` carries the symbol's size between calls (-1 = unbound).
bool matches_type(const Tensor& t, const ValueType& type, int64_t& s0);

}  // namespace kiln::compiler
