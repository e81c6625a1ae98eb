// kiln bench fusion: what Layer Fusion and fuse_modules buy, each measured
// side by side in one process (docs/layer-fusion.md).
//
// Layer Fusion: two copies of a zoo model from the same seed, one with
// freeze_similar(K); the recipe's eager SGD train step on one random batch.
// Prints the backward's kernel counts (conv2d_backward_weight,
// conv2d_backward_input) and images/s of both, timed in alternating rounds
// so that load on a shared machine hits both alike.
// fuse_modules: the eval forward of the model and of fuse_modules(copy),
// the outputs' scaled error (max |fused - plain| / max |plain|) and images/s.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/json_line.h"
#include "kiln/fusion.h"
#include "kiln/kiln.h"
#include "ops/dispatch_mode.h"

namespace kiln::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Counts the ops dispatched in its scope.
class CountOps : public DispatchMode {
 public:
  const char* mode_name() const override { return "bench_fusion_count"; }
  Tensors handle(OpId id, Tensors& inputs, const Attrs& attrs, const NextMode& next) override {
    ++counts[op_name(id)];
    return next(id, inputs, attrs);
  }
  std::map<std::string, int64_t> counts;
};

// a against b, timed in `rounds` alternating rounds of `per_round` calls
// each, after one warm-up call of each: seconds per call of each, and the
// median over rounds of a's time / b's time (a burst of load on a shared
// machine spoils a round, not the ratio).
struct SideBySide {
  double a_s = 0, b_s = 0, ratio = 0;
};
SideBySide time_side_by_side(const std::function<void()>& a, const std::function<void()>& b, int rounds,
                             int per_round) {
  a();
  b();
  auto time = [per_round](const std::function<void()>& f) {
    auto t0 = Clock::now();
    for (int i = 0; i < per_round; ++i) f();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  SideBySide r;
  std::vector<double> ratios;
  for (int k = 0; k < rounds; ++k) {
    double ta = time(a), tb = time(b);
    r.a_s += ta;
    r.b_s += tb;
    ratios.push_back(ta / tb);
  }
  std::sort(ratios.begin(), ratios.end());
  size_t m = ratios.size() / 2;
  r.ratio = ratios.size() % 2 ? ratios[m] : (ratios[m - 1] + ratios[m]) / 2;
  double n = static_cast<double>(rounds) * per_round;
  r.a_s /= n;
  r.b_s /= n;
  return r;
}

struct TrainCase {
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<optim::SGD> opt;
  std::function<void()> step;
  std::map<std::string, int64_t> backward_ops;
};

TrainCase make_train(const BenchFusionOptions& o, int64_t topk, const Tensor& x, const Tensor& y,
                     std::vector<fusion::LayerPair>* pairs) {
  Recipe r = recipe_for(o.model);
  manual_seed(0);
  TrainCase c;
  c.model = models::create(o.model, o.model == "airbench" ? o.width : 1.0);
  c.model->train();
  if (topk > 0) *pairs = fusion::freeze_similar(*c.model, topk);
  c.opt = std::make_unique<optim::SGD>(
      fusion::trainable_parameters(*c.model),
      optim::SGDOptions(r.lr).momentum(r.momentum).weight_decay(r.weight_decay).nesterov(r.nesterov));
  auto* m = c.model.get();
  auto* opt = c.opt.get();
  double ls = r.label_smoothing;
  c.step = [m, opt, ls, x, y] {
    Tensor loss = cross_entropy(m->forward(x), y, ls);
    opt->zero_grad();
    loss.backward();
    opt->step();
  };
  Tensor loss = cross_entropy(m->forward(x), y, ls);
  CountOps count;
  {
    ModeGuard guard(count);
    loss.backward();
  }
  c.backward_ops = count.counts;
  return c;
}

}  // namespace

