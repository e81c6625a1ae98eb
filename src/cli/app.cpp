// The kiln command line (CLI11): subcommands, typed options with their
// ranges, --help on each, and the dispatch to src/cli/<command>.cpp.
//
// Numbers are read by kiln's own validators (std::from_chars, decimal only)
// rather than CLI11's conversions, which take 010 as octal, 0x10 as hex and
// let "-1" wrap into an unsigned seed; each validator rejects a fraction, a
// NaN, an infinity or an out-of-range value with the range in its message.
#include <CLI/CLI.hpp>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <new>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "cli/cli.h"
#include "cli/commands.h"
#include "kiln/data.h"
#include "kiln/error.h"

namespace kiln::cli {
namespace {

constexpr int64_t kMaxEpochs = 1'000'000;
constexpr int64_t kMaxWorkers = 256;  // DataLoader threads; more only contend for the cores
constexpr int64_t kMaxThreads = 1024;
constexpr int64_t kMaxReps = 1'000'000;
constexpr double kMaxWidth = 16.0;
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

std::string range_text(int64_t lo, int64_t hi) {
  if (hi == kInt64Max) return "a whole number >= " + std::to_string(lo);
  return "a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
}

// Parses all of `s` as a decimal integer; nullopt on anything else (a sign
// other than '-', a fraction, an exponent, hex, spaces, overflow).
std::optional<int64_t> parse_integer(const std::string& s) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<double> parse_finite(const std::string& s) {
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

CLI::Validator integer_in(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        auto v = parse_integer(s);
        if (!v || *v < lo || *v > hi) return "expected " + range_text(lo, hi) + ", got '" + s + "'";
        return "";
      },
      "", "integer_in");
}

// A finite number > lo (or >= lo when lo_inclusive) and <= hi.
CLI::Validator finite_in(double lo, bool lo_inclusive, double hi, const std::string& range) {
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        auto v = parse_finite(s);
        if (!v || (lo_inclusive ? *v < lo : *v <= lo) || *v > hi)
          return "expected a finite number " + range + ", got '" + s + "'";
        return "";
      },
      "", "finite_in");
}

CLI::Validator one_of(std::vector<std::string> names, const std::string& what) {
  return CLI::Validator(
      [names, what](std::string& s) -> std::string {
        for (const auto& n : names)
          if (s == n) return "";
        std::string list;
        for (size_t i = 0; i < names.size(); ++i) list += (i ? (i + 1 == names.size() ? " or " : ", ") : "") + names[i];
        return "unknown " + what + " '" + s + "'; use " + list;
      },
      "", "one_of");
}

// Options read through the validators above: the callback runs only on a
// value the validator accepted, so the conversion cannot fail.
template <typename Int, typename Set>
CLI::Option* add_integer(CLI::App* app, const std::string& name, Set set, int64_t lo, int64_t hi,
                         const std::string& help) {
  return app
      ->add_option_function<std::string>(
          name, [set](const std::string& s) { set(static_cast<Int>(*parse_integer(s))); }, help)
      ->check(integer_in(lo, hi))
      ->type_name("INT");
}

template <typename Set>
CLI::Option* add_number(CLI::App* app, const std::string& name, Set set, double lo, bool lo_inclusive, double hi,
                        const std::string& range, const std::string& help) {
  return app
      ->add_option_function<std::string>(
          name, [set](const std::string& s) { set(*parse_finite(s)); }, help)
      ->check(finite_in(lo, lo_inclusive, hi, range))
      ->type_name("NUM");
}

// The lookup order of data::find_fashion_mnist_dir, with its default from the
// data library rather than a copy of the path.
std::string fashion_mnist_help() {
  return "directory holding Fashion-MNIST's four IDX files (.gz or plain); looked up in this order: "
         "--data-dir, then $KILN_FASHION_MNIST, then " +
         data::default_fashion_mnist_dir() + " (Debian's dataset-fashion-mnist)";
}

