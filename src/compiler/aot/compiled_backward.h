// AOT autograd for a forward-only compile whose outputs need gradients
// (kiln::compile(model) in training, loss.backward() outside): the joint
// graph (joint.h) split by the min-cut partitioner into a forward graph that
// also returns the saved values and a backward graph that turns saved values
// and output gradients into input gradients; at run time the forward graph
// runs without a tape and one autograd node runs the backward graph.
//
// Both graphs go through the default passes and run on the backend's
// executable (the interpreter, or generated kernels). What the backward holds between the
// two runs is exactly the partition's saved values plus the inputs it reads.
#pragma once
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <functional>

#include "compiler/aot/partition.h"
#include "compiler/graph/executable.h"
#include "compiler/graph/graph.h"

namespace kiln::compiler {

struct ForwardBackward {
  Graph forward;   // inputs: the forward's; outputs: the forward's, then the saved values
  // inputs: the forward inputs it reads (backward_primals), the saved values,
  // the tangents; outputs: the gradients
  Graph backward;
  size_t num_outputs = 0;  // of the original forward
  size_t num_saved = 0;
  std::vector<size_t> tangent_of;  // per tangent: the forward output it belongs to
  std::vector<size_t> grad_of;     // per backward output: the forward input it is the gradient of
  std::vector<size_t> backward_primals;  // the forward inputs the backward graph reads, in order
  Partition partition;
};

// The split graphs, or nullopt with `why` when the forward is not one the
// compiled backward handles (an output that is an input or a view of one,
// an output returned twice, a scalar input on a differentiable path): the
// caller keeps the eager tape for it. Both graphs then run the pipeline of
// compile mode `mode` (default_passes, then execution_passes).
std::optional<ForwardBackward> split_forward_backward(const Graph& forward, std::string* why = nullptr,
                                                      std::string_view mode = "default");

// Runs a ForwardBackward: the forward graph under no grad, then attaches
// the backward to the outputs that carry gradients.
class AotRunner {
 public:
  using MakeExecutable = std::function<std::unique_ptr<GraphExecutable>(const Graph&)>;
  // `make` builds what runs each of the two graphs (default: the interpreter).
  explicit AotRunner(ForwardBackward fb, const MakeExecutable& make = {});
  // The original forward's outputs.
  Tensors run(TensorSpan inputs, std::span<const AttrValue> scalars) const;
  const ForwardBackward& graphs() const { return *fb_; }

 private:
  std::shared_ptr<const ForwardBackward> fb_;
  std::shared_ptr<const GraphExecutable> forward_, backward_;
};

}  // namespace kiln::compiler
