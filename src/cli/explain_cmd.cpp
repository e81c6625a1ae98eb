// kiln explain: compiles a zoo model's eval forward, or with --train one
// whole train step, and prints what kiln::explain reports (docs/explain.md):
// the summary, one JSON object (--json), and/or an HTML page (--html).
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/maybe_autocast.h"
#include "compiler/capture/precision_trial.h"
#include "compiler/explain/html.h"
#include "kiln/explain.h"
#include "kiln/kiln.h"

namespace kiln::cli {
namespace {

// Calls of the compiled function: at least two (the second replays the
// first's graph); under bf16 autocast until capture's precision trial has
// chosen between the graph autocast wrote and its float32 version
// (compiler/capture/precision_trial.h), which explain then shows.
int calls_for(const ExplainCmdOptions& o) {
  return o.autocast.empty() ? 2 : std::max(2, compiler::PrecisionTrial::kRuns);
}

ExplainReport explain_train_step(const ExplainCmdOptions& o, const ExplainOptions& eo) {
  Recipe r = recipe_for(o.model);
  auto model = models::create(o.model);
  model->train();
  optim::SGD opt(model->parameters(),
                 optim::SGDOptions(r.lr).momentum(r.momentum).weight_decay(r.weight_decay).nesterov(r.nesterov));
  Tensor x = randn({o.batch, 3, 32, 32});
  Tensor y = randint(0, 10, {o.batch});
  auto step = [&](const Tensor& xb, const Tensor& yb) {
    Tensor loss;
    {
      MaybeAutocast amp(o.autocast);
      loss = cross_entropy(model->forward(xb), yb, r.label_smoothing);
    }
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss;
  };
  // Two calls: the second replays the graph the first recorded (the
  // optimizer state exists before the first step, so both run the same ops).
  return explain(ExplainOptions(eo).calls(calls_for(o)), step, x, y);
}

ExplainReport explain_forward(const ExplainCmdOptions& o, const ExplainOptions& eo) {
  recipe_for(o.model);  // validates the name as train does
  auto model = models::create(o.model);
  model->eval();
  NoGradGuard inference;
  Tensor x = randn({o.batch, 3, 32, 32});
  if (o.autocast.empty()) return explain(eo, model, x);
  // The scope inside the compiled function: capture records the casts (a
  // compiled function called inside a scope is an error).
  auto forward = [&model, &o](const Tensor& xb) {
    MaybeAutocast amp(o.autocast);
    return model->forward(xb);
  };
  return explain(ExplainOptions(eo).calls(calls_for(o)), forward, x);
}

}  // namespace

ExplainReport explain_model(const ExplainCmdOptions& o) {
  manual_seed(0);
  ExplainOptions eo;
  eo.compile(CompileOptions().dynamic(o.dynamic).backend(o.backend).mode(o.mode).name(o.model + (o.train ? "_train_step" : "_forward")));
  return o.train ? explain_train_step(o, eo) : explain_forward(o, eo);
}

int run_explain(const ExplainCmdOptions& o) {
  if (!o.html.empty()) {
    // Checked before compiling, as train checks its output paths before training.
    std::filesystem::path dir = std::filesystem::path(o.html).parent_path();
    KILN_CHECK(dir.empty() || std::filesystem::is_directory(dir), "explain --html ", o.html, ": the directory ",
               dir.string(), " does not exist; create it or write the page elsewhere");
  }
  const std::string what = o.train ? "train step" : "eval forward";
  ExplainReport report = explain_model(o);
  const std::string title = o.model + ", " + what + ", batch " + std::to_string(o.batch);
  if (!o.html.empty()) compiler::write_explain_html(report, title, o.html);

  if (o.json) {
    nlohmann::json j = report.json();
    j["model"] = o.model;
    j["train"] = o.train;
    j["batch"] = o.batch;
    j["dynamic"] = o.dynamic;
    std::cout << j.dump() << "\n" << std::flush;
    if (!o.html.empty()) std::cerr << "kiln explain: wrote " << o.html << "\n";
    return kExitOk;
  }
  std::cout << "kiln explain: " << title;
  if (o.train) {
    std::cout << " (forward, backward and the SGD update captured together; called twice";
    if (report.variants > 1)
      std::cout << "; " << report.variants << " variants: the second call took other ops than the first (all are shown)";
    else
      std::cout << "; one graph: the second call replayed the first's";
    std::cout << ")";
  }
  std::cout << "\n" << report.str(o.executable);
  if (!o.html.empty()) std::cout << "\nHTML report: " << o.html << "\n";
  return kExitOk;
}

}  // namespace kiln::cli
