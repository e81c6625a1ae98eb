// Pooling over NCHW planes: max_pool2d (values + int64 indices into each
// H*W plane, as PyTorch), avg_pool2d, their backward ops, and the adaptive
// pools as composites of them.
//
// max_pool2d's attribute `indices=false` (set by the values-only max_pool2d()
// when no gradient will be recorded: grad mode off, or an input that needs
// none) leaves the indices out: the second output is an empty int64 [0] and
// the kernels do not compute them. In an eval forward the int64 indices were
// twice the bytes of the float32 values they index (four times bfloat16's).
//
// Kernels are OpenMP loops parallel over the N*C planes: pooling is
// memory-bound, and each plane is contiguous, so one thread streams through
// whole planes. Output sizes, padding rules, NaN handling and the avg divisor
// follow PyTorch 1.13 exactly (goldens in tests/ops/test_pool.cpp).
// float16/bfloat16 compute in float32.
#include <immintrin.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "kiln/ops.h"
#include "ops/blocked_layout.h"
#include "ops/cpu/copy.h"
#include "ops/cpu/loops.h"
#include "ops/families.h"
#include "ops/op_def.h"
#include "ops/pool_attrs.h"

namespace kiln {
namespace {

struct PoolGeom {
  int64_t planes, H, W, OH, OW;
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
};

std::pair<int64_t, int64_t> pair_of(const std::vector<int64_t>& v, const char* op, const char* name) {
  KILN_CHECK(v.size() == 1 || v.size() == 2, op, ": ", name, " must have 1 or 2 values, got ", shape_str(v));
  return {v[0], v.size() == 2 ? v[1] : v[0]};
}

// PyTorch's pooling_output_shape.
int64_t pooled_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil, bool ceil_mode) {
  int64_t num = in + 2 * pad - dil * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

PoolGeom pool_geometry(const Shape& x, const Attrs& a, const char* op, bool dilated) {
  KILN_CHECK(x.size() == 4, op, ": input must be 4-D [N, C, H, W] (or 3-D [C, H, W] through the public function), got ",
             shape_str(x));
  PoolGeom g{};
  g.planes = x[0] * x[1];
  g.H = x[2], g.W = x[3];
  std::tie(g.kh, g.kw) = pair_of(a.ints("kernel_size"), op, "kernel_size");
  const auto& st = a.ints("stride");
  std::tie(g.sh, g.sw) = st.empty() ? std::make_pair(g.kh, g.kw) : pair_of(st, op, "stride");
  std::tie(g.ph, g.pw) = pair_of(a.ints("padding"), op, "padding");
  g.dh = g.dw = 1;
  if (dilated) std::tie(g.dh, g.dw) = pair_of(a.ints("dilation"), op, "dilation");
  bool ceil_mode = a.b("ceil_mode");
  KILN_CHECK(g.kh > 0 && g.kw > 0, op, ": kernel_size must be positive, got ", shape_str(a.ints("kernel_size")));
  KILN_CHECK(g.sh > 0 && g.sw > 0, op, ": stride must be positive, got ", shape_str(st));
  KILN_CHECK(g.dh > 0 && g.dw > 0, op, ": dilation must be positive");
  KILN_CHECK(g.ph >= 0 && g.pw >= 0 && g.ph <= g.kh / 2 && g.pw <= g.kw / 2, op, ": padding ",
             shape_str(a.ints("padding")), " must be >= 0 and at most half the kernel size ",
             shape_str(a.ints("kernel_size")));
  g.OH = pooled_size(g.H, g.kh, g.ph, g.sh, g.dh, ceil_mode);
  g.OW = pooled_size(g.W, g.kw, g.pw, g.sw, g.dw, ceil_mode);
  KILN_CHECK(g.OH > 0 && g.OW > 0, op, ": input ", shape_str(x), " is too small for kernel ",
             shape_str(a.ints("kernel_size")), " (output would be ", g.OH, "x", g.OW,
             "); use a smaller kernel or more padding");
  return g;
}

Shape out_shape(const Shape& x, const PoolGeom& g) { return {x[0], x[1], g.OH, g.OW}; }

bool is_half(DType d) { return d == DType::Float16 || d == DType::BFloat16; }

void check_pool_dtype(const Tensor& x, const char* op) {
  KILN_CHECK(is_floating(x.dtype()), op, ": input must be floating point, got ", dtype_name(x.dtype()),
             shape_str(x.shape()), "; cast it with .to(DType::Float32)");
}

// The plumbing the four pooling kernels share. For each of the N*C planes
// of `src` and `dst` (4-D, contiguous planes), in parallel, calls
//   body(const T* src_plane, T* dst_plane, int64_t p)
// with T = double for float64 and float otherwise: a 16-bit plane is
// widened into a float32 buffer of the task, and the float32 result
// narrowed into `dst` (rounded once), plane by plane: no float32 copy of
// the whole tensor is written and read again (bf16 autocast's pooling).
template <typename Body>
void for_each_plane(const Tensor& src, const Tensor& dst, Body&& body) {
  DType dt = src.dtype();
  Tensor s = src.contiguous();
  const Shape& ss = s.shape();
  const Shape& ds = dst.shape();
  int64_t planes = ds[0] * ds[1], s_plane = ss[2] * ss[3], d_plane = ds[2] * ds[3];
  // A task is about 16K input elements (whole planes): pooling is memory-bound.
  int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, std::max(s_plane, d_plane)));
  if (is_half(dt)) {
    KILN_ASSERT(dst.is_contiguous(), "pooling: a 16-bit output must be contiguous");
    auto run = [&]<typename H>() {
      const H* sp = s.data<H>();
      H* dp = dst.data<H>();
      cpu::parallel_for(planes, grain, [&](int64_t b, int64_t e) {
        std::vector<float> xs(static_cast<size_t>(s_plane)), ys(static_cast<size_t>(d_plane));
        for (int64_t p = b; p < e; ++p) {
          const H* x = sp + p * s_plane;
          H* y = dp + p * d_plane;
          if constexpr (std::is_same_v<H, BFloat16>) {
            cpu::bf16_to_f32(reinterpret_cast<const uint16_t*>(x), xs.data(), s_plane);
          } else {
            for (int64_t i = 0; i < s_plane; ++i) xs[static_cast<size_t>(i)] = static_cast<float>(x[i]);
          }
          body(static_cast<const float*>(xs.data()), ys.data(), p);
          if constexpr (std::is_same_v<H, BFloat16>) {
            cpu::f32_to_bf16(ys.data(), reinterpret_cast<uint16_t*>(y), d_plane);
          } else {
            for (int64_t i = 0; i < d_plane; ++i) y[i] = H(ys[static_cast<size_t>(i)]);
          }
        }
      });
    };
    if (dt == DType::BFloat16) run.template operator()<BFloat16>();
    else run.template operator()<Half>();
    return;
  }
  auto run = [&]<typename T>() {
    const T* sp = s.data<T>();
    T* dp = dst.data<T>();
    cpu::parallel_for(planes, grain, [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) body(sp + p * s_plane, dp + p * d_plane, p);
    });
  };
  if (s.dtype() == DType::Float64) run.template operator()<double>();
  else run.template operator()<float>();
}

