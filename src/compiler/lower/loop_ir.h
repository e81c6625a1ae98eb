// The loop IR (docs/loop-ir.md): what the compiler's back half lowers a
// graph's pointwise and reduction nodes to, fuses (compiler/schedule) and
// renders to C++ (compiler/codegen/cpp).
//
// A Kernel is one loop nest: the output loops (one per output dim, outermost
// first), then, for a reduction, the reduced loops innermost. Its body reads
// buffers through Loads (a buffer and coordinates over named loop variables,
// addressed row-major), computes ScalarExprs (ops/scalar_expr.h: the same
// formulas the eager kernels run) and writes Stores. A scalar expression's
// input k is an operand of the kernel:
//   k <  kAccumulatorBase        loads[k]
//   kAccumulatorBase + j         the value of reductions[j] (store values only)
//   kIndexValueBase + j          index_values[j] as a number (a mean's count)
// Buffers are graph values held as contiguous tensors at run time (inputs,
// constants, extern outputs, kernel outputs); a view folded into a load's
// coordinates is never copied.
//
// A LoopProgram is a graph's execution plan: steps in order, each an extern
// node (run with the eager kernel), a view run eagerly because a tensor of it
// is needed, or a kernel.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "compiler/graph/graph.h"
#include "compiler/lower/index_expr.h"
#include "ops/scalar_expr.h"

namespace kiln::compiler::lower {

constexpr int kAccumulatorBase = 1 << 20;
constexpr int kIndexValueBase = 2 << 20;

struct Loop {
  std::string var;  // i0, i1... (output) or r0, r1... (reduced)
  IndexExpr extent;
};

// A read of buffer `buffer` (a graph value) at `coords` in an array of
// `sizes`: the buffer's own shape, or the shape of a reshape of it (a
// reshape of a contiguous buffer is the same memory).
struct Load {
  ValueId buffer = kNoValue;
  DType dtype = DType::Float32;
  std::vector<IndexExpr> coords;
  std::vector<IndexExpr> sizes;
  IndexExpr flat() const { return flat_index(coords, sizes); }
};

// Welford: the accumulator is the sum of squared deviations from the
// running mean (M2, kept in double with the mean and count), updated per
// element as Welford's algorithm does, so a variance needs one pass and
// does not cancel.
enum class ReduceOp : uint8_t { Sum, Max, Min, Welford };
const char* reduce_op_name(ReduceOp op);

struct Reduction {
  ReduceOp op = ReduceOp::Sum;
  ScalarExpr value;  // over loads (may read the reduced loop variables)
};

struct Store {
  ValueId buffer = kNoValue;
  DType dtype = DType::Float32;
  std::vector<IndexExpr> coords;  // over the output loop variables
  std::vector<IndexExpr> sizes;
  ScalarExpr value;  // over loads, accumulators and index values
  IndexExpr flat() const { return flat_index(coords, sizes); }
};

struct Kernel {
  std::string name;             // k0, k1... (the extern "C" symbol adds a prefix)
  std::vector<int> nodes;       // graph node indices it computes, in graph order
  std::vector<Loop> loops;      // output loops, outermost first
  std::vector<Loop> reduce_loops;  // reduced loops, innermost; empty: pointwise
  std::vector<Load> loads;
  std::vector<IndexExpr> index_values;
  std::vector<Reduction> reductions;
  std::vector<Store> stores;
  // Buffers that share memory (a store made in place of a copy-back and the
  // destination it loads: schedule/store_copy_backs.h); the renderers do not
  // declare them __restrict__.
  std::vector<ValueId> aliased;

  bool is_reduction() const { return !reductions.empty(); }
  // Operand number of a new load (an equal load already there is reused).
  int add_load(Load load);
};

struct Step {
  enum class Kind : uint8_t { Extern, View, Kernel };
  Kind kind = Kind::Extern;
  int node = -1;    // Extern, View: graph node index
  int kernel = -1;  // Kernel: index into LoopProgram::kernels
};

struct LoopProgram {
  const Graph* graph = nullptr;
  std::vector<Kernel> kernels;
  std::vector<Step> steps;
  // Per value: the run needs it as a tensor (a graph output, an input of an
  // extern node or of a view run eagerly); a fused kernel must not inline it.
  std::vector<bool> needs_tensor;
  // Per value (empty: none): the value whose memory a kernel's store of it
  // writes, its copy-back made in place (schedule/store_copy_backs.h).
  std::vector<ValueId> stored_into;
  // Runs of consecutive kernels (indices into kernels) that run as one
  // OpenMP parallel region (schedule/parallel_regions.h); region r is the
  // extern "C" function kiln_r<r>.
  std::vector<std::vector<int>> regions;
};

// prefix followed by n ("i0", "k3"); appended, since GCC 12 warns falsely
// (-Wrestrict) about "i" + std::to_string(n).
std::string numbered(const char* prefix, int64_t n);

// The extent of dim d of a value: s0 where the dim is symbolic.
IndexExpr size_expr(const ValueType& t, size_t d);
std::vector<IndexExpr> size_exprs(const ValueType& t);

// The expression with each input k replaced by with(k) (shared subtrees
// stay shared).
ScalarExpr map_inputs(const ScalarExpr& e, const std::function<ScalarExpr(int)>& with);

// A kernel's expressions: the reductions' values, then the stores'.
std::vector<ScalarExpr> expressions(const Kernel& k);
// Every expression of the kernel with input k replaced by with(k).
void map_expressions(Kernel& k, const std::function<ScalarExpr(int)>& with);
// Drops the loads and index values no expression reads; renumbers the rest.
void remove_unused_operands(Kernel& k);

// The non-leaf nodes of the expressions (not inputs, not constants) in an
// order where each comes after its arguments, each once: how the printer
// and the renderers give every shared subexpression one temporary.
std::vector<ScalarExpr> ssa_order(const std::vector<ScalarExpr>& roots);

// Text form, stable for tests (docs/loop-ir.md):
//   kernel k0 covers %2 = add #2, %3 = relu #3 {
//     for i0 in [0, 4):
//       for i1 in [0, s0):
//         t0 = add(%0[i0*s0 + i1], %1[i1])
//         t1 = lt(t0, 0)
//         t2 = select(t1, 0, t0)
//         %3[i0*s0 + i1] = t2
//   }
std::string print(const Kernel& k);
std::string print(const LoopProgram& p);

}  // namespace kiln::compiler::lower
