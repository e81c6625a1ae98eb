// Factories and random ops: tensors made from attributes (full, arange) and
// draws from a Generator (rand, randn, randint, bernoulli, dropout).
//
// Random ops take their stream position as attributes: the public function
// reserves Philox counters from the generator (Generator::advance) and passes
// (seed, offset); element i then depends only on (seed, offset, i), so the
// same seed gives the same numbers whatever the thread count, and a captured
// graph can replay a draw by its attributes.
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>

#include "kiln/ops.h"
#include "ops/cpu/copy.h"
#include "ops/cpu/loops.h"
#include "ops/families.h"
#include "ops/op_def.h"
#include "ops/philox.h"

namespace kiln {
namespace {

// Elements per parallel task of a random kernel (a multiple of 4: one
// Philox call gives four 32-bit words).
constexpr int64_t kRandomGrain = 1 << 14;

Attrs factory_attrs(const Shape& shape, const TensorOptions& o) {
  return Attrs().set("shape", shape).set("dtype", o.dtype).set("device", o.device.str());
}

std::vector<TensorMeta> factory_infer(TensorSpan, const Attrs& a) {
  for (int64_t s : a.ints("shape"))
    KILN_CHECK(s >= 0, "factory: negative size in shape ", shape_str(a.ints("shape")), "; sizes must be >= 0");
  return {{a.ints("shape"), a.dtype("dtype"), Device::parse(a.s("device"))}};
}

Tensor finish(Tensor t, const TensorOptions& o) {
  if (o.requires_grad) t.requires_grad_(true);
  return t;
}

// ---- full ----
void full_kernel(TensorSpan, std::span<Tensor> out, const Attrs& a) {
  const Tensor& o = out[0];
  double v = a.f("value");
  visit_dtype(o.dtype(), [&]<typename T>() {
    T val = cpu::from_double<T>(v);
    T* p = static_cast<T*>(o.data_ptr());
    cpu::parallel_for(o.numel(), 1 << 16, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = val;
    });
  });
}

// ---- arange ----
int64_t arange_length(double start, double end, double step) {
  KILN_CHECK(step != 0, "arange: step must be nonzero");
  KILN_CHECK(std::isfinite(start) && std::isfinite(end), "arange: start ", start, " and end ", end,
             " must be finite");
  KILN_CHECK((step > 0 && end >= start) || (step < 0 && end <= start), "arange: upper bound ", end,
             " and lower bound ", start, " are inconsistent with step sign ", step,
             "; use a positive step for end > start and a negative one otherwise");
  return static_cast<int64_t>(std::ceil((end - start) / step));
}
std::vector<TensorMeta> arange_infer(TensorSpan, const Attrs& a) {
  int64_t n = arange_length(a.f("start"), a.f("end"), a.f("step"));
  return {{{n}, a.dtype("dtype"), Device::parse(a.s("device"))}};
}
void arange_kernel(TensorSpan, std::span<Tensor> out, const Attrs& a) {
  const Tensor& o = out[0];
  double start = a.f("start"), step = a.f("step");
  visit_dtype(o.dtype(), [&]<typename T>() {
    T* p = static_cast<T*>(o.data_ptr());
    for (int64_t i = 0; i < o.numel(); ++i) p[i] = cpu::from_double<T>(start + static_cast<double>(i) * step);
  });
}

// ---- random helpers ----
// The word conversions are ops/philox.h's, shared with the CUDA kernels.
inline double unit_double(uint32_t hi, uint32_t lo) { return philox_unit_double(hi, lo); }  // [0, 1), 53 bits
inline float unit_float_open0(uint32_t x) { return philox_unit_float_open0(x); }          // (0, 1]

// The one walk over a random stream that every random kernel uses: `Per`
// consecutive elements (4 for 32-bit draws, 2 for 64-bit ones) share the
// four words of counter offset + i / Per. Parallel over blocks of
// kRandomGrain elements; calls draw(i, m, words) for the m <= Per elements
// from i on, then block_done(b, e) once each block is drawn. Element i thus
// depends only on (seed, offset, i), whatever the thread count.
template <int64_t Per, typename Draw, typename BlockDone>
void walk_philox(uint64_t seed, uint64_t offset, int64_t n, Draw&& draw, BlockDone&& block_done) {
  static_assert(kRandomGrain % Per == 0, "a block must start on a counter boundary");
  int64_t blocks = (n + kRandomGrain - 1) / kRandomGrain;
  cpu::parallel_for(blocks, 1, [&](int64_t bb, int64_t be) {
    for (int64_t blk = bb; blk < be; ++blk) {
      int64_t b = blk * kRandomGrain, e = std::min(n, b + kRandomGrain);
      for (int64_t i = b; i < e; i += Per)
        draw(i, std::min<int64_t>(Per, e - i), philox(seed, offset + static_cast<uint64_t>(i / Per)));
      block_done(b, e);
    }
  });
}
template <int64_t Per, typename Draw>
void walk_philox(uint64_t seed, uint64_t offset, int64_t n, Draw&& draw) {
  walk_philox<Per>(seed, offset, n, std::forward<Draw>(draw), [](int64_t, int64_t) {});
}

// Calls f(i, word) with one 32-bit word per element (word i % 4).
template <typename F>
void for_each_word(uint64_t seed, uint64_t offset, int64_t n, F&& f) {
  walk_philox<4>(seed, offset, n, [&](int64_t i, int64_t m, const Philox4& r) {
    for (int64_t k = 0; k < m; ++k) f(i + k, r.v[k]);
  });
}
// Calls f(i, hi, lo) with two words per element (64-bit draws).
template <typename F>
void for_each_dword(uint64_t seed, uint64_t offset, int64_t n, F&& f) {
  walk_philox<2>(seed, offset, n, [&](int64_t i, int64_t m, const Philox4& r) {
    f(i, r.v[0], r.v[1]);
    if (m > 1) f(i + 1, r.v[2], r.v[3]);
  });
}

// Counters a kernel uses for n elements (must match walk_philox's Per).
uint64_t counters_for(int64_t n, bool wide) { return static_cast<uint64_t>(wide ? (n + 1) / 2 : (n + 3) / 4); }
bool is_wide(DType t) { return t == DType::Float64 || t == DType::Int64; }

Attrs random_attrs(const Shape& shape, const TensorOptions& o, Generator* gen, uint64_t counters) {
  Generator& g = gen ? *gen : default_generator();
  uint64_t off = g.advance(counters);
  return factory_attrs(shape, o)
      .set("seed", static_cast<int64_t>(g.seed()))
      .set("offset", static_cast<int64_t>(off));
}
uint64_t seed_of(const Attrs& a) { return static_cast<uint64_t>(a.i("seed")); }
uint64_t offset_of(const Attrs& a) { return static_cast<uint64_t>(a.i("offset")); }

// ---- rand ----
std::vector<TensorMeta> float_random_infer(TensorSpan in, const Attrs& a) {
  auto m = factory_infer(in, a);
  KILN_CHECK(is_floating(m[0].dtype), "rand/randn: dtype ", dtype_name(m[0].dtype),
             " is not a floating type; use float32/float64 (or randint for integers)");
  return m;
}
void rand_kernel(TensorSpan, std::span<Tensor> out, const Attrs& a) {
  const Tensor& o = out[0];
  visit_dtype(o.dtype(), [&]<typename T>() {
    if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      T* p = static_cast<T*>(o.data_ptr());
      if constexpr (std::is_same_v<T, double>) {
        for_each_dword(seed_of(a), offset_of(a), o.numel(),
                       [&](int64_t i, uint32_t hi, uint32_t lo) { p[i] = unit_double(hi, lo); });
      } else {
        for_each_word(seed_of(a), offset_of(a), o.numel(), [&](int64_t i, uint32_t w) {
          float u = uint_to_unit_float(w);
          T v = T(u);
          // Rounding to a 16-bit float can reach 1.0; keep the interval half-open.
          if (static_cast<float>(v) >= 1.0f) v = T(0.0f);
          p[i] = v;
        });
      }
    } else {
      KILN_ASSERT(false, "rand on ", dtype_name(o.dtype()));
    }
  });
}