// ---------------------------------------------------------------------------
// max_pool2d

template <typename T>
void max_pool_plane(const PoolGeom& g, const T* x, T* y, int64_t* idx) {  // idx null: values only
  for (int64_t oh = 0; oh < g.OH; ++oh) {
    int64_t hs = oh * g.sh - g.ph;
    int64_t he = std::min(hs + (g.kh - 1) * g.dh + 1, g.H);
    while (hs < 0) hs += g.dh;
    for (int64_t ow = 0; ow < g.OW; ++ow) {
      int64_t ws = ow * g.sw - g.pw;
      int64_t we = std::min(ws + (g.kw - 1) * g.dw + 1, g.W);
      while (ws < 0) ws += g.dw;
      int64_t best = hs * g.W + ws;
      T m = -std::numeric_limits<T>::infinity();
      for (int64_t h = hs; h < he; h += g.dh)
        for (int64_t w = ws; w < we; w += g.dw) {
          T v = x[h * g.W + w];
          if (v > m || std::isnan(v)) {
            m = v;
            best = h * g.W + w;
          }
        }
      y[oh * g.OW + ow] = m;
      if (idx) idx[oh * g.OW + ow] = best;
    }
  }
}

// The vector form of max_pool_plane's rule (a later value replaces the
// max when greater or NaN): the lanes where v replaces m.
inline __m256 replaces_max(__m256 v, __m256 m) {
  return _mm256_or_ps(_mm256_cmp_ps(v, m, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}
// The index lanes that follow: b where s is set, else a.
inline __m256i pick_index(__m256i a, __m256i b, __m256 s) {
  return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(b), s));
}

// The common 2x2, stride 2, unpadded case. Same order and tie/NaN rule as the
// general loop (a later value replaces the max when greater or NaN), computed
// with compares and blends over 8 outputs at a time: as branches it
// mispredicts half the time on real activations and ran 10x slower. The
// outputs of a plane are walked flat, through `corner` (each output's
// top-left input offset), so narrow planes (15x15, 7x7) vectorize too.
// kIdx false: values only (idx unused), without the index blends.
template <typename T, bool kIdx>
void max_pool_plane_2x2(const PoolGeom& g, const std::vector<int32_t>& corner, const T* x, T* y, int64_t* idx) {
  const int64_t n = g.OH * g.OW;
  int64_t o = 0;
  if constexpr (std::is_same_v<T, float>) {
    const __m256i one = _mm256_set1_epi32(1), w0 = _mm256_set1_epi32(static_cast<int>(g.W));
    const __m256i w1 = _mm256_set1_epi32(static_cast<int>(g.W + 1));
    for (; o + 8 <= n; o += 8) {
      __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(corner.data() + o));
      __m256 v0 = _mm256_i32gather_ps(x, c, 4);
      __m256 v1 = _mm256_i32gather_ps(x, _mm256_add_epi32(c, one), 4);
      __m256 v2 = _mm256_i32gather_ps(x, _mm256_add_epi32(c, w0), 4);
      __m256 v3 = _mm256_i32gather_ps(x, _mm256_add_epi32(c, w1), 4);
      __m256 s = replaces_max(v1, v0);
      __m256 m = _mm256_blendv_ps(v0, v1, s);
      __m256i k = _mm256_and_si256(_mm256_castps_si256(s), one);
      s = replaces_max(v2, m);
      m = _mm256_blendv_ps(m, v2, s);
      k = pick_index(k, w0, s);
      s = replaces_max(v3, m);
      m = _mm256_blendv_ps(m, v3, s);
      k = pick_index(k, w1, s);
      _mm256_storeu_ps(y + o, m);
      if constexpr (!kIdx) continue;
      k = _mm256_add_epi32(k, c);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(idx + o), _mm256_cvtepi32_epi64(_mm256_castsi256_si128(k)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(idx + o + 4),
                          _mm256_cvtepi32_epi64(_mm256_extracti128_si256(k, 1)));
    }
  }
  for (; o < n; ++o) {
    int64_t c = corner[o];
    T m = x[c];
    int64_t k = c;
    for (int64_t d : {c + 1, c + g.W, c + g.W + 1}) {
      T v = x[d];
      if (v > m || std::isnan(v)) m = v, k = d;
    }
    y[o] = m;
    if constexpr (kIdx) idx[o] = k;
  }
}