const char* const kEnvironmentHelp =
    "Environment:\n"
    "  KILN_DATA             where CIFAR-10 lives (cifar-10-batches-bin/ inside; default ./data)\n"
    "  KILN_CIFAR10_ARCHIVE  a CIFAR-10 archive to import when KILN_DATA holds none\n"
    "  KILN_FASHION_MNIST    Fashion-MNIST's directory when --data-dir is not given\n"
    "  KILN_PROFILE          train: profile as --profile does, writing the trace to this file\n"
    "Usage errors exit 2, other errors (files, data) exit 1.";

// Everything one command line can ask for; filled by the parse, run by dispatch().
struct Invocation {
  TrainOptions train;
  DemoOptions demo;
  DataOptions data;
  BenchOpsOptions bench_ops;
  BenchModelsOptions bench_models;
  BenchFusionOptions bench_fusion;
  ExplainCmdOptions explain;
  ReportOptions report;
  CacheCmdOptions cache;
  std::string help_topic;  // kiln help COMMAND
  CLI::App* help = nullptr;
  CLI::App* demo_cmd = nullptr;
  CLI::App* train_cmd = nullptr;
  CLI::App* data_import_cmd = nullptr;
  CLI::App* data_get_cmd = nullptr;
  CLI::App* bench_ops_cmd = nullptr;
  CLI::App* bench_models_cmd = nullptr;
  CLI::App* bench_fusion_cmd = nullptr;
  CLI::App* explain_cmd = nullptr;
  CLI::App* report_cmd = nullptr;
  CLI::App* cache_cmd = nullptr;
  CLI::Option* train_width = nullptr;
  CLI::Option* train_data_dir = nullptr;
};

// --device cpu|cuda. A CUDA run on a machine without a GPU (or a build
// without CUDA) is a run-time error (exit 1) with the reason, not a usage error.
void add_device(CLI::App* cmd, std::string& device, const std::string& what) {
  cmd->add_option("--device", device, what + ": cpu or cuda (cuda:0, the first GPU)")
      ->check(one_of({"cpu", "cuda"}, "device"))
      ->type_name("NAME")
      ->default_str(device);
}

// --layer-fusion-topk/-at/-policy (docs/layer-fusion.md).
void add_layer_fusion(CLI::App* t, TrainOptions& o) {
  add_integer<int64_t>(t, "--layer-fusion-topk", [&o](int64_t v) { o.layer_fusion_topk = v; }, 0, kInt64Max,
                       "Layer Fusion: freeze (or tie) one layer of each of the K most similar layer pairs, by the "
                       "cosine similarity of their weights (0: off; docs/layer-fusion.md)")
      ->default_str("0");
  add_integer<int64_t>(t, "--layer-fusion-at", [&o](int64_t v) { o.layer_fusion_at = v; }, 0, kMaxEpochs,
                       "apply Layer Fusion at the start of this epoch, counted from 0 (0: before training)")
      ->default_str("0");
  t->add_option("--layer-fusion-policy", o.layer_fusion_policy,
                "freeze (the later layer of a pair stops training) or tie (it shares the earlier layer's weight)")
      ->check(one_of({"freeze", "tie"}, "layer fusion policy"))
      ->type_name("NAME")
      ->default_str(o.layer_fusion_policy);
}

