// Linear algebra: matmul on oneDNN's matmul primitive (float32), addmm as a
// composite of it, and linear as an op of its own (below: why).
//
// The matmul op takes operands of at least 2 dims, [..., M, K] x [..., K, N]
// with broadcast batch dims; the public function handles 1-D operands as
// PyTorch does, with unsqueeze/squeeze views around the op. Transposed
// operands (a stride of 1 in either of the last two dims) go to oneDNN as
// they are, so the derivative's `b^T` costs no copy. A batched left operand
// times a 2-D right operand is folded into one 2-D product.
//
// oneDNN has no float64 matmul: float64 and integer dtypes run a cache-blocked
// loop (tests use it). bfloat16 (autocast) runs oneDNN's bfloat16 matmul
// (AMX or AVX-512 BF16 brgemm kernels, float32 accumulation) where this CPU
// has one, with no cast of the operands; float16, and bfloat16 without
// AVX-512, compute in float32 between casts. Never routed through libblas
// (Debian's default is the slow reference BLAS).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>

#include "core/cpu_features.h"
#include "kiln/ops.h"
#include "ops/cpu/copy.h"
#include "ops/conv_autotune.h"
#include "ops/cpu/loops.h"
#include "ops/cpu/pointwise_util.h"
#include "ops/dispatch_mode.h"
#include "ops/dnnl/dnnl_utils.h"
#include "ops/matmul_batch.h"
#include "ops/matmul_precision.h"
#include "ops/families.h"
#include "ops/op_def.h"

