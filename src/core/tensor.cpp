#include "kiln/tensor.h"

#include <cmath>
#include <iomanip>
#include <sstream>

#include "autograd/node.h"
#include "kiln/ops.h"

namespace kiln {

void throw_undefined_tensor(const char* what) {
  KILN_FAIL("Tensor::", what, " called on an undefined Tensor (a default-constructed Tensor, or the grad() of a "
            "tensor that no backward() has reached yet); check t.defined() first");
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t s : shape)
    KILN_CHECK(s >= 0, "empty: negative size in shape ", shape_str(shape), "; sizes must be >= 0");
  auto impl = std::make_shared<TensorImpl>();
  try {
    impl->storage = std::make_shared<Storage>(static_cast<size_t>(numel_of(shape)) * kiln::itemsize(dtype), device);
  } catch (const InternalError&) {
    throw;
  } catch (const Error& e) {
    KILN_FAIL("empty: cannot allocate a ", dtype_name(dtype), shape_str(shape), " tensor on ", device, ": ", e.what());
  }
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::meta(const Shape& shape, DType dtype, Device device, const Shape& strides) {
  for (int64_t s : shape)
    KILN_CHECK(s >= 0, "meta: negative size in shape ", shape_str(shape), "; sizes must be >= 0");
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->strides = strides.empty() && !shape.empty() ? contiguous_strides(shape) : strides;
  KILN_CHECK(impl->strides.size() == shape.size(), "meta: ", shape.size(), " sizes but ", impl->strides.size(),
             " strides");
  int64_t extent = 1;  // elements spanned: 1 + sum (size-1)*stride
  bool empty = false;
  for (size_t d = 0; d < shape.size(); ++d) {
    KILN_CHECK(impl->strides[d] >= 0, "meta: negative stride in ", shape_str(impl->strides));
    empty = empty || shape[d] == 0;
    extent += (shape[d] - 1) * impl->strides[d];
  }
  impl->storage = std::make_shared<Storage>(empty ? 0 : static_cast<size_t>(extent) * kiln::itemsize(dtype), device,
                                            Storage::Meta{});
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

namespace {
thread_local MetaDataAccessHook t_meta_hook = nullptr;
}

MetaDataAccessHook set_meta_data_access_hook(MetaDataAccessHook hook) {
  MetaDataAccessHook prev = t_meta_hook;
  t_meta_hook = hook;
  return prev;
}

// A read of a meta tensor's data: a graph break under capture (the hook fills
// the tensor), else an error.
[[gnu::noinline]] static void on_meta_data_access(
    const Tensor& t, const char* what, const SourceLocation& where) {
  if (t_meta_hook != nullptr) t_meta_hook(t, what, where);
  KILN_CHECK(!t.impl()->storage->is_meta(), what, ": the tensor ", dtype_name(t.dtype()), shape_str(t.shape()),
             " is a meta tensor (shape, dtype and device without memory), so it has no data to read; run the op on "
             "real tensors");
}

int64_t Tensor::size(int64_t d) const { return checked("size()")->shape[wrap_dim(d, dim(), "Tensor::size")]; }
int64_t Tensor::stride(int64_t d) const {
  return checked("stride()")->strides[wrap_dim(d, dim(), "Tensor::stride")];
}

bool Tensor::is_contiguous() const {
  checked("is_contiguous()");
  // No element, nothing out of place: torch's rule, and the strides of an
  // empty tensor (from max(size, 1)) would fail the walk below.
  if (numel() == 0) return true;
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (impl_->shape[i] == 1) continue;
    if (impl_->strides[i] != expected) return false;
    expected *= impl_->shape[i];
  }
  return true;
}

bool Tensor::shares_storage(const Tensor& other) const {
  return defined() && other.defined() && impl_->storage == other.impl_->storage;
}

void* Tensor::data_ptr(const SourceLocation& where) const {
  checked("data_ptr()");
  if (impl_->storage->data() == nullptr && impl_->storage->is_meta()) [[unlikely]]
    on_meta_data_access(*this, "data_ptr()", where);
  return static_cast<char*>(impl_->storage->data()) + impl_->offset * static_cast<int64_t>(itemsize());
}

double Tensor::item(const SourceLocation& where) const {
  checked("item()");
  KILN_CHECK(numel() == 1, "item(): the tensor has ", numel(), " elements (shape ", shape_str(shape()),
             "); item() needs exactly one; index or reduce it first");
  if (impl_->storage->is_meta()) on_meta_data_access(*this, "item()", where);
  Tensor c = to(Device::cpu());
  return visit_dtype(dtype(), [&]<typename T>() { return static_cast<double>(*static_cast<const T*>(c.data_ptr())); });
}

bool Tensor::requires_grad() const { return impl_ && (impl_->requires_grad || impl_->grad_fn != nullptr); }

Tensor& Tensor::requires_grad_(bool value) {
  checked("requires_grad_()");
  KILN_CHECK(is_leaf(), "requires_grad_(): only leaf tensors can change requires_grad; this one was made by '",
             impl_->grad_fn->name(), "'. Use detach().requires_grad_() for a new leaf");
  KILN_CHECK(!value || is_floating(dtype()), "requires_grad_(): only floating-point tensors can require grad; this one is ",
             dtype_name(dtype()), ". Cast it with .to(DType::Float32) first");
  impl_->requires_grad = value;
  return *this;
}

void Tensor::set_grad(const Tensor& g) {
  checked("set_grad()");
  KILN_CHECK(!g.defined() || g.shape() == shape(), "set_grad: grad shape ", shape_str(g.shape()),
             " differs from the tensor's shape ", shape_str(shape()));
  impl_->grad = g.defined() ? g.impl_ptr() : nullptr;
}

void Tensor::retain_grad() {
  checked("retain_grad()");
  KILN_CHECK(requires_grad(), "retain_grad(): the tensor ", dtype_name(dtype()), shape_str(shape()),
             " does not require grad, so it will get no gradient; call it on a tensor computed from one that does");
  if (impl_->retains_grad) return;
  impl_->retains_grad = true;
  if (!is_leaf()) impl_->grad_fn->retained_grads.emplace_back(impl_->output_nr, impl_);
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  checked("backward()");
  autograd::run_backward({*this}, {grad}, retain_graph);
}

Tensor Tensor::detach() const {
  checked("detach()");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->shape = impl_->shape;
  impl->strides = impl_->strides;
  impl->offset = impl_->offset;
  impl->dtype = impl_->dtype;
  impl->wrapped_number = impl_->wrapped_number;
  return Tensor(std::move(impl));
}

Tensor Tensor::to(DType d) const { return d == dtype() ? *this : cast(*this, d); }
Tensor Tensor::to(Device d) const { return d == device() ? *this : kiln::to_device(*this, d); }
Tensor Tensor::clone() const { return kiln::clone(*this); }
Tensor Tensor::contiguous() const { return kiln::contiguous(*this); }
Tensor Tensor::view(const Shape& s) const { return kiln::view(*this, s); }
Tensor Tensor::reshape(const Shape& s) const { return kiln::reshape(*this, s); }
Tensor Tensor::permute(const std::vector<int64_t>& d) const { return kiln::permute(*this, d); }
Tensor Tensor::transpose(int64_t a, int64_t b) const { return kiln::transpose(*this, a, b); }
Tensor Tensor::slice(int64_t d, int64_t s, int64_t e, int64_t st) const { return kiln::slice(*this, d, s, e, st); }
Tensor Tensor::select(int64_t d, int64_t i) const { return kiln::select(*this, d, i); }
Tensor Tensor::expand(const Shape& s) const { return kiln::expand(*this, s); }
Tensor Tensor::squeeze(int64_t d) const { return kiln::squeeze(*this, d); }
Tensor Tensor::squeeze() const { return kiln::squeeze(*this); }
Tensor Tensor::unsqueeze(int64_t d) const { return kiln::unsqueeze(*this, d); }
Tensor Tensor::flatten(int64_t s, int64_t e) const { return kiln::flatten(*this, s, e); }
Tensor Tensor::sum(const std::vector<int64_t>& d, bool k) const { return kiln::sum(*this, d, k); }
Tensor Tensor::mean(const std::vector<int64_t>& d, bool k) const { return kiln::mean(*this, d, k); }
Tensor Tensor::amax(const std::vector<int64_t>& d, bool k) const { return kiln::amax(*this, d, k); }
Tensor Tensor::amin(const std::vector<int64_t>& d, bool k) const { return kiln::amin(*this, d, k); }
Tensor Tensor::var(const std::vector<int64_t>& d, int64_t c, bool k) const { return kiln::var(*this, d, c, k); }
Tensor Tensor::argmax(int64_t d, bool k) const { return kiln::argmax(*this, d, k); }
Tensor Tensor::softmax(int64_t d) const { return kiln::softmax(*this, d); }
Tensor Tensor::log_softmax(int64_t d) const { return kiln::log_softmax(*this, d); }
Tensor Tensor::add(const Tensor& o) const { return kiln::add(*this, o); }
Tensor Tensor::add(double o) const { return kiln::add(*this, o); }
Tensor Tensor::sub(const Tensor& o) const { return kiln::sub(*this, o); }
Tensor Tensor::sub(double o) const { return kiln::sub(*this, o); }
Tensor Tensor::mul(const Tensor& o) const { return kiln::mul(*this, o); }
Tensor Tensor::mul(double o) const { return kiln::mul(*this, o); }
Tensor Tensor::div(const Tensor& o) const { return kiln::div(*this, o); }
Tensor Tensor::div(double o) const { return kiln::div(*this, o); }
Tensor Tensor::pow(const Tensor& e) const { return kiln::pow(*this, e); }
Tensor Tensor::pow(double e) const { return kiln::pow(*this, e); }
Tensor Tensor::maximum(const Tensor& o) const { return kiln::maximum(*this, o); }
Tensor Tensor::minimum(const Tensor& o) const { return kiln::minimum(*this, o); }
Tensor Tensor::neg() const { return kiln::neg(*this); }
Tensor Tensor::exp() const { return kiln::exp(*this); }
Tensor Tensor::log() const { return kiln::log(*this); }
Tensor Tensor::sqrt() const { return kiln::sqrt(*this); }
Tensor Tensor::rsqrt() const { return kiln::rsqrt(*this); }
Tensor Tensor::abs() const { return kiln::abs(*this); }
Tensor Tensor::sign() const { return kiln::sign(*this); }
Tensor Tensor::relu() const { return kiln::relu(*this); }
Tensor Tensor::gelu(const std::string& a) const { return kiln::gelu(*this, a); }
Tensor Tensor::sigmoid() const { return kiln::sigmoid(*this); }
Tensor Tensor::tanh() const { return kiln::tanh(*this); }
Tensor Tensor::clamp(std::optional<double> lo, std::optional<double> hi) const { return kiln::clamp(*this, lo, hi); }
Tensor Tensor::eq(const Tensor& o) const { return kiln::eq(*this, o); }
Tensor Tensor::eq(double o) const { return kiln::eq(*this, o); }
Tensor Tensor::ne(const Tensor& o) const { return kiln::ne(*this, o); }
Tensor Tensor::ne(double o) const { return kiln::ne(*this, o); }
Tensor Tensor::lt(const Tensor& o) const { return kiln::lt(*this, o); }
Tensor Tensor::lt(double o) const { return kiln::lt(*this, o); }
Tensor Tensor::le(const Tensor& o) const { return kiln::le(*this, o); }
Tensor Tensor::le(double o) const { return kiln::le(*this, o); }
Tensor Tensor::gt(const Tensor& o) const { return kiln::gt(*this, o); }
Tensor Tensor::gt(double o) const { return kiln::gt(*this, o); }
Tensor Tensor::ge(const Tensor& o) const { return kiln::ge(*this, o); }
Tensor Tensor::ge(double o) const { return kiln::ge(*this, o); }
Tensor Tensor::logical_not() const { return kiln::logical_not(*this); }
Tensor Tensor::matmul(const Tensor& o) const { return kiln::matmul(*this, o); }
Tensor Tensor::index_select(int64_t d, const Tensor& i) const { return kiln::index_select(*this, d, i); }
Tensor Tensor::gather(int64_t d, const Tensor& i) const { return kiln::gather(*this, d, i); }
Tensor& Tensor::fill_(double v) { return kiln::fill_(*this, v); }
Tensor& Tensor::copy_(const Tensor& s) { return kiln::copy_(*this, s); }
Tensor& Tensor::add_(const Tensor& o, double a) { return kiln::add_(*this, o, a); }
Tensor& Tensor::mul_(const Tensor& o) { return kiln::mul_(*this, o); }
Tensor& Tensor::mul_(double v) { return kiln::mul_(*this, v); }

// Printing in PyTorch's spirit: nested brackets, long dims summarized.
namespace {
void print_rec(std::ostream& os, const Tensor& t, const std::vector<double>& vals, int64_t dim, int64_t& pos,
               int64_t base, bool is_float, int indent) {
  const Shape& s = t.shape();
  if (dim == t.dim()) {
    double v = vals[base];
    if (is_float) os << std::setw(10) << std::setprecision(4) << v;
    else os << static_cast<int64_t>(v);
    return;
  }
  int64_t n = s[dim];
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < t.dim(); ++d) inner *= s[d];
  os << '[';
  bool summarize = t.numel() > 1000 && n > 6;
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && i == 3) {
      os << (dim + 1 == t.dim() ? " ..., " : "...,\n" + std::string(indent + 1, ' '));
      i = n - 3;
    }
    print_rec(os, t, vals, dim + 1, pos, base + i * inner, is_float, indent + 1);
    if (i + 1 < n) os << (dim + 1 == t.dim() ? ", " : ",\n" + std::string(indent + 1, ' '));
  }
  os << ']';
}
}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  if (is_meta() && t_meta_hook != nullptr) t_meta_hook(*this, "printing", SourceLocation::current());
  if (is_meta()) {
    os << "tensor(..., size=" << shape_str(shape()) << ", dtype=" << dtype_name(dtype());
    if (!device().is_cpu()) os << ", device=" << device();
    os << ", meta)";
    return os.str();
  }
  os << "tensor(";
  std::vector<double> vals = to_vector<double>();
  int64_t pos = 0;
  print_rec(os, *this, vals, 0, pos, 0, is_floating(dtype()), 7);
  os << ", dtype=" << dtype_name(dtype());
  if (!device().is_cpu()) os << ", device=" << device();
  if (grad_fn()) os << ", grad_fn=" << grad_fn()->name();
  else if (requires_grad()) os << ", requires_grad=true";
  os << ')';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace kiln
