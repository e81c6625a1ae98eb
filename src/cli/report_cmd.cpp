// kiln report: measures each model the way kiln bench models, kiln train and
// kiln explain do (it calls them, in this process), and writes what they
// found as one self-contained HTML page (report_page.h, docs/report.md).
// Progress goes to stderr: a report takes minutes.
//
// Runs that did not happen (a failed or skipped one) are drawn as labelled
// gaps, and the page says why.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/bench_models.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/report_page.h"
#include "compiler/graph/dot.h"
#include "kiln/explain.h"
#include "kiln/kiln.h"
#include "report/markup.h"

namespace kiln::cli {
namespace {

using Clock = std::chrono::steady_clock;
using report::append;

// Epochs and steps per epoch after --quick's defaults.
struct Plan {
  int64_t epochs = 0;
  int64_t steps = 0;  // 0: whole epochs
};

constexpr int64_t kQuickEpochs = 3, kQuickSteps = 70, kFullEpochs = 4;

Plan plan_for(const ReportOptions& o) {
  return {o.epochs > 0 ? o.epochs : (o.quick ? kQuickEpochs : kFullEpochs), o.steps > 0 ? o.steps : (o.quick ? kQuickSteps : 0)};
}

class Progress {
 public:
  void operator()(const std::string& what) const {
    std::fprintf(stderr, "kiln report [%6.1f s] %s\n", seconds(), what.c_str());
    std::fflush(stderr);
  }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }

 private:
  Clock::time_point t0_ = Clock::now();
};

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string width_text(double w) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", w);
  return buf;
}

// --out is checked before anything is measured: a typo must not cost the run.
void check_output_path(const std::string& out) {
  namespace fs = std::filesystem;
  KILN_CHECK(!out.empty(), "report: --out is empty; name the HTML file to write");
  fs::path parent = fs::path(out).parent_path();
  if (parent.empty()) parent = ".";
  std::error_code ec;
  KILN_CHECK(fs::is_directory(parent, ec), "report --out ", out, ": the directory ", parent.string(),
             " does not exist; create it first or write the report elsewhere");
  KILN_CHECK(!fs::is_directory(out, ec), "report --out ", out, " is a directory; name a file in it");
  KILN_CHECK(access(parent.c_str(), W_OK) == 0, "report --out ", out, ": the directory ", parent.string(),
             " is not writable; write the report elsewhere");
}

// Eager first: it is what every compiled mode's speed-up is against.
std::vector<std::string> modes_with_eager_first(const std::vector<std::string>& modes) {
  std::vector<std::string> out = {"eager"};
  for (const std::string& m : modes)
    if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
  return out;
}

std::vector<ModelBenchCase> measure_speed(const ReportOptions& o, const std::string& model, Device dev,
                                          const Progress& progress) {
  BenchModelsOptions b;
  b.width = o.width;
  b.device = o.device;
  b.steps = static_cast<int>(std::min<int64_t>(o.steps, 100000));  // an explicit --steps caps the timed steps too
  std::vector<ModelBenchCase> cases;
  for (const std::string phase : {"train", "eval"})
    for (const std::string& mode : modes_with_eager_first(o.modes)) {
      progress(model + ": timing " + phase + " " + mode + " (kiln bench models)");
      cases.push_back(measure_model_case(b, model, mode, phase, dev));
      const ModelBenchCase& c = cases.back();
      std::string line = model + ": " + phase + " " + mode + ": " + fixed(c.img_per_s, 1) + " img/s";
      if (c.compile_s >= 0) append(line, ", cold compile ", fixed(c.compile_s, 2), " s");
      if (c.warm_s >= 0) append(line, ", warm start ", fixed(c.warm_s, 2), " s");
      progress(line);
    }
  return cases;
}

TrainOptions training_options(const ReportOptions& o, const std::string& model, const Plan& plan) {
  TrainOptions t;
  t.model = model;
  t.width = model == "airbench" ? o.width : 1.0;
  t.data = o.data;
  t.data_dir = o.data_dir;
  t.epochs = plan.epochs;
  t.steps = plan.steps;
  t.workers = o.workers;
  t.device = o.device;
  t.quiet = true;
  return t;
}

struct DataSets {
  data::ImageDataset train, test;
};

TrainingRun run_training(const std::string& label, TrainOptions t, const DataSets& data, const Progress& progress) {
  std::string start;
  append(start, t.model, ": training ", label, " (kiln train, ", std::to_string(t.epochs), " epochs)");
  progress(start);
  t.on_epoch = [&](const EpochRecord& e) {
    std::string line;
    append(line, t.model, ": ", label, " epoch ", std::to_string(e.epoch), "/", std::to_string(t.epochs), ": loss ",
           fixed(e.train_loss, 4), ", test accuracy ", fixed(100 * e.test_acc, 2), " %, ",
           fixed(e.train_img_per_s, 0), " img/s");
    progress(line);
  };
  TrainResult r = train(t, data.train, data.test);
  TrainingRun run;
  run.label = label;
  run.epochs = r.epochs;
  run.train_img_per_s = r.train_img_per_s;
  run.test_acc = r.test_acc;
  return run;
}

// The compiled run beside the eager one: kiln train --compile --mode MODE,
// the same seed, data order and initial weights as the eager run.
TrainingRun compiled_training_run(TrainOptions t, const std::string& mode, const DataSets& data,
                                  const Progress& progress) {
  t.compile.enabled = true;
  t.compile.mode = mode;
  return run_training("compiled (" + mode + ")", t, data, progress);
}

