// The launchers of kiln's own CUDA kernels, in plain structs (no Tensor), so
// the .cu files include nothing but the CUDA headers and stay quick to build.
// src/cuda/ops.cpp turns op calls into these.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace kiln::cuda {

constexpr int kMaxDims = 8;

// kiln::DType's order (kept in step by a static_assert in ops.cpp).
enum class Scalar : uint8_t { Bool, UInt8, Int32, Int64, Float16, BFloat16, Float32, Float64 };

// One operand of an elementwise loop: a tensor (data + strides in elements
// over the loop's dims; 0 where broadcast) or a number passed by value.
struct Operand {
  void* data = nullptr;
  int64_t strides[kMaxDims] = {};
  Scalar dtype = Scalar::Float32;
  bool is_number = false;
  double number = 0;
};

enum class PointwiseOp : uint8_t {
  // binary
  Add, Sub, Mul, Div, Pow, Maximum, Minimum, AddScaled /* a + p0 * b */, GeluBackwardErf, GeluBackwardTanh,
  // updates of optimizers: a + p0*b*c, a + p0*b/c, lerp(a, b, p0)
  AddCMul, AddCDiv, Lerp,
  // unary
  Neg, Exp, Log, Sqrt, Rsqrt, Abs, Sign, Relu, GeluErf, GeluTanh, Sigmoid, Tanh, Clamp /* [p0, p1] */,
  // comparisons (bool output)
  Eq, Ne, Lt, Le, Gt, Ge, LogicalNot,
  // where(cond, a, b)
  Where,
  // out = in[0] converted to out's dtype (also fills: in[0] a number)
  Cast,
};

// out[i] = op(in[0][i], ...) over `sizes` (dims already merged where every
// operand allows). All tensor inputs have the compute dtype `compute`
// (Where's condition is bool; Cast's input any dtype); out has `compute`
// too, or bool for comparisons, or any dtype for Cast.
struct PointwiseCall {
  PointwiseOp op = PointwiseOp::Add;
  Scalar compute = Scalar::Float32;
  int nd = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t numel = 0;
  bool contiguous = false;  // every tensor operand dense over the loop, in order
  Operand out;
  Operand in[3];
  int nin = 0;
  double p0 = 0, p1 = 0;
  cudaStream_t stream = nullptr;
};
void launch_pointwise(const PointwiseCall& c);  // pointwise.cu
void launch_cast(const PointwiseCall& c);       // cast.cu

enum class ReduceOp : uint8_t { Sum, Max, Min };

// out[o, i] = scale * sum_r in[o, r, i] (or the max / min over r, NaN winning)
// over a dense [outer, R, inner] input. dtype: Float32, Float64 or Int64
// (input and output alike).
struct ReduceCall {
  ReduceOp op = ReduceOp::Sum;
  const void* in = nullptr;
  void* out = nullptr;
  Scalar dtype = Scalar::Float32;
  int64_t outer = 1, reduced = 1, inner = 1;
  double scale = 1.0;
  void* scratch = nullptr;  // reduce_scratch_bytes(call) bytes, for long rows
  cudaStream_t stream = nullptr;
  int num_sms = 132;
};
size_t reduce_scratch_bytes(const ReduceCall& c);
void launch_reduce(const ReduceCall& c);  // reduce.cu

// softmax / log_softmax over the middle dim of a dense [outer, D, inner]
// tensor, and their backward (out = y * (g - sum g*y), or g - exp(y) sum g).
struct SoftmaxCall {
  const void* x = nullptr;  // forward: input; backward: the forward's output y
  const void* grad = nullptr;  // backward only
  void* out = nullptr;
  Scalar dtype = Scalar::Float32;  // Float32 or Float64
  int64_t outer = 1, dim = 1, inner = 1;
  bool log = false;
  bool backward = false;
  cudaStream_t stream = nullptr;
};
void launch_softmax(const SoftmaxCall& c);  // softmax.cu

}  // namespace kiln::cuda

namespace kiln::cuda {

// nll_loss over log_probs [N, C, S] (dense, Float32 or Float64) and int64
// targets [N, S]; reduction 0 none, 1 mean, 2 sum. `check` is 3 int64 of
// device scratch: [bad target seen, its value, count of non-ignored]; the
// caller reads it back to report a bad target.
struct NllCall {
  const void* log_probs = nullptr;
  const int64_t* target = nullptr;
  const void* grad = nullptr;  // backward: the output's gradient
  void* out = nullptr;         // forward: the loss; backward: [N, C, S], zero-filled by the caller
  int64_t* check = nullptr;
  Scalar dtype = Scalar::Float32;
  int64_t N = 1, C = 1, S = 1;
  int reduction = 1;
  int64_t ignore_index = -100;
  bool backward = false;
  cudaStream_t stream = nullptr;
};
void launch_nll(const NllCall& c);  // nll.cu

}  // namespace kiln::cuda

namespace kiln::cuda {

// out[o, i] = the first index r of the largest in[o, r, i] (the first NaN
// wins, as on the CPU) over a dense [outer, D, inner] input; dtype Float32,
// Float64 or Int64; out is int64.
struct ArgmaxCall {
  const void* in = nullptr;
  int64_t* out = nullptr;
  Scalar dtype = Scalar::Float32;
  int64_t outer = 1, dim = 1, inner = 1;
  cudaStream_t stream = nullptr;
};
void launch_argmax(const ArgmaxCall& c);  // argmax.cu

}  // namespace kiln::cuda