void add_train(CLI::App& app, Invocation& inv) {
  TrainOptions& o = inv.train;
  CLI::App* t = app.add_subcommand("train", "train a zoo model with its recipe (docs/training.md)");
  inv.train_cmd = t;
  t->add_option("--model", o.model, "tutorial|resnet18|airbench; each has its recipe")
      ->check(one_of({"tutorial", "resnet18", "airbench"}, "model"))
      ->type_name("NAME")
      ->default_str(o.model);
  inv.train_width = add_number(
      t, "--width", [&o](double v) { o.width = v; }, 0.0, false, kMaxWidth, "> 0 and <= 16",
      "airbench's width multiplier, > 0 and <= 16 (airbench only)");
  inv.train_width->default_str("1");
  t->add_option("--data", o.data, "cifar10|fashion-mnist")
      ->check(one_of({"cifar10", "fashion-mnist"}, "data set"))
      ->type_name("NAME")
      ->default_str(o.data);
  inv.train_data_dir = t->add_option("--data-dir", o.data_dir, std::string("with --data fashion-mnist: ") +
                                                                    fashion_mnist_help())
                           ->type_name("DIR");
  add_integer<int64_t>(t, "--epochs", [&o](int64_t v) { o.epochs = v; }, 1, kMaxEpochs,
                       "epochs to train, 1 to " + std::to_string(kMaxEpochs))
      ->default_str("1");
  add_integer<int64_t>(t, "--batch", [&o](int64_t v) { o.batch = v; }, 1, kInt64Max,
                       "batch size, 1 up to the training set's size (default: the recipe's)");
  add_number(
      t, "--lr", [&o](double v) { o.lr = v; }, 0.0, true, std::numeric_limits<double>::max(), ">= 0",
      "peak learning rate, a finite number >= 0 (default: the recipe's; 1e-3 with --opt adamw)");
  t->add_option("--opt", o.opt, "sgd|adamw")
      ->check(one_of({"sgd", "adamw"}, "optimizer"))
      ->type_name("NAME")
      ->default_str(o.opt);
  add_integer<uint64_t>(t, "--seed", [&o](uint64_t v) { o.seed = v; }, 0, kInt64Max,
                        "random seed of the weights, shuffling and augmentation, a whole number >= 0")
      ->default_str("0");
  t->add_option("--save", o.save,
                "after each epoch, write a checkpoint (model, optimizer, epoch) to FILE; its directory must exist")
      ->type_name("FILE");
  t->add_option("--resume", o.resume, "continue from a checkpoint that --save wrote, up to --epochs")
      ->type_name("FILE");
  t->add_option("--save-init", o.save_init, "write the initial weights to FILE before training")->type_name("FILE");
  t->add_option("--init", o.init, "start from the weights in FILE (as --save-init writes them)")->type_name("FILE");
  t->add_flag("--json", o.json, "print one JSON object per epoch and a summary object at the end");
  add_integer<int64_t>(t, "--steps", [&o](int64_t v) { o.steps = v; }, 0, kInt64Max,
                       "cap each epoch at N training steps and evaluate on the first N test batches (0: no cap)")
      ->default_str("0");
  t->add_option("--profile", o.profile,
                "profile the run: write a Chrome trace to FILE (Perfetto, chrome://tracing) and print the per-op "
                "table at the end (docs/profiling.md)")
      ->type_name("FILE");
  add_integer<int>(t, "--workers", [&o](int v) { o.workers = v; }, 0, kMaxWorkers,
                   "data-loading threads, 0 to " + std::to_string(kMaxWorkers) +
                       " (0: batches are assembled in the training thread)")
      ->default_str(std::to_string(o.workers));
  add_device(t, o.device, "where the model trains");
  t->add_option("--autocast", o.autocast,
                "mixed precision: bf16 or fp16 forward passes over float32 weights (fp16 adds loss scaling); "
                "docs/autocast.md")
      ->check(one_of({"bf16", "fp16"}, "autocast dtype"))
      ->type_name("DTYPE");
  t->add_flag("--channels-last", o.channels_last,
              "lay out the batches and the convolution weights channels-last (NHWC; MemoryFormat::ChannelsLast): "
              "on CUDA, convolutions, batch norm, pooling and pointwise ops then run NHWC kernels (docs/cuda.md)");
  t->add_flag("--host-data", o.host_data,
              "with --device cuda: assemble the batches on the host (worker threads) and copy each over, instead of "
              "keeping the data set on the GPU and augmenting there (DataLoaderOptions::device)");
  CLI::Option* compile = t->add_flag("--compile", o.compile.enabled,
                                     "run the train step (forward, loss, backward, optimizer) and the evaluation "
                                     "forward as kiln::compile'd graphs (docs/compile.md)");
  t->add_option("--mode", o.compile.mode, "with --compile: default|reduce-overhead|max-autotune")
      ->check(one_of({"default", "reduce-overhead", "max-autotune"}, "mode"))
      ->needs(compile)
      ->type_name("MODE")
      ->default_str(o.compile.mode);
  t->add_option("--backend", o.compile.backend,
                "with --compile: cpp (generated C++ kernels; the default on the CPU) or interpreter (the graphs on "
                "the eager kernels; the default on CUDA)")
      ->check(one_of({"cpp", "interpreter"}, "backend"))
      ->needs(compile)
      ->type_name("NAME");
  add_layer_fusion(t, o);
  t->footer(kEnvironmentHelp);
}