// ---- randn: Box-Muller over pairs of words ----
void randn_kernel(TensorSpan, std::span<Tensor> out, const Attrs& a) {
  const Tensor& o = out[0];
  int64_t n = o.numel();
  uint64_t seed = seed_of(a), offset = offset_of(a);
  visit_dtype(o.dtype(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, double>) {
      // One counter gives two 53-bit uniforms -> two normals.
      double* p = static_cast<double*>(o.data_ptr());
      walk_philox<2>(seed, offset, n, [&](int64_t i, int64_t m, const Philox4& r) {
        double u1 = 1.0 - unit_double(r.v[0], r.v[1]);  // (0, 1]
        double u2 = unit_double(r.v[2], r.v[3]);
        double rad = std::sqrt(-2.0 * std::log(u1)), th = 2.0 * M_PI * u2;
        p[i] = rad * std::cos(th);
        if (m > 1) p[i + 1] = rad * std::sin(th);
      });
    } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      // One counter gives four words -> two pairs -> four normals.
      T* p = static_cast<T*>(o.data_ptr());
      walk_philox<4>(seed, offset, n, [&](int64_t i, int64_t m, const Philox4& r) {
        float z[4];
        for (int k = 0; k < 2; ++k) {
          float u1 = unit_float_open0(r.v[2 * k]), u2 = uint_to_unit_float(r.v[2 * k + 1]);
          float rad = std::sqrt(-2.0f * std::log(u1)), th = 6.2831853071795864f * u2;
          z[2 * k] = rad * std::cos(th);
          z[2 * k + 1] = rad * std::sin(th);
        }
        for (int64_t k = 0; k < m; ++k) p[i + k] = T(z[k]);
      });
    } else {
      KILN_ASSERT(false, "randn on ", dtype_name(o.dtype()));
    }
  });
}

