// Which precision a bfloat16 matrix product runs in on this CPU (the
// compiler's float32_regions pass asks, as it asks conv_fused.h about
// convolutions).
#pragma once
#include "kiln/tensor.h"
#include "ops/op_def.h"

namespace kiln {

// Whether a bfloat16 matmul (operands a, b) or linear (input a, weight b)
// node runs in float32 on this CPU as things stand: no bfloat16 matmul here
// (no AVX-512 BF16, or KILN_MATMUL_BF16=0), or its first call of this shape
// measured float32 between casts faster than oneDNN's bfloat16 matmul
// (ops/matmul.cpp; the choice is kept in the autotuning table,
// ops/conv_autotune.h). A shape not multiplied yet is timed now, as its
// first call would time it, on synthetic operands (the choice is recorded).
// Shapes and strides (in elements) as the graph types them.
bool matmul_bf16_runs_float32(OpId op, const Shape& a, const Shape& a_strides, const Shape& b,
                              const Shape& b_strides);
// Whether it runs in float32, or its bfloat16 product won its first call's
// timing only by saving the casts of float32 operands (recorded as
// "bf16-alone"): among float32 values, as in a compiled float32 region, the
// float32 product without casts is faster.
bool matmul_bf16_loses_among_float32(OpId op, const Shape& a, const Shape& a_strides, const Shape& b,
                                     const Shape& b_strides);
// Records a product's choice as its first call would ("bf16", "bf16-alone"
// or "float32"): tests of what the compiler does with each.
void record_matmul_bf16_choice(OpId op, const Shape& a, const Shape& a_strides, const Shape& b,
                               const Shape& b_strides, const std::string& choice);

}  // namespace kiln