void add_demo(CLI::App& app, Invocation& inv) {
  DemoOptions& o = inv.demo;
  CLI::App* d = app.add_subcommand(
      "demo", "train the tutorial CNN on CIFAR-10 (else Fashion-MNIST, saying why): test accuracy and images/s");
  inv.demo_cmd = d;
  add_integer<int64_t>(d, "--epochs", [&o](int64_t v) { o.epochs = v; }, 1, kMaxEpochs,
                       "epochs to train, 1 to " + std::to_string(kMaxEpochs))
      ->default_str(std::to_string(o.epochs));
  add_integer<int64_t>(d, "--steps", [&o](int64_t v) { o.steps = v; }, 0, kInt64Max,
                       "cap each epoch at N training steps and evaluate on the first N test batches (0: no cap)")
      ->default_str("0");
  d->add_option("--data-dir", o.data_dir,
                "used when CIFAR-10 is not available: " + fashion_mnist_help())
      ->type_name("DIR");
  d->footer(kEnvironmentHelp);
}

void add_data(CLI::App& app, Invocation& inv) {
  DataOptions& o = inv.data;
  CLI::App* data = app.add_subcommand("data", "put CIFAR-10 into the data directory (official binary layout)");
  data->require_subcommand(1);
  const std::string dataset_help =
      "the data set: cifar10 (Fashion-MNIST comes from Debian's dataset-fashion-mnist package)";
  const std::string dir_help = "the data directory (default: $KILN_DATA, else ./data)";

  CLI::App* imp = data->add_subcommand(
      "import", "write CIFAR-10 from an archive (cifar-10-binary.tar.gz, an image-folder .tar.zst/.tar.gz) or an "
                "image-folder directory (train/ and test/, one folder per class)");
  inv.data_import_cmd = imp;
  imp->add_option("dataset", o.dataset, dataset_help)
      ->required()
      ->check(one_of({"cifar10"}, "data set"))
      ->type_name("NAME");
  imp->add_option("source", o.source, "the archive file or image-folder directory to import")
      ->required()
      ->type_name("FILE|DIR");
  imp->add_option("--dir", o.dir, dir_help)->type_name("DIR");

  CLI::App* get = data->add_subcommand("get", "download the official CIFAR-10 archive, check its MD5, import it");
  inv.data_get_cmd = get;
  get->add_option("dataset", o.dataset, dataset_help)
      ->required()
      ->check(one_of({"cifar10"}, "data set"))
      ->type_name("NAME");
  get->add_option("--dir", o.dir, dir_help)->type_name("DIR");
}

// kiln bench fusion (docs/layer-fusion.md).
void add_bench_fusion(CLI::App* bench, Invocation& inv) {
  BenchFusionOptions& f = inv.bench_fusion;
  CLI::App* c = bench->add_subcommand(
      "fusion", "Layer Fusion's train step and fuse_modules' eval forward against the plain model, side by side");
  inv.bench_fusion_cmd = c;
  c->add_option("--model", f.model, "tutorial|resnet18|airbench (default airbench)")
      ->check(one_of({"tutorial", "resnet18", "airbench"}, "model"))
      ->type_name("NAME");
  c->add_option("--width", f.width, "airbench's width multiplier (default 0.25)")
      ->check(CLI::Range(0.0625, kMaxWidth))
      ->type_name("W");
  add_integer<int64_t>(c, "--batch", [&f](int64_t v) { f.batch = v; }, 1, 65536, "images per step (default 128)");
  add_integer<int64_t>(c, "--layer-fusion-topk", [&f](int64_t v) { f.topk = v; }, 0, 1000000,
                       "layer pairs to freeze (default 2)");
  add_integer<int>(c, "--rounds", [&f](int v) { f.rounds = v; }, 1, 1000, "alternating timing rounds; the speed-up is the median of their ratios (default 11)");
  add_integer<int>(c, "--steps", [&f](int v) { f.steps = v; }, 1, 1000, "calls per round and side (default 2)");
  c->add_flag("--json", f.json, "one JSON object with every figure");
}