// ---- randint: low + (64-bit draw mod range) ----
std::vector<TensorMeta> randint_infer(TensorSpan in, const Attrs& a) {
  int64_t low = a.i("low"), high = a.i("high");
  KILN_CHECK(high > low, "randint: needs low < high, got low=", low, " high=", high,
             "; the numbers are drawn from [low, high)");
  auto m = factory_infer(in, a);
  KILN_CHECK(m[0].dtype != DType::Bool, "randint: dtype bool is not supported; use an integer or float dtype");
  return m;
}
void randint_kernel(TensorSpan, std::span<Tensor> out, const Attrs& a) {
  const Tensor& o = out[0];
  int64_t low = a.i("low");
  uint64_t range = static_cast<uint64_t>(a.i("high")) - static_cast<uint64_t>(low);
  visit_dtype(o.dtype(), [&]<typename T>() {
    T* p = static_cast<T*>(o.data_ptr());
    for_each_dword(seed_of(a), offset_of(a), o.numel(), [&](int64_t i, uint32_t hi, uint32_t lo) {
      uint64_t v = (static_cast<uint64_t>(hi) << 32 | lo) % range;
      int64_t x = low + static_cast<int64_t>(v);
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) p[i] = T(static_cast<float>(x));
      else p[i] = static_cast<T>(x);
    });
  });
}

// ---- bernoulli ----
std::vector<TensorMeta> bernoulli_infer(TensorSpan in, const Attrs&) {
  KILN_CHECK(is_floating(in[0].dtype()), "bernoulli: p must be a floating tensor of probabilities, got ",
             dtype_name(in[0].dtype()), "; cast it with .to(DType::Float32)");
  return {{in[0].shape(), in[0].dtype(), in[0].device()}};
}
void bernoulli_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  Tensor p;
  {
    p = in[0].detach().contiguous();
  }
  const Tensor& o = out[0];
  visit_dtype(o.dtype(), [&]<typename T>() {
    const T* pp = static_cast<const T*>(p.data_ptr());
    T* op = static_cast<T*>(o.data_ptr());
    std::atomic<bool> bad{false};
    for_each_word(seed_of(a), offset_of(a), o.numel(), [&](int64_t i, uint32_t w) {
      float prob = static_cast<float>(pp[i]);
      if (!(prob >= 0.0f && prob <= 1.0f)) bad.store(true, std::memory_order_relaxed);
      op[i] = T(uint_to_unit_float(w) < prob ? 1.0f : 0.0f);
    });
    KILN_CHECK(!bad.load(), "bernoulli: every probability must be in [0, 1]");
  });
}

