// kiln::Tensor: a shared handle to (storage, shape, strides, offset, dtype)
// plus the autograd state. Copies of a Tensor share the same tensor; views
// share storage with their base.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include "kiln/source_location.h"
#include <ostream>
#include <string>
#include <vector>

#include "kiln/device.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/shape.h"
#include "kiln/storage.h"

namespace kiln {

namespace autograd {
class Node;
}

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;  // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::Float32;
  // A 0-dim tensor made from a C++ number: type promotion treats it as
  // PyTorch treats Python scalars (it only wins across categories).
  bool wrapped_number = false;

  // autograd
  bool requires_grad = false;  // leaves only; non-leaves require grad via grad_fn
  std::shared_ptr<autograd::Node> grad_fn;
  int output_nr = 0;  // which output of grad_fn this tensor is
  std::weak_ptr<autograd::Node> grad_accumulator;  // leaves: shared by the graphs using it
  std::shared_ptr<TensorImpl> grad;
  bool retains_grad = false;
};

// Throws kiln::Error for `what` (a method name) called on an undefined Tensor.
[[noreturn]] void throw_undefined_tensor(const char* what);

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
  // A new, uninitialized, contiguous tensor.
  static Tensor empty(const Shape& shape, DType dtype = DType::Float32, Device device = Device::cpu());
  // A meta tensor: shape, dtype, device and strides (contiguous when empty)
  // without memory. Ops on meta tensors run their shape rules only and give
  // meta tensors; reading one's data is an error (or, under capture, a graph
  // break that fills it).
  static Tensor meta(const Shape& shape, DType dtype, Device device, const Shape& strides = {});

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

  // metadata (each throws kiln::Error on an undefined Tensor, except
  // numel(), which is 0 there as in libtorch)
  const Shape& shape() const { return checked("shape()")->shape; }
  const Shape& sizes() const { return checked("sizes()")->shape; }
  const Shape& strides() const { return checked("strides()")->strides; }
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return static_cast<int64_t>(checked("dim()")->shape.size()); }
  int64_t numel() const { return impl_ ? numel_of(impl_->shape) : 0; }
  int64_t offset() const { return checked("offset()")->offset; }
  DType dtype() const { return checked("dtype()")->dtype; }
  Device device() const { return checked("device()")->storage->device(); }
  size_t itemsize() const { return kiln::itemsize(dtype()); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * itemsize(); }
  bool is_contiguous() const;
  bool is_floating_point() const { return is_floating(dtype()); }
  bool shares_storage(const Tensor& other) const;
  bool is_meta() const { return checked("is_meta()")->storage->is_meta(); }
  // The storage's in-place write count (shared with views and detach()).
  uint64_t version() const { return checked("version()")->storage->version(); }
  // Marks an in-place write made outside the in-place ops (kernels that
  // update an input, such as batch_norm's running statistics).
  void bump_version() const { checked("bump_version()")->storage->bump_version(); }

  // Pointer to element 0 (storage base + offset). `where` names the caller
  // in a graph-break report under capture (as for item()).
  void* data_ptr(const SourceLocation& where = SourceLocation::current()) const;
  // Typed pointer; throws kiln::Error if T does not match dtype().
  template <typename T>
  T* data(const SourceLocation& where = SourceLocation::current()) const;
  // The single value of a one-element tensor, converted to double/T.
  // `where` names the caller in a graph-break report under capture.
  double item(const SourceLocation& where = SourceLocation::current()) const;
  template <typename T>
  T item(const SourceLocation& where = SourceLocation::current()) const {
    return static_cast<T>(item(where));
  }
  // All elements, in row-major order, converted to T (any device).
  template <typename T>
  std::vector<T> to_vector(const SourceLocation& where = SourceLocation::current()) const;

  // autograd
  // false for an undefined Tensor (as libtorch); the others below throw there.
  bool requires_grad() const;
  Tensor& requires_grad_(bool value = true);
  bool is_leaf() const { return checked("is_leaf()")->grad_fn == nullptr; }
  const std::shared_ptr<autograd::Node>& grad_fn() const { return checked("grad_fn()")->grad_fn; }
  // Undefined until a backward() reaches this tensor.
  Tensor grad() const { return Tensor(checked("grad()")->grad); }
  void set_grad(const Tensor& g);
  // Keep .grad() for a non-leaf tensor after backward.
  void retain_grad();
  // grad defaults to ones for a one-element tensor.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  // Same storage, no autograd history.
  Tensor detach() const;

  // conversions and copies (each goes through the ops table)
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;
  Tensor clone() const;
  Tensor contiguous() const;

  // views
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const { return transpose(0, 1); }
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;
  Tensor squeeze(int64_t dim) const;
  Tensor squeeze() const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor operator[](int64_t index) const { return select(0, index); }

  Tensor view_as(const Tensor& other) const { return view(other.shape()); }
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }

  // Methods for the free functions of ops.h (x.mean({2, 3}, true) is
  // mean(x, {2, 3}, true)); each forwards to the function of the same name.
  // reductions (dims empty = all dims)
  Tensor sum(const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor mean(const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor amax(const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor amin(const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor var(const std::vector<int64_t>& dims = {}, int64_t correction = 1, bool keepdim = false) const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  // pointwise
  Tensor add(const Tensor& other) const;
  Tensor add(double other) const;
  Tensor sub(const Tensor& other) const;
  Tensor sub(double other) const;
  Tensor mul(const Tensor& other) const;
  Tensor mul(double other) const;
  Tensor div(const Tensor& other) const;
  Tensor div(double other) const;
  Tensor pow(const Tensor& exponent) const;
  Tensor pow(double exponent) const;
  Tensor maximum(const Tensor& other) const;
  Tensor minimum(const Tensor& other) const;
  Tensor neg() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor abs() const;
  Tensor sign() const;
  Tensor relu() const;
  Tensor gelu(const std::string& approximate = "none") const;
  Tensor sigmoid() const;
  Tensor tanh() const;
  Tensor clamp(std::optional<double> min, std::optional<double> max) const;
  Tensor eq(const Tensor& other) const;
  Tensor eq(double other) const;
  Tensor ne(const Tensor& other) const;
  Tensor ne(double other) const;
  Tensor lt(const Tensor& other) const;
  Tensor lt(double other) const;
  Tensor le(const Tensor& other) const;
  Tensor le(double other) const;
  Tensor gt(const Tensor& other) const;
  Tensor gt(double other) const;
  Tensor ge(const Tensor& other) const;
  Tensor ge(double other) const;
  Tensor logical_not() const;
  // linear algebra and indexing
  Tensor matmul(const Tensor& other) const;
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor gather(int64_t dim, const Tensor& index) const;

  // in-place, for optimizers and initializers (not recorded by autograd)
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }
  Tensor& copy_(const Tensor& src);
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double value);

  std::string str() const;

 private:
  // The impl, or a kiln::Error naming `what` when undefined: one predictable
  // branch, so the accessors stay cheap.
  TensorImpl* checked(const char* what) const {
    if (impl_ == nullptr) [[unlikely]] throw_undefined_tensor(what);
    return impl_.get();
  }

  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Called when code reads the data of a meta tensor: capture installs one that
// runs the graph so far and fills the tensor (a graph break); without one the
// read is a kiln::Error. Thread-local; returns the previous hook.
using MetaDataAccessHook = void (*)(const Tensor& t, const char* what, const SourceLocation& where);
MetaDataAccessHook set_meta_data_access_hook(MetaDataAccessHook hook);

// Scope that turns off autograd recording (like torch.no_grad()).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};
bool grad_mode_enabled();
void set_grad_mode(bool enabled);

// ---- template definitions ----
template <typename T>
T* Tensor::data(const SourceLocation& where) const {
  KILN_CHECK(dtype() == dtype_v<T>, "Tensor::data<", dtype_name(dtype_v<T>), ">(): the tensor holds ",
             dtype_name(dtype()), "; use data<matching type>() or .to(", dtype_name(dtype_v<T>), ") first");
  return static_cast<T*>(data_ptr(where));
}

template <typename T>
std::vector<T> Tensor::to_vector(const SourceLocation& where) const {
  Tensor c = to(Device::cpu()).to(dtype_v<T>).contiguous();
  const T* p = c.data<T>(where);
  return std::vector<T>(p, p + c.numel());
}

}  // namespace kiln