// 2x2 stride 2, float32, output rows of at least 4: each row of 8 outputs
// is two contiguous 16-float loads per input row, split into their even and
// odd lanes (the windows' left and right columns), then the same compare
// chain in the same order as max_pool_plane_2x2 (top-left, top-right,
// bottom-left, bottom-right; greater or NaN replaces), so values and indices
// are those of the other kernels bit for bit. The gathers that kernel needs
// cost more than the pooling here; they stay for rows of 1 to 3 outputs,
// where they fill a vector from several rows. A row's last vector starts at
// OW - 8 and may recompute outputs already written: same results.
// kIdx false: values only (idx unused).
template <bool kIdx>
void max_pool_plane_2x2_rows(const PoolGeom& g, const float* x, float* y, int64_t* idx) {
  auto even = [](__m256 a, __m256 b) {  // lanes 0, 2, .., 14 of the 16 floats a:b
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
  };
  auto odd = [](__m256 a, __m256 b) {
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
  };
  const __m256i one = _mm256_set1_epi32(1), w0 = _mm256_set1_epi32(static_cast<int>(g.W));
  const __m256i w1 = _mm256_set1_epi32(static_cast<int>(g.W + 1));
  const __m256i lanes2 = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  // Rows of fewer than 8 outputs: masked loads of the 2 * OW inputs a row
  // has (masked-off lanes are not read) and masked stores of the OW outputs.
  const bool narrow = g.OW < 8;
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i in_lo = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(2 * g.OW)), lane);
  const __m256i in_hi = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(2 * g.OW - 8)), lane);
  const __m256i out_mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(g.OW)), lane);
  const __m256i idx_lo = _mm256_cmpgt_epi64(_mm256_set1_epi64x(g.OW), _mm256_setr_epi64x(0, 1, 2, 3));
  const __m256i idx_hi = _mm256_cmpgt_epi64(_mm256_set1_epi64x(g.OW), _mm256_setr_epi64x(4, 5, 6, 7));
  auto load = [&](const float* r, __m256i mask) { return narrow ? _mm256_maskload_ps(r, mask) : _mm256_loadu_ps(r); };
  for (int64_t oh = 0; oh < g.OH; ++oh) {
    const float* r0 = x + 2 * oh * g.W;
    const float* r1 = r0 + g.W;
    float* out = y + oh * g.OW;
    for (int64_t ow = 0; ow < g.OW; ow += 8) {
      if (ow + 8 > g.OW) ow = narrow ? 0 : g.OW - 8;
      const __m256 a0 = load(r0 + 2 * ow, in_lo), a1 = load(r0 + 2 * ow + 8, in_hi);
      const __m256 b0 = load(r1 + 2 * ow, in_lo), b1 = load(r1 + 2 * ow + 8, in_hi);
      __m256 m = even(a0, a1);
      const __m256 v1 = odd(a0, a1), v2 = even(b0, b1), v3 = odd(b0, b1);
      __m256 s = replaces_max(v1, m);
      m = _mm256_blendv_ps(m, v1, s);
      __m256i k = _mm256_and_si256(_mm256_castps_si256(s), one);
      s = replaces_max(v2, m);
      m = _mm256_blendv_ps(m, v2, s);
      if constexpr (kIdx) k = pick_index(k, w0, s);
      s = replaces_max(v3, m);
      m = _mm256_blendv_ps(m, v3, s);
      if (narrow) _mm256_maskstore_ps(out + ow, out_mask, m);
      else _mm256_storeu_ps(out + ow, m);
      if constexpr (kIdx) {
        k = pick_index(k, w1, s);
        k = _mm256_add_epi32(k, _mm256_add_epi32(lanes2, _mm256_set1_epi32(static_cast<int>(2 * oh * g.W + 2 * ow))));
        auto* io = reinterpret_cast<long long*>(idx + oh * g.OW + ow);
        const __m256i lo = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(k));
        const __m256i hi = _mm256_cvtepi32_epi64(_mm256_extracti128_si256(k, 1));
        if (narrow) {
          _mm256_maskstore_epi64(io, idx_lo, lo);
          _mm256_maskstore_epi64(io + 4, idx_hi, hi);
        } else {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(io), lo);
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(io + 4), hi);
        }
      }
    }
  }
}

