// Parallel regions (docs/loop-ir.md, "Parallel regions"): a run of
// consecutive kernels that share no memory runs as one OpenMP parallel
// region, one call that starts the thread team once, instead of one
// region per kernel. The optimizer's update is such a run: one kernel per
// parameter shape (fuse_horizontal joins those of equal shape), each storing
// into its own parameter and momentum buffer; as one region it is one call
// over all parameters, where large kernels split their loops over the
// threads without waiting for each other and small ones run whole on
// whichever thread is free.
//
// Requires: a LoopProgram after the fusion passes (store_copy_backs
// included: a store into a parameter's memory counts as a write of it).
// Guarantees: each region's kernels are consecutive steps (views run only
// for their indexing may sit between), have constant loop extents, and no
// kernel of a region writes memory another one reads or writes: memory
// followed through views and in-place stores. The run time checks the
// pointers again (an extern's output may alias its input) and calls the
// kernels one by one where they overlap.
// KILN_DISABLE_PASSES=parallel_regions turns it off (the cpp backend skips it).
#pragma once
#include "compiler/lower/loop_ir.h"

namespace kiln::compiler::schedule {

// The number of regions formed. A run becomes a region when at least two
// of its kernels do `parallel_work` loop iterations or more (those that
// would each start the thread team alone: codegen's kParallelThreshold);
// runs of small kernels stay on the calling thread.
int group_parallel_regions(lower::LoopProgram& p, int64_t parallel_work);

}  // namespace kiln::compiler::schedule
