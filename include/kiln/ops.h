// The public op functions. Each one packs its arguments into an op call
// (OpId + tensors + attributes) and goes through kiln::dispatch, so eager
// kernels, autograd and capture all see the same op. The definitions are in
// src/ops/*.cpp, one file per family, next to the op's table entry.
#pragma once
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "kiln/random.h"
#include "kiln/tensor.h"

namespace kiln {

// Options for factories: dtype, device, requires_grad.
struct TensorOptions {
  DType dtype = DType::Float32;
  Device device = Device::cpu();
  bool requires_grad = false;
  TensorOptions& with_dtype(DType d) { dtype = d; return *this; }
  TensorOptions& with_device(Device d) { device = d; return *this; }
  TensorOptions& with_requires_grad(bool r = true) { requires_grad = r; return *this; }
};
inline TensorOptions dtype(DType d) { return TensorOptions().with_dtype(d); }

// ---- factories ----
Tensor empty(const Shape& shape, TensorOptions opts = {});
Tensor full(const Shape& shape, double value, TensorOptions opts = {});
Tensor zeros(const Shape& shape, TensorOptions opts = {});
Tensor ones(const Shape& shape, TensorOptions opts = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
Tensor arange(double start, double end, double step = 1.0, TensorOptions opts = dtype(DType::Int64));
Tensor arange(int64_t end, TensorOptions opts = dtype(DType::Int64));
// A 0-dim tensor; as an argument it promotes like a Python number.
Tensor scalar_tensor(double value, DType dtype = DType::Float32);
// From host values (copied); shape must match values.size().
Tensor from_vector(const std::vector<float>& values, const Shape& shape, TensorOptions opts = {});
Tensor from_vector(const std::vector<double>& values, const Shape& shape, TensorOptions opts = dtype(DType::Float64));
Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape, TensorOptions opts = dtype(DType::Int64));
// From raw bytes of `dtype` (copied).
Tensor from_blob(const void* data, const Shape& shape, DType dtype);

// ---- random (seedable; default generator when gen is null) ----
Tensor rand(const Shape& shape, TensorOptions opts = {}, Generator* gen = nullptr);
Tensor randn(const Shape& shape, TensorOptions opts = {}, Generator* gen = nullptr);
// Uniform integers in [low, high).
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts = dtype(DType::Int64),
               Generator* gen = nullptr);
// 1 with probability p, else 0, shaped like p.
Tensor bernoulli(const Tensor& p, Generator* gen = nullptr);
// Zeroes elements with probability p and scales the rest by 1/(1-p) when training.
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* gen = nullptr);

// ---- pointwise ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);  // true division: integers give float32
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, double exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor relu(const Tensor& x);
// relu's derivative from its output: result > 0 ? grad : 0 (one kernel, no bool mask)
Tensor relu_backward(const Tensor& grad, const Tensor& result);
// approximate: "none" (exact, erf) or "tanh"
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
Tensor gelu_backward(const Tensor& grad, const Tensor& x, const std::string& approximate = "none");
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& x);
Tensor cast(const Tensor& x, DType dtype);

// Scalar forms (the number becomes a wrapped 0-dim tensor).
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& x);

// ---- reductions (dims empty = all dims) ----
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
// correction 1 = unbiased (PyTorch's default), 0 = population variance
Tensor var(const Tensor& x, const std::vector<int64_t>& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// Sums `x` down to `shape` (the reverse of broadcasting); used by derivatives.
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- linear algebra ----
// 2-D x 2-D, batched 3-D x 3-D (or broadcast 2-D), 1-D handled as in PyTorch.
Tensor matmul(const Tensor& a, const Tensor& b);
// beta * self + alpha * (m1 @ m2)
Tensor addmm(const Tensor& self, const Tensor& m1, const Tensor& m2, double beta = 1.0, double alpha = 1.0);
// x @ weight^T + bias; weight is [out, in]
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// ---- convolution (NCHW input, OIHW weight) ----
struct Conv2dParams {
  std::vector<int64_t> stride{1, 1};
  std::vector<int64_t> padding{0, 0};
  std::vector<int64_t> dilation{1, 1};
  int64_t groups = 1;
};
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const Conv2dParams& p = {});
Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Shape& input_shape,
                             const Conv2dParams& p);