namespace kiln {
namespace {

using dnnl::memory;

struct MatmulShape {
  Shape batch;  // broadcast batch dims
  int64_t M, K, N;
};

MatmulShape matmul_shape(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.dim() >= 2 && b.dim() >= 2, "matmul: the op takes operands of at least 2 dims, got ",
             shape_str(a.shape()), " and ", shape_str(b.shape()), "; kiln::matmul() handles 1-D operands");
  MatmulShape s;
  s.M = a.shape()[a.dim() - 2];
  s.K = a.shape()[a.dim() - 1];
  s.N = b.shape()[b.dim() - 1];
  int64_t kb = b.shape()[b.dim() - 2];
  KILN_CHECK(s.K == kb, "matmul: shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()),
             " cannot be multiplied (", s.K, " columns vs ", kb, " rows); the last dim of the first must equal the "
             "second-to-last dim of the second");
  Shape ab(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  s.batch = broadcast_shapes(ab, bb, "matmul (batch dims)");
  return s;
}

// ---- oneDNN float32 ----

struct MatmulEntry {
  dnnl::matmul prim;
  memory::desc a_md, b_md, c_md, scratch_md;
};

// The strides of a 3-D [B, R, C] operand, with the strides of size-1 dims
// (which address nothing) set to what a dense layout would have.
Shape normalized_strides(const Tensor& t3) {
  Shape st = t3.strides();
  int64_t B = t3.shape()[0], R = t3.shape()[1], C = t3.shape()[2];
  if (R == 1 && C == 1) st[1] = st[2] = 1;
  else if (R == 1) st[1] = st[2] == 1 ? C : 1;
  else if (C == 1) st[2] = st[1] == 1 ? R : 1;
  if (B == 1) st[0] = R * C;
  return st;
}

// oneDNN's matmul takes plain layouts with one of the last two dims
// unit-stride and batches that do not overlap; anything else is copied.
Tensor dnnl_operand(const Tensor& t3) {
  Shape st = normalized_strides(t3);
  int64_t B = t3.shape()[0], R = t3.shape()[1], C = t3.shape()[2];
  bool row_major = st[2] == 1 && st[1] >= C && (B == 1 || st[0] >= R * st[1]);
  bool col_major = st[1] == 1 && st[2] >= R && (B == 1 || st[0] >= C * st[2]);
  return (row_major || col_major) ? t3 : t3.contiguous();
}

// c3 = a3 x b3, all three of data type `dt` (f32 or bf16). A dnnl::error
// (no bfloat16 implementation on this CPU) escapes before anything is cached.
void dnnl_matmul(const Tensor& a3, const Tensor& b3, const Tensor& c3, memory::data_type dt = memory::data_type::f32) {
  int64_t B = c3.shape()[0], M = c3.shape()[1], N = c3.shape()[2], K = a3.shape()[2];
  Shape as = normalized_strides(a3), bs = normalized_strides(b3);
  onednn::PrimitiveKey key{static_cast<int64_t>(onednn::PrimitiveKind::Matmul), B, M, K, N, as[0], as[1], as[2],
                           bs[0], bs[1], bs[2], static_cast<int64_t>(dt)};
  auto e = onednn::cached<MatmulEntry>(key, [&]() {
    auto en = std::make_shared<MatmulEntry>();
    en->a_md = memory::desc({B, M, K}, dt, memory::dims(as.begin(), as.end()));
    en->b_md = memory::desc({B, K, N}, dt, memory::dims(bs.begin(), bs.end()));
    en->c_md = memory::desc({B, M, N}, dt, memory::format_tag::abc);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::matmul::desc desc(en->a_md, en->b_md, en->c_md);
    dnnl::matmul::primitive_desc pd(desc, attr, onednn::cpu_engine());
    en->prim = dnnl::matmul(pd);
    en->scratch_md = pd.scratchpad_desc();
    return en;
  });
  Tensor scratch_buf;
  memory scratch = onednn::make_buffer(e->scratch_md, scratch_buf);
  e->prim.execute(onednn::cpu_stream(), {{DNNL_ARG_SRC, onednn::wrap(e->a_md, a3)},
                                         {DNNL_ARG_WEIGHTS, onednn::wrap(e->b_md, b3)},
                                         {DNNL_ARG_DST, onednn::wrap(e->c_md, c3)},
                                         {DNNL_ARG_SCRATCHPAD, scratch}});
  onednn::cpu_stream().wait();
}

// KILN_MATMUL_BF16: "auto" (default) times a bfloat16 product of each shape
// both ways on its first call, oneDNN's bfloat16 matmul and float32 between
// casts, and keeps the faster (the tutorial CNN's small linears measured
// slower in bfloat16 on AVX-512 BF16 without AMX, as some convolutions do);
// "1" always takes the bfloat16 matmul where it exists, "0" never.
enum class Bf16Setting { Auto, Always, Never };
Bf16Setting bf16_matmul_setting() {
  static const Bf16Setting s = [] {
    const char* v = std::getenv("KILN_MATMUL_BF16");
    const std::string t = v ? v : "auto";
    if (t == "0") return Bf16Setting::Never;
    if (t == "1") return Bf16Setting::Always;
    KILN_CHECK(t == "auto" || t.empty(), "KILN_MATMUL_BF16=", t, ": use auto (the faster of bfloat16 and float32 ",
               "per shape), 1 (always bfloat16) or 0 (never)");
    return Bf16Setting::Auto;
  }();
  return s;
}

// oneDNN's bfloat16 matmul runs natively on AVX-512 BF16 / AMX and is
// emulated (slower than float32) on plain AVX-512; below AVX-512 it has none.
bool bf16_matmul_available() {
  static const bool on = [] {
    // oneDNN's ISA values are cumulative bit masks: AMX includes AVX-512 BF16.
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
    return cpu_has_avx512() && (isa & bf16) == bf16 && bf16_matmul_setting() != Bf16Setting::Never;
  }();
  return on;
}

// The autotuning table key (ops/conv_autotune.h) of a bfloat16 product's
// precision choice: its sizes as oneDNN multiplies them (a batched left
// operand times a 2-D right one folded into one product) and whether each
// operand is transposed. From shapes and strides alone, so the compiler can
// ask about a graph's node (matmul_bf16_runs_float32).
std::string bf16_matmul_key(const Shape& a, const Shape& as, const Shape& b, const Shape& bs) {
  const size_t da = a.size(), db = b.size();
  int64_t B = numel_of(broadcast_shapes(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2),
                                        "matmul (batch dims)"));
  int64_t M = a[da - 2];
  if (db == 2 && da > 2) {
    M *= B;
    B = 1;
  }
  auto order = [](const Shape& t, const Shape& st) {
    const size_t d = t.size();
    return t[d - 2] > 1 && t[d - 1] > 1 && st[d - 2] == 1 ? 't' : 'n';
  };
  return "mm_bf16:" + std::to_string(B) + ',' + std::to_string(M) + ',' + std::to_string(a[da - 1]) + ',' +
         std::to_string(b[db - 1]) + ':' + order(a, as) + order(b, bs);
}

enum class Bf16Path { Undecided, Bf16, Float32 };
Bf16Path bf16_matmul_path(const std::string& key) {
  if (!bf16_matmul_available()) return Bf16Path::Float32;
  if (bf16_matmul_setting() == Bf16Setting::Always) return Bf16Path::Bf16;
  if (std::optional<std::string> v = conv_autotune::lookup(key)) {
    if (*v == "bf16" || *v == "bf16-alone") return Bf16Path::Bf16;
    if (*v == "float32") return Bf16Path::Float32;
  }
  return Bf16Path::Undecided;
}

// Seconds one call of f takes.
template <typename F>
double seconds_of(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ---- reference (float64, integers): blocked i-k-j loops on contiguous data ----
template <typename T>
void loop_matmul(const T* a, const T* b, T* c, int64_t B, int64_t M, int64_t K, int64_t N) {
  constexpr int64_t kBlockK = 128;
  cpu::parallel_for(B * M, 16, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      int64_t bi = row / M, i = row % M;
      T* crow = c + (bi * M + i) * N;
      std::fill(crow, crow + N, T(0));
      const T* arow = a + (bi * M + i) * K;
      const T* bmat = b + bi * K * N;
      for (int64_t k0 = 0; k0 < K; k0 += kBlockK) {
        int64_t k1 = std::min(K, k0 + kBlockK);
        for (int64_t k = k0; k < k1; ++k) {
          T av = arow[k];
          const T* brow = bmat + k * N;
#pragma omp simd
          for (int64_t j = 0; j < N; ++j) crow[j] += av * brow[j];
        }
      }
    }
  });
}

