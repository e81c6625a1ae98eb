// In-place ops: fills, copies and the elementwise updates optimizers make
// (self += alpha * other, addcmul_, addcdiv_, lerp_). They write into their
// first input, which may be a non-contiguous view; the other inputs broadcast
// to it. Autograd does not record them: dispatch refuses an in-place update
// of a tensor that requires grad while grad mode is on.
//
// Other inputs are converted to self's dtype before the loop (after checking
// that the promoted result could be cast to it, as PyTorch does); float32
// rows run the vectorized updates of ops/cpu/pointwise_f32.h, other rows the
// formulas of ops/scalar_math.h.
#include <cmath>
#include <limits>
#include <type_traits>

#include "kiln/ops.h"
#include "ops/cpu/pointwise_f32.h"
#include "ops/cpu/pointwise_util.h"
#include "ops/families.h"
#include "ops/op_def.h"
#include "ops/scalar_math.h"

namespace kiln {
namespace {

// PyTorch's canCast: no floating -> integral, no non-bool -> bool.
bool can_cast(DType from, DType to) {
  if (is_floating(from) && !is_floating(to)) return false;
  if (from != DType::Bool && to == DType::Bool) return false;
  return true;
}

// Checks shared by the updates: self defined and not broadcast by the other
// inputs, the promoted dtype castable to self's, whole scalars for integer self.
void check_update(TensorSpan in, const char* op, std::initializer_list<const char*> scalar_names, const Attrs& a) {
  for (size_t i = 0; i < in.size(); ++i)
    KILN_CHECK(in[i].defined(), op, ": input ", i, " is an undefined Tensor");
  const Tensor& self = in[0];
  common_device(in, op);
  for (size_t i = 1; i < in.size(); ++i) {
    Shape b = broadcast_shapes(self.shape(), in[i].shape(), op);
    KILN_CHECK(b == self.shape(), op, ": cannot update a tensor of shape ", shape_str(self.shape()),
               " in place with an input of shape ", shape_str(in[i].shape()),
               " (the result would have shape ", shape_str(b), "); use the out-of-place op");
  }
  DType rt = result_type(in);
  KILN_CHECK(can_cast(rt, self.dtype()), op, ": the result type ", dtype_name(rt), " of (", describe(in),
             ") cannot be stored in place into ", dtype_name(self.dtype()),
             "; use the out-of-place op or convert self with .to(", dtype_name(rt), ")");
  if (!is_floating(self.dtype())) {
    for (const char* name : scalar_names) {
      double v = a.f(name);
      KILN_CHECK(v == std::trunc(v), op, ": for an integer tensor (", dtype_name(self.dtype()), ") ", name,
                 " must be a whole number, got ", v);
    }
  }
}

std::vector<TensorMeta> self_meta(const Tensor& self) { return {{self.shape(), self.dtype(), self.device()}}; }

// An input read while self is written: a private copy when it shares memory
// with self in any other layout than self's own (elementwise aliasing is safe).
Tensor unaliased(const Tensor& t, const Tensor& self) {
  if (!t.shares_storage(self)) return t;
  if (t.offset() == self.offset() && t.shape() == self.shape() && t.strides() == self.strides()) return t;
  Tensor c = Tensor::empty(t.shape(), t.dtype(), t.device());
  cpu::copy_cast(t, c);
  return c;
}

// Runs `body(s)` on self, or on a float32 copy written back for 16-bit floats.
template <typename Body>
void update_in(const Tensor& self, Body body) {
  DType cd = cpu::compute_dtype(self.dtype());
  if (cd == self.dtype()) {
    body(self);
    return;
  }
  Tensor tmp = cpu::converted(self, cd);
  body(tmp);
  cpu::copy_cast(tmp, self);
}

// self = f(self, x) or self = f(self, a, b) elementwise; `fast` handles a
// float32 row with contiguous self and contiguous/broadcast inputs.
template <typename T, typename F, typename Fast>
void update1(const Tensor& self, const Tensor& x, F f, Fast fast) {
  cpu::for_each_row_tiled<2>(self, {&x}, [&](char* const* p, const int64_t* s, int64_t n) {
    if constexpr (std::is_same_v<T, float>) {
      if (cpu::f32_row_ok(s, 2)) {
        fast(reinterpret_cast<float*>(p[0]), reinterpret_cast<const float*>(p[1]), s[1] / 4, n);
        return;
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      T* y = reinterpret_cast<T*>(p[0] + i * s[0]);
      *y = f(*y, *reinterpret_cast<const T*>(p[1] + i * s[1]));
    }
  });
}
template <typename T, typename F, typename Fast>
void update2(const Tensor& self, const Tensor& a, const Tensor& b, F f, Fast fast) {
  cpu::for_each_row_tiled<3>(self, {&a, &b}, [&](char* const* p, const int64_t* s, int64_t n) {
    if constexpr (std::is_same_v<T, float>) {
      if (cpu::f32_row_ok(s, 3)) {
        fast(reinterpret_cast<float*>(p[0]), reinterpret_cast<const float*>(p[1]), s[1] / 4,
             reinterpret_cast<const float*>(p[2]), s[2] / 4, n);
        return;
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      T* y = reinterpret_cast<T*>(p[0] + i * s[0]);
      *y = f(*y, *reinterpret_cast<const T*>(p[1] + i * s[1]), *reinterpret_cast<const T*>(p[2] + i * s[2]));
    }
  });
}

// ---- fill_ ----
std::vector<TensorMeta> fill_infer(TensorSpan in, const Attrs& a) {
  KILN_CHECK(in[0].defined(), "fill_: self is an undefined Tensor");
  double v = a.f("value");
  DType dt = in[0].dtype();
  if (is_integral(dt) && dt != DType::Bool && std::isfinite(v)) {
    double lo = 0, hi = 0;
    cpu::visit_compute_dtype(dt, [&]<typename T>() {
      lo = static_cast<double>(std::numeric_limits<T>::lowest());
      hi = static_cast<double>(std::numeric_limits<T>::max());
    });
    KILN_CHECK(v >= lo && v <= hi, "fill_: value ", v, " does not fit in ", dtype_name(dt));
  }
  KILN_CHECK(is_floating(dt) || dt == DType::Bool || std::isfinite(v), "fill_: cannot fill an integer tensor (",
             dtype_name(dt), ") with ", v);
  return self_meta(in[0]);
}
void fill_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& self = out[0];
  double v = a.f("value");
  if (self.dtype() == DType::Float32) {
    const cpu::F32Kernels& k = cpu::f32_kernels();
    float fv = static_cast<float>(v);
    cpu::for_each_row_tiled<1>(self, {}, [&](char* const* p, const int64_t* s, int64_t n) {
      if (s[0] == 4) {
        k.fill(reinterpret_cast<float*>(p[0]), fv, n);
      } else {
        for (int64_t i = 0; i < n; ++i) *reinterpret_cast<float*>(p[0] + i * s[0]) = fv;
      }
    });
    return;
  }
  visit_dtype(self.dtype(), [&]<typename T>() {
    T tv = cpu::from_double<T>(v);
    cpu::for_each_row_tiled<1>(self, {}, [&](char* const* p, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = tv;
    });
  });
}

// ---- copy_ ----
std::vector<TensorMeta> copy_infer(TensorSpan in, const Attrs&) {
  KILN_CHECK(in[0].defined() && in[1].defined(), "copy_: got an undefined Tensor");
  Shape b = broadcast_shapes(in[0].shape(), in[1].shape(), "copy_");
  KILN_CHECK(b == in[0].shape(), "copy_: cannot copy a source of shape ", shape_str(in[1].shape()),
             " into a tensor of shape ", shape_str(in[0].shape()), "; the source must broadcast to the destination");
  return self_meta(in[0]);
}
void copy_kernel(TensorSpan in, std::span<Tensor> out, const Attrs&) {
  const Tensor& self = out[0];
  cpu::copy_cast(unaliased(in[1], self), self);
}

// ---- add_ / mul_ ----
std::vector<TensorMeta> add_infer(TensorSpan in, const Attrs& a) {
  check_update(in, "add_", {"alpha"}, a);
  return self_meta(in[0]);
}
void add_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  double alpha = a.f("alpha");
  update_in(out[0], [&](const Tensor& self) {
    DType cd = self.dtype();
    Tensor x = cpu::converted(unaliased(in[1], self), cd);
    cpu::visit_compute_dtype(cd, [&]<typename T>() {
      T al = cpu::from_double<T>(alpha);
      const cpu::F32Kernels& k = cpu::f32_kernels();
      float fal = static_cast<float>(alpha);
      update1<T>(
          self, x, [al](T s, T v) { return scalar::add_update(s, v, al); },
          [&](float* s, const float* v, int64_t sv, int64_t n) { k.add_(s, v, sv, fal, n); });
    });
  });
}

std::vector<TensorMeta> mul_infer(TensorSpan in, const Attrs& a) {
  check_update(in, "mul_", {}, a);
  return self_meta(in[0]);
}
void mul_kernel(TensorSpan in, std::span<Tensor> out, const Attrs&) {
  update_in(out[0], [&](const Tensor& self) {
    DType cd = self.dtype();
    Tensor x = cpu::converted(unaliased(in[1], self), cd);
    cpu::visit_compute_dtype(cd, [&]<typename T>() {
      const cpu::F32Kernels& k = cpu::f32_kernels();
      update1<T>(
          self, x, [](T s, T v) { return scalar::mul_update(s, v); },
          [&](float* s, const float* v, int64_t sv, int64_t n) { k.mul_(s, v, sv, n); });
    });
  });
}

// ---- addcmul_ / addcdiv_ ----
template <bool Div>
std::vector<TensorMeta> addc_infer(TensorSpan in, const Attrs& a) {
  const char* op = Div ? "addcdiv_" : "addcmul_";
  check_update(in, op, {"value"}, a);
  if constexpr (Div) {
    KILN_CHECK(is_floating(in[1].dtype()) || is_floating(in[2].dtype()), "addcdiv_: integer division (",
               describe(in), ") is not supported; convert the inputs to a floating dtype");
  }
  return self_meta(in[0]);
}
template <bool Div>
void addc_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  double value = a.f("value");
  update_in(out[0], [&](const Tensor& self) {
    DType cd = self.dtype();
    Tensor x = cpu::converted(unaliased(in[1], self), cd);
    Tensor y = cpu::converted(unaliased(in[2], self), cd);
    cpu::visit_compute_dtype(cd, [&]<typename T>() {
      T val = cpu::from_double<T>(value);
      const cpu::F32Kernels& k = cpu::f32_kernels();
      float fval = static_cast<float>(value);
      auto scalar = [val](T s, T u, T v) {
        if constexpr (Div) return scalar::addcdiv_update(s, u, v, val);
        else return scalar::addcmul_update(s, u, v, val);
      };
      update2<T>(self, x, y, scalar, [&](float* s, const float* u, int64_t su, const float* v, int64_t sv, int64_t n) {
        if constexpr (Div) k.addcdiv_(s, u, su, v, sv, fval, n);
        else k.addcmul_(s, u, su, v, sv, fval, n);
      });
    });
  });
}

// ---- lerp_ ----
std::vector<TensorMeta> lerp_infer(TensorSpan in, const Attrs& a) {
  check_update(in, "lerp_", {}, a);
  KILN_CHECK(is_floating(in[0].dtype()), "lerp_: needs a floating-point tensor, got ", describe(in));
  return self_meta(in[0]);
}
void lerp_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  double w = a.f("weight");
  update_in(out[0], [&](const Tensor& self) {
    DType cd = self.dtype();
    Tensor e = cpu::converted(unaliased(in[1], self), cd);
    cpu::visit_float_dtype(cd, [&]<typename T>() {
      T tw = static_cast<T>(w);
      const cpu::F32Kernels& k = cpu::f32_kernels();
      update1<T>(
          self, e,
          [tw](T s, T v) { return scalar::lerp_update(s, v, tw); },
          [&](float* s, const float* v, int64_t sv, int64_t n) { k.lerp_(s, v, sv, static_cast<float>(w), n); });
    });
  });
}

}  // namespace

