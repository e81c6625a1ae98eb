// Random kernels and arange: one thread per Philox counter, drawing the
// words the CPU kernels (src/ops/factory.cpp) draw for the same elements,
// with the same conversions (ops/philox.h), so a seed gives the same
// tensor on either device (normals up to the last bits of log/sin/cos).
#include "cuda/launch.cuh"
#include "ops/philox.h"

namespace kiln::cuda {
namespace {

// Per is elements per counter: 4 (one word each) or 2 (two words each).
template <typename T, int Per>
__global__ void random_kernel(RandomCall c, int64_t counters) {
  T* out = static_cast<T*>(c.out);
  KILN_GRID_STRIDE(k, counters) {
    uint32_t w[4];
    philox_words(c.seed, c.offset + static_cast<uint64_t>(k), w);
    const int64_t i0 = k * Per;
    const int64_t m = c.n - i0 < Per ? c.n - i0 : Per;
    if (c.op == RandomOp::Rand) {
      if constexpr (std::is_same_v<T, double>) {
        out[i0] = philox_unit_double(w[0], w[1]);
        if (m > 1) out[i0 + 1] = philox_unit_double(w[2], w[3]);
      } else {
        for (int64_t j = 0; j < m; ++j) {
          T v = convert<T>(philox_unit_float(w[j]));
          if (convert<float>(v) >= 1.0f) v = convert<T>(0.0f);  // a 16-bit rounding up to 1
          out[i0 + j] = v;
        }
      }
    } else if (c.op == RandomOp::Randn) {
      if constexpr (std::is_same_v<T, double>) {
        const double u1 = 1.0 - philox_unit_double(w[0], w[1]), u2 = philox_unit_double(w[2], w[3]);
        const double rad = sqrt(-2.0 * log(u1)), th = 2.0 * 3.14159265358979323846 * u2;
        out[i0] = rad * cos(th);
        if (m > 1) out[i0 + 1] = rad * sin(th);
      } else {
        float z[4];
        for (int p = 0; p < 2; ++p) {
          const float u1 = philox_unit_float_open0(w[2 * p]), u2 = philox_unit_float(w[2 * p + 1]);
          const float rad = sqrtf(-2.0f * logf(u1)), th = 6.2831853071795864f * u2;
          z[2 * p] = rad * cosf(th);
          z[2 * p + 1] = rad * sinf(th);
        }
        for (int64_t j = 0; j < m; ++j) out[i0 + j] = convert<T>(z[j]);
      }
    } else if (c.op == RandomOp::Randint) {
      for (int64_t j = 0; j < m; ++j) {
        const uint64_t v = (static_cast<uint64_t>(w[2 * j]) << 32 | w[2 * j + 1]) % c.range;
        const int64_t x = c.low + static_cast<int64_t>(v);
        if constexpr (kIsHalf<T>) out[i0 + j] = T(static_cast<float>(x));
        else out[i0 + j] = static_cast<T>(x);
      }
    } else if (c.op == RandomOp::Bernoulli) {
      const T* p = static_cast<const T*>(c.in);
      for (int64_t j = 0; j < m; ++j) {
        const float prob = convert<float>(p[i0 + j]);
        if (!(prob >= 0.0f && prob <= 1.0f)) c.bad[0] = 1;
        out[i0 + j] = convert<T>(philox_unit_float(w[j]) < prob ? 1.0f : 0.0f);
      }
    } else if (c.op == RandomOp::Dropout) {
      using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
      const T* x = static_cast<const T*>(c.in);
      const C scale = static_cast<C>(c.scale);
      for (int64_t j = 0; j < m; ++j) {
        const bool keep = c.keep_all || w[j] < c.keep_threshold;
        c.mask[i0 + j] = keep;
        out[i0 + j] = convert<T>(keep ? static_cast<C>(convert<C>(x[i0 + j]) * scale) : C(0));
      }
    }
  }
}

template <typename T>
__global__ void arange_kernel(RandomCall c) {
  T* out = static_cast<T*>(c.out);
  KILN_GRID_STRIDE(i, c.n) out[i] = convert<T>(c.start + static_cast<double>(i) * c.step);
}

}  // namespace

void launch_random(const RandomCall& c) {
  if (c.n == 0) return;
  if (c.op == RandomOp::Arange) {
    visit_scalar(c.dtype, [&]<typename T>() { arange_kernel<T><<<blocks_for(c.n), kThreads, 0, c.stream>>>(c); });
    KILN_CUDA_CHECK_LAUNCH("arange");
    return;
  }
  // 64-bit draws (float64 uniforms and normals, every randint) take two
  // words an element; bernoulli and dropout one word whatever the dtype.
  const bool wide = c.op == RandomOp::Randint ||
                    (c.dtype == Scalar::Float64 && (c.op == RandomOp::Rand || c.op == RandomOp::Randn));
  visit_scalar(c.dtype, [&]<typename T>() {
    if (wide) {
      const int64_t counters = (c.n + 1) / 2;
      random_kernel<T, 2><<<blocks_for(counters), kThreads, 0, c.stream>>>(c, counters);
    } else {
      const int64_t counters = (c.n + 3) / 4;
      random_kernel<T, 4><<<blocks_for(counters), kThreads, 0, c.stream>>>(c, counters);
    }
  });
  KILN_CUDA_CHECK_LAUNCH("random");
}

}  // namespace kiln::cuda