// ---- the op ----
std::vector<TensorMeta> matmul_infer(TensorSpan in, const Attrs&) {
  const Tensor& a = in[0];
  const Tensor& b = in[1];
  KILN_CHECK(a.dtype() == b.dtype(), "matmul: operands have different dtypes (", describe(in),
             "); cast one with .to(dtype)");
  KILN_CHECK(a.dtype() != DType::Bool, "matmul: bool operands are not supported (", describe(in), ")");
  MatmulShape s = matmul_shape(a, b);
  Shape out = s.batch;
  out.push_back(s.M);
  out.push_back(s.N);
  return {{out, a.dtype(), common_device(in, "matmul")}};
}

void matmul_kernel(TensorSpan in, std::span<Tensor> out, const Attrs&) {
  const Tensor& a = in[0];
  const Tensor& b = in[1];
  Tensor& c = out[0];
  MatmulShape s = matmul_shape(a, b);
  if (c.numel() == 0) return;
  int64_t B = numel_of(s.batch);
  Tensor a3, b3;
  Tensor c3 = c.view({B, s.M, s.N});
  if (b.dim() == 2 && a.dim() > 2) {
    // [batch..., M, K] x [K, N]: one [B*M, K] x [K, N] product.
    a3 = a.reshape({1, B * s.M, s.K});
    b3 = b.unsqueeze(0);
    c3 = c.view({1, B * s.M, s.N});
  } else {
    a3 = as_batched3(a, s.batch);
    b3 = as_batched3(b, s.batch);
  }
  if (s.K == 0) {
    std::memset(c.data_ptr(), 0, c.nbytes());
    return;
  }
  DType dt = c.dtype();
  if (dt == DType::Float32) {
    dnnl_matmul(dnnl_operand(a3), dnnl_operand(b3), c3);
    return;
  }
  auto in_float32 = [&] {
    Tensor c32 = Tensor::empty(c3.shape(), DType::Float32);
    dnnl_matmul(cpu::converted(a3, DType::Float32), cpu::converted(b3, DType::Float32), c32);
    cpu::copy_cast(c32, c3);
  };
  if (dt == DType::BFloat16 && bf16_matmul_available()) {
    auto in_bf16 = [&] { dnnl_matmul(dnnl_operand(a3), dnnl_operand(b3), c3, memory::data_type::bf16); };
    const std::string key = bf16_matmul_key(a.shape(), a.strides(), b.shape(), b.strides());
    const Bf16Path path = bf16_matmul_path(key);
    if (path == Bf16Path::Float32) return in_float32();
    try {
      in_bf16();  // the chosen path, or the first of the timing runs (oneDNN's setup is not timed)
    } catch (const dnnl::error&) {
      // No bfloat16 primitive for these strides: float32, and no timing.
      if (path == Bf16Path::Undecided) conv_autotune::record(key, "float32");
      return in_float32();
    }
    if (path == Bf16Path::Bf16) return;
    // First call of this shape: the faster path, best of three interleaved
    // runs each (small products take microseconds: a burst of load then hits
    // both alike), in place on the real operands; the chosen path runs last,
    // so `c` holds its result. A third candidate, the float32 product of
    // float32 operands without the casts, is what the product costs inside
    // a compiled float32 region (float32_regions): bfloat16 that wins only
    // by saving its own casts is recorded as "bf16-alone", which that pass
    // runs in float32 among float32 neighbours (as for convolutions). The
    // tutorial CNN's linears measured so: bf16 autocast's eval ran at
    // 0.93-0.95x of compiled float32 with them in bfloat16.
    in_float32();
    const Tensor a32 = cpu::converted(a3, DType::Float32), b32 = cpu::converted(b3, DType::Float32);
    const Tensor c32 = Tensor::empty(c3.shape(), DType::Float32);
    auto on_float32_values = [&] { dnnl_matmul(a32, b32, c32); };
    on_float32_values();
    double t_bf16 = 1e30, t_f32 = 1e30, t_values = 1e30;
    for (int round = 0; round < 3; ++round) {
      t_bf16 = std::min(t_bf16, seconds_of(in_bf16));
      t_f32 = std::min(t_f32, seconds_of(in_float32));
      t_values = std::min(t_values, seconds_of(on_float32_values));
    }
    const bool bf16 = t_bf16 <= t_f32;
    const double casts = std::max(0.0, t_f32 - t_values);
    conv_autotune::record(key, !bf16 ? "float32" : conv_autotune::bf16_choice(t_bf16, casts, t_values));
    if (bf16) in_bf16();
    return;
  }
  if (dt == DType::Float16 || dt == DType::BFloat16) return in_float32();
  Tensor ac = a3.contiguous(), bc = b3.contiguous();
  int64_t Bn = c3.shape()[0], Mn = c3.shape()[1];
  visit_dtype(dt, [&]<typename T>() {
    if constexpr (std::is_same_v<T, double> || std::is_same_v<T, int64_t> || std::is_same_v<T, int32_t> ||
                  std::is_same_v<T, uint8_t>) {
      loop_matmul<T>(ac.data<T>(), bc.data<T>(), c3.data<T>(), Bn, Mn, s.K, s.N);
    } else {
      KILN_FAIL("matmul: dtype ", dtype_name(dt), " is not supported");
    }
  });
}

