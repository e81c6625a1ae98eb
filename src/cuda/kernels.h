// The launchers of kiln's own CUDA kernels, in plain structs (no Tensor), so
// the .cu files include nothing but the CUDA headers and stay quick to build.
// src/cuda/ops.cpp turns op calls into these.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace kiln::cuda {

constexpr int kMaxDims = 8;

// Whether p may be read in 16-byte vectors (null counts: an absent operand
// does not stop the vector path).
inline bool aligned16(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }

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
  ReluBackward /* a = grad, b = relu's result */,
  // updates of optimizers: a + p0*b*c, a + p0*b/c, lerp(a, b, p0)
  AddCMul, AddCDiv, Lerp,
  // unary
  Neg, Exp, Log, Sqrt, Rsqrt, Abs, Sign, Relu, GeluErf, GeluTanh, Sigmoid, Tanh, Erf, Clamp /* [p0, p1] */,
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

namespace kiln::cuda {

// Pooling over the planes of dense [N*C, H, W] inputs, windows and divisors
// as the CPU kernels (src/ops/pool.cpp) compute them. dtype: any float; the
// arithmetic is float32 (float64 for Float64).
struct PoolCall {
  const void* in = nullptr;   // forward: x; backward: grad_out
  void* out = nullptr;        // forward: y; backward: grad_in (the caller zero-fills it)
  int64_t* indices = nullptr;  // max pool: forward writes them (null: values only), backward reads them
  int64_t* bad = nullptr;      // max pool backward: [seen, index] of an index outside the plane
  Scalar dtype = Scalar::Float32;
  int64_t planes = 1, H = 1, W = 1, OH = 1, OW = 1;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  bool count_include_pad = true;
  // Channels-last: in, out and indices are NHWC ([N, H, W, C] in memory),
  // with C channels per pixel (planes = N * C as for NCHW).
  bool channels_last = false;
  int64_t C = 1;
  cudaStream_t stream = nullptr;
};
void launch_max_pool(const PoolCall& c);           // pool.cu
void launch_max_pool_backward(const PoolCall& c);  // out: Float32 or Float64 (atomic adds)
void launch_avg_pool(const PoolCall& c);
void launch_avg_pool_backward(const PoolCall& c);  // out: Float32 or Float64 (atomic adds)

// A dense [C] array of a float dtype (data null: absent).
struct ChannelArray {
  void* data = nullptr;
  Scalar dtype = Scalar::Float32;
};

// Batch norm over a dense [N, C, HW] input x (any float dtype), statistics
// in float64. Per channel c (mean, var, sum_g, sum_gd, k1-k3 are float64):
//   stats:    mean[c], var[c] (biased) of x over N and HW, one pass (sums of x
//             and x^2 in float64)
//   backward: sum_g[c] = sum g, sum_gd[c] = sum g * (x - mean[c])
//   apply:    out = k1[c] * (g or x) + k2[c] * x + k3[c]  (the forward uses k1 on x, k2 = 0)
// The per-channel coefficients are computed by the kernel that combines the
// sums (one thread per channel), from the arrays below: no small ops between.
struct BatchNormFinish {
  ChannelArray weight, bias;                // absent: 1, 0
  ChannelArray running_mean, running_var;   // forward: read in eval, updated in place in training
  ChannelArray save_mean, save_invstd;      // forward outputs; backward inputs
  ChannelArray grad_weight, grad_bias;      // backward outputs (absent: not wanted)
  double momentum = 0.1, eps = 1e-5;
  bool training = true;
};
struct BatchNormCall {
  const void* x = nullptr;
  const void* g = nullptr;  // backward: grad_out (same dtype as x)
  void* out = nullptr;      // apply: y or grad_x (x's dtype)
  double* mean = nullptr;
  double* var = nullptr;
  double* sum_g = nullptr;
  double* sum_gd = nullptr;
  const double* k1 = nullptr;
  const double* k2 = nullptr;
  const double* k3 = nullptr;
  double* scratch = nullptr;  // batch_norm_scratch_doubles(c) doubles
  Scalar dtype = Scalar::Float32;
  int64_t N = 1, C = 1, HW = 1;
  // Channels-last: x, g and out are [N * HW, C] in memory (NHWC) instead of [N, C, HW].
  bool channels_last = false;
  int num_sms = 132;
  cudaStream_t stream = nullptr;
};
int64_t batch_norm_scratch_doubles(const BatchNormCall& c);
// Forward: (training) the statistics, the running-stat update, then
// save_mean/save_invstd and k1 (scale), k3 (shift) into c.k1/c.k3 (writable
// [C] float64 arrays passed as k1/k3), then the apply pass.
void launch_batch_norm_forward(const BatchNormCall& c, const BatchNormFinish& f, double* k1, double* k3);
// Backward: the grad sums, grad_weight/grad_bias and k1-k3, then the apply pass.
void launch_batch_norm_backward(const BatchNormCall& c, const BatchNormFinish& f, double* k1, double* k2,
                                double* k3);
void launch_batch_norm_apply(const BatchNormCall& c);

// Indexing over [outer, D, inner] views of dense tensors, elements moved as
// raw words of `itemsize` bytes (1, 2, 4 or 8). Indices are int64, negative
// ones counted from the end; one outside [-D, D) sets bad[0] = 1, bad[1] = it.
struct IndexCall {
  const void* src = nullptr;
  void* dst = nullptr;
  const int64_t* index = nullptr;
  int64_t* bad = nullptr;
  Scalar dtype = Scalar::Float32;  // index_add / scatter_add: the element type added
  int itemsize = 4;
  int64_t outer = 1, D = 1, inner = 1, K = 1;  // K indices (index_select / index_add)
  // gather / scatter_add: index (and src for scatter) dense with `sizes`;
  // the indexed tensor has `strides` (its own along `dim`).
  int nd = 0;
  int dim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
  int64_t numel = 0;
  cudaStream_t stream = nullptr;
};
void launch_index_select(const IndexCall& c);  // dst[o, k, i] = src[o, index[k], i]; index.cu
void launch_index_add(const IndexCall& c);     // dst[o, index[k], i] += src[o, k, i]
void launch_gather(const IndexCall& c);        // dst[p] = src[p with p[dim] = index[p]]
void launch_scatter_add(const IndexCall& c);   // dst[p with p[dim] = index[p]] += src[p]
void launch_one_hot(const IndexCall& c);       // dst[i, index[i]] = 1 (dst int64, zero-filled; D classes)

// Random draws from the Philox stream (ops/philox.h) exactly as the CPU
// kernels draw them: element i takes word i % 4 of counter offset + i / 4
// (two words of counter offset + i / 2 for 64-bit draws).
enum class RandomOp : uint8_t { Rand, Randn, Randint, Bernoulli, Dropout, Arange };
struct RandomCall {
  RandomOp op = RandomOp::Rand;
  void* out = nullptr;
  const void* in = nullptr;  // bernoulli: p; dropout: x (dense, out's dtype)
  bool* mask = nullptr;      // dropout
  int64_t* bad = nullptr;    // bernoulli: a probability outside [0, 1]
  Scalar dtype = Scalar::Float32;
  int64_t n = 0;
  uint64_t seed = 0, offset = 0;
  int64_t low = 0;
  uint64_t range = 1;           // randint
  uint32_t keep_threshold = 0;  // dropout: keep when word < threshold (or keep_all)
  bool keep_all = false;
  double scale = 1.0;                // dropout
  double start = 0.0, step = 1.0;  // arange
  cudaStream_t stream = nullptr;
};
void launch_random(const RandomCall& c);  // random.cu

}  // namespace kiln::cuda