// The 16 lanes of an [n][16] tile (positions x lanes, 32-bit values) as 16
// rows of n: rows(l, o, v) takes 8 consecutive positions o..o+7 of lane l
// (an 8x8 transpose in AVX2 registers), one(l, o, i) the tail's positions one
// at a time. Used to write a pooled nChw16c block into its 16 NCHW planes.
template <typename Rows, typename One>
void transpose_tile16(const float* tile, int64_t n, Rows&& rows, One&& one) {
  int64_t o = 0;
  for (; o + 8 <= n; o += 8)
    for (int64_t l0 = 0; l0 < 16; l0 += 8) {
      __m256 r[8], t[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(tile + (o + i) * 16 + l0);
      for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
      }
      for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
      }
      for (int i = 0; i < 4; ++i) {
        rows(l0 + i, o, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
        rows(l0 + i + 4, o, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
      }
    }
  for (; o < n; ++o)
    for (int64_t l = 0; l < 16; ++l) one(l, o, o * 16 + l);
}

// The NCHW planes of nChw16c block b (of cb blocks per image) holding
// `channels` channels: the first plane's index, and how many there are (16,
// fewer in a padded last block).
struct BlockPlanes {
  int64_t first, lanes;
};
BlockPlanes block_planes(int64_t b, int64_t cb, int64_t channels) {
  const int64_t in_image = b % cb * kChannelBlock;
  return {b / cb * channels + in_image, std::min(kChannelBlock, channels - in_image)};
}

// max_pool2d over an nChw16c input (ops/blocked_layout.h; the compiler's
// layout pass): the 16 channels of a block pooled side by side, each window
// walked in max_pool_plane's order with its tie and NaN rule (a later value
// replaces the max when greater or NaN), so values and indices are the NCHW
// kernels' bit for bit. A block's outputs are gathered in a tile and
// transposed into its 16 NCHW planes, or, with blocked_out, stored as they
// are: y and the indices nChw16c too (an index is still h * W + w of the
// input plane).
// channels: the real channel count (x may be padded: its last block's lanes
// from channels % 16 on are not written to a plain y).
void max_pool_blocked(const PoolGeom& g, const Tensor& x, const Tensor& y, int64_t* idx, bool blocked_out,
                      int64_t channels) {
  constexpr int64_t L = kChannelBlock;
  const int64_t cb = x.shape()[1];
  KILN_CHECK(g.H * g.W < (int64_t{1} << 31), "max_pool2d: planes of ", g.H, "x", g.W, " are too large for the ",
             "nChw16c kernel's 32-bit offsets; use smaller images");
  const Tensor xc = x.contiguous();
  const float* xp = xc.data<float>();
  float* yp = y.data<float>();
  const int64_t in_block = g.H * g.W * L, out_plane = g.OH * g.OW;
  // Every window inside the plane (ceil_mode's last one may hang over).
  const bool two_by_two = g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.ph == 0 && g.pw == 0 && g.dh == 1 &&
                          g.dw == 1 && 2 * g.OH <= g.H && 2 * g.OW <= g.W;
  cpu::parallel_for(x.shape()[0] * cb, std::max<int64_t>(1, 16384 / in_block), [&](int64_t b0, int64_t b1) {
    std::vector<float> tm(static_cast<size_t>(out_plane * L));
    std::vector<int32_t> tk(idx ? static_cast<size_t>(out_plane * L) : 0);
    for (int64_t b = b0; b < b1; ++b) {
      const float* xb = xp + b * in_block;
      // 2x2 stride 2 (airbench's pools): the four window positions unrolled,
      // in the general loop's order (top-left, top-right, bottom-left,
      // bottom-right). A blocked output is stored where it goes, indices
      // widened to int64 on the way (through the tile they cost a copy of y
      // and a scalar widening loop: 10-20% of the kernel).
      float* yd = blocked_out ? yp + b * L * out_plane : tm.data();
      int64_t* id = blocked_out && idx ? idx + b * L * out_plane : nullptr;
      for (int64_t oh = 0; two_by_two && oh < g.OH; ++oh)
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          const int64_t c = 2 * oh * g.W + 2 * ow;
          const float* v = xb + c * L;
          const int64_t o = (oh * g.OW + ow) * L;
          for (int half = 0; half < 2; ++half) {
            const float* vh = v + 8 * half;
            __m256 m = _mm256_loadu_ps(vh);
            const __m256 v1 = _mm256_loadu_ps(vh + L), v2 = _mm256_loadu_ps(vh + g.W * L),
                         v3 = _mm256_loadu_ps(vh + (g.W + 1) * L);
            __m256 s1 = replaces_max(v1, m);
            m = _mm256_blendv_ps(m, v1, s1);
            __m256 s2 = replaces_max(v2, m);
            m = _mm256_blendv_ps(m, v2, s2);
            __m256 s3 = replaces_max(v3, m);
            m = _mm256_blendv_ps(m, v3, s3);
            _mm256_storeu_ps(yd + o + 8 * half, m);
            if (!idx) continue;
            __m256i k = _mm256_set1_epi32(static_cast<int>(c));
            k = pick_index(k, _mm256_set1_epi32(static_cast<int>(c + 1)), s1);
            k = pick_index(k, _mm256_set1_epi32(static_cast<int>(c + g.W)), s2);
            k = pick_index(k, _mm256_set1_epi32(static_cast<int>(c + g.W + 1)), s3);
            if (id) {
              auto* dst = reinterpret_cast<__m256i*>(id + o + 8 * half);
              _mm256_storeu_si256(dst, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(k)));
              _mm256_storeu_si256(dst + 1, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(k, 1)));
            } else {
              _mm256_storeu_si256(reinterpret_cast<__m256i*>(tk.data() + o + 8 * half), k);
            }
          }
        }
      if (two_by_two && blocked_out) continue;
      for (int64_t oh = 0; !two_by_two && oh < g.OH; ++oh) {
        int64_t hs = oh * g.sh - g.ph;
        const int64_t he = std::min(hs + (g.kh - 1) * g.dh + 1, g.H);
        while (hs < 0) hs += g.dh;
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          int64_t ws = ow * g.sw - g.pw;
          const int64_t we = std::min(ws + (g.kw - 1) * g.dw + 1, g.W);
          while (ws < 0) ws += g.dw;
          // The 16 lanes as two 8-float vectors (AVX2, the floor), as max_pool_plane_2x2.
          __m256 m[2] = {_mm256_set1_ps(-std::numeric_limits<float>::infinity()),
                         _mm256_set1_ps(-std::numeric_limits<float>::infinity())};
          const __m256i first = _mm256_set1_epi32(static_cast<int>(hs * g.W + ws));
          __m256i k[2] = {first, first};
          for (int64_t h = hs; h < he; h += g.dh)
            for (int64_t w = ws; w < we; w += g.dw) {
              const float* v = xb + (h * g.W + w) * L;
              const __m256i pos = _mm256_set1_epi32(static_cast<int>(h * g.W + w));
              for (int half = 0; half < 2; ++half) {
                const __m256 xv = _mm256_loadu_ps(v + 8 * half);
                const __m256 s = replaces_max(xv, m[half]);
                m[half] = _mm256_blendv_ps(m[half], xv, s);
                k[half] = pick_index(k[half], pos, s);
              }
            }
          const int64_t o = (oh * g.OW + ow) * L;
          _mm256_storeu_ps(tm.data() + o, m[0]);
          _mm256_storeu_ps(tm.data() + o + 8, m[1]);
          if (idx) {
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(tk.data() + o), k[0]);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(tk.data() + o + 8), k[1]);
          }
        }
      }
      // The block's planes, one after the other (named, not bound: the
      // lambdas below capture them, which clang 14 refuses for bindings).
      const BlockPlanes planes = block_planes(b, cb, channels);
      const int64_t first = planes.first, lanes = planes.lanes;
      float* yb = yp + first * out_plane;
      if (blocked_out) {
        yb = yp + b * L * out_plane;
        std::memcpy(static_cast<void*>(yb), tm.data(), sizeof(float) * static_cast<size_t>(out_plane * L));
        if (idx)
          std::copy(tk.begin(), tk.end(), idx + b * L * out_plane);
        continue;
      }
      transpose_tile16(
          tm.data(), out_plane,
          [&](int64_t l, int64_t o, __m256 v) {
            if (l < lanes) _mm256_storeu_ps(yb + l * out_plane + o, v);
          },
          [&](int64_t l, int64_t o, int64_t i) {
            if (l < lanes) yb[l * out_plane + o] = tm[static_cast<size_t>(i)];
          });
      if (!idx) continue;
      int64_t* ib = idx + first * out_plane;
      transpose_tile16(
          reinterpret_cast<const float*>(tk.data()), out_plane,
          [&](int64_t l, int64_t o, __m256 v) {
            if (l >= lanes) return;
            const __m256i k = _mm256_castps_si256(v);
            auto* dst = reinterpret_cast<__m256i*>(ib + l * out_plane + o);
            _mm256_storeu_si256(dst, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(k)));
            _mm256_storeu_si256(dst + 1, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(k, 1)));
          },
          [&](int64_t l, int64_t o, int64_t i) {
            if (l < lanes) ib[l * out_plane + o] = tk[static_cast<size_t>(i)];
          });
    }
  });
}