void register_inplace_ops() {
  // The scalars of optimizer updates change every step (learning rates,
  // bias corrections): step attributes, never baked into a graph.
  auto update = [](OpId id, InferFn infer, KernelFn kernel, std::vector<std::string_view> step_attrs) {
    OpDef d = kernel_op(id, infer, kernel, nullptr, kSaveNone);
    d.step_attrs = std::move(step_attrs);
    define_op(d);
  };
  update(OpId::fill_, fill_infer, fill_kernel, {"value"});
  update(OpId::copy_, copy_infer, copy_kernel, {});
  update(OpId::add_, add_infer, add_kernel, {"alpha"});
  update(OpId::mul_, mul_infer, mul_kernel, {});
  update(OpId::addcmul_, addc_infer<false>, addc_kernel<false>, {"value"});
  update(OpId::addcdiv_, addc_infer<true>, addc_kernel<true>, {"value"});
  update(OpId::lerp_, lerp_infer, lerp_kernel, {"weight"});
}

// ---- public functions ----
Tensor& fill_(Tensor& self, double value) {
  dispatch(OpId::fill_, {self}, Attrs().set("value", value));
  return self;
}
Tensor& copy_(Tensor& self, const Tensor& src) {
  dispatch(OpId::copy_, {self, src});
  return self;
}
Tensor& add_(Tensor& self, const Tensor& other, double alpha) {
  dispatch(OpId::add_, {self, other}, Attrs().set("alpha", alpha));
  return self;
}
Tensor& mul_(Tensor& self, const Tensor& other) {
  dispatch(OpId::mul_, {self, other});
  return self;
}
Tensor& mul_(Tensor& self, double value) {
  dispatch(OpId::mul_, {self, cpu::wrap_number(value)});
  return self;
}
Tensor& addcmul_(Tensor& self, const Tensor& a, const Tensor& b, double value) {
  dispatch(OpId::addcmul_, {self, a, b}, Attrs().set("value", value));
  return self;
}
Tensor& addcdiv_(Tensor& self, const Tensor& a, const Tensor& b, double value) {
  dispatch(OpId::addcdiv_, {self, a, b}, Attrs().set("value", value));
  return self;
}
Tensor& lerp_(Tensor& self, const Tensor& end, double weight) {
  dispatch(OpId::lerp_, {self, end}, Attrs().set("weight", weight));
  return self;
}

}  // namespace kiln
