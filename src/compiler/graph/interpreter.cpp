// Runs graphs with the eager kernels (interpreter.h).
#include "compiler/graph/interpreter.h"

#include <sstream>

#include "compiler/graph/printer.h"

namespace kiln::compiler {

bool matches_type(const Tensor& t, const ValueType& type, int64_t& s0) {
  if (!t.defined() || t.dtype() != type.dtype || t.device() != type.device) return false;
  if (t.shape().size() != type.shape.size()) return false;
  for (size_t d = 0; d < type.shape.size(); ++d) {
    int64_t size = t.shape()[d];
    if (!is_symbolic(type, d)) {
      if (size != type.shape[d]) return false;
    } else if (s0 < 0) {
      s0 = size;
    } else if (size != s0) {
      return false;
    }
  }
  return true;
}

Interpreter::Interpreter(const Graph& g) : g_(g), free_after_(g.nodes.size()) {
  // A value dies after the last node that reads it, or right after its
  // definition if nothing reads it; graph outputs live on.
  std::vector<int> last_use(g.values.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (ValueId v : g.nodes[i].inputs)
      if (v != kNoValue) last_use[static_cast<size_t>(v)] = static_cast<int>(i);
  }
  for (ValueId v : g.outputs) last_use[static_cast<size_t>(v)] = static_cast<int>(g.nodes.size());
  for (size_t v = 0; v < g.values.size(); ++v) {
    int at = last_use[v] >= 0 ? last_use[v] : g.values[v].node;
    if (at >= 0 && static_cast<size_t>(at) < g.nodes.size()) free_after_[static_cast<size_t>(at)].push_back(static_cast<ValueId>(v));
  }
}

void Interpreter::check_inputs(TensorSpan inputs) const {
  auto types = [&] {
    std::ostringstream os;
    for (size_t i = 0; i < g_.inputs.size(); ++i) os << (i ? ", " : "") << type_str(g_.type(g_.inputs[i]));
    return os.str();
  };
  KILN_CHECK(inputs.size() == g_.inputs.size(), "interpret(graph ", g_.name, "): got ", inputs.size(),
             " inputs but the graph takes ", g_.inputs.size(), " (", types(), "); pass one tensor per graph input");
  int64_t s0 = -1;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ValueType& want = g_.type(g_.inputs[i]);
    const Tensor& t = inputs[i];
    KILN_CHECK(t.defined(), "interpret(graph ", g_.name, "): input ", i, " is undefined but the graph takes ",
               type_str(want));
    int64_t bound = s0;
    if (matches_type(t, want, s0)) continue;
    ValueType got = ValueType::of(t);
    got.requires_grad = want.requires_grad;  // not checked: keep the message about what differs
    std::string hint = bound >= 0 && want.symbolic_dims != 0 ? detail::concat(" (s0 is ", bound, " from an earlier input)") : "";
    KILN_FAIL("interpret(graph ", g_.name, "): input ", i, " is ", type_str(got), " but the graph expects ",
              type_str(want), hint, "; pass a tensor of that shape, dtype and device, or capture the graph again");
  }
}

std::vector<AttrValue> Interpreter::scalar_values(std::span<const AttrValue> scalars) const {
  if (scalars.empty()) {
    std::vector<AttrValue> examples;
    for (const ScalarInput& s : g_.scalar_inputs) examples.push_back(s.example);
    return examples;
  }
  KILN_CHECK(scalars.size() == g_.scalar_inputs.size(), "interpret(graph ", g_.name, "): got ", scalars.size(),
             " scalar inputs but the graph takes ", g_.scalar_inputs.size());
  std::vector<AttrValue> values(scalars.begin(), scalars.end());
  for (size_t i = 0; i < values.size(); ++i) {
    const AttrValue& want = g_.scalar_inputs[i].example;
    if (values[i].index() == want.index()) continue;
    const int64_t* whole = std::get_if<int64_t>(&values[i]);
    KILN_CHECK(std::holds_alternative<double>(want) && whole != nullptr, "interpret(graph ", g_.name,
               "): scalar input $", i, " (", g_.scalar_inputs[i].name, ") must be ", attr_type_name(want),
               " but got a ", attr_type_name(values[i]));
    values[i].emplace<double>(static_cast<double>(*whole));  // an integer learning rate is fine
  }
  return values;
}

Tensors Interpreter::run(TensorSpan inputs, std::span<const AttrValue> scalars) const {
  check_inputs(inputs);
  std::vector<AttrValue> scalar = scalar_values(scalars);
  std::vector<Tensor> env(g_.values.size());
  for (size_t i = 0; i < g_.nodes.size(); ++i) {
    const Node& n = g_.nodes[i];
    switch (n.kind) {
      case NodeKind::Input: env[static_cast<size_t>(n.outputs[0])] = inputs[static_cast<size_t>(n.input_index)]; break;
      case NodeKind::Constant: env[static_cast<size_t>(n.outputs[0])] = n.constant; break;
      case NodeKind::Op: {
        Tensors args;
        args.reserve(n.inputs.size());
        for (ValueId v : n.inputs) args.push_back(v == kNoValue ? Tensor() : env[static_cast<size_t>(v)]);
        Tensors out = run_node(g_, n, std::move(args), scalar);
        for (size_t k = 0; k < out.size(); ++k) env[static_cast<size_t>(n.outputs[k])] = std::move(out[k]);
        break;
      }
    }
    for (ValueId v : free_after_[i]) env[static_cast<size_t>(v)] = Tensor();
  }
  Tensors result;
  result.reserve(g_.outputs.size());
  for (ValueId v : g_.outputs) result.push_back(env[static_cast<size_t>(v)]);
  return result;
}

Tensors run_node(const Graph& g, const Node& n, Tensors args, std::span<const AttrValue> scalars) {
  Tensors out;
  if (n.attr_inputs.empty()) {
    out = dispatch(n.op, std::move(args), n.attrs);
  } else {
    Attrs attrs = n.attrs;
    for (const AttrInput& a : n.attr_inputs) attrs.set(a.attr, scalars[static_cast<size_t>(a.scalar_index)]);
    out = dispatch(n.op, std::move(args), attrs);
  }
  KILN_ASSERT(out.size() == n.outputs.size(), "interpret: ", op_name(n.op), " gave ", out.size(),
              " outputs but the graph node has ", n.outputs.size());
  // A number made a tensor inside the graph (full of x * 0.5) keeps its
  // wrapped-number promotion, as it had when captured.
  for (size_t k = 0; k < out.size(); ++k)
    if (g.type(n.outputs[k]).wrapped_number) out[k].impl()->wrapped_number = true;
  return out;
}

Tensors interpret(const Graph& g, TensorSpan inputs, std::span<const AttrValue> scalars) {
  return Interpreter(g).run(inputs, scalars);
}

}  // namespace kiln::compiler
