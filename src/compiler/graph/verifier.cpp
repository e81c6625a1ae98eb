// Graph invariants (verifier.h).
#include "compiler/graph/verifier.h"

#include <set>
#include <sstream>

#include "compiler/graph/printer.h"

namespace kiln::compiler {
namespace {

std::string where(const Graph& g, size_t node_index) {
  const Node& n = g.nodes[node_index];
  std::ostringstream os;
  os << "node " << node_index << " (";
  switch (n.kind) {
    case NodeKind::Input: os << "input"; break;
    case NodeKind::Constant: os << "constant"; break;
    case NodeKind::Op:
      if (static_cast<int>(n.op) < kNumOps) os << op_name(n.op);
      else os << "op #" << static_cast<int>(n.op);
      break;
  }
  os << ")";
  return os.str();
}

size_t expected_outputs(OpId op) { return op_kind(op) == OpKind::View ? 1 : static_cast<size_t>(op_def(op).num_outputs); }

void check_op_node(const Graph& g, size_t i, std::vector<std::string>& problems) {
  const Node& n = g.nodes[i];
  auto problem = [&](auto&&... parts) { problems.push_back(detail::concat(where(g, i), ": ", parts...)); };
  if (static_cast<int>(n.op) >= kNumOps) {
    problem("op id out of range");
    return;
  }
  if (op_kind(n.op) == OpKind::Composite) {
    problem("composite op in a graph (capture decomposes composite ops; only their constituents belong here)");
    return;
  }
  if (n.outputs.size() != expected_outputs(n.op))
    problem("has ", n.outputs.size(), " outputs but ", op_name(n.op), " gives ", expected_outputs(n.op));
  if (op_kind(n.op) == OpKind::View && (n.inputs.empty() || n.inputs[0] == kNoValue))
    problem("a view op needs its input");
  std::set<std::string_view> seen;
  for (const AttrInput& a : n.attr_inputs) {
    if (a.scalar_index < 0 || static_cast<size_t>(a.scalar_index) >= g.scalar_inputs.size())
      problem("attribute '", a.attr, "' reads scalar input $", a.scalar_index, " but the graph has ",
              g.scalar_inputs.size());
    if (!seen.insert(a.attr).second) problem("attribute '", a.attr, "' is read from two scalar inputs");
  }
}

}  // namespace

std::vector<std::string> verify_structure(const Graph& g) {
  std::vector<std::string> problems;
  const size_t nv = g.values.size();
  auto in_range = [&](ValueId v) { return v >= 0 && static_cast<size_t>(v) < nv; };
  std::vector<int> defined_by(nv, -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    auto problem = [&](auto&&... parts) { problems.push_back(detail::concat(where(g, i), ": ", parts...)); };
    for (ValueId v : n.inputs) {
      if (v == kNoValue) continue;
      if (!in_range(v)) problem("input %", v, " does not exist (", nv, " values)");
      else if (defined_by[static_cast<size_t>(v)] < 0) problem("input %", v, " is used before it is defined");
    }
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      ValueId v = n.outputs[k];
      if (!in_range(v)) {
        problem("output %", v, " does not exist (", nv, " values)");
        continue;
      }
      size_t vi = static_cast<size_t>(v);
      if (defined_by[vi] >= 0) problem("redefines %", v, " (defined by node ", defined_by[vi], ")");
      defined_by[vi] = static_cast<int>(i);
      const Value& val = g.values[vi];
      if (val.node != static_cast<int>(i) || val.output_index != static_cast<int>(k))
        problem("%", v, " says it is output ", val.output_index, " of node ", val.node, ", but it is output ", k,
                " of node ", i);
    }
    switch (n.kind) {
      case NodeKind::Input:
        if (n.outputs.size() != 1 || !n.inputs.empty()) problem("an input node has one output and no inputs");
        if (n.input_index < 0 || static_cast<size_t>(n.input_index) >= g.inputs.size())
          problem("input index ", n.input_index, " out of range (", g.inputs.size(), " inputs)");
        else if (n.outputs.size() == 1 && g.inputs[static_cast<size_t>(n.input_index)] != n.outputs[0])
          problem("defines %", n.outputs[0], " but graph input ", n.input_index, " is %",
                  g.inputs[static_cast<size_t>(n.input_index)]);
        break;
      case NodeKind::Constant:
        if (n.outputs.size() != 1 || !n.inputs.empty()) problem("a constant node has one output and no inputs");
        if (!n.constant.defined()) problem("constant without a tensor");
        break;
      case NodeKind::Op: check_op_node(g, i, problems); break;
    }
  }
  for (size_t v = 0; v < nv; ++v)
    if (defined_by[v] < 0) problems.push_back(detail::concat("%", v, " is defined by no node"));
  for (size_t k = 0; k < g.inputs.size(); ++k) {
    ValueId v = g.inputs[k];
    if (!in_range(v)) {
      problems.push_back(detail::concat("graph input ", k, " is %", v, ", which does not exist"));
      continue;
    }
    int node = defined_by[static_cast<size_t>(v)];
    if (node < 0 || g.nodes[static_cast<size_t>(node)].kind != NodeKind::Input ||
        g.nodes[static_cast<size_t>(node)].input_index != static_cast<int>(k))
      problems.push_back(detail::concat("graph input ", k, " (%", v, ") is not defined by input node ", k));
  }
  for (size_t k = 0; k < g.outputs.size(); ++k)
    if (!in_range(g.outputs[k]))
      problems.push_back(detail::concat("graph output ", k, " is %", g.outputs[k], ", which does not exist"));
  return problems;
}

std::vector<std::string> verify(const Graph& g) {
  std::vector<std::string> problems = verify_structure(g);
  if (!problems.empty()) return problems;  // types need a sound structure
  return verify_types(g);
}

void verify_or_throw(const Graph& g, const char* stage) {
  std::vector<std::string> problems = verify(g);
  if (problems.empty()) return;
  std::ostringstream os;
  os << "internal error: graph '" << g.name << "' is invalid after " << stage << " (" << problems.size()
     << " problem" << (problems.size() == 1 ? "" : "s") << "):\n";
  for (const std::string& p : problems) os << "  " << p << '\n';
  os << print(g);
  throw InternalError(os.str());
}

}  // namespace kiln::compiler