Tensor conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                              const Conv2dParams& p);

// ---- pooling (NCHW) ----
// stride empty = kernel_size. Returns (values, indices into each H*W plane, int64).
std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const std::vector<int64_t>& kernel_size,
                                                   const std::vector<int64_t>& stride = {},
                                                   const std::vector<int64_t>& padding = {0, 0},
                                                   const std::vector<int64_t>& dilation = {1, 1},
                                                   bool ceil_mode = false);
Tensor max_pool2d(const Tensor& x, const std::vector<int64_t>& kernel_size, const std::vector<int64_t>& stride = {},
                  const std::vector<int64_t>& padding = {0, 0}, const std::vector<int64_t>& dilation = {1, 1},
                  bool ceil_mode = false);
Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Shape& input_shape);
Tensor avg_pool2d(const Tensor& x, const std::vector<int64_t>& kernel_size, const std::vector<int64_t>& stride = {},
                  const std::vector<int64_t>& padding = {0, 0}, bool ceil_mode = false,
                  bool count_include_pad = true);
Tensor avg_pool2d_backward(const Tensor& grad_out, const Shape& input_shape, const std::vector<int64_t>& kernel_size,
                           const std::vector<int64_t>& stride, const std::vector<int64_t>& padding, bool ceil_mode,
                           bool count_include_pad);
Tensor adaptive_avg_pool2d(const Tensor& x, const std::vector<int64_t>& output_size);
Tensor adaptive_max_pool2d(const Tensor& x, const std::vector<int64_t>& output_size);

// ---- normalization ----
// training: normalizes with batch statistics over (N, H, W) and updates
// running_mean/running_var in place (momentum as PyTorch, unbiased var);
// eval: uses the running statistics. weight/bias/running stats may be undefined.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5);
// Returns (grad_x, grad_weight, grad_bias) given the saved batch mean and 1/std.
std::tuple<Tensor, Tensor, Tensor> batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                                                       const Tensor& save_mean, const Tensor& save_invstd,
                                                       bool training, double eps);

// ---- losses ----
// reduction: "mean" | "sum" | "none"; targets are int64 class indices.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const std::string& reduction = "mean",
                int64_t ignore_index = -100);
Tensor cross_entropy(const Tensor& logits, const Tensor& target, double label_smoothing = 0.0,
                     const std::string& reduction = "mean");

// ---- indexing and joining ----
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// int64 indices -> int64 one-hot with num_classes (-1: max + 1) as last dim
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);

// ---- views and copies (also available as Tensor methods) ----
Tensor view(const Tensor& x, const Shape& shape);  // shape may hold one -1
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor select(const Tensor& x, int64_t dim, int64_t index);
Tensor expand(const Tensor& x, const Shape& shape);  // -1 keeps a size
Tensor squeeze(const Tensor& x, std::optional<int64_t> dim = std::nullopt);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor as_strided(const Tensor& x, const Shape& shape, const Shape& strides, int64_t offset);
Tensor contiguous(const Tensor& x);
Tensor clone(const Tensor& x);
// A copy on `device` (Tensor::to(Device)); gradients flow back to x's device.
Tensor to_device(const Tensor& x, Device device);
Tensor slice_backward(const Tensor& grad, const Shape& input_shape, int64_t dim, int64_t start, int64_t end,
                      int64_t step);

// ---- in-place (no autograd; throw on a tensor that requires grad while grad mode is on) ----
Tensor& fill_(Tensor& self, double value);
Tensor& copy_(Tensor& self, const Tensor& src);
Tensor& add_(Tensor& self, const Tensor& other, double alpha = 1.0);
Tensor& mul_(Tensor& self, const Tensor& other);
Tensor& mul_(Tensor& self, double value);
Tensor& addcmul_(Tensor& self, const Tensor& a, const Tensor& b, double value = 1.0);
Tensor& addcdiv_(Tensor& self, const Tensor& a, const Tensor& b, double value = 1.0);
Tensor& lerp_(Tensor& self, const Tensor& end, double weight);

// ---- comparison helpers for tests and users ----
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);

}  // namespace kiln