Tensor mT(const Tensor& t) { return t.transpose(-1, -2); }

Tensors matmul_back(const BackwardCtx& c, TensorSpan g) {
  const Tensor& a = c.inputs[0];
  const Tensor& b = c.inputs[1];
  const Tensor& go = g[0];
  Tensors out(2);
  if (c.needs_grad[0]) {
    Tensor ga = matmul(go, mT(b));
    out[0] = ga.shape() == a.shape() ? ga : sum_to(ga, a.shape());
  }
  if (c.needs_grad[1]) {
    if (b.dim() == 2 && a.dim() > 2) {
      int64_t K = a.shape()[a.dim() - 1], N = go.shape()[go.dim() - 1];
      out[1] = matmul(a.reshape({-1, K}).t(), go.reshape({-1, N}));
    } else {
      Tensor gb = matmul(mT(a), go);
      out[1] = gb.shape() == b.shape() ? gb : sum_to(gb, b.shape());
    }
  }
  return out;
}

// ---- composites ----
Tensors addmm_dec(TensorSpan in, const Attrs& a) {
  double beta = a.f("beta"), alpha = a.f("alpha");
  KILN_CHECK(in[1].dim() == 2 && in[2].dim() == 2, "addmm: m1 and m2 must be 2-D, got ", shape_str(in[1].shape()),
             " and ", shape_str(in[2].shape()));
  Tensor mm = matmul(in[1], in[2]);
  if (alpha != 1.0) mm = mul(mm, alpha);
  if (beta == 0.0) return {mm};  // as PyTorch: self is ignored (NaN in it does not propagate)
  Tensor s = beta == 1.0 ? in[0] : mul(in[0], beta);
  return {add(s, mm)};
}

// ---- linear: y = x w^T (+ bias) ----
// An op of its own rather than a composite of matmul and add, so that a
// backend can run it as one product with the bias in its epilogue (cuBLASLt
// on CUDA: src/cuda/matmul.cpp). Its CPU kernel, its derivative and its
// decomposition (which the compiler expands, so compiled graphs see matmul
// and add as before) compute what the composite computed, in the same order.

