// Which storage each step of a LoopProgram writes in place, for the
// fusions: moving a read (inlining a producer into a later consumer, joining
// a later kernel to an earlier one) is sound only if no step it moves across
// writes what it reads. Only extern steps write in place (in-place ops, the
// copy-backs of a functionalized graph, batch_norm's running statistics);
// kernels write fresh buffers.
#pragma once
#include <vector>

#include "compiler/lower/loop_ir.h"

namespace kiln::compiler::schedule {

class StepWrites {
 public:
  explicit StepWrites(const lower::LoopProgram& p);
  // Whether a step strictly between `from` and `to` (step indices) writes
  // the storage of one of the buffers `reads` loads.
  bool written_between(const std::vector<lower::Load>& reads, size_t from, size_t to) const;

 private:
  const Graph& g_;
  std::vector<std::vector<ValueId>> roots_;  // per step: alias roots it writes
};

}  // namespace kiln::compiler::schedule
