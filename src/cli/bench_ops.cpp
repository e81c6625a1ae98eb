// kiln bench ops: times the op cases that bench/vs_torch.sh compares with
// PyTorch (bench/torch_ops.py runs the same cases, shapes and timing rule).
//
// Timing rule (keep in step with bench/torch_ops.py): two warm-up iterations,
// the second one timed to pick the repetition count (about kTargetMs of timed
// work, at least kMinReps, at most kMaxReps) unless --reps is given, then the
// median of the repetitions. One iteration of a forward+backward case is
// forward + loss (sum unless the case says otherwise) + backward; gradients are
// reset to none before each iteration, outside the timed region.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/json_line.h"
#include "kiln/kiln.h"

namespace kiln::cli {
namespace {

constexpr double kTargetMs = 1500.0;
constexpr int kMinReps = 3;
constexpr int kMaxReps = 1000;

// One prepared case: `step` is the timed iteration, `reset` runs untimed before it.
struct Iteration {
  std::function<void()> reset;
  std::function<void()> step;
};

struct Case {
  const char* name;
  const char* what;
  std::function<Iteration(Generator&, Device)> prepare;  // allocates inputs on the device (untimed)
};

Tensor leaf(Tensor t) { return t.detach().requires_grad_(true); }

std::function<void()> clear_grads(std::vector<Tensor> leaves) {
  return [leaves] {
    for (Tensor t : leaves) t.set_grad(Tensor());
  };
}

Conv2dParams pad1() {
  Conv2dParams p;
  p.padding = {1, 1};
  return p;
}

Iteration conv_case(Generator& gen, Device d, const Shape& xs, const Shape& ws, bool backward) {
  Tensor x = randn(xs, {}, &gen).to(d);
  Tensor w = randn(ws, {}, &gen).to(d);
  if (!backward) return {[] {}, [x, w] { conv2d(x, w, Tensor(), pad1()); }};
  x = leaf(x);
  w = leaf(w);
  return {clear_grads({x, w}), [x, w] { sum(conv2d(x, w, Tensor(), pad1())).backward(); }};
}

const std::vector<Case>& all_cases() {
  static const std::vector<Case> cases = {
      {"conv_resnet_block", "conv2d fwd+bwd (input+weight grad, no bias) x[128,64,32,32] w[64,64,3,3] pad 1",
       [](Generator& g, Device d) { return conv_case(g, d, {128, 64, 32, 32}, {64, 64, 3, 3}, true); }},
      {"conv_airbench_256", "conv2d fwd+bwd (input+weight grad, no bias) x[128,256,15,15] w[256,256,3,3] pad 1",
       [](Generator& g, Device d) { return conv_case(g, d, {128, 256, 15, 15}, {256, 256, 3, 3}, true); }},
      {"conv_airbench_64_256", "conv2d fwd+bwd (input+weight grad, no bias) x[128,64,15,15] w[256,64,3,3] pad 1",
       [](Generator& g, Device d) { return conv_case(g, d, {128, 64, 15, 15}, {256, 64, 3, 3}, true); }},
      {"conv_resnet_block_fwd", "conv2d forward x[128,64,32,32] w[64,64,3,3] pad 1",
       [](Generator& g, Device d) { return conv_case(g, d, {128, 64, 32, 32}, {64, 64, 3, 3}, false); }},
      {"conv_airbench_256_fwd", "conv2d forward x[128,256,15,15] w[256,256,3,3] pad 1",
       [](Generator& g, Device d) { return conv_case(g, d, {128, 256, 15, 15}, {256, 256, 3, 3}, false); }},
      {"matmul_1024", "matmul [1024,1024] @ [1024,1024] forward",
       [](Generator& g, Device d) {
         Tensor a = randn({1024, 1024}, {}, &g).to(d), b = randn({1024, 1024}, {}, &g).to(d);
         return Iteration{[] {}, [a, b] { matmul(a, b); }};
       }},
      {"linear_fc", "linear x[128,4096] w[1024,4096] b[1024] fwd+bwd (x, w, b grads), loss = sum",
       [](Generator& g, Device d) {
         Tensor x = leaf(randn({128, 4096}, {}, &g).to(d)), w = leaf(randn({1024, 4096}, {}, &g).to(d)),
                b = leaf(randn({1024}, {}, &g).to(d));
         return Iteration{clear_grads({x, w, b}), [x, w, b] { sum(linear(x, w, b)).backward(); }};
       }},
      {"pointwise_chain", "sum(gelu(relu(x*a+b)*c)) x[128,64,32,32], a,b,c [64,1,1]; forward, one eager op each",
       [](Generator& g, Device d) {
         Tensor x = randn({128, 64, 32, 32}, {}, &g).to(d), a = randn({64, 1, 1}, {}, &g).to(d),
                b = randn({64, 1, 1}, {}, &g).to(d), c = randn({64, 1, 1}, {}, &g).to(d);
         return Iteration{[] {}, [x, a, b, c] { sum(gelu(mul(relu(add(mul(x, a), b)), c))); }};
       }},
      {"maxpool_bn_relu", "max_pool2d 2x2 -> batch_norm(train) -> relu, x[128,64,32,32] fwd+bwd, loss = sum",
       [](Generator& g, Device d) {
         Tensor x = leaf(randn({128, 64, 32, 32}, {}, &g).to(d)), gamma = leaf(ones({64}).to(d)),
                beta = leaf(zeros({64}).to(d));
         Tensor running_mean = zeros({64}).to(d), running_var = ones({64}).to(d);
         return Iteration{clear_grads({x, gamma, beta}), [=] {
                            Tensor p = max_pool2d(x, {2, 2});
                            sum(relu(batch_norm(p, gamma, beta, running_mean, running_var, true))).backward();
                          }};
       }},
      {"softmax_xent", "cross_entropy(logits[4096,1000], targets[4096]) mean, fwd+bwd",
       [](Generator& g, Device d) {
         Tensor logits = leaf(randn({4096, 1000}, {}, &g).to(d));
         Tensor target = randint(0, 1000, {4096}, dtype(DType::Int64), &g).to(d);
         return Iteration{clear_grads({logits}), [logits, target] { cross_entropy(logits, target).backward(); }};
       }},
  };
  return cases;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Returns the median milliseconds of one iteration; `reps_used` gets the count.
double time_iteration(const Iteration& it, Device device, int reps, int& reps_used) {
  auto once = [&] {
    it.reset();
    if (device.is_cuda()) cuda::synchronize(device.index);
    auto t0 = std::chrono::steady_clock::now();
    it.step();
    if (device.is_cuda()) cuda::synchronize(device.index);  // the kernels, not only their launches
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  once();
  double probe = once();
  if (reps <= 0) {
    double want = std::ceil(kTargetMs / std::max(probe, 1e-3));
    reps = static_cast<int>(std::clamp(want, static_cast<double>(kMinReps), static_cast<double>(kMaxReps)));
  }
  std::vector<double> times;
  times.reserve(reps);
  for (int r = 0; r < reps; ++r) times.push_back(once());
  reps_used = reps;
  return median(times);
}

}  // namespace

std::vector<std::string> bench_ops_case_names() {
  std::vector<std::string> names;
  for (const Case& c : all_cases()) names.emplace_back(c.name);
  return names;
}

int run_bench_ops(const BenchOpsOptions& o) {
  const bool json = o.json, list = o.list;
  const int reps = o.reps, threads = o.threads;
  const std::vector<std::string>& names = o.cases;
  if (list) {
    for (const Case& c : all_cases()) std::cout << c.name << "\t" << c.what << "\n";
    return 0;
  }

  std::vector<const Case*> selected;
  if (names.empty()) {
    for (const Case& c : all_cases()) selected.push_back(&c);
  } else {
    for (const std::string& n : names) {
      auto it = std::find_if(all_cases().begin(), all_cases().end(), [&](const Case& c) { return n == c.name; });
      KILN_CHECK(it != all_cases().end(), "bench ops: unknown case '", n, "'; see kiln bench ops --list");
      selected.push_back(&*it);
    }
  }

  const Device device = checked_device(o.device, "bench ops");
  if (threads > 0) omp_set_num_threads(threads);
  if (!json)
    std::printf("kiln bench ops: %s%d thread(s), float32, eager; median of timed repetitions\n",
                device.is_cpu() ? "" : (device.str() + ", ").c_str(), omp_get_max_threads());

  int failures = 0;
  for (const Case* c : selected) {
    Generator gen(0);
    try {
      Iteration it = c->prepare(gen, device);
      int reps_used = 0;
      double ms = time_iteration(it, device, reps, reps_used);
      if (json)
        print_json_line({{"case", c->name}, {"kiln_ms", rounded(ms, 4)}});
      else
        std::printf("%-24s %10.3f ms  (median of %d)\n", c->name, ms, reps_used);
    } catch (const Error& e) {
      ++failures;
      std::cerr << "kiln bench ops: case " << c->name << " failed: " << e.what() << "\n";
      if (json)
        print_json_line({{"case", c->name}, {"kiln_ms", nullptr}, {"error", e.what()}});
      else
        std::printf("%-24s %10s\n", c->name, "error");
    }
    std::fflush(stdout);
  }
  return failures ? 1 : 0;
}

}  // namespace kiln::cli
