// The graph IR every compiler stage shares: SSA values over the ops of the
// ops table (DESIGN.md, "Data flow"). Capture records one, AOT autograd
// derives the backward and partitions it, passes rewrite it, and the
// interpreter (interpreter.h) runs it with the eager kernels: the reference
// every later backend is tested against.
//
// A graph is a list of nodes in topological order. Each node defines its
// output values once; an input that an op may omit (a convolution's bias)
// is kNoValue. Values that change from call to call without changing the
// graph (a learning rate, a random seed) are scalar inputs: a node reads
// such an attribute from Graph::scalar_inputs at run time instead of baking
// it in, so a new value never recompiles.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/attrs.h"
#include "kiln/tensor.h"
#include "ops/op_def.h"

namespace kiln::compiler {

using ValueId = int32_t;
constexpr ValueId kNoValue = -1;

// A value's type: what a meta tensor holds.
struct ValueType {
  Shape shape;    // sizes seen at capture (dims marked symbolic vary)
  Shape strides;  // in elements
  DType dtype = DType::Float32;
  Device device;
  uint64_t symbolic_dims = 0;  // bit d set: dim d is the symbol s0 (the batch size)
  bool requires_grad = false;
  // A C++ number made a tensor (x * 0.5): type promotion treats it as a
  // Python scalar, so graphs must keep the flag when they re-run shape rules.
  bool wrapped_number = false;

  static ValueType of(const Tensor& t);
  // A meta tensor of this type (wrapped-number flag included).
  Tensor meta() const;
  // A contiguous value of the given shape (tests, passes).
  static ValueType contiguous(Shape shape, DType dtype = DType::Float32, Device device = Device::cpu(),
                              uint64_t symbolic_dims = 0);
  bool operator==(const ValueType&) const = default;
};
std::string type_str(const ValueType& t);  // "f32[s0, 3, 32, 32]"
const char* dtype_short_name(DType t);      // "f32", "i64", "bool"
bool is_symbolic(const ValueType& t, size_t dim);
// An op's output of `rank` dims keeps the symbolic dims of its inputs
// (`inputs_symbolic`: their bits or-ed) that it has: how the passes that add
// ops type their outputs.
inline uint64_t symbolic_dims_for(uint64_t inputs_symbolic, size_t rank) {
  return rank == 0 ? 0 : inputs_symbolic & ((uint64_t{1} << rank) - 1);
}

enum class NodeKind : uint8_t {
  Input,     // the graph's input number input_index
  Constant,  // a tensor captured by value (created inside the captured code)
  Op,        // an op of the ops table
};

// An attribute of an Op node read from a scalar input at run time.
struct AttrInput {
  std::string_view attr;  // attribute name (a literal, as in Attrs)
  int scalar_index = 0;   // into Graph::scalar_inputs
  bool operator==(const AttrInput&) const = default;
};

struct ScalarInput {
  std::string name;   // "lr", "seed" (for printing)
  AttrValue example;  // the value seen at capture (fixes the type)
};

struct Node {
  NodeKind kind = NodeKind::Op;
  OpId op{};                           // Op nodes
  Attrs attrs;                         // Op nodes
  std::vector<AttrInput> attr_inputs;  // Op nodes: attrs taken from scalar inputs
  std::vector<ValueId> inputs;         // Op nodes; kNoValue for an absent optional input
  std::vector<ValueId> outputs;
  int input_index = -1;  // Input nodes
  Tensor constant;       // Constant nodes
  std::string where;     // user source location "file.cpp:42" (explain, errors); may be empty
  // Which part of a train step the node belongs to: capture marks the
  // derivative nodes of a captured backward() and what runs after them
  // (the optimizer update); the partitioner splits on it.
  enum class Region : uint8_t { Forward, Backward, Update };
  Region region = Region::Forward;
};

struct Value {
  ValueType type;
  int node = -1;          // index of the defining node in Graph::nodes
  int output_index = 0;   // which output of that node
};

class Graph {
 public:
  std::string name = "graph";
  std::vector<Node> nodes;  // topological order
  std::vector<Value> values;
  std::vector<ValueId> inputs;  // in call order (Input nodes)
  std::vector<ScalarInput> scalar_inputs;
  std::vector<ValueId> outputs;

  ValueId add_input(const ValueType& type);
  int add_scalar_input(std::string name, AttrValue example);
  ValueId add_constant(const Tensor& value);
  // Appends an op node with outputs of the given types; returns their ids.
  std::vector<ValueId> add_op(OpId op, Attrs attrs, std::vector<ValueId> inputs,
                              const std::vector<ValueType>& output_types, std::vector<AttrInput> attr_inputs = {});

  const ValueType& type(ValueId v) const { return values.at(static_cast<size_t>(v)).type; }
  const Node& producer(ValueId v) const { return nodes.at(static_cast<size_t>(values.at(static_cast<size_t>(v)).node)); }
  size_t num_ops() const;
};

}  // namespace kiln::compiler