// The NCHW shape of max_pool2d's input (its nChw16c form checked).
Shape max_pool_input_shape(const Tensor& x, const Attrs& a) {
  if (!wants_blocked(a, "input_layout", "max_pool2d")) return x.shape();
  check_blocked_dtype(x, x.device(), "max_pool2d");
  if (!a.has("channels")) return nchw_of_blocked(x.shape(), "max_pool2d");
  // A padded input (channels not a multiple of 16) pools into a plain output.
  KILN_CHECK(!a.has("output_layout"), "max_pool2d: channels=", a.i("channels"), " (a padded nChw16c input) pools into ",
             "an NCHW output; leave output_layout out");
  return nchw_of_blocked(x.shape(), a.i("channels"), "max_pool2d");
}
// output_layout=nChw16c: y and the indices in the blocked layout; only from
// a blocked input (the kernel pools blocks).
bool max_pool_blocked_out(const Attrs& a) {
  if (!wants_blocked(a, "output_layout", "max_pool2d")) return false;
  KILN_CHECK(wants_blocked(a, "input_layout", "max_pool2d"), "max_pool2d: output_layout=nChw16c needs ",
             "input_layout=nChw16c too (the blocked kernel reads blocks)");
  return true;
}

std::vector<TensorMeta> max_pool_infer(TensorSpan in, const Attrs& a) {
  check_pool_dtype(in[0], "max_pool2d");
  const Shape xs = max_pool_input_shape(in[0], a);
  PoolGeom g = pool_geometry(xs, a, "max_pool2d", true);
  Shape os = out_shape(xs, g);
  if (max_pool_blocked_out(a)) os = blocked_shape(os, "max_pool2d");
  return {{os, in[0].dtype(), in[0].device()}, {wants_max_pool_indices(a) ? os : Shape{0}, DType::Int64, in[0].device()}};
}

void max_pool_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  const Shape xs = max_pool_input_shape(in[0], a);
  PoolGeom g = pool_geometry(xs, a, "max_pool2d", true);
  int64_t* ip = wants_max_pool_indices(a) ? out[1].data<int64_t>() : nullptr;
  if (xs != in[0].shape()) return max_pool_blocked(g, in[0], out[0], ip, max_pool_blocked_out(a), xs[1]);
  bool fast = g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.ph == 0 && g.pw == 0 && g.dh == 1 &&
              g.dw == 1 && 2 * g.OH <= g.H && 2 * g.OW <= g.W;
  std::vector<int32_t> corner;
  if (fast) {
    KILN_CHECK(g.H * g.W < (int64_t{1} << 31), "max_pool2d: planes of ", g.H, "x", g.W,
               " are too large for the 2x2 kernel's 32-bit offsets; use smaller images");
    corner.resize(static_cast<size_t>(g.OH * g.OW));
    for (int64_t oh = 0; oh < g.OH; ++oh)
      for (int64_t ow = 0; ow < g.OW; ++ow) corner[oh * g.OW + ow] = static_cast<int32_t>(2 * oh * g.W + 2 * ow);
  }
  int64_t out_plane = g.OH * g.OW;
  for_each_plane(in[0], out[0], [&]<typename T>(const T* x, T* y, int64_t p) {
    int64_t* idx = ip ? ip + p * out_plane : nullptr;
    if constexpr (std::is_same_v<T, float>) {
      if (fast && g.OW >= 4) {
        if (ip) max_pool_plane_2x2_rows<true>(g, x, y, idx);
        else max_pool_plane_2x2_rows<false>(g, x, y, nullptr);
        return;
      }
    }
    if (fast && ip) max_pool_plane_2x2<T, true>(g, corner, x, y, idx);
    else if (fast) max_pool_plane_2x2<T, false>(g, corner, x, y, nullptr);
    else max_pool_plane<T>(g, x, y, idx);
  });
}

Tensors max_pool_back(const BackwardCtx& c, TensorSpan g) {
  check_no_blocked_derivative(c.attrs, "input_layout", "max_pool2d");
  check_no_blocked_derivative(c.attrs, "output_layout", "max_pool2d");
  KILN_CHECK(wants_max_pool_indices(c.attrs), "max_pool2d: this call was made with indices=false (no gradient was "
             "expected: grad mode off or an input that needs none), so it has no backward; call max_pool2d_with_indices");
  return {max_pool2d_backward(g[0], c.outputs[1], c.input_metas[0].shape)};
}

// ---- max_pool2d_backward(grad_out, indices) ----
// grad_output_layout=nChw16c: grad_out and the indices blocked (as max_pool2d
// writes them with output_layout); only into a blocked grad_input.
bool max_pool_bwd_blocked_grad_out(const Attrs& a) {
  if (!wants_blocked(a, "grad_output_layout", "max_pool2d_backward")) return false;
  KILN_CHECK(wants_blocked(a, "grad_input_layout", "max_pool2d_backward"), "max_pool2d_backward: ",
             "grad_output_layout=nChw16c needs grad_input_layout=nChw16c too");
  return true;
}

std::vector<TensorMeta> max_pool_bwd_infer(TensorSpan in, const Attrs& a) {
  const Tensor& go = in[0];
  const Tensor& idx = in[1];
  const Shape& xs = a.ints("input_shape");
  KILN_CHECK(idx.dtype() == DType::Int64, "max_pool2d_backward: indices must be int64, got ",
             dtype_name(idx.dtype()));
  const bool blocked_go = max_pool_bwd_blocked_grad_out(a);
  const Shape gs = blocked_go ? nchw_of_blocked(go.shape(), "max_pool2d_backward") : go.shape();
  KILN_CHECK(go.shape() == idx.shape() && gs.size() == 4 && xs.size() == 4 && xs[0] == gs[0] && xs[1] == gs[1],
             "max_pool2d_backward: grad_out ", shape_str(go.shape()), " and indices ", shape_str(idx.shape()),
             " must have the same ", blocked_go ? "nChw16c" : "4-D", " shape with the N, C of input_shape ",
             shape_str(xs));
  check_pool_dtype(go, "max_pool2d_backward");
  if (wants_blocked(a, "grad_input_layout", "max_pool2d_backward")) {
    check_blocked_dtype(go, go.device(), "max_pool2d_backward");
    // From an NCHW grad_out the channels may be padded (zero lanes).
    return {{blocked_go ? blocked_shape(xs, "max_pool2d_backward") : padded_blocked_shape(xs, "max_pool2d_backward"),
             go.dtype(), go.device()}};
  }
  return {{xs, go.dtype(), go.device()}};
}

