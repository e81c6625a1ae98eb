// Micro-benchmarks of the hot ops: the two airbench-style convolutions
// (forward, and forward + both backward passes), a 1024^3 matmul and a
// pointwise chain. Compare against PyTorch 1.13 with the same thread count:
//   OMP_NUM_THREADS=2 ./bench_ops
// (bench/ also holds the side-by-side PyTorch scripts).
#include <benchmark/benchmark.h>

#include <random>

#include "kiln/kiln.h"
#include "ops/op_def.h"

namespace {

using kiln::Tensor;

// Filled directly (not through kiln::randn) so that the benchmark measures
// only the ops under test.
Tensor random_tensor(const kiln::Shape& shape, uint32_t seed) {
  Tensor t = Tensor::empty(shape, kiln::DType::Float32);
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(gen);
  return t;
}

template <typename F>
void run_guarded(benchmark::State& state, F&& body) {
  try {
    for (auto _ : state) body();
  } catch (const kiln::Error& e) {
    state.SkipWithError(e.what());
  }
}

void conv_forward(benchmark::State& state, int64_t n, int64_t c, int64_t o, int64_t hw) {
  Tensor x = random_tensor({n, c, hw, hw}, 1), w = random_tensor({o, c, 3, 3}, 2);
  kiln::Conv2dParams p;
  p.padding = {1, 1};
  kiln::NoGradGuard ng;
  run_guarded(state, [&] {
    Tensor y = kiln::conv2d(x, w, Tensor(), p);
    benchmark::DoNotOptimize(y.data_ptr());
  });
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * o * hw * hw * c * 9 * 1e-9 * state.iterations(),
                                                  benchmark::Counter::kIsRate);
}

// Forward plus the two backward ops autograd calls (no bias, as airbench).
void conv_forward_backward(benchmark::State& state, int64_t n, int64_t c, int64_t o, int64_t hw) {
  Tensor x = random_tensor({n, c, hw, hw}, 1), w = random_tensor({o, c, 3, 3}, 2);
  Tensor gy = random_tensor({n, o, hw, hw}, 3);
  kiln::Conv2dParams p;
  p.padding = {1, 1};
  kiln::NoGradGuard ng;
  run_guarded(state, [&] {
    Tensor y = kiln::conv2d(x, w, Tensor(), p);
    Tensor gx = kiln::conv2d_backward_input(gy, w, x.shape(), p);
    Tensor gw = kiln::conv2d_backward_weight(gy, x, w.shape(), p);
    benchmark::DoNotOptimize(y.data_ptr());
    benchmark::DoNotOptimize(gx.data_ptr());
    benchmark::DoNotOptimize(gw.data_ptr());
  });
  state.counters["GFLOP/s"] = benchmark::Counter(6.0 * n * o * hw * hw * c * 9 * 1e-9 * state.iterations(),
                                                  benchmark::Counter::kIsRate);
}

void BM_Conv2d_64x32x32_Forward(benchmark::State& s) { conv_forward(s, 128, 64, 64, 32); }
void BM_Conv2d_64x32x32_ForwardBackward(benchmark::State& s) { conv_forward_backward(s, 128, 64, 64, 32); }
void BM_Conv2d_256x15x15_Forward(benchmark::State& s) { conv_forward(s, 128, 256, 256, 15); }
void BM_Conv2d_256x15x15_ForwardBackward(benchmark::State& s) { conv_forward_backward(s, 128, 256, 256, 15); }

void BM_Matmul_1024(benchmark::State& state) {
  Tensor a = random_tensor({1024, 1024}, 4), b = random_tensor({1024, 1024}, 5);
  kiln::NoGradGuard ng;
  run_guarded(state, [&] {
    Tensor c = kiln::matmul(a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  });
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * 1024 * 1024 * 1024 * 1e-9 * state.iterations(), benchmark::Counter::kIsRate);
}

void BM_Matmul_128x512x10(benchmark::State& state) {
  Tensor a = random_tensor({128, 512}, 4), b = random_tensor({512, 10}, 5);
  kiln::NoGradGuard ng;
  run_guarded(state, [&] {
    Tensor c = kiln::matmul(a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  });
}

void BM_PointwiseChain(benchmark::State& state) {
  Tensor x = random_tensor({128, 64, 32, 32}, 6), y = random_tensor({128, 64, 32, 32}, 7);
  Tensor z = random_tensor({128, 64, 32, 32}, 8);
  kiln::NoGradGuard ng;
  run_guarded(state, [&] {
    Tensor r = kiln::relu(x * y + z);
    benchmark::DoNotOptimize(r.data_ptr());
  });
  state.SetBytesProcessed(state.iterations() * x.nbytes() * 4);
}

void BM_MaxPool2d_ForwardBackward(benchmark::State& state) {
  Tensor x = random_tensor({128, 64, 32, 32}, 9), gy = random_tensor({128, 64, 16, 16}, 10);
  kiln::NoGradGuard ng;
  run_guarded(state, [&] {
    auto [y, idx] = kiln::max_pool2d_with_indices(x, {2, 2});
    Tensor gx = kiln::max_pool2d_backward(gy, idx, x.shape());
    benchmark::DoNotOptimize(gx.data_ptr());
  });
}

void BM_BatchNormTrain_ForwardBackward(benchmark::State& state) {
  Tensor x = random_tensor({128, 64, 32, 32}, 11), gy = random_tensor({128, 64, 32, 32}, 12);
  Tensor w = random_tensor({64}, 13), b = random_tensor({64}, 14);
  Tensor rm = random_tensor({64}, 15), rv = random_tensor({64}, 16);
  kiln::NoGradGuard ng;
  run_guarded(state, [&] {
    kiln::Tensors out = kiln::dispatch(kiln::OpId::batch_norm, {x, w, b, rm, rv},
                                       kiln::Attrs().set("training", true).set("momentum", 0.1).set("eps", 1e-5));
    auto [gx, gw, gb] = kiln::batch_norm_backward(gy, x, w, out[1], out[2], true, 1e-5);
    benchmark::DoNotOptimize(gx.data_ptr());
  });
}

}  // namespace

BENCHMARK(BM_Conv2d_64x32x32_Forward)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Conv2d_64x32x32_ForwardBackward)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Conv2d_256x15x15_Forward)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Conv2d_256x15x15_ForwardBackward)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Matmul_1024)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Matmul_128x512x10)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_PointwiseChain)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_MaxPool2d_ForwardBackward)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_BatchNormTrain_ForwardBackward)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