void add_bench(CLI::App& app, Invocation& inv) {
  BenchOpsOptions& o = inv.bench_ops;
  CLI::App* bench = app.add_subcommand("bench", "time kiln against its peers (bench/vs_torch.sh drives these)");
  bench->require_subcommand(1);
  CLI::App* ops = bench->add_subcommand("ops", "time the op cases that bench/vs_torch.sh compares with PyTorch");
  inv.bench_ops_cmd = ops;
  ops->add_flag("--json", o.json, "one JSON object per case: {\"case\": ..., \"kiln_ms\": ...}");
  std::vector<std::string> names = bench_ops_case_names();
  ops->add_option("--cases", o.cases, "comma-separated case names (default: all)")
      ->delimiter(',')
      ->check(one_of(names, "case"))
      ->type_name("A,B,...");
  add_integer<int>(ops, "--reps", [&o](int v) { o.reps = v; }, 1, kMaxReps,
                   "timed repetitions per case, 1 to " + std::to_string(kMaxReps) +
                       " (default: adapts to about 1.5 s per case)");
  add_integer<int>(ops, "--threads", [&o](int v) { o.threads = v; }, 1, kMaxThreads,
                   "OpenMP threads, 1 to " + std::to_string(kMaxThreads) + " (default: OMP_NUM_THREADS)");
  ops->add_flag("--list", o.list, "print the case names and what each one times");
  add_device(ops, o.device, "where the cases run");
  std::string footer = "cases:";
  for (const auto& n : names) footer += "\n  " + n;
  ops->footer(footer);

  BenchModelsOptions& m = inv.bench_models;
  CLI::App* models = bench->add_subcommand(
      "models", "images/s of whole zoo models, eager against compiled, with compile and warm-start seconds");
  inv.bench_models_cmd = models;
  models->add_option("--models", m.models, "comma-separated: tutorial,resnet18,airbench (default: all three)")
      ->delimiter(',')
      ->check(one_of({"tutorial", "resnet18", "airbench"}, "model"))
      ->type_name("A,B,...");
  models->add_option("--modes", m.modes, "comma-separated: eager,default,reduce-overhead,max-autotune,bf16 "
                                         "(default: eager,default; the speed-up is against eager; bf16 is the "
                                         "default compile under bf16 autocast, also set against default)")
      ->delimiter(',')
      ->check(one_of({"eager", "default", "reduce-overhead", "max-autotune", "bf16"}, "mode"))
      ->type_name("A,B,...");
  models->add_option("--phases", m.phases, "comma-separated: train (a recipe SGD step), eval (a forward)")
      ->delimiter(',')
      ->check(one_of({"train", "eval"}, "phase"))
      ->type_name("A,B,...");
  add_integer<int64_t>(models, "--batch", [&m](int64_t v) { m.batch = v; }, 1, 65536, "images per step (default 128)");
  add_integer<int>(models, "--steps", [&m](int v) { m.steps = v; }, 1, 100000,
                   "at most this many timed steps per case (default: about 2 s of steps)");
  add_integer<int>(models, "--rounds", [&m](int v) { m.rounds = v; }, 1, 1000,
                   "> 1: time the modes of each model and phase in this many alternating rounds, side by side in one "
                   "process (about 0.5 s or --steps steps per mode and round); img/s is the median round and the "
                   "speed-up the median of the rounds' ratios (default 1: each case alone, one after the other)");
  models->add_option("--width", m.width, "airbench's width multiplier (default 1)")
      ->check(CLI::Range(0.0625, kMaxWidth))
      ->type_name("W");
  models->add_flag("--json", m.json,
                   "one JSON object per case: {\"model\",\"mode\",\"phase\",\"img_per_s\",\"compile_s\",\"warm_s\",...}");
  models->add_flag("--no-warm", m.no_warm, "skip the warm start (a second process on the warm kernel cache)");
  models->add_flag("--first-call-only", m.first_call_only, "time only the first call (how the warm start is measured)")
      ->group("");
  models->add_option("--backend", m.backend, "what the compiled modes run on: cpp (generated kernels, default) or "
                                             "interpreter (the eager kernels op by op)")
      ->check(one_of({"cpp", "interpreter"}, "backend"))
      ->type_name("NAME");
  add_device(models, m.device, "where the models run");
  models->add_option("--autocast", m.autocast, "mixed precision: the forward and loss in bf16 or fp16 (float32 weights)")
      ->check(one_of({"bf16", "fp16"}, "autocast dtype"))
      ->type_name("DTYPE");
  models->add_flag("--channels-last", m.channels_last,
                   "the batch and the convolution weights channels-last (NHWC; MemoryFormat::ChannelsLast)");
  add_bench_fusion(bench, inv);
}

