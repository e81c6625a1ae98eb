#include "kiln/tensor.h"

#include <cmath>
#include <iomanip>
#include <sstream>

#include "autograd/node.h"
#include "kiln/ops.h"

namespace kiln {

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

int64_t Tensor::size(int64_t d) const { return impl_->shape[wrap_dim(d, dim(), "Tensor::size")]; }
int64_t Tensor::stride(int64_t d) const { return impl_->strides[wrap_dim(d, dim(), "Tensor::stride")]; }

bool Tensor::is_contiguous() const {
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

void* Tensor::data_ptr() const {
  return static_cast<char*>(impl_->storage->data()) + impl_->offset * static_cast<int64_t>(itemsize());
}

double Tensor::item() const {
  KILN_CHECK(numel() == 1, "item(): the tensor has ", numel(), " elements (shape ", shape_str(shape()),
             "); item() needs exactly one; index or reduce it first");
  Tensor c = to(Device::cpu());
  return visit_dtype(dtype(), [&]<typename T>() { return static_cast<double>(*static_cast<const T*>(c.data_ptr())); });
}

bool Tensor::requires_grad() const { return impl_->requires_grad || impl_->grad_fn != nullptr; }

Tensor& Tensor::requires_grad_(bool value) {
  KILN_CHECK(is_leaf(), "requires_grad_(): only leaf tensors can change requires_grad; this one was made by '",
             impl_->grad_fn->name(), "'. Use detach().requires_grad_() for a new leaf");
  KILN_CHECK(!value || is_floating(dtype()), "requires_grad_(): only floating-point tensors can require grad; this one is ",
             dtype_name(dtype()), ". Cast it with .to(DType::Float32) first");
  impl_->requires_grad = value;
  return *this;
}

void Tensor::set_grad(const Tensor& g) {
  KILN_CHECK(!g.defined() || g.shape() == shape(), "set_grad: grad shape ", shape_str(g.shape()),
             " differs from the tensor's shape ", shape_str(shape()));
  impl_->grad = g.defined() ? g.impl_ptr() : nullptr;
}

void Tensor::retain_grad() {
  KILN_CHECK(requires_grad(), "retain_grad(): the tensor ", dtype_name(dtype()), shape_str(shape()),
             " does not require grad, so it will get no gradient; call it on a tensor computed from one that does");
  if (impl_->retains_grad) return;
  impl_->retains_grad = true;
  if (!is_leaf()) impl_->grad_fn->retained_grads.emplace_back(impl_->output_nr, impl_);
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  autograd::run_backward({*this}, {grad}, retain_graph);
}

Tensor Tensor::detach() const {
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
Tensor Tensor::sum() const { return kiln::sum(*this); }
Tensor Tensor::mean() const { return kiln::mean(*this); }
Tensor Tensor::relu() const { return kiln::relu(*this); }
Tensor Tensor::exp() const { return kiln::exp(*this); }
Tensor Tensor::log() const { return kiln::log(*this); }
Tensor Tensor::abs() const { return kiln::abs(*this); }
Tensor Tensor::argmax(int64_t d, bool k) const { return kiln::argmax(*this, d, k); }
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
