// One registration function per op family file; dispatch.cpp calls them all
// once, before the first op runs (explicit calls: a static registrar in a
// static library would be dropped by the linker).
#pragma once

namespace kiln {
void register_view_ops();
void register_pointwise_ops();
void register_reduce_ops();
void register_matmul_ops();
void register_conv_ops();
void register_pool_ops();
void register_norm_ops();
void register_loss_ops();
void register_index_ops();
void register_factory_ops();
void register_inplace_ops();
void register_device_ops();
// Not a family: the decompositions of ops that keep an eager kernel.
void register_decompositions();
}  // namespace kiln