namespace kiln::cuda {

// The DataLoader's batch assembly on the device (src/data/device_loader.cpp):
// out image i = the dataset's uint8 image draws[i].index, flipped, cropped
// (zero padding) and translated (reflect padding) as the CPU's
// detail::assemble_image does, then fma(pixel, scale[c], bias[c]) (one
// rounding, as the CPU's). Labels gathered alike.
constexpr int kAugmentMaxChannels = 4;
struct AugmentDraw {  // detail::ImageAugment plus the image's index: a row of an int32 [B, 6] tensor
  int32_t index, flip, crop_y, crop_x, translate_y, translate_x;
};
struct AugmentCall {
  const uint8_t* images = nullptr;  // [N, C, H, W]
  const int64_t* labels = nullptr;  // [N]
  const AugmentDraw* draws = nullptr;  // [B]
  float* out = nullptr;             // [B, C, H, W], or NHWC in memory when channels_last
  int64_t* out_labels = nullptr;    // [B]
  int64_t B = 0, C = 1, H = 1, W = 1;
  int64_t crop_padding = 0, translate = 0;
  float scale[kAugmentMaxChannels] = {}, bias[kAugmentMaxChannels] = {};
  bool channels_last = false;
  cudaStream_t stream = nullptr;
};
void launch_augment(const AugmentCall& c);  // augment.cu

}  // namespace kiln::cuda

namespace kiln::cuda {

// SGD's step over many float32 parameters in one launch (src/optim/sgd.cpp,
// as torch's foreach SGD): the per-parameter path is six in-place ops, each
// a launch, and ResNet-18's 62 parameters made ~370 launches a step. Per
// tensor, over its n elements, the per-op path's arithmetic in its order and
// rounding (each multiply rounded, each `self + alpha * other` one fma, as
// nvcc contracts scalar::add_update in the pointwise kernel):
//   b = b * m;  b = fma(a_g, g, b);  [wd] b = fma(a_wp, p, b)
//   nesterov:  [wd] p = p * decay;  p = fma(a_pg, g, p);  p = fma(a_pb, b, p)
//   else:      p = fma(a_pb, b, p)
constexpr int kSgdMaxTensors = 48;  // per launch: the call is a kernel parameter (under 4 KB)
struct SgdTensor {
  float* p = nullptr;
  const float* g = nullptr;
  float* b = nullptr;
  int64_t n = 0;
};
struct SgdCall {
  SgdTensor t[kSgdMaxTensors];
  int count = 0;
  int64_t max_n = 0;
  float m = 0, a_g = 0, a_wp = 0, decay = 1, a_pg = 0, a_pb = 0;
  bool weight_decay = false, nesterov = false;
  cudaStream_t stream = nullptr;
};
void launch_sgd(const SgdCall& c);  // sgd.cu

}  // namespace kiln::cuda