// Adds grad_out plane `src` (n values) into its input plane at the indices
// `id`: element k of the plane is dst[k * stride] (1 for NCHW, 16 for an
// nChw16c block's lane). Indices are user data: a bad one is noted in `bad`
// (an exception cannot leave an OpenMP region) and reported after the loop.
struct BadIndex {
  std::atomic<bool> seen{false};
  std::atomic<int64_t> index{0};
  // Whether k is outside [0, in_plane) (then noted).
  bool outside(int64_t k, int64_t in_plane) {
    if (static_cast<uint64_t>(k) < static_cast<uint64_t>(in_plane)) [[likely]]
      return false;
    index.store(k, std::memory_order_relaxed);
    seen.store(true, std::memory_order_relaxed);
    return true;
  }
};
template <typename T>
void scatter_plane(const T* src, const int64_t* id, int64_t n, T* dst, int64_t stride, int64_t in_plane,
                   BadIndex& bad) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = id[i];
    if (!bad.outside(k, in_plane)) dst[k * stride] += src[i];
  }
}

// One nChw16c block of max_pool2d_backward where every index lies in its
// output's 2x2 cell (output (oh, ow) -> the input pixels at rows 2 oh, 2 oh + 1
// and columns 2 ow, 2 ow + 1), as a 2x2 stride 2 pool writes them (airbench's
// pools): the cells are disjoint, so each input pixel takes the gradient of at
// most its own cell's output and the block is written once, by comparing each
// lane's index with the cell's four positions (no zero fill, then no scatter:
// the scalar scatter ran 10% behind the NCHW kernel). Pixels outside every
// cell are zeroed. False, with the block part written, when an index is not in
// its cell (another pool, or indices not from max_pool2d): the caller scatters.
bool max_pool_bwd_block_2x2(const PoolGeom& g, const float* gb, const int64_t* ib, float* db) {
  constexpr int64_t L = kChannelBlock;
  // The low 32 bits of 8 int64 indices (all < 2^31: checked by the caller).
  const __m256i narrow = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  auto low_halves = [&](const int64_t* p) {
    const __m256i a = _mm256_permutevar8x32_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), narrow);
    const __m256i b = _mm256_permutevar8x32_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 4)), narrow);
    return _mm256_permute2x128_si256(a, b, 0x20);
  };
  for (int64_t oh = 0; oh < g.OH; ++oh)
    for (int64_t ow = 0; ow < g.OW; ++ow) {
      const int64_t c = 2 * oh * g.W + 2 * ow, o = (oh * g.OW + ow) * L;
      const int64_t pos[4] = {c, c + 1, c + g.W, c + g.W + 1};
      for (int half = 0; half < 2; ++half) {
        const __m256i k = low_halves(ib + o + 8 * half);
        const __m256 gv = _mm256_loadu_ps(gb + o + 8 * half);
        __m256i hit = _mm256_setzero_si256();
        for (int p = 0; p < 4; ++p) {
          const __m256i m = _mm256_cmpeq_epi32(k, _mm256_set1_epi32(static_cast<int>(pos[p])));
          hit = _mm256_or_si256(hit, m);
          _mm256_storeu_ps(db + pos[p] * L + 8 * half, _mm256_and_ps(_mm256_castsi256_ps(m), gv));
        }
        if (_mm256_movemask_ps(_mm256_castsi256_ps(hit)) != 0xff) return false;
      }
    }
  // The last row and column when H or W is odd.
  for (int64_t h = 0; h < g.H; ++h)
    for (int64_t w = h < 2 * g.OH ? 2 * g.OW : 0; w < g.W; ++w)
      std::memset(static_cast<void*>(db + (h * g.W + w) * L), 0, sizeof(float) * L);
  return true;
}

void max_pool_bwd_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  const Shape& xs = a.ints("input_shape");
  Tensor idx = in[1].contiguous();
  int64_t in_plane = xs[2] * xs[3];
  int64_t out_plane = idx.shape()[2] * idx.shape()[3];
  const int64_t* ip = idx.data<int64_t>();
  BadIndex bad;
  if (wants_blocked(a, "grad_input_layout", "max_pool2d_backward")) {
    // Into nChw16c blocks: the block's 16 grad_out planes, each into its lane.
    constexpr int64_t L = kChannelBlock;
    const Tensor go = in[0].contiguous();
    const float* gp = go.data<float>();
    float* dp = out[0].data<float>();
    const int64_t in_block = in_plane * L;
    const bool blocked_go = max_pool_bwd_blocked_grad_out(a);
    // The op knows no window, only indices: output (oh, ow) is tried on the
    // 2x2 cell at (2 oh, 2 ow), which is its window for 2x2 stride 2 pools;
    // max_pool_bwd_block_2x2 checks every index against its cell.
    PoolGeom pg{};
    pg.H = xs[2], pg.W = xs[3], pg.OH = idx.shape()[2], pg.OW = idx.shape()[3];
    const bool two_by_two = blocked_go && 2 * pg.OH <= pg.H && 2 * pg.OW <= pg.W && in_plane < (int64_t{1} << 31);
    const int64_t channels = xs[1], cb = channel_blocks(channels);
    cpu::parallel_for(xs[0] * cb, std::max<int64_t>(1, 16384 / in_block), [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        float* db = dp + b * in_block;
        if (two_by_two && max_pool_bwd_block_2x2(pg, gp + b * L * out_plane, ip + b * L * out_plane, db)) continue;
        std::memset(static_cast<void*>(db), 0, sizeof(float) * in_block);
        if (blocked_go) {
          // Lane l of each grad_out pixel into lane l of its input pixel.
          const float* gb = gp + b * L * out_plane;
          const int64_t* ib = ip + b * L * out_plane;
          for (int64_t o = 0; o < out_plane; ++o)
            for (int64_t l = 0; l < L; ++l) {
              const int64_t k = ib[o * L + l];
              if (!bad.outside(k, in_plane)) db[k * L + l] += gb[o * L + l];
            }
          continue;
        }
        // The block's NCHW grad_out planes (fewer than 16 in a padded last
        // block, whose other lanes stay zero).
        const auto [first, lanes] = block_planes(b, cb, channels);
        for (int64_t l = 0; l < lanes; ++l)
          scatter_plane(gp + (first + l) * out_plane, ip + (first + l) * out_plane, out_plane, db + l, L, in_plane, bad);
      }
    });
  } else {
    for_each_plane(in[0], out[0], [&]<typename T>(const T* src, T* dst, int64_t p) {
      std::memset(static_cast<void*>(dst), 0, sizeof(T) * in_plane);
      scatter_plane(src, ip + p * out_plane, out_plane, dst, 1, in_plane, bad);
    });
  }
  KILN_CHECK(!bad.seen.load(), "max_pool2d_backward: index ", bad.index.load(), " is outside the input plane of ", xs[2],
             "x", xs[3], " = ", in_plane, " elements (input_shape ", shape_str(xs),
             "); indices must be in [0, H*W), as max_pool2d_with_indices returns them");
}