void add_explain(CLI::App& app, Invocation& inv) {
  ExplainCmdOptions& o = inv.explain;
  CLI::App* e = app.add_subcommand(
      "explain", "compile a zoo model and show its graphs, graph breaks, guards and op counts (docs/explain.md)");
  inv.explain_cmd = e;
  e->add_option("--model", o.model, "tutorial|resnet18|airbench")
      ->check(one_of({"tutorial", "resnet18", "airbench"}, "model"))
      ->type_name("NAME")
      ->default_str(o.model);
  e->add_option("--backend", o.backend, "cpp (generated, fused kernels, kiln::compile's default: lists each fused "
                                        "kernel, its ops and the bytes it does not write) or interpreter (each op on "
                                        "its eager kernel)")
      ->check(one_of({"cpp", "interpreter"}, "backend"))
      ->type_name("NAME")
      ->default_str(o.backend);
  e->add_flag("--train", o.train,
              "compile one whole train step (loss, zero_grad, backward, SGD step with the model's recipe) and call "
              "it twice, instead of the eval-mode forward");
  add_integer<int64_t>(e, "--batch", [&o](int64_t v) { o.batch = v; }, 1, 4096, "batch size, 1 to 4096")
      ->default_str(std::to_string(o.batch));
  e->add_option("--html", o.html, "also write a self-contained HTML page (graphs drawn as SVG) to FILE")
      ->type_name("FILE");
  e->add_flag("--json", o.json, "print the report as one JSON object on stdout instead of the summary");
  e->add_flag("--dynamic", o.dynamic, "compile with dynamic=true: the batch size is a symbol");
  e->add_flag("--executable", o.executable,
              "print each graph as it runs (after functionalization and the passes: fused batch norms and "
              "convolutions, nChw16c layouts) instead of as captured");
  e->add_option("--mode", o.mode, "the compile mode: default, reduce-overhead or max-autotune (the convolutions' "
                                  "algorithms timed per layer; the list of convolutions shows the choices)")
      ->check(one_of({"default", "reduce-overhead", "max-autotune"}, "mode"))
      ->type_name("MODE")
      ->default_str(o.mode);
  e->add_option("--autocast", o.autocast,
                "mixed precision: the forward (and loss) in bf16 or fp16, as kiln train --autocast; the list of "
                "convolutions shows which layers run in bfloat16")
      ->check(one_of({"bf16", "fp16"}, "autocast dtype"))
      ->type_name("DTYPE");
}

