// The C-like part of rendering a loop kernel (DESIGN.md: "the C++ and CUDA
// code generators share a C-like renderer and differ only where the targets
// do", as tinygrad's renderer base class).
//
// CLikeRenderer prints what every C-like target writes the same way: the
// typed buffer pointers, index arithmetic, one `const float tN = ...;` per
// expression node (each op's C text comes from ops/scalar_expr.h's
// render_c, so the math is written once), accumulators, loads and stores.
// A target subclass decides the function signature and how loops run:
// pragmas for OpenMP and SIMD in C++ (render_cpp.h), thread indices for
// CUDA later.
//
// A kernel's function takes its buffers as `void* const* bufs` in the order
// of kernel_buffers() and the symbolic sizes as `const int64_t* sizes`
// (sizes[0] = s0), so every kernel has one C type.
#pragma once
#include <string>
#include <vector>

#include "compiler/lower/loop_ir.h"

namespace kiln::compiler::codegen {

// The buffers a kernel's function receives: loaded ones first (in load
// order, each once), then stored ones.
std::vector<ValueId> kernel_buffers(const lower::Kernel& k);
// How buffer v's pointer is declared: "* __restrict__ ", or "* " where it
// shares memory with another of the kernel's buffers (Kernel::aliased).
const char* pointer_declarator(const lower::Kernel& k, ValueId v);
// C type of a buffer element ("float", "bool").
const char* c_element_type(DType t);

class CLikeRenderer {
 public:
  virtual ~CLikeRenderer() = default;
  // The whole function for `k`.
  std::string render(const lower::Kernel& k);

 protected:
  // The line(s) opening the function, up to and including "{".
  virtual std::string signature(const lower::Kernel& k) const = 0;
  // Printed on the line before an output loop (`depth` counts loops from 0;
  // the innermost output loop of a pointwise kernel is `innermost`).
  virtual std::string output_loop_prefix(const lower::Kernel& k, size_t depth, bool innermost) const = 0;
  // Printed before the innermost reduced loop, and before the outermost one
  // of a kernel without output loops (`accumulators` names the sum ones).
  virtual std::string reduce_loop_prefix(const lower::Kernel& k, size_t depth, bool innermost,
                                         const std::vector<std::string>& sum_accumulators) const = 0;

  // Helpers a target may use.
  static std::string c_index(const lower::IndexExpr& e);

 private:
  struct State;
  void emit(State& s, size_t indent, const std::string& line) const;
  std::vector<std::string> compute(State& s, size_t indent, const std::vector<ScalarExpr>& roots) const;
  std::string operand(const State& s, int i) const;
};

}  // namespace kiln::compiler::codegen
