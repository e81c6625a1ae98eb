// The DataLoader's gather + augment + normalize on the device: one thread an
// output element, walking the output's memory order (NCHW or NHWC). The
// coordinate maps are src/data/augment.cpp's axis_map, element by element.
#include "cuda/launch.cuh"

namespace kiln::cuda {
namespace {

// numpy/torch "reflect" (the edge is not repeated), as augment.cpp's reflect.
__device__ inline int64_t reflect(int64_t i, int64_t n) {
  if (n == 1) return 0;
  const int64_t period = 2 * (n - 1);
  i %= period;
  if (i < 0) i += period;
  return i < n ? i : period - i;
}

// Output coordinate -> source coordinate, -1 for zero padding (augment.cpp's axis_map).
__device__ inline int64_t source_coord(int64_t o, int64_t n, int64_t pad, int crop, int64_t translate, int shift,
                                       bool flip) {
  const int64_t u = translate > 0 ? reflect(o + shift - translate, n) : o;
  const int64_t v = pad > 0 ? u + crop - pad : u;
  if (v < 0 || v >= n) return -1;
  return flip ? n - 1 - v : v;
}

__global__ void augment_kernel(AugmentCall c, int64_t total) {
  KILN_GRID_STRIDE(e, total) {
    int64_t x, y, ch, i;
    if (c.channels_last) {
      ch = e % c.C;
      x = (e / c.C) % c.W;
      y = (e / (c.C * c.W)) % c.H;
      i = e / (c.C * c.W * c.H);
    } else {
      x = e % c.W;
      y = (e / c.W) % c.H;
      ch = (e / (c.W * c.H)) % c.C;
      i = e / (c.W * c.H * c.C);
    }
    const AugmentDraw d = c.draws[i];
    const int64_t sy = source_coord(y, c.H, c.crop_padding, d.crop_y, c.translate, d.translate_y, false);
    const int64_t sx = source_coord(x, c.W, c.crop_padding, d.crop_x, c.translate, d.translate_x, d.flip != 0);
    const float b = c.bias[ch];
    float v = b;  // zero padding: pixel 0
    if (sy >= 0 && sx >= 0) {
      const uint8_t p = c.images[((static_cast<int64_t>(d.index) * c.C + ch) * c.H + sy) * c.W + sx];
      v = __fmaf_rn(static_cast<float>(p), c.scale[ch], b);  // one rounding, as the CPU's std::fma
    }
    c.out[e] = v;
    if (e < c.B) c.out_labels[e] = c.labels[c.draws[e].index];
  }
}

}  // namespace

void launch_augment(const AugmentCall& c) {
  const int64_t total = c.B * c.C * c.H * c.W;
  if (total == 0) return;
  augment_kernel<<<blocks_for(total), kThreads, 0, c.stream>>>(c, total);
  KILN_CUDA_CHECK_LAUNCH("DataLoader batch on the device");
}

}  // namespace kiln::cuda