bool has_bias(TensorSpan in) { return in.size() > 2 && in[2].defined(); }

Tensors linear_dec(TensorSpan in, const Attrs&) {
  Tensor y = matmul(in[0], in[1].t());
  if (has_bias(in)) y = add(y, in[2]);
  return {y};
}

std::vector<TensorMeta> linear_infer(TensorSpan in, const Attrs&) {
  const Tensor& x = in[0];
  const Tensor& w = in[1];
  KILN_CHECK(x.defined() && w.defined(), "linear: input and weight must be defined tensors");
  KILN_CHECK(w.dim() == 2, "linear: weight must be 2-D [out_features, in_features], got ", shape_str(w.shape()));
  KILN_CHECK(x.dim() >= 1 && x.shape()[x.dim() - 1] == w.shape()[1], "linear: input ", shape_str(x.shape()),
             " has last dim ", x.dim() ? x.shape()[x.dim() - 1] : 0, " but weight ", shape_str(w.shape()),
             " expects in_features = ", w.shape()[1]);
  KILN_CHECK(x.dtype() == w.dtype(), "linear: input and weight have different dtypes (", describe(in),
             "); cast one with .to(dtype)");
  KILN_CHECK(x.dtype() != DType::Bool, "linear: bool operands are not supported (", describe(in), ")");
  Shape y(x.shape().begin(), x.shape().end() - 1);
  y.push_back(w.shape()[0]);
  DType dt = x.dtype();
  if (has_bias(in)) {
    const Tensor& b = in[2];
    KILN_CHECK(broadcast_shapes(y, b.shape(), "linear (bias)") == y, "linear: bias ", shape_str(b.shape()),
               " does not broadcast to the output ", shape_str(y), "; give it shape [out_features]");
    dt = result_type(Tensors{x, b});
  }
  return {{y, dt, common_device(in, "linear")}};
}

void linear_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  Tensor& y = out[0];
  // A bias of a wider dtype (the composite's promotion), or a 1-D input (the
  // matmul op takes 2-D operands): through the decomposition.
  if (y.dtype() != in[0].dtype() || in[0].dim() == 1) {
    y.copy_(linear_dec(in, a)[0]);
    return;
  }
  Tensors mm{in[0], in[1].t()};
  matmul_kernel(mm, out, a);
  if (has_bias(in)) y.add_(in[2]);
}

// The composite's derivative: matmul_back of x (w^T), then the bias as add's.
Tensors linear_back(const BackwardCtx& c, TensorSpan g) {
  const Tensor& x = c.inputs[0];
  const Tensor& w = c.inputs[1];
  const Tensor& go = g[0];
  Tensors out(c.input_metas.size());
  if (c.needs_grad[0]) out[0] = matmul(go, w);
  if (c.needs_grad[1]) {
    const int64_t K = w.shape()[1], N = w.shape()[0];
    const Tensor x2 = x.dim() == 1 ? x.unsqueeze(0) : x.reshape({-1, K});
    const Tensor g2 = go.dim() == 1 ? go.unsqueeze(0) : go.reshape({-1, N});
    out[1] = matmul(x2.t(), g2).t();
  }
  if (c.input_metas.size() > 2 && c.needs_grad[2]) out[2] = sum_to(go, c.input_metas[2].shape);
  return out;
}

// The table key of a matmul (a times b) or linear (input a, weight b) node.
std::string bf16_product_key(OpId op, const Shape& a, const Shape& as, const Shape& b, const Shape& bs) {
  const bool linear = op == OpId::linear;  // x times w's transpose (linear_kernel)
  return linear ? bf16_matmul_key(a, as, Shape{b[1], b[0]}, Shape{bs[1], bs[0]}) : bf16_matmul_key(a, as, b, bs);
}

}  // namespace

void register_matmul_ops() {
  define_op(kernel_op(OpId::matmul, matmul_infer, matmul_kernel, matmul_back, kSaveInputs));
  define_op(composite_op(OpId::addmm, addmm_dec));
  OpDef linear_def = kernel_op(OpId::linear, linear_infer, linear_kernel, linear_back, kSaveInputs);
  linear_def.unsaved_inputs = 0b100;  // the derivative reads the bias's shape only
  define_op(linear_def);
  register_decomposition(OpId::linear, linear_dec);
}

