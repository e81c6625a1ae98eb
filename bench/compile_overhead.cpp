// What kiln::compile's replay and guards cost on the interpreter backend
// (issue 8: ResNet-18 eval at batch 1 at most 5% of the eager step, an
// airbench train step at batch 128 at most 1%):
//   - eager: the step run op by op;
//   - compiled: a call of the compiled function (replaying the recorded
//     variant: guards, the per-op check, placeholders, the graph's run);
//   - graph: the part of that same call spent in Interpreter::run
//     (CompiledState::time_graph_runs);
//   - overhead = compiled - graph, as a share of the eager step.
// Eager and compiled steps alternate so both see the same machine load; the
// overhead is measured within each compiled call, so load moves it little.
//   build/bench/compile_overhead [--resnet-steps N] [--airbench-steps N] [--width W]
#include <algorithm>
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "compiler/capture/compiled_state.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"

#include "bench_util.h"

namespace {

using namespace kiln;
using Clock = std::chrono::steady_clock;
using bench::median;
using bench::min_of;


struct Args {
  int resnet_steps = 20;
  int airbench_steps = 3;
  double width = 1.0;
};

Args parse(int argc, char** argv) {
  Args a;
  CLI::App app("compile_overhead: what kiln::compile's replay and guards cost (issue 8)");
  app.add_option("--resnet-steps", a.resnet_steps, "ResNet-18 eval steps at batch 1")->check(CLI::PositiveNumber);
  app.add_option("--airbench-steps", a.airbench_steps, "airbench train steps at batch 128")->check(CLI::PositiveNumber);
  app.add_option("--width", a.width, "airbench width")->check(CLI::PositiveNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e));
  }
  return a;
}

struct Result {
  std::string name;
  int steps = 0;
  size_t ops = 0;  // recorded op calls replayed per compiled call
  std::vector<double> eager_ms, compiled_ms, graph_ms, overhead_ms;
  int variants = 0;

  double pct_median() const { return 100 * median(overhead_ms) / median(eager_ms); }
  double pct_min() const { return 100 * min_of(overhead_ms) / min_of(eager_ms); }
};

