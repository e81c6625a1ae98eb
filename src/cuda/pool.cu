// Pooling kernels: one thread per output, windows walked in the CPU kernels'
// order (src/ops/pool.cpp) so max_pool2d picks the same index on a tie or a
// NaN, and the backward ops scatter with atomic adds.
#include <cmath>

#include "cuda/launch.cuh"

namespace kiln::cuda {
namespace {

__device__ inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ inline int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

template <typename T>
__global__ void max_pool_kernel(PoolCall c, int64_t n) {
  const T* x = static_cast<const T*>(c.in);
  T* y = static_cast<T*>(c.out);
  KILN_GRID_STRIDE(i, n) {
    const int64_t ow = i % c.OW, oh = (i / c.OW) % c.OH, p = i / (c.OW * c.OH);
    int64_t hs = oh * c.sh - c.ph;
    const int64_t he = imin(hs + (c.kh - 1) * c.dh + 1, c.H);
    while (hs < 0) hs += c.dh;
    int64_t ws = ow * c.sw - c.pw;
    const int64_t we = imin(ws + (c.kw - 1) * c.dw + 1, c.W);
    while (ws < 0) ws += c.dw;
    const T* plane = x + p * c.H * c.W;
    int64_t best = hs * c.W + ws;
    Acc<T> m = -INFINITY;
    for (int64_t h = hs; h < he; h += c.dh)
      for (int64_t w = ws; w < we; w += c.dw) {
        const Acc<T> v = convert<Acc<T>>(plane[h * c.W + w]);
        if (v > m || isnan(v)) {
          m = v;
          best = h * c.W + w;
        }
      }
    y[i] = convert<T>(m);
    if (c.indices) c.indices[i] = best;
  }
}

template <typename T>
__global__ void max_pool_backward_kernel(PoolCall c, int64_t n) {
  const T* gy = static_cast<const T*>(c.in);
  Acc<T>* gx = static_cast<Acc<T>*>(c.out);
  const int64_t plane = c.H * c.W;
  KILN_GRID_STRIDE(i, n) {
    const int64_t p = i / (c.OW * c.OH);
    const int64_t k = c.indices[i];
    if (k < 0 || k >= plane) {
      c.bad[1] = k;
      c.bad[0] = 1;
      continue;
    }
    atomicAdd(gx + p * plane + k, convert<Acc<T>>(gy[i]));
  }
}

// The window of output (oh, ow) clipped to the input, and PyTorch's divisor.
struct AvgWindow {
  int64_t h0, h1, w0, w1, div;
};
__device__ inline AvgWindow avg_window(const PoolCall& c, int64_t oh, int64_t ow) {
  const int64_t hs = oh * c.sh - c.ph, he = imin(hs + c.kh, c.H + c.ph);
  const int64_t ws = ow * c.sw - c.pw, we = imin(ws + c.kw, c.W + c.pw);
  AvgWindow a;
  a.h0 = imax(hs, 0), a.w0 = imax(ws, 0);
  a.h1 = imin(he, c.H), a.w1 = imin(we, c.W);
  a.div = c.count_include_pad ? (he - hs) * (we - ws) : (a.h1 - a.h0) * (a.w1 - a.w0);
  return a;
}

template <typename T>
__global__ void avg_pool_kernel(PoolCall c, int64_t n) {
  const T* x = static_cast<const T*>(c.in);
  T* y = static_cast<T*>(c.out);
  KILN_GRID_STRIDE(i, n) {
    const int64_t ow = i % c.OW, oh = (i / c.OW) % c.OH, p = i / (c.OW * c.OH);
    const AvgWindow a = avg_window(c, oh, ow);
    const T* plane = x + p * c.H * c.W;
    Acc<T> s = 0;
    for (int64_t h = a.h0; h < a.h1; ++h)
      for (int64_t w = a.w0; w < a.w1; ++w) s += convert<Acc<T>>(plane[h * c.W + w]);
    const bool empty = a.h0 >= a.h1 || a.w0 >= a.w1;
    y[i] = convert<T>(empty ? Acc<T>(0) : s / static_cast<Acc<T>>(a.div));
  }
}

template <typename T>
__global__ void avg_pool_backward_kernel(PoolCall c, int64_t n) {
  const T* gy = static_cast<const T*>(c.in);
  Acc<T>* gx = static_cast<Acc<T>*>(c.out);
  KILN_GRID_STRIDE(i, n) {
    const int64_t ow = i % c.OW, oh = (i / c.OW) % c.OH, p = i / (c.OW * c.OH);
    const AvgWindow a = avg_window(c, oh, ow);
    if (a.h0 >= a.h1 || a.w0 >= a.w1) continue;
    const Acc<T> v = convert<Acc<T>>(gy[i]) / static_cast<Acc<T>>(a.div);
    Acc<T>* plane = gx + p * c.H * c.W;
    for (int64_t h = a.h0; h < a.h1; ++h)
      for (int64_t w = a.w0; w < a.w1; ++w) atomicAdd(plane + h * c.W + w, v);
  }
}

// Channels-last versions: output i is (n, oh, ow, c) in NHWC order, so a
// warp reads and writes consecutive channels of one pixel. Indices are the
// same plane offsets h * W + w as the NCHW kernels'.
struct NhwcOut {
  int64_t n, oh, ow, c;
};
__device__ inline NhwcOut nhwc_out(const PoolCall& c, int64_t i) {
  NhwcOut o;
  o.c = i % c.C;
  int64_t r = i / c.C;
  o.ow = r % c.OW;
  r /= c.OW;
  o.oh = r % c.OH;
  o.n = r / c.OH;
  return o;
}

template <typename T>
__global__ void max_pool_nhwc_kernel(PoolCall c, int64_t n) {
  const T* x = static_cast<const T*>(c.in);
  T* y = static_cast<T*>(c.out);
  KILN_GRID_STRIDE(i, n) {
    const NhwcOut o = nhwc_out(c, i);
    int64_t hs = o.oh * c.sh - c.ph;
    const int64_t he = imin(hs + (c.kh - 1) * c.dh + 1, c.H);
    while (hs < 0) hs += c.dh;
    int64_t ws = o.ow * c.sw - c.pw;
    const int64_t we = imin(ws + (c.kw - 1) * c.dw + 1, c.W);
    while (ws < 0) ws += c.dw;
    const T* img = x + o.n * c.H * c.W * c.C + o.c;
    int64_t best = hs * c.W + ws;
    Acc<T> m = -INFINITY;
    for (int64_t h = hs; h < he; h += c.dh)
      for (int64_t w = ws; w < we; w += c.dw) {
        const Acc<T> v = convert<Acc<T>>(img[(h * c.W + w) * c.C]);
        if (v > m || isnan(v)) {
          m = v;
          best = h * c.W + w;
        }
      }
    y[i] = convert<T>(m);
    if (c.indices) c.indices[i] = best;
  }
}

template <typename T>
__global__ void max_pool_backward_nhwc_kernel(PoolCall c, int64_t n) {
  const T* gy = static_cast<const T*>(c.in);
  Acc<T>* gx = static_cast<Acc<T>*>(c.out);
  const int64_t plane = c.H * c.W;
  KILN_GRID_STRIDE(i, n) {
    const NhwcOut o = nhwc_out(c, i);
    const int64_t k = c.indices[i];
    if (k < 0 || k >= plane) {
      c.bad[1] = k;
      c.bad[0] = 1;
      continue;
    }
    atomicAdd(gx + (o.n * plane + k) * c.C + o.c, convert<Acc<T>>(gy[i]));
  }
}

template <typename T>
__global__ void avg_pool_nhwc_kernel(PoolCall c, int64_t n) {
  const T* x = static_cast<const T*>(c.in);
  T* y = static_cast<T*>(c.out);
  KILN_GRID_STRIDE(i, n) {
    const NhwcOut o = nhwc_out(c, i);
    const AvgWindow a = avg_window(c, o.oh, o.ow);
    const T* img = x + o.n * c.H * c.W * c.C + o.c;
    Acc<T> s = 0;
    for (int64_t h = a.h0; h < a.h1; ++h)
      for (int64_t w = a.w0; w < a.w1; ++w) s += convert<Acc<T>>(img[(h * c.W + w) * c.C]);
    const bool empty = a.h0 >= a.h1 || a.w0 >= a.w1;
    y[i] = convert<T>(empty ? Acc<T>(0) : s / static_cast<Acc<T>>(a.div));
  }
}

template <typename T>
__global__ void avg_pool_backward_nhwc_kernel(PoolCall c, int64_t n) {
  const T* gy = static_cast<const T*>(c.in);
  Acc<T>* gx = static_cast<Acc<T>*>(c.out);
  KILN_GRID_STRIDE(i, n) {
    const NhwcOut o = nhwc_out(c, i);
    const AvgWindow a = avg_window(c, o.oh, o.ow);
    if (a.h0 >= a.h1 || a.w0 >= a.w1) continue;
    const Acc<T> v = convert<Acc<T>>(gy[i]) / static_cast<Acc<T>>(a.div);
    Acc<T>* img = gx + o.n * c.H * c.W * c.C + o.c;
    for (int64_t h = a.h0; h < a.h1; ++h)
      for (int64_t w = a.w0; w < a.w1; ++w) atomicAdd(img + (h * c.W + w) * c.C, v);
  }
}

// Runs launch.template operator()<T>(n) over the call's n outputs, T the storage type.
template <typename Launch>
void over_outputs(const PoolCall& c, const char* what, Launch&& launch) {
  const int64_t n = c.planes * c.OH * c.OW;
  if (n == 0) return;
  visit_float(c.dtype, [&]<typename T>() { launch.template operator()<T>(n); });
  KILN_CUDA_CHECK_LAUNCH(what);
}

}  // namespace

void launch_max_pool(const PoolCall& c) {
  over_outputs(c, "max_pool2d", [&]<typename T>(int64_t n) {
    if (c.channels_last)
      max_pool_nhwc_kernel<T><<<blocks_for(n), kThreads, 0, c.stream>>>(c, n);
    else
      max_pool_kernel<T><<<blocks_for(n), kThreads, 0, c.stream>>>(c, n);
  });
}

void launch_max_pool_backward(const PoolCall& c) {
  over_outputs(c, "max_pool2d_backward", [&]<typename T>(int64_t n) {
    if (c.channels_last)
      max_pool_backward_nhwc_kernel<T><<<blocks_for(n), kThreads, 0, c.stream>>>(c, n);
    else
      max_pool_backward_kernel<T><<<blocks_for(n), kThreads, 0, c.stream>>>(c, n);
  });
}

void launch_avg_pool(const PoolCall& c) {
  over_outputs(c, "avg_pool2d", [&]<typename T>(int64_t n) {
    if (c.channels_last)
      avg_pool_nhwc_kernel<T><<<blocks_for(n), kThreads, 0, c.stream>>>(c, n);
    else
      avg_pool_kernel<T><<<blocks_for(n), kThreads, 0, c.stream>>>(c, n);
  });
}

void launch_avg_pool_backward(const PoolCall& c) {
  over_outputs(c, "avg_pool2d_backward", [&]<typename T>(int64_t n) {
    if (c.channels_last)
      avg_pool_backward_nhwc_kernel<T><<<blocks_for(n), kThreads, 0, c.stream>>>(c, n);
    else
      avg_pool_backward_kernel<T><<<blocks_for(n), kThreads, 0, c.stream>>>(c, n);
  });
}

}  // namespace kiln::cuda
