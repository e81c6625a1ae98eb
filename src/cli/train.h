// The training loop behind `kiln train` and `kiln demo`: a model from the zoo,
// a data set, a recipe (docs/training.md), progress, evaluation, checkpoints.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cli/train_step.h"
#include "kiln/data.h"

namespace kiln::cli {

// One finished epoch: what `kiln train --json` prints per epoch (kiln report draws them).
struct EpochRecord {
  int64_t epoch = 0;  // 1-based
  double train_loss = 0, test_acc = 0, train_img_per_s = 0, eval_img_per_s = 0, train_s = 0;
};

struct TrainOptions {
  std::string model = "tutorial";
  double width = 1.0;
  std::string data = "cifar10";  // cifar10 | fashion-mnist
  int64_t epochs = 1;
  std::optional<int64_t> batch;   // unset: the recipe's
  std::optional<double> lr;       // unset: the recipe's (or 1e-3 for adamw)
  std::string opt = "sgd";        // sgd | adamw
  uint64_t seed = 0;
  std::string save, resume, save_init, init;
  bool json = false;
  int64_t steps = 0;  // > 0: cap on training steps per epoch and eval batches
  int workers = 2;
  std::string data_dir;  // Fashion-MNIST's directory; empty: data::find_fashion_mnist_dir's order
  std::string profile;   // Chrome trace file; empty: $KILN_PROFILE, else no profile
  std::string device = "cpu";  // cpu | cuda: where the model, the batches and the steps live
  std::string autocast;        // "" (float32) | bf16 | fp16: mixed precision (docs/autocast.md)
  bool channels_last = false;  // images and 4-d weights laid out NHWC (MemoryFormat::ChannelsLast)
  bool host_data = false;      // --device cuda: batches assembled on the host and copied (else resident on the GPU)
  CompileChoice compile;       // --compile [--mode M] [--backend B]
  bool quiet = false;          // print nothing on stdout (a caller such as kiln report shows its own progress)
  std::function<void(const EpochRecord&)> on_epoch;  // called after each epoch's evaluation
  // Layer Fusion (docs/layer-fusion.md): at the start of epoch layer_fusion_at,
  // freeze_similar(model, layer_fusion_topk, policy); topk 0: off.
  int64_t layer_fusion_topk = 0;
  int64_t layer_fusion_at = 0;
  std::string layer_fusion_policy = "freeze";  // freeze | tie
};

// A zoo model's training recipe (docs/training.md); `kiln explain --train`
// compiles its step.
struct Recipe {
  int64_t batch;
  double lr;
  double momentum;
  double weight_decay;
  bool nesterov;
  double label_smoothing;
  std::string schedule;  // linear | cosine | airbench
  data::AugmentOptions augment;
};
// kiln::Error for a name that is not tutorial, resnet18 or airbench.
Recipe recipe_for(const std::string& model);

struct TrainResult {
  double train_img_per_s = 0, eval_img_per_s = 0, test_acc = 0, wall_s = 0;
  double first_step_s = -1;  // the first train call (--compile: capture and compile included)
  std::vector<EpochRecord> epochs;  // the epochs this run trained, in order
};

// Finds CIFAR-10 as the issue describes: $KILN_DATA (default ./data) if it
// holds the binary layout; else import from $KILN_CIFAR10_ARCHIVE; else
// download. Returns the data dir, or nullopt with `why` set when none worked.
std::optional<std::string> find_cifar10(std::string* why);

// Fashion-MNIST's train and test splits from `explicit_dir` (empty: $KILN_FASHION_MNIST,
// else Debian's directory; data::find_fashion_mnist_dir).
void load_fashion_mnist(const std::string& explicit_dir, data::ImageDataset& train_set, data::ImageDataset& test_set);

// The train and test splits of `name` (cifar10: find_cifar10's order;
// fashion-mnist: load_fashion_mnist(data_dir)); kiln::Error naming `command` otherwise.
void load_data_sets(const std::string& name, const std::string& data_dir, const char* command,
                    data::ImageDataset& train_set, data::ImageDataset& test_set);

TrainResult train(const TrainOptions& o, const data::ImageDataset& train_set, const data::ImageDataset& test_set);

}  // namespace kiln::cli
