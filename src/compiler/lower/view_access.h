// Folding views into indexing (docs/loop-ir.md, "Views").
//
// A kernel reading a view of a buffer reads the buffer itself at coordinates
// the view maps: permute swaps them, slice scales and shifts one, select and
// a broadcast (expand, a size-1 input dim) fix one, squeeze and unsqueeze
// drop or add a size-1 one, and a reshape of a buffer held contiguous reads
// the same memory under another shape. Nothing is copied. A view this cannot
// express (as_strided; a reshape of a non-contiguous view; a slice or select
// of the symbolic dim) runs eagerly instead and its result is a buffer.
#pragma once
#include <vector>

#include "compiler/lower/loop_ir.h"

namespace kiln::compiler::lower {

// Per value: read through its producer's view (true) or as a buffer.
// A view node folds when it is one of the forms above; decided in graph
// order, since a reshape folds only over a contiguous buffer.
std::vector<bool> folded_views(const Graph& g);

// The load of value `v` at `coords` (one per dim of v), following folded
// views back to the buffer they read.
Load resolve_load(const Graph& g, const std::vector<bool>& folded, ValueId v, std::vector<IndexExpr> coords);

// The coordinates of an input of shape `in` read by an op broadcasting it to
// the output coordinates `out` (numpy rules: dims aligned right, a size-1
// dim reads 0).
std::vector<IndexExpr> broadcast_coords(const ValueType& in, const ValueType& out_type,
                                        const std::vector<IndexExpr>& out);

}  // namespace kiln::compiler::lower