// ---- dropout: outputs y and a bool keep-mask ----
double dropout_scale(double p) { return p >= 1.0 ? 0.0 : 1.0 / (1.0 - p); }
std::vector<TensorMeta> dropout_infer(TensorSpan in, const Attrs& a) {
  const Tensor& x = in[0];
  double p = a.f("p");
  KILN_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability has to be between 0 and 1, but got ", p);
  KILN_CHECK(is_floating(x.dtype()), "dropout: input must be floating, got ", dtype_name(x.dtype()));
  return {{x.shape(), x.dtype(), x.device()}, {x.shape(), DType::Bool, x.device()}};
}
void dropout_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  Tensor x;
  {
    x = in[0].detach().contiguous();
  }
  const Tensor& y = out[0];
  bool* mask = static_cast<bool*>(out[1].data_ptr());
  double p = a.f("p");
  // keep when u < 1 - p, with u = w / 2^32 compared in integers (exact).
  double keep_prob = 1.0 - p;
  uint64_t thresh64 = static_cast<uint64_t>(std::ldexp(keep_prob, 32));
  bool keep_all = thresh64 >= (uint64_t{1} << 32);
  uint32_t thresh = keep_all ? 0xffffffffu : static_cast<uint32_t>(thresh64);
  uint64_t seed = seed_of(a), offset = offset_of(a);
  int64_t n = x.numel();
  visit_dtype(x.dtype(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half> ||
                  std::is_same_v<T, BFloat16>) {
      using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
      const T* xp = static_cast<const T*>(x.data_ptr());
      T* yp = static_cast<T*>(y.data_ptr());
      C scale = static_cast<C>(dropout_scale(p));
      // The mask of a block first, then its outputs in one vectorized pass
      // while the block is still in cache.
      walk_philox<4>(
          seed, offset, n,
          [&](int64_t i, int64_t m, const Philox4& r) {
            for (int64_t k = 0; k < m; ++k) mask[i + k] = keep_all || r.v[k] < thresh;
          },
          [&](int64_t b, int64_t e) {
#pragma omp simd
            for (int64_t i = b; i < e; ++i)
              yp[i] = T(mask[i] ? static_cast<C>(static_cast<C>(xp[i]) * scale) : C(0));
          });
    } else {
      KILN_ASSERT(false, "dropout on ", dtype_name(x.dtype()));
    }
  });
}
Tensors dropout_back(const BackwardCtx& c, TensorSpan g) {
  const Tensor& mask = c.outputs[1];
  double scale = dropout_scale(c.attrs.f("p"));
  return {mul(mul(g[0], mask), scale)};
}

}  // namespace

void register_factory_ops() {
  // full's value is a step attribute: C++ numbers in op calls (x * 0.5,
  // 1 - lr * wd) become wrapped-number tensors made by full, and a number
  // that changes between calls must not recompile a graph.
  OpDef full_def = kernel_op(OpId::full, factory_infer, full_kernel, nullptr, kSaveNone);
  full_def.step_attrs = {"value"};
  define_op(full_def);
  define_op(kernel_op(OpId::arange, arange_infer, arange_kernel, nullptr, kSaveNone));
  // A random op's Philox seed and offset advance with every call: step
  // attributes, so a captured graph draws fresh numbers on every replay.
  auto random_op = [](OpId id, InferFn infer, KernelFn kernel, BackwardFn backward = nullptr,
                      uint8_t save = kSaveNone) {
    OpDef d = kernel_op(id, infer, kernel, backward, save);
    d.step_attrs = {"seed", "offset"};
    return d;
  };
  define_op(random_op(OpId::rand, float_random_infer, rand_kernel));
  define_op(random_op(OpId::randn, float_random_infer, randn_kernel));
  define_op(random_op(OpId::randint, randint_infer, randint_kernel));
  define_op(random_op(OpId::bernoulli, bernoulli_infer, bernoulli_kernel));
  OpDef d = random_op(OpId::dropout, dropout_infer, dropout_kernel, dropout_back, kSaveOutputs);
  d.num_outputs = 2;
  d.num_differentiable_outputs = 1;
  define_op(d);
}

// ---- public functions ----
Tensor empty(const Shape& shape, TensorOptions opts) {
  return finish(Tensor::empty(shape, opts.dtype, opts.device), opts);
}
Tensor full(const Shape& shape, double value, TensorOptions opts) {
  return finish(dispatch1(OpId::full, {}, factory_attrs(shape, opts).set("value", value)), opts);
}
Tensor zeros(const Shape& shape, TensorOptions opts) { return full(shape, 0.0, opts); }
Tensor ones(const Shape& shape, TensorOptions opts) { return full(shape, 1.0, opts); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), dtype(t.dtype()).with_device(t.device())); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), dtype(t.dtype()).with_device(t.device())); }
Tensor full_like(const Tensor& t, double value) {
  return full(t.shape(), value, dtype(t.dtype()).with_device(t.device()));
}

