// C++ for a LoopProgram's kernels (docs/loop-ir.md, "C++"): one translation
// unit per graph, one extern "C" function per kernel, for the JIT
// (jit_compiler.h: g++ -O3 -fopenmp, no fast-math).
//
// The outermost output loops run in parallel with OpenMP when the kernel does
// enough work (kParallelThreshold elements; a symbolic size decides at run
// time through the pragma's if clause); a pointwise kernel's innermost loop
// and a sum's innermost reduced loop are `omp simd` (sums with a vector
// accumulator). Each function is preceded by a comment naming the graph
// nodes it computes.
//
// Math functions are the scalar libm ones (expf, erff...), never SIMD
// variants: fusion recomputes a producer in each consumer, and a mask such
// as eq(gelu(x), amax(gelu(x))) is right only if every copy rounds alike,
// whether its loop vectorized or not. (glibc's libmvec variants differ from
// the scalar functions in the last bits.)
#pragma once
#include <cstdint>
#include <string>

#include "compiler/lower/loop_ir.h"

namespace kiln::compiler::codegen {

// Below this many loop iterations a kernel runs on one thread: starting the
// team costs more than it saves.
constexpr int64_t kParallelThreshold = 32768;

// The extern "C" name of a kernel's function.
std::string kernel_symbol(const lower::Kernel& k);
// The function of one kernel (without includes).
std::string render_cpp_kernel(const lower::Kernel& k);
// The whole translation unit of a program's kernels, with its includes.
std::string render_cpp(const lower::LoopProgram& p);

}  // namespace kiln::compiler::codegen