// Layer fusion k = 1..K: kiln train with the k most similar pairs frozen
// (kiln::fusion::freeze_similar, kiln train --layer-fusion-topk k) from the
// first epoch, appended after the k = 0 run (the eager run).
std::vector<TrainingRun> layer_fusion_runs(const ReportOptions& o, const TrainOptions& base, const DataSets& data,
                                           const Progress& progress, std::string* note) {
  std::vector<TrainingRun> runs;
  for (int64_t k = 1; k <= o.layer_fusion_topk; ++k) {
    TrainOptions t = base;
    t.layer_fusion_topk = k;
    t.layer_fusion_at = 0;
    t.layer_fusion_policy = "freeze";
    runs.push_back(run_training("k = " + std::to_string(k), t, data, progress));
  }
  note->clear();
  append(*note, "k = 0 is the eager run above (nothing frozen); each k > 0 run freezes the later layer of each of "
                "the k most similar pairs (cosine similarity of their weights) before the first step, with the same "
                "seed, data order and initial weights.");
  return runs;
}

ModelReport report_model(const ReportOptions& o, const std::string& model, const Plan& plan, Device dev,
                         const DataSets& data, const Progress& progress) {
  ModelReport m;
  m.model = model;
  m.bench = measure_speed(o, model, dev, progress);

  TrainOptions eager = training_options(o, model, plan);
  m.training.push_back(run_training("eager", eager, data, progress));
  for (const std::string& mode : modes_with_eager_first(o.modes))
    if (mode != "eager") m.training.push_back(compiled_training_run(eager, mode, data, progress));

  TrainingRun unfused = m.training.front();
  unfused.label = "k = 0";
  unfused.detail = "none (the eager run)";
  m.layer_fusion.push_back(unfused);
  for (TrainingRun& r : layer_fusion_runs(o, eager, data, progress, &m.layer_fusion_note))
    m.layer_fusion.push_back(std::move(r));

  progress(model + ": compiling one train step for its graph report (kiln explain --train)");
  ExplainCmdOptions e;
  e.model = model;
  e.train = true;
  e.backend = "cpp";  // generated kernels: explain lists what each fused
  m.explain = explain_model(e).json();
  append(m.explain_what, "train step (batch ", std::to_string(e.batch), model == "airbench" ? ", width 1)" : ")");
  return m;
}

std::string command_line(const ReportOptions& o) {
  std::string s = "kiln report --models ";
  for (size_t i = 0; i < o.models.size(); ++i) s += (i ? "," : "") + o.models[i];
  s += " --modes ";
  for (size_t i = 0; i < o.modes.size(); ++i) s += (i ? "," : "") + o.modes[i];
  s += " --device " + o.device + " --data " + o.data;
  if (o.epochs > 0) append(s, " --epochs ", std::to_string(o.epochs));
  if (o.steps > 0) append(s, " --steps ", std::to_string(o.steps));
  if (o.quick) s += " --quick";
  if (o.width != 1.0) append(s, " --width ", width_text(o.width));
  s += " --out " + o.out;
  return s;
}

std::string settings_text(const ReportOptions& o, const Plan& plan) {
  std::string s = std::to_string(plan.epochs) + " epochs";
  if (plan.steps > 0)
    append(s, " of at most ", std::to_string(plan.steps), " steps (and ", std::to_string(plan.steps),
           " test batches of 500)");
  else
    s += " (whole epochs, the whole test set)";
  append(s, " per training run on ", o.data, ", each model with its recipe (docs/training.md)");
  if (std::find(o.models.begin(), o.models.end(), "airbench") != o.models.end())
    append(s, "; airbench at width ", width_text(o.width));
  return s;
}

}  // namespace

int run_report(const ReportOptions& o) {
  // Everything a user can get wrong is checked before minutes of measuring.
  KILN_CHECK(!o.models.empty(), "report: --models is empty; name tutorial, resnet18 or airbench");
  for (const std::string& m : o.models)
    KILN_CHECK(m == "tutorial" || m == "resnet18" || m == "airbench", "report: unknown model '", m,
               "'; use --models with tutorial, resnet18 and/or airbench");
  Device dev = checked_device(o.device, "report");
  check_output_path(o.out);
  const Plan plan = plan_for(o);
  Progress progress;

  progress("loading " + o.data);
  DataSets data;
  load_data_sets(o.data, o.data_dir, "report", data.train, data.test);

  ReportData report;
  report.command = command_line(o);
  report.settings = settings_text(o, plan);
  report.machine = describe_machine(o.device);
  for (size_t i = 0; i < o.models.size(); ++i) {
    std::string line;
    append(line, "model ", std::to_string(i + 1), "/", std::to_string(o.models.size()), ": ", o.models[i]);
    progress(line);
    report.models.push_back(report_model(o, o.models[i], plan, dev, data, progress));
  }
  report.wall_s = progress.seconds();
  compiler::write_file_atomically(o.out, report_html(report), "report --out");
  progress("wrote " + o.out);
  std::printf("kiln report: wrote %s (%.1f s)\n", o.out.c_str(), report.wall_s);
  return kExitOk;
}

}  // namespace kiln::cli