// ---- public functions ----
bool matmul_bf16_runs_float32(OpId op, const Shape& a, const Shape& as, const Shape& b, const Shape& bs) {
  KILN_CHECK(op == OpId::matmul || op == OpId::linear, "matmul_bf16_runs_float32: ", op_name(op),
             " is not a matrix product");
  KILN_CHECK(a.size() >= 2 && b.size() >= 2 && as.size() == a.size() && bs.size() == b.size(),
             "matmul_bf16_runs_float32: ", op_name(op), " of ", shape_str(a), " and ", shape_str(b));
  // linear(x, w) multiplies x by w's transpose (linear_kernel).
  const bool linear = op == OpId::linear;
  KILN_CHECK(!linear || b.size() == 2, "matmul_bf16_runs_float32: linear weight ", shape_str(b), " is not 2-D");
  const Shape rb = linear ? Shape{b[1], b[0]} : b, rbs = linear ? Shape{bs[1], bs[0]} : bs;
  const std::string key = bf16_product_key(op, a, as, b, bs);
  const Bf16Path path = bf16_matmul_path(key);
  if (path != Bf16Path::Undecided) return path == Bf16Path::Float32;
  // Not called yet: its first call's timing, now, on synthetic operands of
  // these shapes and transposes (a dense product's speed does not depend on
  // the values), so a compiled graph knows before it first runs.
  ExcludeModesGuard below_every_mode;  // the views below are no graph's or tape's ops
  auto operand = [](const Shape& t, const Shape& st) {
    const size_t d = t.size();
    if (t[d - 2] > 1 && t[d - 1] > 1 && st[d - 2] == 1) {  // transposed: a transposed contiguous tensor
      Shape swapped = t;
      std::swap(swapped[d - 2], swapped[d - 1]);
      return cpu::synthetic_operand(swapped, DType::BFloat16).transpose(-1, -2);
    }
    return cpu::synthetic_operand(t, DType::BFloat16);
  };
  const Tensor x = operand(a, as), y = operand(rb, rbs);
  const MatmulShape s = matmul_shape(x, y);
  Shape out = s.batch;
  out.push_back(s.M);
  out.push_back(s.N);
  Tensor c = Tensor::empty(out, DType::BFloat16);
  matmul_kernel(Tensors{x, y}, std::span<Tensor>(&c, 1), Attrs());
  return bf16_matmul_path(key) == Bf16Path::Float32;
}

bool matmul_bf16_loses_among_float32(OpId op, const Shape& a, const Shape& as, const Shape& b, const Shape& bs) {
  if (matmul_bf16_runs_float32(op, a, as, b, bs)) return true;  // decides an undecided shape
  return bf16_matmul_setting() == Bf16Setting::Auto &&
         conv_autotune::lookup(bf16_product_key(op, a, as, b, bs)) == "bf16-alone";
}

void record_matmul_bf16_choice(OpId op, const Shape& a, const Shape& as, const Shape& b, const Shape& bs,
                               const std::string& choice) {
  conv_autotune::record_bf16_choice(bf16_product_key(op, a, as, b, bs), choice, "record_matmul_bf16_choice");
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.defined() && b.defined(), "matmul: operands must be defined tensors");
  KILN_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both operands need at least 1 dim, got ", shape_str(a.shape()),
             " and ", shape_str(b.shape()));
  if (a.dim() == 1 && b.dim() == 1) {
    KILN_CHECK(a.shape()[0] == b.shape()[0], "matmul: 1-D operands of different lengths ", shape_str(a.shape()),
               " and ", shape_str(b.shape()), " (dot product needs equal lengths)");
    return dispatch1(OpId::matmul, {a.unsqueeze(0), b.unsqueeze(1)}).reshape({});
  }
  if (a.dim() == 1) return dispatch1(OpId::matmul, {a.unsqueeze(0), b}).squeeze(-2);
  if (b.dim() == 1) return dispatch1(OpId::matmul, {a, b.unsqueeze(1)}).squeeze(-1);
  return dispatch1(OpId::matmul, {a, b});
}

Tensor addmm(const Tensor& self, const Tensor& m1, const Tensor& m2, double beta, double alpha) {
  return dispatch1(OpId::addmm, {self, m1, m2}, Attrs().set("beta", beta).set("alpha", alpha));
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  Tensors in{x, weight};
  if (bias.defined()) in.push_back(bias);
  return dispatch1(OpId::linear, std::move(in));
}

}  // namespace kiln
