// What runs a graph: the reference Interpreter (interpreter.h) or a compiled
// backend (compiler/backend/). Capture holds one per graph segment and calls
// it the same way whichever backend CompileOptions::backend names.
#pragma once
#include <span>

#include "compiler/graph/graph.h"

namespace kiln::compiler {

class GraphExecutable {
 public:
  virtual ~GraphExecutable() = default;
  // `scalars` gives one value per Graph::scalar_inputs entry; empty means
  // the examples seen at capture.
  virtual Tensors run(TensorSpan inputs, std::span<const AttrValue> scalars = {}) const = 0;
};

}  // namespace kiln::compiler
