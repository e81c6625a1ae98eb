// Micro-benchmarks of kiln's CUDA kernels, timed with CUDA events (the work is
// asynchronous: a host clock would time the launch). Each reports its rate:
// bytes/s for memory-bound ops (bytes read + written once each), FLOP/s for
// matmul; compare with the device's ceilings (H200: about 4.3 TB/s copies,
// about 790 TFLOP/s bf16 matmul). On the GPU machine:
//   bash .device/on_device.sh run bench_cuda
// Without a CUDA device every case is skipped with the reason.
#include <benchmark/benchmark.h>

#include <functional>

#include "kiln/kiln.h"

namespace {

using kiln::Device;
using kiln::DType;
using kiln::Tensor;

// Times body() per iteration with events on the current stream; bytes and
// flops are per call.
void timed(benchmark::State& state, const std::function<void()>& body, double bytes, double flops = 0) {
  if (!kiln::cuda::is_available()) {
    state.SkipWithError(kiln::cuda::unavailable_reason());
    return;
  }
  try {
    body();  // warm-up: allocator cache, cuBLASLt handle and heuristics
    kiln::cuda::synchronize();
    kiln::cuda::Event start, end;
    for (auto _ : state) {
      start.record();
      body();
      end.record();
      end.synchronize();
      state.SetIterationTime(start.elapsed_ms(end) / 1e3);
    }
    if (bytes > 0) state.counters["bytes/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
    if (flops > 0) state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
    kiln::cuda::AllocatorStats s = kiln::cuda::allocator_stats();
    state.counters["cudaMalloc"] = static_cast<double>(s.num_cuda_mallocs);
  } catch (const kiln::Error& e) {
    state.SkipWithError(e.what());
  }
}

// False (the case skipped with the reason) without a CUDA device.
bool have_cuda(benchmark::State& st) {
  if (kiln::cuda::is_available()) return true;
  st.SkipWithError(kiln::cuda::unavailable_reason());
  return false;
}

Tensor on_gpu(const kiln::Shape& shape, DType dt = DType::Float32) {
  return kiln::randn(shape).to(Device::cuda()).to(dt);
}

constexpr int64_t kN = int64_t{1} << 26;  // 64 Mi elements: 256 MiB in float32

void BM_add(benchmark::State& st) {
  if (!have_cuda(st)) return;
  Tensor a = on_gpu({kN}), b = on_gpu({kN});
  timed(st, [&] { benchmark::DoNotOptimize(kiln::add(a, b)); }, 3.0 * 4 * kN);
}
void BM_add_broadcast_row(benchmark::State& st) {
  if (!have_cuda(st)) return;
  Tensor a = on_gpu({kN / 1024, 1024}), b = on_gpu({1024});
  timed(st, [&] { benchmark::DoNotOptimize(kiln::add(a, b)); }, 2.0 * 4 * kN);
}
void BM_relu(benchmark::State& st) {
  if (!have_cuda(st)) return;
  Tensor a = on_gpu({kN});
  timed(st, [&] { benchmark::DoNotOptimize(kiln::relu(a)); }, 2.0 * 4 * kN);
}
void BM_gelu_bf16(benchmark::State& st) {
  if (!have_cuda(st)) return;
  Tensor a = on_gpu({kN}, DType::BFloat16);
  timed(st, [&] { benchmark::DoNotOptimize(kiln::gelu(a)); }, 2.0 * 2 * kN);
}
void BM_cast_f32_to_bf16(benchmark::State& st) {
  if (!have_cuda(st)) return;
  Tensor a = on_gpu({kN});
  timed(st, [&] { benchmark::DoNotOptimize(a.to(DType::BFloat16)); }, 6.0 * kN);
}
void BM_transpose_copy(benchmark::State& st) {
  if (!have_cuda(st)) return;
  Tensor a = on_gpu({8192, 8192});
  timed(st, [&] { benchmark::DoNotOptimize(a.t().contiguous()); }, 2.0 * 4 * 8192 * 8192);
}
void BM_sum_all(benchmark::State& st) {
  if (!have_cuda(st)) return;
  Tensor a = on_gpu({kN});
  timed(st, [&] { benchmark::DoNotOptimize(kiln::sum(a)); }, 4.0 * kN);
}
void BM_sum_rows(benchmark::State& st) {
  if (!have_cuda(st)) return;
  Tensor a = on_gpu({kN / 1024, 1024});
  timed(st, [&] { benchmark::DoNotOptimize(kiln::sum(a, {1})); }, 4.0 * kN);
}
void BM_sum_columns(benchmark::State& st) {
  if (!have_cuda(st)) return;
  Tensor a = on_gpu({kN / 1024, 1024});
  timed(st, [&] { benchmark::DoNotOptimize(kiln::sum(a, {0})); }, 4.0 * kN);
}
void BM_softmax_rows(benchmark::State& st) {
  if (!have_cuda(st)) return;
  Tensor a = on_gpu({kN / 1024, 1024});
  timed(st, [&] { benchmark::DoNotOptimize(kiln::softmax(a, 1)); }, 2.0 * 4 * kN);
}
void BM_matmul(benchmark::State& st, DType dt) {
  if (!have_cuda(st)) return;
  const int64_t n = st.range(0);
  Tensor a = on_gpu({n, n}, dt), b = on_gpu({n, n}, dt);
  timed(st, [&] { benchmark::DoNotOptimize(kiln::matmul(a, b)); }, 0, 2.0 * n * n * n);
}
void BM_to_cuda(benchmark::State& st) {
  if (!have_cuda(st)) return;
  Tensor h = kiln::randn({kN / 4});
  timed(st, [&] { benchmark::DoNotOptimize(h.to(Device::cuda())); }, 4.0 * kN / 4);
}
void BM_to_cpu(benchmark::State& st) {
  if (!have_cuda(st)) return;
  Tensor d = on_gpu({kN / 4});
  timed(st, [&] { benchmark::DoNotOptimize(d.to(Device::cpu())); }, 4.0 * kN / 4);
}

BENCHMARK(BM_add)->UseManualTime();
BENCHMARK(BM_add_broadcast_row)->UseManualTime();
BENCHMARK(BM_relu)->UseManualTime();
BENCHMARK(BM_gelu_bf16)->UseManualTime();
BENCHMARK(BM_cast_f32_to_bf16)->UseManualTime();
BENCHMARK(BM_transpose_copy)->UseManualTime();
BENCHMARK(BM_sum_all)->UseManualTime();
BENCHMARK(BM_sum_rows)->UseManualTime();
BENCHMARK(BM_sum_columns)->UseManualTime();
BENCHMARK(BM_softmax_rows)->UseManualTime();
BENCHMARK_CAPTURE(BM_matmul, f32, DType::Float32)->Arg(4096)->UseManualTime();
BENCHMARK_CAPTURE(BM_matmul, bf16, DType::BFloat16)->Arg(8192)->UseManualTime();
BENCHMARK(BM_to_cuda)->UseManualTime();
BENCHMARK(BM_to_cpu)->UseManualTime();

}  // namespace

BENCHMARK_MAIN();
