// What the CUDA ops-table kernels share (defined in ops.cpp): dtype
// routing, casts and fills through the pointwise loop, and the wrapper that
// runs a kernel on its output's device.
#pragma once
#include <span>

#include "cuda/check.h"
#include "cuda/kernels.h"
#include "kiln/memory_format.h"
#include "kiln/tensor.h"
#include "ops/op_def.h"

namespace kiln::cuda {

Scalar scalar_of(DType t);
// The dtype a kernel computes in: float32 for 16-bit floats, else out's own.
DType compute_dtype(DType out);
bool is_number(const Tensor& t);  // a host scalar (number or 0-dim CPU tensor)
Operand number_operand(double v);
PointwiseCall make_call(PointwiseOp op, DType compute, const Tensor& out, std::initializer_list<Tensor> inputs);
// Writes src (any dtype, broadcast to dst) into dst (any dtype and layout).
void cast_into(const Tensor& src, const Tensor& dst);
void fill_with(const Tensor& dst, double value);
// A new tensor of like's shape in dtype dt, channels-last when like is.
Tensor empty_like_layout(const Tensor& like, DType dt);
// t in dtype dt (t itself when it already is; a copy keeps a channels-last layout).
Tensor converted(const Tensor& t, DType dt);
int multiprocessors(int device);

// Runs body(y) with y = out when out has the compute dtype, else with a
// temporary in it that is then converted into out.
template <typename Body>
void with_compute_output(const Tensor& out, DType cd, Body body) {
  if (out.dtype() == cd) {
    body(out);
    return;
  }
  Tensor y = empty_like_layout(out, cd);
  body(y);
  cast_into(y, out);
}

// Every CUDA kernel runs on its output's device.
template <KernelFn F>
void on_device(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  DeviceGuard g(out[0].device().index);
  F(in, out, a);
}

// The kernels of ops_nn.cpp (convolution, pooling, batch norm, var,
// indexing, factories and random ops), added to the table.
void register_nn_kernels();

}  // namespace kiln::cuda