int run_bench_fusion(const BenchFusionOptions& o) {
  manual_seed(1);
  Tensor x = randn({o.batch, 3, 32, 32});
  Tensor y = randint(0, 10, {o.batch});
  const double imgs = static_cast<double>(o.batch);

  std::vector<fusion::LayerPair> pairs;
  TrainCase plain = make_train(o, 0, x, y, nullptr);
  TrainCase fused = make_train(o, o.topk, x, y, &pairs);
  SideBySide train = time_side_by_side(plain.step, fused.step, o.rounds, o.steps);
  const double tp = train.a_s, tf = train.b_s;

  // fuse_modules: the same weights, eval mode, with trained-looking statistics
  // taken from a few train-mode forwards.
  manual_seed(0);
  auto eval_model = models::create(o.model, o.model == "airbench" ? o.width : 1.0);
  {
    NoGradGuard no_grad;
    for (int i = 0; i < 3; ++i) eval_model->forward(randn({o.batch, 3, 32, 32}));
  }
  eval_model->eval();
  manual_seed(0);
  auto copy = models::create(o.model, o.model == "airbench" ? o.width : 1.0);
  copy->load_state_dict(eval_model->state_dict());
  auto fused_eval = nn::fuse_modules(copy);
  NoGradGuard no_grad;
  Tensor want = eval_model->forward(x);
  fused_eval->forward(x);  // plans the fusion
  Tensor got = fused_eval->forward(x);
  double err = abs(sub(got.to(DType::Float64), want.to(DType::Float64))).amax().item() /
               std::max(abs(want.to(DType::Float64)).amax().item(), 1e-30);
  SideBySide eval = time_side_by_side([&] { eval_model->forward(x); }, [&] { fused_eval->forward(x); }, o.rounds,
                                      o.steps);
  const double ep = eval.a_s, ef = eval.b_s;

  auto bw = [](const TrainCase& c, const char* op) {
    auto it = c.backward_ops.find(op);
    return it == c.backward_ops.end() ? int64_t{0} : it->second;
  };
  int64_t total_plain = 0, total_fused = 0;
  for (auto& [_, n] : plain.backward_ops) total_plain += n;
  for (auto& [_, n] : fused.backward_ops) total_fused += n;
  if (o.json) {
    JsonLine list = JsonLine::array();
    for (const auto& p : pairs) list.push_back({{"a", p.a}, {"b", p.b}, {"cosine", p.cosine}});
    print_json_line({{"model", o.model},
                     {"width", o.width},
                     {"batch", o.batch},
                     {"layer_fusion", {{"topk", o.topk}, {"pairs", list}}},
                     {"backward_weight_kernels", {bw(plain, "conv2d_backward_weight"), bw(fused, "conv2d_backward_weight")}},
                     {"backward_ops", {total_plain, total_fused}},
                     {"train_img_per_s", {imgs / tp, imgs / tf}},
                     {"train_speedup", train.ratio},
                     {"fuse_modules", {{"fused", fused_eval->fused().size()}, {"scaled_error", err}}},
                     {"eval_img_per_s", {imgs / ep, imgs / ef}},
                     {"eval_speedup", eval.ratio}});
    return 0;
  }
  std::printf("%s%s, batch %lld, %d rounds x %d steps each, alternating\n", o.model.c_str(),
              o.model == "airbench" ? (" width " + std::to_string(o.width)).c_str() : "",
              static_cast<long long>(o.batch), o.rounds, o.steps);
  std::printf("layer fusion, top-%lld pairs frozen (the second layer of each):\n", static_cast<long long>(o.topk));
  for (const auto& p : pairs) std::printf("  %s ~ %s  cosine %.6f\n", p.a.c_str(), p.b.c_str(), p.cosine);
  std::printf("  backward conv2d_backward_weight kernels: %lld -> %lld; conv2d_backward_input %lld -> %lld; "
              "all backward ops %lld -> %lld\n",
              static_cast<long long>(bw(plain, "conv2d_backward_weight")),
              static_cast<long long>(bw(fused, "conv2d_backward_weight")),
              static_cast<long long>(bw(plain, "conv2d_backward_input")),
              static_cast<long long>(bw(fused, "conv2d_backward_input")), static_cast<long long>(total_plain),
              static_cast<long long>(total_fused));
  std::printf("  train step (eager, recipe SGD): %.1f -> %.1f img/s, speed-up %.3fx (median of the rounds' ratios)\n",
              imgs / tp, imgs / tf, train.ratio);
  std::printf("fuse_modules (eval forward, eager): %zu fusions, scaled error %.2e\n", fused_eval->fused().size(), err);
  for (const auto& f : fused_eval->fused()) std::printf("  %s\n", f.c_str());
  std::printf("  eval forward: %.1f -> %.1f img/s, speed-up %.3fx (median of the rounds' ratios)\n", imgs / ep,
              imgs / ef, eval.ratio);
  return 0;
}

}  // namespace kiln::cli
