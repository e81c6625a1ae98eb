// C++ for a LoopProgram's kernels (docs/loop-ir.md, "C++"): one translation
// unit per graph, one extern "C" function per kernel, for the JIT
// (jit_compiler.h: g++ -O3 -fopenmp -ffp-contract=off, no fast-math).
//
// The code is explicit vector code over src/ops/cpu/vec_math.h (pasted at the
// top of the file as namespace kv): one loop runs kv::kLanes iterations at a
// time (16 on AVX-512, 8 on AVX2; the last chunk has n_ < kLanes active
// lanes), every expression node is one kv:: call. Those are the calls the
// eager float32 kernels make for the same formulas, so a value recomputed
// in a fused kernel has the eager value's bits (max-pool's backward compares
// them). The lanes run over a pointwise kernel's innermost output loop; a
// reduction's innermost reduced loop (vector accumulators reduced across
// lanes at the end) when its loads walk it contiguously, else its innermost
// output loop. The outer output loops run in parallel with OpenMP when the
// kernel does enough work (kParallelThreshold; a symbolic size decides at
// run time through the pragma's if clause). Each function is preceded by a
// comment naming the graph nodes it computes. A parallel region
// (LoopProgram::regions) is one more function, kiln_r<N>, that opens the
// OpenMP region once and calls its kernels inside it.
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
// The extern "C" name of parallel region r (LoopProgram::regions).
std::string region_symbol(size_t r);
// The function of one kernel (without includes); in_region: for a call
// inside a parallel region its caller opened (parallel_regions.h).
std::string render_cpp_kernel(const lower::Kernel& k, bool in_region = false);
// The whole translation unit of a program's kernels, with its includes.
std::string render_cpp(const lower::LoopProgram& p);

}  // namespace kiln::compiler::codegen
