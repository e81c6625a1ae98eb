// The kiln program's subcommands, one file each. src/cli/app.cpp fills the
// options from the command line (CLI11, with the range checks) and calls these.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cli/train.h"
#include "kiln/device.h"

namespace kiln {
struct ExplainReport;  // kiln/explain.h
}

namespace kiln::cli {

struct DemoOptions {
  int64_t epochs = 2;
  int64_t steps = 0;     // > 0: cap on training steps per epoch and eval batches
  std::string data_dir;  // Fashion-MNIST for the fallback; empty: data::find_fashion_mnist_dir's order
};

struct DataOptions {
  std::string dataset = "cifar10";
  std::string source;  // import: an archive file or an image-folder directory
  std::string dir;     // empty: $KILN_DATA, else ./data
};

struct BenchOpsOptions {
  bool json = false, list = false;
  int reps = 0, threads = 0;  // 0: adaptive repetitions / OMP_NUM_THREADS
  std::vector<std::string> cases;
  std::string device = "cpu";  // cpu | cuda
};

struct BenchModelsOptions {
  std::vector<std::string> models = {"tutorial", "resnet18", "airbench"};
  std::vector<std::string> modes = {"eager", "default"};  // eager | default | reduce-overhead | max-autotune
  std::vector<std::string> phases = {"train", "eval"};
  int64_t batch = 128;
  int steps = 0;  // > 0: at most this many timed steps per case (default: about 2 s); per round with rounds > 1
  int rounds = 1;  // > 1: the modes of a model and phase timed in alternating rounds (medians; bench_models.cpp)
  double width = 1.0;  // airbench's
  bool json = false;
  bool no_warm = false;          // skip the warm-start process
  bool first_call_only = false;  // internal: the warm-start probe
  std::string device = "cpu";
  std::string backend = "cpp";  // what compiled modes run on: cpp (generated kernels) | interpreter
  std::string autocast;         // "" | bf16 | fp16: the forward and loss under kiln::autocast
  bool channels_last = false;   // the batch and the 4-d weights in MemoryFormat::ChannelsLast
};

// kiln bench fusion (src/cli/bench_fusion.cpp, docs/layer-fusion.md).
struct BenchFusionOptions {
  std::string model = "airbench";
  double width = 0.25;  // airbench's
  int64_t batch = 128;
  int64_t topk = 2;     // Layer Fusion pairs frozen
  int rounds = 11;      // alternating timing rounds (the speed-up is their median ratio)
  int steps = 2;        // calls per round and side
  bool json = false;
};

struct ExplainCmdOptions {
  std::string model = "tutorial";
  bool train = false;  // a whole train step instead of the eval forward
  int64_t batch = 8;
  std::string html;    // write the HTML report here
  bool json = false;
  bool dynamic = false;
  std::string backend = "cpp";  // cpp (lists the fused kernels) | interpreter; kiln::compile's default
  std::string mode = "default";         // the compile mode (max-autotune: tuned convolutions)
  std::string autocast;                 // "", "bf16" or "fp16": the forward (and loss) in that dtype
  bool executable = false;              // print the graphs as they run (after the passes), not as captured
};

struct ReportOptions {
  std::vector<std::string> models = {"tutorial", "airbench"};
  std::vector<std::string> modes = {"eager", "default"};  // the bench section's modes (eager is always first)
  std::string device = "cpu";
  std::string data = "cifar10";  // cifar10 | fashion-mnist: what the training runs learn
  std::string data_dir;          // Fashion-MNIST's directory (as kiln train --data-dir)
  int64_t epochs = 0;   // 0: 3 with --quick, else 4
  int64_t steps = 0;    // > 0: training steps per epoch (and eval batches, timed bench steps); 0: --quick's 70 or all
  bool quick = false;   // a few hundred steps per run: the whole report in minutes
  double width = 1.0;   // airbench's
  int64_t layer_fusion_topk = 2;  // the layer-fusion section's K (runs k = 0..K)
  int workers = 2;
  std::string out = "report.html";
};

struct CacheCmdOptions {
  bool info = false;   // the default anyway
  bool clear = false;
};

// kiln cache [--info] | --clear: the compiled-kernel cache (docs/kernel-cache.md).
int run_cache(const CacheCmdOptions& o);
// kiln demo: the tutorial CNN trained on CIFAR-10 (or Fashion-MNIST), accuracy and images/s.
int run_demo(const DemoOptions& o);
// kiln train --model ... --data ... (see docs/training.md).
int run_train(const TrainOptions& o);
// kiln data import cifar10 FILE|DIR / kiln data get cifar10.
int run_data_import(const DataOptions& o);
int run_data_get(const DataOptions& o);
// kiln bench ops: times the op cases of bench/vs_torch.sh.
int run_bench_ops(const BenchOpsOptions& o);
// kiln bench models: images/s of the zoo models, eager and compiled, with compile and warm-start times.
int run_bench_models(const BenchModelsOptions& o);
// kiln report: eager against compiled, training curves, layer fusion, the compiled graphs,
// the machine, as one self-contained HTML page (docs/report.md).
int run_report(const ReportOptions& o);
// kiln bench fusion: Layer Fusion's train step and fuse_modules' eval forward against the plain model.
int run_bench_fusion(const BenchFusionOptions& o);
// kiln explain --model ...: what kiln::compile makes of a zoo model (docs/explain.md).
int run_explain(const ExplainCmdOptions& o);
// What kiln explain reports for o (the report without the printing; kiln report's graph section).
ExplainReport explain_model(const ExplainCmdOptions& o);
// The device a --device NAME names, checked: a CUDA device must be usable
// (else kiln::Error naming `command`, the reason, and --device cpu).
Device checked_device(const std::string& name, const char* command);
// The names of the bench ops cases, in order (for --cases and --help).
std::vector<std::string> bench_ops_case_names();

}  // namespace kiln::cli