// PyTorch infers a floating dtype when any bound or the step is fractional.
// C++ cannot tell a defaulted int64 from an explicit one, so an integral
// dtype with a fractional argument gives float32, as torch.arange(0, 1, 0.1).
Tensor arange(double start, double end, double step, TensorOptions opts) {
  auto fractional = [](double v) { return v != std::floor(v); };
  if (is_integral(opts.dtype) && (fractional(start) || fractional(end) || fractional(step)))
    opts.dtype = DType::Float32;
  Attrs a = Attrs().set("start", start).set("end", end).set("step", step).set("dtype", opts.dtype).set(
      "device", opts.device.str());
  return finish(dispatch1(OpId::arange, {}, a), opts);
}
Tensor arange(int64_t end, TensorOptions opts) { return arange(0.0, static_cast<double>(end), 1.0, opts); }

Tensor scalar_tensor(double value, DType dt) {
  Tensor t = full({}, value, dtype(dt));
  t.impl()->wrapped_number = true;
  return t;
}

namespace {
template <typename T>
Tensor from_host(const std::vector<T>& values, const Shape& shape, const TensorOptions& opts) {
  KILN_CHECK(numel_of(shape) == static_cast<int64_t>(values.size()), "from_vector: shape ", shape_str(shape),
             " holds ", numel_of(shape), " elements but ", values.size(), " values were given");
  Tensor t = Tensor::empty(shape, dtype_v<T>);
  if (!values.empty()) std::memcpy(t.data_ptr(), values.data(), values.size() * sizeof(T));
  if (opts.dtype != dtype_v<T>) t = t.to(opts.dtype);
  if (opts.device != Device::cpu()) t = t.to(opts.device);
  return finish(t, opts);
}
}  // namespace

Tensor from_vector(const std::vector<float>& values, const Shape& shape, TensorOptions opts) {
  return from_host(values, shape, opts);
}
Tensor from_vector(const std::vector<double>& values, const Shape& shape, TensorOptions opts) {
  return from_host(values, shape, opts);
}
Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape, TensorOptions opts) {
  return from_host(values, shape, opts);
}
Tensor from_blob(const void* data, const Shape& shape, DType dt) {
  Tensor t = Tensor::empty(shape, dt);
  if (t.nbytes() > 0) {
    KILN_CHECK(data != nullptr, "from_blob: data is null for a ", shape_str(shape), " tensor");
    std::memcpy(t.data_ptr(), data, t.nbytes());
  }
  return t;
}

Tensor rand(const Shape& shape, TensorOptions opts, Generator* gen) {
  int64_t n = numel_of(shape);
  return finish(dispatch1(OpId::rand, {}, random_attrs(shape, opts, gen, counters_for(n, is_wide(opts.dtype)))),
                opts);
}
Tensor randn(const Shape& shape, TensorOptions opts, Generator* gen) {
  int64_t n = numel_of(shape);
  return finish(dispatch1(OpId::randn, {}, random_attrs(shape, opts, gen, counters_for(n, is_wide(opts.dtype)))),
                opts);
}
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts, Generator* gen) {
  int64_t n = numel_of(shape);
  Attrs a = random_attrs(shape, opts, gen, counters_for(n, true)).set("low", low).set("high", high);
  return finish(dispatch1(OpId::randint, {}, a), opts);
}
Tensor bernoulli(const Tensor& p, Generator* gen) {
  Attrs a = random_attrs(p.shape(), dtype(p.dtype()), gen, counters_for(p.numel(), false));
  return dispatch1(OpId::bernoulli, {p}, a);
}
Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability has to be between 0 and 1, but got ", p);
  if (!training || p == 0.0) return x;
  Attrs a = random_attrs(x.shape(), dtype(x.dtype()), gen, counters_for(x.numel(), false)).set("p", p);
  return dispatch(OpId::dropout, {x}, a)[0];
}

}  // namespace kiln