// Double backward: the gradient of a scatter by index is a gather by it.
Tensors max_pool_bwd_back(const BackwardCtx& c, TensorSpan gg) {
  check_no_blocked_derivative(c.attrs, "grad_input_layout", "max_pool2d_backward");
  check_no_blocked_derivative(c.attrs, "grad_output_layout", "max_pool2d_backward");
  const Tensor& idx = c.inputs[1];
  Tensors out(2);
  if (c.needs_grad[0]) out[0] = gather(gg[0].flatten(2), 2, idx.flatten(2)).view(idx.shape());
  return out;
}

// ---------------------------------------------------------------------------
// avg_pool2d

// Calls f(o, h0, h1, w0, w1, divisor) for each output o of an avg pool: its
// window [h0, h1) x [w0, w1) clipped to the input (empty when h0 >= h1 or
// w0 >= w1: all padding) and PyTorch's divisor for it.
template <typename F>
void for_each_avg_window(const PoolGeom& g, bool include_pad, F&& f) {
  for (int64_t oh = 0; oh < g.OH; ++oh) {
    int64_t hs = oh * g.sh - g.ph, he = std::min(hs + g.kh, g.H + g.ph);
    for (int64_t ow = 0; ow < g.OW; ++ow) {
      int64_t ws = ow * g.sw - g.pw, we = std::min(ws + g.kw, g.W + g.pw);
      int64_t pool = (he - hs) * (we - ws);
      int64_t h0 = std::max<int64_t>(hs, 0), w0 = std::max<int64_t>(ws, 0);
      int64_t h1 = std::min(he, g.H), w1 = std::min(we, g.W);
      f(oh * g.OW + ow, h0, h1, w0, w1, include_pad ? pool : (h1 - h0) * (w1 - w0));
    }
  }
}

template <typename T>
void avg_pool_plane(const PoolGeom& g, bool include_pad, const T* x, T* y) {
  for_each_avg_window(g, include_pad, [&](int64_t o, int64_t h0, int64_t h1, int64_t w0, int64_t w1, int64_t div) {
    if (h0 >= h1 || w0 >= w1) {
      y[o] = T(0);
      return;
    }
    T s = 0;
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) s += x[h * g.W + w];
    y[o] = s / static_cast<T>(div);
  });
}

template <typename T>
void avg_pool_bwd_plane(const PoolGeom& g, bool include_pad, const T* gy, T* gx) {
  std::memset(static_cast<void*>(gx), 0, sizeof(T) * g.H * g.W);
  for_each_avg_window(g, include_pad, [&](int64_t o, int64_t h0, int64_t h1, int64_t w0, int64_t w1, int64_t div) {
    if (h0 >= h1 || w0 >= w1) return;
    T v = gy[o] / static_cast<T>(div);
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) gx[h * g.W + w] += v;
  });
}

std::vector<TensorMeta> avg_pool_infer(TensorSpan in, const Attrs& a) {
  check_pool_dtype(in[0], "avg_pool2d");
  PoolGeom g = pool_geometry(in[0].shape(), a, "avg_pool2d", false);
  return {{out_shape(in[0].shape(), g), in[0].dtype(), in[0].device()}};
}

void avg_pool_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  PoolGeom g = pool_geometry(in[0].shape(), a, "avg_pool2d", false);
  bool include_pad = a.b("count_include_pad");
  for_each_plane(in[0], out[0],
                 [&]<typename T>(const T* x, T* y, int64_t) { avg_pool_plane<T>(g, include_pad, x, y); });
}

std::vector<int64_t> stride_or_kernel(const Attrs& a) {
  return a.ints("stride").empty() ? a.ints("kernel_size") : a.ints("stride");
}

Tensors avg_pool_back(const BackwardCtx& c, TensorSpan g) {
  const Attrs& a = c.attrs;
  return {avg_pool2d_backward(g[0], c.input_metas[0].shape, a.ints("kernel_size"), stride_or_kernel(a),
                              a.ints("padding"), a.b("ceil_mode"), a.b("count_include_pad"))};
}

// ---- avg_pool2d_backward(grad_out) ----
std::vector<TensorMeta> avg_pool_bwd_infer(TensorSpan in, const Attrs& a) {
  const Shape& xs = a.ints("input_shape");
  check_pool_dtype(in[0], "avg_pool2d_backward");
  PoolGeom g = pool_geometry(xs, a, "avg_pool2d_backward", false);
  KILN_CHECK(in[0].shape() == out_shape(xs, g), "avg_pool2d_backward: grad_out has shape ", shape_str(in[0].shape()),
             " but pooling ", shape_str(xs), " gives ", shape_str(out_shape(xs, g)));
  return {{xs, in[0].dtype(), in[0].device()}};
}

void avg_pool_bwd_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  const Shape& xs = a.ints("input_shape");
  PoolGeom g = pool_geometry(xs, a, "avg_pool2d_backward", false);
  bool include_pad = a.b("count_include_pad");
  for_each_plane(in[0], out[0],
                 [&]<typename T>(const T* gy, T* gx, int64_t) { avg_pool_bwd_plane<T>(g, include_pad, gy, gx); });
}

// avg_pool2d_backward is linear in grad_out; its adjoint is avg_pool2d.
Tensors avg_pool_bwd_back(const BackwardCtx& c, TensorSpan gg) {
  const Attrs& a = c.attrs;
  return {avg_pool2d(gg[0], a.ints("kernel_size"), stride_or_kernel(a), a.ints("padding"), a.b("ceil_mode"),
                     a.b("count_include_pad"))};
}

// ---------------------------------------------------------------------------
// adaptive pools (composites)

// The kernel for an adaptive pool that is an ordinary one, or an error.
std::pair<int64_t, int64_t> adaptive_kernel(const Tensor& x, const std::vector<int64_t>& os, const char* op) {
  KILN_CHECK(x.dim() == 4, op, ": input must be 4-D [N, C, H, W], got ", shape_str(x.shape()));
  KILN_CHECK(os.size() == 2 && os[0] > 0 && os[1] > 0, op, ": output_size must be two positive sizes, got ",
             shape_str(os));
  int64_t H = x.shape()[2], W = x.shape()[3];
  KILN_CHECK(H % os[0] == 0 && W % os[1] == 0, op, ": input ", shape_str(x.shape()), " to output ", shape_str(os),
             " is not supported: kiln supports output 1x1 and output sizes that divide the input's H and W evenly");
  return {H / os[0], W / os[1]};
}

