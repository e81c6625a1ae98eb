// The joint forward+backward graph of a forward graph (AOTAutograd's joint
// trace): the forward's nodes, then the backward that the ops' derivative
// entries give, as graph nodes.
//
// How: the forward graph is replayed on meta tensors with autograd
// recording under a tracing dispatch mode that appends each op to the joint
// graph; then the autograd engine runs backward from the differentiable
// outputs with one new graph input (a tangent) per output, and the same mode
// records the derivative ops. Each primal input that requires grad gets a
// sink where its gradient arrives; those gradients are the joint graph's
// last outputs.
//
// Requires: a verified, functional graph (the capture pipeline's
// executable). Guarantees: the joint graph's forward nodes (Region::Forward)
// compute the forward's outputs; its Backward nodes compute, from the
// tangents, each requiring-grad input's gradient exactly as eager autograd
// would (the same derivative entries, the same accumulation order).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "compiler/graph/graph.h"

namespace kiln::compiler {

struct JointGraph {
  Graph graph;  // inputs: the forward's inputs, then the tangents; outputs: the forward's, then the gradients
  size_t num_primals = 0;
  size_t num_forward_outputs = 0;
  std::vector<size_t> tangent_of;   // per tangent: the forward output it is the gradient of
  std::vector<size_t> grad_of;      // per gradient output: the primal input it is the gradient of
};

// The joint graph, or nullopt with `why` set when the forward cannot be
// differentiated ahead of time (the caller then keeps the eager tape).
std::optional<JointGraph> build_joint(const Graph& forward, std::string* why = nullptr);

}  // namespace kiln::compiler
