// A graph compiled for the CPU (docs/loop-ir.md, "Running"): lowered to loop
// kernels, fused, rendered to C++, built by the JIT (codegen/cpp/
// jit_compiler.h, cached on disk), and run with the same call as the
// reference Interpreter, against which every result is tested.
//
// A run walks the program's steps: extern nodes (conv2d, matmul, pooling,
// batch_norm, anything that did not lower) run their eager kernels through
// kiln::dispatch, folded views run eagerly only where a tensor of them is
// needed, kernels run the compiled functions on contiguous buffers (an
// input given with other strides is made contiguous for the call). Each
// intermediate is freed after its last use; outputs that are graph inputs or
// constants come back as those very tensors.
//
// Autograd sees no generated kernel: a run whose outputs need gradients
// (grad mode on and an input or constant requiring grad) goes through the
// reference Interpreter, so the tape records every op as eager mode would.
// Grad mode alone is not enough: with nothing requiring grad the tape
// records nothing, and the kernels run (an eval loop that forgot no_grad).
//
// KILN_DUMP=loops prints the fused loop program, KILN_DUMP=kernels the
// generated C++, both to stderr when the executable is built.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "compiler/graph/interpreter.h"
#include "compiler/lower/loop_ir.h"

namespace kiln::compiler::codegen {
class LoadedModule;
}

namespace kiln::compiler {

class CppExecutable : public GraphExecutable {
 public:
  // Compiles `g` (which must outlive the executable and not change).
  explicit CppExecutable(const Graph& g);
  ~CppExecutable() override;
  Tensors run(TensorSpan inputs, std::span<const AttrValue> scalars = {}) const override;
  // Whether autograd would record this run: an input or constant requires grad.
  bool records_gradients(TensorSpan inputs) const;

  const lower::LoopProgram& program() const { return program_; }
  const std::string& source() const { return source_; }  // empty when nothing lowered

 private:
  using KernelFn = void (*)(void* const*, const int64_t*);
  using RegionFn = void (*)(void* const* const*, const int64_t*);
  const Graph& g_;
  Interpreter reference_;  // input and scalar checks; runs in grad mode
  lower::LoopProgram program_;
  std::string source_;
  std::shared_ptr<codegen::LoadedModule> module_;
  std::vector<KernelFn> functions_;                 // per kernel
  // Per kernel: the profile range of its calls, "<graph>/k3" (the graphs of
  // one model, its train step and its evaluation, each have a k3).
  std::vector<std::string> kernel_names_;
  std::vector<std::vector<ValueId>> buffers_;       // per kernel: its arguments
  // Per kernel argument, what run() needs, worked out once: a stored one's
  // output type (its shape with symbolic dims to fill in with s0).
  struct Argument {
    ValueId value = kNoValue;
    bool stored = false;
    ValueId into = kNoValue;  // stored: the value whose memory takes the store (LoopProgram::stored_into)
    Shape shape;
    std::vector<size_t> symbolic_dims;
    DType dtype = DType::Float32;
    Device device;
    bool wrapped_number = false;
  };
  std::vector<std::vector<Argument>> arguments_;  // per kernel
  std::vector<RegionFn> region_functions_;        // per parallel region (LoopProgram::regions)
  std::vector<std::string> region_names_;         // per region: its profile range, "<graph>/r0"
  // Per kernel: the region it starts, kRegionMember for a later kernel of a
  // region (run with the region), kNoRegion otherwise.
  static constexpr int kNoRegion = -1, kRegionMember = -2;
  std::vector<int> region_of_kernel_;
  std::vector<std::vector<ValueId>> free_after_;    // per step
};

// The executable of a backend: "interpreter" or "cpp" (kiln::Error naming
// the choices for another name).
std::unique_ptr<GraphExecutable> make_executable(const Graph& g, const std::string& backend);

}  // namespace kiln::compiler
