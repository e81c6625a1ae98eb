// Building graphs and naming value types (graph.h).
#include "compiler/graph/graph.h"

#include <sstream>

namespace kiln::compiler {

ValueType ValueType::of(const Tensor& t) {
  ValueType v;
  v.shape = t.shape();
  v.strides = t.strides();
  v.dtype = t.dtype();
  v.device = t.device();
  v.requires_grad = t.requires_grad();
  v.wrapped_number = t.impl()->wrapped_number;
  return v;
}

Tensor ValueType::meta() const {
  Tensor t = Tensor::meta(shape, dtype, device, strides);
  t.impl()->wrapped_number = wrapped_number;
  return t;
}

ValueType ValueType::contiguous(Shape shape, DType dtype, Device device, uint64_t symbolic_dims) {
  ValueType v;
  v.strides = contiguous_strides(shape);
  v.shape = std::move(shape);
  v.dtype = dtype;
  v.device = device;
  v.symbolic_dims = symbolic_dims;
  return v;
}

const char* dtype_short_name(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::UInt8: return "u8";
    case DType::Int32: return "i32";
    case DType::Int64: return "i64";
    case DType::Float16: return "f16";
    case DType::BFloat16: return "bf16";
    case DType::Float32: return "f32";
    case DType::Float64: return "f64";
  }
  return "?";
}

bool is_symbolic(const ValueType& t, size_t dim) { return dim < 64 && ((t.symbolic_dims >> dim) & 1u) != 0; }

// Strides print only when they are not the contiguous ones, the device only
// when it is not the CPU: the common case stays short.
std::string type_str(const ValueType& t) {
  std::ostringstream os;
  os << dtype_short_name(t.dtype) << '[';
  for (size_t d = 0; d < t.shape.size(); ++d) {
    os << (d ? ", " : "");
    if (is_symbolic(t, d)) os << "s0";
    else os << t.shape[d];
  }
  os << ']';
  if (!t.strides.empty() && t.strides != contiguous_strides(t.shape)) os << "{strides=" << shape_str(t.strides) << '}';
  if (!t.device.is_cpu()) os << '@' << t.device.str();
  if (t.requires_grad) os << " grad";
  return os.str();
}

ValueId Graph::add_input(const ValueType& type) {
  Node n;
  n.kind = NodeKind::Input;
  n.input_index = static_cast<int>(inputs.size());
  ValueId v = static_cast<ValueId>(values.size());
  values.push_back({type, static_cast<int>(nodes.size()), 0});
  n.outputs.push_back(v);
  nodes.push_back(std::move(n));
  inputs.push_back(v);
  return v;
}

int Graph::add_scalar_input(std::string name, AttrValue example) {
  scalar_inputs.push_back({std::move(name), std::move(example)});
  return static_cast<int>(scalar_inputs.size()) - 1;
}

ValueId Graph::add_constant(const Tensor& value) {
  KILN_ASSERT(value.defined(), "Graph::add_constant: undefined tensor");
  Node n;
  n.kind = NodeKind::Constant;
  n.constant = value;
  ValueId v = static_cast<ValueId>(values.size());
  values.push_back({ValueType::of(value), static_cast<int>(nodes.size()), 0});
  n.outputs.push_back(v);
  nodes.push_back(std::move(n));
  return v;
}

std::vector<ValueId> Graph::add_op(OpId op, Attrs attrs, std::vector<ValueId> op_inputs,
                                   const std::vector<ValueType>& output_types, std::vector<AttrInput> attr_inputs) {
  for (ValueId in : op_inputs)
    KILN_ASSERT(in == kNoValue || (in >= 0 && static_cast<size_t>(in) < values.size()), "Graph::add_op(",
                op_name(op), "): input %", in, " does not exist");
  Node n;
  n.kind = NodeKind::Op;
  n.op = op;
  n.attrs = std::move(attrs);
  n.inputs = std::move(op_inputs);
  n.attr_inputs = std::move(attr_inputs);
  std::vector<ValueId> out;
  for (size_t i = 0; i < output_types.size(); ++i) {
    ValueId v = static_cast<ValueId>(values.size());
    values.push_back({output_types[i], static_cast<int>(nodes.size()), static_cast<int>(i)});
    out.push_back(v);
  }
  n.outputs = out;
  nodes.push_back(std::move(n));
  return out;
}

size_t Graph::num_ops() const {
  size_t n = 0;
  for (const Node& node : nodes) n += node.kind == NodeKind::Op;
  return n;
}

}  // namespace kiln::compiler