void add_report(CLI::App& app, Invocation& inv) {
  ReportOptions& o = inv.report;
  CLI::App* r = app.add_subcommand(
      "report", "measure eager against compiled, training curves and the compiled graphs of zoo models and write "
                "them as one self-contained HTML page with SVG charts (docs/report.md)");
  inv.report_cmd = r;
  r->add_option("--models", o.models, "comma-separated: tutorial,resnet18,airbench (default: tutorial,airbench)")
      ->delimiter(',')
      ->check(one_of({"tutorial", "resnet18", "airbench"}, "model"))
      ->type_name("A,B,...");
  r->add_option("--modes", o.modes, "compiled modes to measure beside eager: default,reduce-overhead,max-autotune "
                                    "(default: eager,default)")
      ->delimiter(',')
      ->check(one_of({"eager", "default", "reduce-overhead", "max-autotune"}, "mode"))
      ->type_name("A,B,...");
  add_device(r, o.device, "where the models run");
  r->add_option("--data", o.data, "what the training runs learn: cifar10|fashion-mnist")
      ->check(one_of({"cifar10", "fashion-mnist"}, "data set"))
      ->type_name("NAME")
      ->default_str(o.data);
  r->add_option("--data-dir", o.data_dir, std::string("with --data fashion-mnist: ") + fashion_mnist_help())
      ->type_name("DIR");
  add_integer<int64_t>(r, "--epochs", [&o](int64_t v) { o.epochs = v; }, 1, kMaxEpochs,
                       "epochs per training run (default: 3 with --quick, else 4)");
  add_integer<int64_t>(r, "--steps", [&o](int64_t v) { o.steps = v; }, 1, kInt64Max,
                       "cap each training epoch at N steps, each evaluation at N test batches and each timed bench "
                       "case at N steps (default: 70 training steps with --quick, else no cap)");
  r->add_flag("--quick", o.quick, "a few hundred steps per training run (3 epochs of 70 steps): minutes, not hours");
  add_number(
       r, "--width", [&o](double v) { o.width = v; }, 0.0, false, kMaxWidth, "> 0 and <= 16",
       "airbench's width multiplier (default 1)");
  add_integer<int64_t>(r, "--layer-fusion-topk", [&o](int64_t v) { o.layer_fusion_topk = v; }, 0, 64,
                       "K of the layer-fusion section: runs with k = 0..K similar layer pairs frozen")
      ->default_str(std::to_string(o.layer_fusion_topk));
  add_integer<int>(r, "--workers", [&o](int v) { o.workers = v; }, 0, kMaxWorkers, "data-loading threads")
      ->default_str(std::to_string(o.workers));
  r->add_option("--out", o.out, "the HTML file to write (atomically; its directory must exist)")
      ->type_name("FILE")
      ->default_str(o.out);
  r->footer(kEnvironmentHelp);
}

void add_cache(CLI::App& app, Invocation& inv) {
  CLI::App* c = app.add_subcommand(
      "cache", "show (--info, the default) or empty (--clear) the compiled-kernel cache (docs/kernel-cache.md)");
  inv.cache_cmd = c;
  CLI::Option* info = c->add_flag("--info", inv.cache.info, "print the cache directory and what it holds");
  c->add_flag("--clear", inv.cache.clear, "delete every compiled kernel; later runs compile again")->excludes(info);
  c->footer("Environment:\n  KILN_CACHE_DIR  the cache directory (default $XDG_CACHE_HOME/kiln, else ~/.cache/kiln)");
}

void build(CLI::App& app, Invocation& inv) {
  app.description("kiln: a deep-learning framework in C++; train, evaluate and benchmark from the command line");
  app.require_subcommand(1);
  add_demo(app, inv);
  add_train(app, inv);
  add_data(app, inv);
  add_bench(app, inv);
  add_explain(app, inv);
  add_report(app, inv);
  add_cache(app, inv);
  inv.help = app.add_subcommand("help", "print this text, or with a COMMAND that command's options");
  inv.help->add_option("command", inv.help_topic, "demo|train|data|bench|explain|report|cache")
      ->check(one_of({"demo", "train", "data", "bench", "explain", "report", "cache"}, "command"))
      ->type_name("COMMAND");
  app.footer(std::string("Run 'kiln COMMAND --help' for a command's options.\n") + kEnvironmentHelp);
}

// Rules that involve more than one option; parse errors like the rest.
void check_combinations(const Invocation& inv) {
  if (inv.train_cmd->parsed()) {
    const TrainOptions& o = inv.train;
    if (inv.train_data_dir->count() > 0 && o.data != "fashion-mnist")
      throw CLI::ValidationError("--data-dir", "names Fashion-MNIST's directory and needs --data fashion-mnist; "
                                               "CIFAR-10 is found through $KILN_DATA");
    if (inv.train_width->count() > 0 && o.model != "airbench" && o.width != 1.0)
      throw CLI::ValidationError("--width", "applies only to --model airbench, not to '" + o.model + "'");
  }
}