Tensors adaptive_avg_dec(TensorSpan in, const Attrs& a) {
  const Tensor& x = in[0];
  const auto& os = a.ints("output_size");
  auto [kh, kw] = adaptive_kernel(x, os, "adaptive_avg_pool2d");
  if (os[0] == 1 && os[1] == 1) return {mean(x, {2, 3}, true)};
  return {avg_pool2d(x, {kh, kw}, {kh, kw}, {0, 0}, false, true)};
}

Tensors adaptive_max_dec(TensorSpan in, const Attrs& a) {
  const Tensor& x = in[0];
  const auto& os = a.ints("output_size");
  auto [kh, kw] = adaptive_kernel(x, os, "adaptive_max_pool2d");
  if (os[0] == 1 && os[1] == 1) return {amax(x, {2, 3}, true)};
  return {max_pool2d(x, {kh, kw}, {kh, kw}, {0, 0}, {1, 1}, false)};
}

// Pools accept 3-D [C, H, W] like PyTorch: run batched, drop the batch dim.
bool unbatched(const Tensor& x, const char* op) {
  KILN_CHECK(x.defined() && (x.dim() == 3 || x.dim() == 4), op, ": input must be 3-D [C, H, W] or 4-D [N, C, H, W], got ",
             x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  return x.dim() == 3;
}

}  // namespace

void register_pool_ops() {
  OpDef mp = kernel_op(OpId::max_pool2d, max_pool_infer, max_pool_kernel, max_pool_back, kSaveOutputs);
  mp.num_outputs = 2;
  mp.num_differentiable_outputs = 1;
  define_op(mp);
  define_op(kernel_op(OpId::max_pool2d_backward, max_pool_bwd_infer, max_pool_bwd_kernel, max_pool_bwd_back,
                      kSaveInputs));
  define_op(kernel_op(OpId::avg_pool2d, avg_pool_infer, avg_pool_kernel, avg_pool_back, kSaveNone));
  define_op(kernel_op(OpId::avg_pool2d_backward, avg_pool_bwd_infer, avg_pool_bwd_kernel, avg_pool_bwd_back,
                      kSaveNone));
  define_op(composite_op(OpId::adaptive_avg_pool2d, adaptive_avg_dec));
  define_op(composite_op(OpId::adaptive_max_pool2d, adaptive_max_dec));
}

// ---- public functions ----
namespace {
Tensors max_pool_call(const Tensor& x, const std::vector<int64_t>& kernel_size, const std::vector<int64_t>& stride,
                      const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation, bool ceil_mode,
                      bool indices) {
  bool u = unbatched(x, "max_pool2d");
  Attrs a;
  a.set("kernel_size", kernel_size)
      .set("stride", stride)
      .set("padding", padding)
      .set("dilation", dilation)
      .set("ceil_mode", ceil_mode);
  if (!indices) a.set("indices", false);
  Tensors r = dispatch(OpId::max_pool2d, {u ? x.unsqueeze(0) : x}, a);
  if (u)
    for (Tensor& t : r) t = t.dim() == 4 ? t.squeeze(0) : t;
  return r;
}
}  // namespace

std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const std::vector<int64_t>& kernel_size,
                                                   const std::vector<int64_t>& stride,
                                                   const std::vector<int64_t>& padding,
                                                   const std::vector<int64_t>& dilation, bool ceil_mode) {
  Tensors r = max_pool_call(x, kernel_size, stride, padding, dilation, ceil_mode, true);
  return {r[0], r[1]};
}
Tensor max_pool2d(const Tensor& x, const std::vector<int64_t>& kernel_size, const std::vector<int64_t>& stride,
                  const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation, bool ceil_mode) {
  // Indices only where autograd will record this call and its backward
  // needs them (dispatch records when grad mode is on and an input needs a
  // gradient); a traced eval forward gets indices=false in its graph.
  const bool indices = grad_mode_enabled() && x.requires_grad();
  return max_pool_call(x, kernel_size, stride, padding, dilation, ceil_mode, indices)[0];
}
Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Shape& input_shape) {
  return dispatch1(OpId::max_pool2d_backward, {grad_out, indices}, Attrs().set("input_shape", input_shape));
}
Tensor avg_pool2d(const Tensor& x, const std::vector<int64_t>& kernel_size, const std::vector<int64_t>& stride,
                  const std::vector<int64_t>& padding, bool ceil_mode, bool count_include_pad) {
  bool u = unbatched(x, "avg_pool2d");
  Tensor y = dispatch1(OpId::avg_pool2d, {u ? x.unsqueeze(0) : x},
                       Attrs()
                           .set("kernel_size", kernel_size)
                           .set("stride", stride)
                           .set("padding", padding)
                           .set("ceil_mode", ceil_mode)
                           .set("count_include_pad", count_include_pad));
  return u ? y.squeeze(0) : y;
}
Tensor avg_pool2d_backward(const Tensor& grad_out, const Shape& input_shape, const std::vector<int64_t>& kernel_size,
                           const std::vector<int64_t>& stride, const std::vector<int64_t>& padding, bool ceil_mode,
                           bool count_include_pad) {
  return dispatch1(OpId::avg_pool2d_backward, {grad_out},
                   Attrs()
                       .set("input_shape", input_shape)
                       .set("kernel_size", kernel_size)
                       .set("stride", stride)
                       .set("padding", padding)
                       .set("ceil_mode", ceil_mode)
                       .set("count_include_pad", count_include_pad));
}
Tensor adaptive_avg_pool2d(const Tensor& x, const std::vector<int64_t>& output_size) {
  bool u = unbatched(x, "adaptive_avg_pool2d");
  Tensor y = dispatch1(OpId::adaptive_avg_pool2d, {u ? x.unsqueeze(0) : x}, Attrs().set("output_size", output_size));
  return u ? y.squeeze(0) : y;
}
Tensor adaptive_max_pool2d(const Tensor& x, const std::vector<int64_t>& output_size) {
  bool u = unbatched(x, "adaptive_max_pool2d");
  Tensor y = dispatch1(OpId::adaptive_max_pool2d, {u ? x.unsqueeze(0) : x}, Attrs().set("output_size", output_size));
  return u ? y.squeeze(0) : y;
}

}  // namespace kiln
