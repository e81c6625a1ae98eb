// bfloat16 autocast where it does not pay: a bfloat16 convolution that runs
// in float32 anyway (oneDNN has no bfloat16 kernel for it here, or its first
// call measured float32 faster: ops/conv.cpp) converted its operands to
// float32 and its result back on every call, after the graph had cast its
// float32 sources down to bfloat16 to feed it. On a model whose convolutions
// all measured float32 faster (the tutorial CNN's 5x5 layers on AVX-512
// without AMX) those casts made bf16 autocast slower than compiled float32.
// This pass computes such regions in float32 and rounds to bfloat16 only
// where a value leaves them.
//
// Requires: a graph the verifier accepts; runs on graphs about to execute
// (execution_passes), before fuse_norm_activation and blocked_layouts (a
// float32 convolution it makes may keep nChw16c values there).
// Guarantees: a CPU conv2d, conv2d_backward_input, conv2d_backward_weight,
// linear or matmul with bfloat16 operands and output, no layout attributes,
// that runs in float32 on this CPU (conv_bf16_runs_float32,
// matmul_bf16_runs_float32: a shape not seen yet is timed now), or a
// convolution or matrix product whose bfloat16 kernel won its timing only
// by saving its own casts and whose operands are all float32 values here
// (conv_bf16_loses_among_float32, matmul_bf16_loses_among_float32), becomes the float32 op on float32 operands: an operand that is cast(s) of a float32 s
// (s not written in place between the cast and this op), or that this pass
// computed in float32, is read as that float32 value; any other is cast up.
// Its output is rounded to bfloat16 for the readers that need bfloat16. A
// relu, gelu, their backward, max_pool2d, max_pool2d_backward, view,
// reshape, sum, add, batch_norm or batch_norm_backward with a bfloat16
// operand that has a float32 value (its other bfloat16 operands cast up,
// once per value; its other floating operands float32) runs on them (max-pool's values round to the same bfloat16, rounding being
// monotone; its indices may pick another of equal bfloat16 values), so
// fuse_norm_activation and blocked_layouts see float32 values there. A cast of such a
// value up to float32 reads the float32 value. A fused activation whose
// oneDNN post-op would cost the float32 convolution its algorithm becomes
// a node of its own after it. Dead casts go. Values written in place are
// left alone.
// Results: float32 where the unoptimized graph rounded to bfloat16 in
// between (as Inductor keeps fused intermediates in float32), so they differ
// from eager bf16 autocast by bfloat16 rounding and are no less accurate.
// KILN_DISABLE_PASSES=float32_regions turns it off.
#pragma once
#include "compiler/graph/graph.h"

namespace kiln::compiler {

// Which bfloat16 layers start a float32 region.
enum class Float32Regions {
  WhereFloat32Wins,  // those float32_wins: the per-layer choices above
  // Every bfloat16 layer: the whole graph in float32 but for the values it
  // reads or returns as bfloat16. What capture's whole-graph precision trial
  // (capture/precision_trial.h) times against the graph as autocast wrote it.
  Everywhere,
};

// The number of ops now computed in float32.
int compute_float32_regions(Graph& g, Float32Regions which = Float32Regions::WhereFloat32Wins);

// The number of CPU convolutions and matrix products that compute on
// bfloat16 operands in `g` (the layers a float32 region can start at).
int count_bfloat16_layers(const Graph& g);

}  // namespace kiln::compiler