// The deepest command the parse reached ("kiln train", "kiln bench ops").
const CLI::App* deepest_command(const CLI::App* app, std::string* path) {
  *path = app->get_name();
  for (;;) {
    auto subs = app->get_subcommands();
    if (subs.empty()) return app;
    app = subs.front();
    *path += " " + app->get_name();
  }
}

std::string usage_message(const CLI::App* app, const CLI::Error& e) {
  std::string path;
  const CLI::App* command = deepest_command(app, &path);
  std::string what = e.what();
  // "kiln frobnicate": CLI11 reports the missing subcommand; name the word it did not know.
  std::vector<std::string> rest = command->remaining();
  if (command->get_require_subcommand_min() > 0 && !rest.empty()) {
    what = "unknown command '" + rest.front() + "'; use";
    auto subs = command->get_subcommands([](const CLI::App*) { return true; });
    for (size_t i = 0; i < subs.size(); ++i) what += (i ? ", " : " ") + subs[i]->get_name();
  }
  return path + ": " + what + "\nRun '" + path + " --help' for more information.\n";
}

std::vector<const char*> with_program_name(int argc, const char* const* argv) {
  std::vector<const char*> args;
  if (argc < 1 || argv == nullptr || argv[0] == nullptr) args.push_back("kiln");
  for (int i = 0; argv != nullptr && i < argc; ++i) args.push_back(argv[i] != nullptr ? argv[i] : "");
  return args;
}

int dispatch(const Invocation& inv, const CLI::App& app) {
  if (inv.help->parsed()) {
    if (!inv.help_topic.empty()) {
      std::cout << app.get_subcommand(inv.help_topic)->help(app.get_name());
      return kExitOk;
    }
    // app.help() would describe the selected subcommand, "help" itself.
    std::cout << app.get_formatter()->make_help(&app, app.get_name(), CLI::AppFormatMode::Normal);
    return kExitOk;
  }
  if (inv.demo_cmd->parsed()) return run_demo(inv.demo);
  if (inv.train_cmd->parsed()) return run_train(inv.train);
  if (inv.data_import_cmd->parsed()) return run_data_import(inv.data);
  if (inv.data_get_cmd->parsed()) return run_data_get(inv.data);
  if (inv.bench_ops_cmd->parsed()) return run_bench_ops(inv.bench_ops);
  if (inv.bench_models_cmd->parsed()) return run_bench_models(inv.bench_models);
  if (inv.bench_fusion_cmd->parsed()) return run_bench_fusion(inv.bench_fusion);
  if (inv.explain_cmd->parsed()) return run_explain(inv.explain);
  if (inv.report_cmd->parsed()) return run_report(inv.report);
  if (inv.cache_cmd->parsed()) return run_cache(inv.cache);
  KILN_ASSERT(false, "the parse chose no command");
}

}  // namespace

int parse_only(int argc, const char* const* argv, std::string* message) {
  Invocation inv;
  CLI::App app{"", "kiln"};
  build(app, inv);
  std::vector<const char*> args = with_program_name(argc, argv);
  try {
    app.parse(static_cast<int>(args.size()), args.data());
    check_combinations(inv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return kExitOk;  // --help
    if (message) *message = usage_message(&app, e);
    return kExitUsage;
  }
  return kExitOk;
}

int run(int argc, const char* const* argv) {
  Invocation inv;
  CLI::App app{"", "kiln"};
  build(app, inv);
  app.failure_message(usage_message);
  std::vector<const char*> args = with_program_name(argc, argv);
  try {
    app.parse(static_cast<int>(args.size()), args.data());
    check_combinations(inv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == static_cast<int>(CLI::ExitCodes::Success) ? kExitOk : kExitUsage;
  }
  try {
    return dispatch(inv, app);
  } catch (const Error& e) {
    std::cout.flush();
    std::cerr << "kiln " << e.what() << "\n";
    return kExitError;
  } catch (const std::bad_alloc&) {
    std::cerr << "kiln: out of memory; try a smaller --batch, --width or fewer --workers\n";
    return kExitError;
  }
}

}  // namespace kiln::cli