double timed_ms(const std::function<void()>& body) {
  Clock::time_point t = Clock::now();
  body();
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Alternates eager and compiled steps; `compiled_state` is the compiled
// function's state (its graph runs are timed). Warm-up first: an eager step
// (allocator cache, oneDNN primitives) and two compiled calls (the trace,
// and the variant a train step's second call records once the optimizer
// state exists).
Result measure(const std::string& name, int steps, const std::function<void()>& eager,
               const std::function<void()>& compiled, const compiler::CompiledState& compiled_state) {
  auto& st = const_cast<compiler::CompiledState&>(compiled_state);
  eager();
  compiled();
  compiled();
  Result r;
  r.name = name;
  r.steps = steps;
  st.time_graph_runs = true;
  for (int i = 0; i < steps; ++i) {
    r.eager_ms.push_back(timed_ms(eager));
    st.graph_run_ns = 0;
    double c = timed_ms(compiled);
    double g = 1e-6 * static_cast<double>(st.graph_run_ns);
    r.compiled_ms.push_back(c);
    r.graph_ms.push_back(g);
    r.overhead_ms.push_back(c - g);
  }
  st.time_graph_runs = false;
  r.variants = compiled_state.stats.variants;
  for (const auto& seg : compiled_state.variants.back()->segments) r.ops += seg->calls.size();
  return r;
}

void print_table(const std::vector<Result>& rs) {
  std::printf("%-22s %6s %5s | %10s %10s %10s %10s | %8s %8s | %8s\n", "case", "steps", "ops", "eager ms",
              "compiled", "graph", "overhead", "% eager", "% (min)", "ns/op");
  for (const Result& r : rs) {
    std::printf("%-22s %6d %5zu | %10.3f %10.3f %10.3f %10.4f | %7.3f%% %7.3f%% | %8.0f\n", r.name.c_str(), r.steps,
                r.ops, median(r.eager_ms), median(r.compiled_ms), median(r.graph_ms), median(r.overhead_ms),
                r.pct_median(), r.pct_min(), r.ops ? 1e6 * median(r.overhead_ms) / static_cast<double>(r.ops) : 0.0);
  }
  std::printf("(medians over the steps; %% (min): the fastest overhead over the fastest eager step)\n");
  for (const Result& r : rs)
    if (r.variants > 2) std::printf("warning: %s recorded %d variants\n", r.name.c_str(), r.variants);
}

void print_json(const std::vector<Result>& rs, const char* threads) {
  std::printf("{\"bench\":\"compile_overhead\",\"omp_num_threads\":\"%s\",\"cases\":[", threads ? threads : "");
  for (size_t i = 0; i < rs.size(); ++i) {
    const Result& r = rs[i];
    std::printf(
        "%s{\"name\":\"%s\",\"steps\":%d,\"ops\":%zu,\"variants\":%d,\"eager_ms\":%.4f,\"eager_ms_min\":%.4f,"
        "\"compiled_ms\":%.4f,\"graph_ms\":%.4f,\"overhead_ms\":%.4f,\"overhead_ms_min\":%.4f,"
        "\"overhead_pct\":%.4f,\"overhead_pct_min\":%.4f}",
        i ? "," : "", r.name.c_str(), r.steps, r.ops, r.variants, median(r.eager_ms), min_of(r.eager_ms),
        median(r.compiled_ms), median(r.graph_ms), median(r.overhead_ms), min_of(r.overhead_ms), r.pct_median(),
        r.pct_min());
  }
  std::printf("]}\n");
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  try {
    std::vector<Result> results;
    {
      // (a) ResNet-18 inference: eval mode, batch 1, no autograd.
      manual_seed(0);
      auto model = models::resnet18();
      model->eval();
      auto compiled = compile(model, CompileOptions().fullgraph(true).name("resnet18_eval"));
      Tensor x = randn({1, 3, 32, 32});
      Tensor sink;
      NoGradGuard no_grad;
      results.push_back(measure(
          "resnet18 eval b1", a.resnet_steps, [&] { sink = model->forward(x); }, [&] { sink = compiled(x); },
          compiled.state()));
    }
    {
      // (b) The airbench train step of `kiln train --model airbench` (SGD
      // nesterov, weight decay, label smoothing 0.2), compiled whole: one graph.
      manual_seed(0);
      auto model_eager = models::airbench(a.width);
      manual_seed(0);
      auto model_compiled = models::airbench(a.width);
      model_eager->train();
      model_compiled->train();
      auto sgd = optim::SGDOptions(0.2).momentum(0.9).weight_decay(5e-4).nesterov(true);
      optim::SGD opt_eager(model_eager->parameters(), sgd), opt_compiled(model_compiled->parameters(), sgd);
      auto step = [](nn::Module& m, optim::Optimizer& opt, const Tensor& x, const Tensor& y) {
        Tensor loss = cross_entropy(m.forward(x), y, 0.2);
        opt.zero_grad();
        loss.backward();
        opt.step();
        return loss;
      };
      auto compiled = compile([&](const Tensor& x, const Tensor& y) { return step(*model_compiled, opt_compiled, x, y); },
                              CompileOptions().fullgraph(true).name("airbench_train"));
      Tensor x = randn({128, 3, 32, 32}), y = randint(0, 10, {128});
      Tensor sink;
      results.push_back(measure(
          "airbench train b128", a.airbench_steps, [&] { sink = step(*model_eager, opt_eager, x, y); },
          [&] { sink = compiled(x, y); }, compiled.state()));
    }
    print_table(results);
    print_json(results, std::getenv("OMP_NUM_THREADS"));
  } catch (const Error& e) {
    std::fprintf(stderr, "compile_overhead: %s\n", e.what());
    return 1;
  }
  return 0;
}
