// Copy-backs stored in place (docs/loop-ir.md, "Fusion"): a functionalized
// graph computes each updated tensor as a new value and copies it back at
// the end (copy_(param, new_param): the optimizer's parameters and momentum
// buffers). Where a kernel computes the new value element for element, it
// stores it into the destination's storage itself and the copy-back goes:
// one pass over the parameter instead of a store, a later read and a write.
//
// Requires: a LoopProgram after fusion (before merge_loops: loops still one
// per dim). Guarantees: the same values in every buffer the run still
// needs, and the destination holds the new value from the kernel on. A
// copy_(dst, src) step goes when
//   - a pointwise kernel K stores src at its own loop coordinates, and src
//     has the shape and dtype of dst, whose type is contiguous;
//   - nothing but the copy_ reads src, src is not a graph output, and
//     nothing reads the copy_'s result;
//   - no step between K and the copy_ reads or writes dst's storage (they
//     would see the new value early), and K reads that storage only at the
//     coordinates it stores (each element read before its own write).
// LoopProgram::stored_into[src] names dst; the executable passes dst's
// memory for the store (a non-contiguous dst at run time gets the copy
// right after the kernel instead, which the same conditions allow).
// KILN_DISABLE_PASSES=store_copy_backs turns it off (the cpp backend skips it).
#pragma once
#include "compiler/lower/loop_ir.h"

namespace kiln::compiler::schedule {

// The number of copy-backs removed.
int store_copy_backs(lower::LoopProgram& p);

}  // namespace kiln::compiler::schedule
