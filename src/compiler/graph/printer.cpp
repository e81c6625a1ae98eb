// The text form of the graph IR (printer.h).
#include "compiler/graph/printer.h"

#include <sstream>

namespace kiln::compiler {
namespace {

// Constants this small print their values; larger ones only their type.
constexpr int64_t kMaxPrintedConstantElements = 8;

std::string value_name(ValueId v) { return v == kNoValue ? std::string("None") : detail::concat('%', v); }

std::string constant_str(const Tensor& t) {
  if (t.numel() > kMaxPrintedConstantElements || t.is_meta()) return "constant(...)";
  std::vector<double> xs = t.to_vector<double>();
  std::ostringstream os;
  os << "constant(";
  if (t.dim() > 0) os << '[';
  for (size_t i = 0; i < xs.size(); ++i) os << (i ? ", " : "") << xs[i];
  if (t.dim() > 0) os << ']';
  os << ')';
  return os.str();
}

}  // namespace

std::string attr_value_str(const AttrValue& v) {
  // Attrs::str already formats every alternative; strip its "x=".
  std::string s = Attrs().set("x", v).str();
  return s.substr(2);
}

const char* attr_type_name(const AttrValue& v) {
  static constexpr const char* kNames[] = {"i64", "f64", "bool", "ints", "dtype", "str"};
  static_assert(std::variant_size_v<AttrValue> == std::size(kNames));
  return kNames[v.index()];
}

std::string print_attrs(const Node& node) {
  std::ostringstream os;
  bool first = true;
  auto scalar_for = [&](std::string_view name) -> int {
    for (const AttrInput& a : node.attr_inputs)
      if (a.attr == name) return a.scalar_index;
    return -1;
  };
  for (const auto& [name, value] : node.attrs.items()) {
    os << (first ? "" : ", ") << name << '=';
    first = false;
    int s = scalar_for(name);
    if (s >= 0) os << '$' << s;
    else os << attr_value_str(value);
  }
  for (const AttrInput& a : node.attr_inputs) {
    if (node.attrs.has(a.attr)) continue;
    os << (first ? "" : ", ") << a.attr << "=$" << a.scalar_index;
    first = false;
  }
  std::string body = os.str();
  return body.empty() ? body : detail::concat('{', body, '}');
}

std::string print_node(const Graph& g, const Node& node) {
  std::ostringstream os;
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    ValueId v = node.outputs[i];
    os << (i ? ", " : "") << value_name(v) << ": ";
    if (v >= 0 && static_cast<size_t>(v) < g.values.size()) os << type_str(g.type(v));
    else os << "<bad value>";
  }
  os << " = ";
  switch (node.kind) {
    case NodeKind::Input: os << "input(" << node.input_index << ')'; break;
    case NodeKind::Constant: os << constant_str(node.constant); break;
    case NodeKind::Op: {
      os << op_name(node.op) << '(';
      for (size_t i = 0; i < node.inputs.size(); ++i) os << (i ? ", " : "") << value_name(node.inputs[i]);
      os << ')';
      std::string attrs = print_attrs(node);
      if (!attrs.empty()) os << ' ' << attrs;
      break;
    }
  }
  if (!node.where.empty()) os << "   # " << node.where;
  return os.str();
}

std::string print(const Graph& g) {
  std::ostringstream os;
  os << "graph " << g.name << '(';
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    ValueId v = g.inputs[i];
    os << (i ? ", " : "") << value_name(v) << ": ";
    if (v >= 0 && static_cast<size_t>(v) < g.values.size()) os << type_str(g.type(v));
  }
  for (size_t i = 0; i < g.scalar_inputs.size(); ++i) {
    const ScalarInput& s = g.scalar_inputs[i];
    os << (i ? ", " : g.inputs.empty() ? "" : "; ") << '$' << i << ' ' << s.name << ": " << attr_type_name(s.example);
  }
  os << ") {\n";
  for (const Node& node : g.nodes) {
    if (node.kind == NodeKind::Input) continue;  // in the signature
    os << "  " << print_node(g, node) << '\n';
  }
  os << "  return (";
  for (size_t i = 0; i < g.outputs.size(); ++i) os << (i ? ", " : "") << value_name(g.outputs[i]);
  os << ")\n}\n";
  return os.str();
}

}  // namespace kiln::compiler
