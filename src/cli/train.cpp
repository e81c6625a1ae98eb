// kiln train: trains a zoo model on CIFAR-10 or Fashion-MNIST with the
// model's recipe (docs/training.md), printing progress, test accuracy each
// epoch and, with --json, machine-readable lines.
#include "cli/train.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "cli/json_line.h"
#include "kiln/fusion.h"
#include "kiln/kiln.h"

namespace kiln::cli {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

Recipe recipe_for(const std::string& model) {
  if (model == "tutorial") {
    Recipe r{32, 0.02, 0.9, 0.0, false, 0.0, "linear", {}};
    r.augment.flip = true;
    return r;
  }
  if (model == "resnet18") {
    Recipe r{128, 0.1, 0.9, 5e-4, false, 0.0, "cosine", {}};
    r.augment.crop_padding = 4;
    r.augment.flip = true;
    return r;
  }
  if (model == "airbench") {
    Recipe r{128, 0.2, 0.9, 5e-4, true, 0.2, "airbench", {}};
    r.augment.alternating_flip = true;
    r.augment.translate = 2;
    return r;
  }
  KILN_FAIL("train: unknown model '", model, "'; use --model tutorial, resnet18 or airbench");
}

namespace {

std::unique_ptr<optim::LRSchedule> make_schedule(const std::string& kind, double lr, int64_t total) {
  total = std::max<int64_t>(total, 1);
  if (kind == "cosine") return std::make_unique<optim::CosineLR>(lr, total);
  if (kind == "airbench" && total >= 2) {
    int64_t warm = std::clamp<int64_t>(total / 4, 1, total - 1);
    return std::make_unique<optim::PiecewiseLinearLR>(std::vector<int64_t>{0, warm, total},
                                                      std::vector<double>{0.2 * lr, lr, 0.0});
  }
  if (kind == "airbench") return std::make_unique<optim::PiecewiseLinearLR>(std::vector<int64_t>{0, 1}, std::vector<double>{lr, lr});
  KILN_ASSERT(kind == "linear", "unknown schedule ", kind);
  return std::make_unique<optim::PiecewiseLinearLR>(std::vector<int64_t>{0, total}, std::vector<double>{lr, 0.0});
}

// A one-line progress bar on a terminal, redrawn in place.
class Progress {
 public:
  Progress(bool enabled, int64_t epoch, int64_t epochs, int64_t total)
      : enabled_(enabled), epoch_(epoch), epochs_(epochs), total_(total) {}
  void update(int64_t done, double loss, double img_per_s) {
    if (!enabled_) return;
    constexpr int kWidth = 30;
    int filled = total_ > 0 ? static_cast<int>(kWidth * done / total_) : kWidth;
    std::string bar(static_cast<size_t>(filled), '=');
    if (filled < kWidth) bar += '>' + std::string(static_cast<size_t>(kWidth - filled - 1), ' ');
    std::fprintf(stderr, "\repoch %lld/%lld [%s] %lld/%lld loss %.4f %.0f img/s ", static_cast<long long>(epoch_),
                 static_cast<long long>(epochs_), bar.c_str(), static_cast<long long>(done),
                 static_cast<long long>(total_), loss, img_per_s);
    std::fflush(stderr);
  }
  void finish() {
    if (enabled_) std::fprintf(stderr, "\n");
  }

 private:
  bool enabled_;
  int64_t epoch_, epochs_, total_;
};

struct EvalResult {
  double acc = 0, img_per_s = 0;
};

EvalResult evaluate(nn::Module& model, TrainStep& step, data::DataLoader& loader, int64_t max_batches, Device device,
                    MemoryFormat format) {
  loader.start_epoch(0);
  model.eval();
  NoGradGuard no_grad;
  int64_t correct = 0, seen = 0, batches = 0;
  auto t0 = Clock::now();
  while (auto batch = loader.next()) {
    Tensor pred = step.logits(contiguous(batch->images.to(device), format)).argmax(1);
    correct += static_cast<int64_t>(sum(eq(pred, batch->labels.to(device))).item());
    seen += batch->labels.numel();
    if (max_batches > 0 && ++batches >= max_batches) break;
  }
  double secs = seconds_since(t0);
  model.train();
  return {seen ? static_cast<double>(correct) / static_cast<double>(seen) : 0.0,
          secs > 0 ? static_cast<double>(seen) / secs : 0.0};
}

// --layer-fusion-topk: freezes (or ties) the pairs, tells the optimizer, which
// keeps the state of the parameters that still train, and prints the pairs.
void apply_layer_fusion(const TrainOptions& o, nn::Module& model, optim::Optimizer& opt, int64_t epoch) {
  fusion::Policy policy = fusion::parse_policy(o.layer_fusion_policy);
  auto pairs = fusion::freeze_similar(model, o.layer_fusion_topk, policy);
  opt.set_params(fusion::trainable_parameters(model));
  if (o.quiet) return;
  if (o.json) {
    JsonLine list = JsonLine::array();
    for (const auto& p : pairs) list.push_back({{"a", p.a}, {"b", p.b}, {"cosine", p.cosine}});
    print_json_line({{"layer_fusion", {{"pairs", list}}}});
    return;
  }
  std::printf("layer fusion at epoch %lld (%s the second layer of each pair):\n", static_cast<long long>(epoch),
              fusion::policy_name(policy));
  for (const auto& p : pairs) std::printf("  %s ~ %s  cosine %.6f\n", p.a.c_str(), p.b.c_str(), p.cosine);
  if (pairs.empty()) std::printf("  no two layers have the same weight shape\n");
}

// Checkpoints hold host tensors, wherever the model trains.
nn::TensorDict prefixed(const nn::TensorDict& d, const std::string& prefix) {
  nn::TensorDict out;
  for (const auto& [k, v] : d) out.emplace_back(prefix + k, v.to(Device::cpu()));
  return out;
}
nn::TensorDict with_prefix(const nn::TensorDict& d, const std::string& prefix) {
  nn::TensorDict out;
  for (const auto& [k, v] : d)
    if (k.rfind(prefix, 0) == 0) out.emplace_back(k.substr(prefix.size()), v);
  return out;
}

// How many epochs the --save checkpoint at `path` has finished: its "epoch"
// metadata, a decimal count >= 0 (std::from_chars: no exceptions, no locale,
// no silent truncation of "3x" or "1e3").
int64_t finished_epochs(const std::map<std::string, std::string>& meta, const std::string& path) {
  auto it = meta.find("epoch");
  KILN_CHECK(it != meta.end(), "train --resume: ", path,
             " has no 'epoch' in its metadata, so it is not a checkpoint written by `kiln train --save`; "
             "resume from a file that --save wrote");
  const std::string& v = it->second;
  int64_t epochs = -1;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), epochs);
  KILN_CHECK(ec != std::errc::result_out_of_range, "train --resume: ", path, " has epoch '", v,
             "' in its metadata, out of range of a 64-bit count; the file is damaged or was not written by "
             "`kiln train --save`");
  KILN_CHECK(ec == std::errc() && end == v.data() + v.size() && epochs >= 0, "train --resume: ", path,
             " has epoch '", v, "' in its metadata where a count of finished epochs (an integer >= 0) belongs; "
             "the file is damaged or was not written by `kiln train --save`");
  return epochs;
}

}  // namespace

std::optional<std::string> find_cifar10(std::string* why) {
  const char* env_dir = std::getenv("KILN_DATA");
  std::string dir = env_dir && *env_dir ? env_dir : "data";
  if (data::has_cifar10_binary(dir)) return dir;
  const char* archive = std::getenv("KILN_CIFAR10_ARCHIVE");
  if (archive && *archive) {
    data::import_cifar10(archive, dir);
    return dir;
  }
  try {
    data::download_cifar10(dir);
    return dir;
  } catch (const Error& e) {
    if (why) *why = e.what();
  }
  return std::nullopt;
}

TrainResult train(const TrainOptions& o, const data::ImageDataset& train_set, const data::ImageDataset& test_set) {
  Recipe r = recipe_for(o.model);
  int64_t batch = o.batch.value_or(r.batch);
  KILN_CHECK(batch > 0 && o.epochs > 0, "train: --batch and --epochs must be positive");
  KILN_CHECK(o.layer_fusion_topk == 0 || o.layer_fusion_at < o.epochs, "train: --layer-fusion-at ", o.layer_fusion_at,
             " is not before the last epoch (--epochs ", o.epochs, "), so Layer Fusion would never apply; ",
             "use an epoch from 0 to ", o.epochs - 1);
  // drop_last: a batch larger than the set would train 0 steps and report nonsense.
  KILN_CHECK(batch <= train_set.size(), "train: batch ", batch, " is larger than the training set (",
             train_set.size(), " images in ", train_set.source, "), so no step would run; use --batch ",
             train_set.size(), " or less");
  bool fmnist = train_set.images.size(1) == 1;
  std::vector<float> mean = fmnist ? std::vector<float>{0.2860f} : data::kCifar10Mean;
  std::vector<float> stdv = fmnist ? std::vector<float>{0.3530f} : data::kCifar10Std;

  const Device device = checked_device(o.device, "train");
  // Mixed precision: float32 weights, the forward and loss under autocast;
  // float16 scales the loss (bfloat16 has float32's range).
  const std::optional<DType> amp =
      o.autocast.empty() ? std::nullopt : std::optional<DType>(parse_autocast_dtype(o.autocast));
  optim::GradScaler scaler(optim::GradScalerOptions().enabled(amp == DType::Float16));
  KILN_CHECK(device.is_cpu() || o.resume.empty(), "train: --resume with --device ", o.device,
             " is not supported yet (the optimizer state loads on the host); resume with --device cpu");
  manual_seed(o.seed);
  auto model = models::create(o.model, o.width, train_set.images.size(1), 10, train_set.images.size(2));
  if (!o.init.empty()) model->load_state_dict(load_safetensors(o.init));
  if (!o.save_init.empty()) save_safetensors(o.save_init, model->state_dict(), {{"model", o.model}});
  // Initialized (and loaded) on the host, then moved: the same weights on every device.
  if (!device.is_cpu()) model->to(device);
  // --channels-last: the 4-d weights and every batch NHWC (after the move:
  // a device copy is contiguous).
  const MemoryFormat format = o.channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  if (o.channels_last) model->to(format);

  // --device cuda: the data sets live on the GPU and batches are made there
  // (DataLoaderOptions::device), unless --host-data.
  const Device data_device = device.is_cuda() && !o.host_data ? device : Device::cpu();
  auto test_loader = [&] {
    data::DataLoaderOptions lo;
    lo.batch_size = 500;
    lo.shuffle = false;
    lo.workers = o.workers;
    lo.mean = mean;
    lo.std = stdv;
    lo.device = data_device;
    lo.memory_format = data_device.is_cuda() ? format : MemoryFormat::Contiguous;
    return std::make_unique<data::DataLoader>(
        std::shared_ptr<const data::ImageDataset>(&test_set, [](const data::ImageDataset*) {}), lo);
  }();

  std::unique_ptr<optim::Optimizer> opt;
  double lr;
  if (o.opt == "sgd") {
    lr = o.lr.value_or(r.lr);
    auto so = optim::SGDOptions(lr).momentum(r.momentum).weight_decay(r.weight_decay).nesterov(r.nesterov);
    opt = std::make_unique<optim::SGD>(model->parameters(), so);
  } else if (o.opt == "adamw") {
    lr = o.lr.value_or(1e-3);
    opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions(lr));
  } else {
    KILN_FAIL("train: unknown optimizer '", o.opt, "'; use --opt sgd or --opt adamw");
  }

  data::DataLoaderOptions lo;
  lo.batch_size = batch;
  lo.shuffle = true;
  lo.drop_last = true;
  lo.seed = o.seed;
  lo.workers = o.workers;
  lo.augment = r.augment;
  lo.mean = mean;
  lo.std = stdv;
  lo.device = data_device;
  lo.memory_format = data_device.is_cuda() ? format : MemoryFormat::Contiguous;
  data::DataLoader loader(std::shared_ptr<const data::ImageDataset>(&train_set, [](const data::ImageDataset*) {}), lo);
  int64_t steps_per_epoch = loader.batches_per_epoch();
  if (o.steps > 0) steps_per_epoch = std::min(steps_per_epoch, o.steps);
  auto schedule = make_schedule(r.schedule, lr, steps_per_epoch * o.epochs);

  int64_t first_epoch = 0;
  if (!o.resume.empty()) {
    std::map<std::string, std::string> meta;
    nn::TensorDict ck = load_safetensors(o.resume, &meta);
    KILN_CHECK(meta["model"] == o.model, "train --resume: ", o.resume, " holds a '", meta["model"],
               "' checkpoint, not '", o.model, "'; pass the same --model");
    first_epoch = finished_epochs(meta, o.resume);
    KILN_CHECK(o.layer_fusion_topk == 0 || first_epoch <= o.layer_fusion_at, "train --resume: the checkpoint ",
               "finished ", first_epoch, " epochs, past --layer-fusion-at ", o.layer_fusion_at,
               ", and it does not record which layers were frozen or tied; resume without Layer Fusion, or apply it ",
               "at epoch ", first_epoch, " or later");
    model->load_state_dict(with_prefix(ck, "model."));
    opt->load_state_dict(with_prefix(ck, "optim."));
    KILN_CHECK(first_epoch < o.epochs, "train --resume: the checkpoint already finished ", first_epoch,
               " epochs; ask for more with --epochs");
  }

  bool tty = !o.json && !o.quiet && isatty(fileno(stderr));
  char width[40] = "";  // " (width 0.25)", as the user wrote it, not 0.250000
  if (o.model == "airbench") std::snprintf(width, sizeof width, " (width %g)", o.width);
  if (!o.json && !o.quiet)
    std::printf("training %s%s on %s: %lld train / %lld test images, batch %lld, %s lr %g, %lld epochs%s\n",
                o.model.c_str(), width, train_set.source.c_str(), static_cast<long long>(train_set.size()),
                static_cast<long long>(test_set.size()), static_cast<long long>(batch), o.opt.c_str(), lr,
                static_cast<long long>(o.epochs),
                (std::string(device.is_cpu() ? "" : ", on " + device.str()) +
                 (device.is_cuda() ? (data_device.is_cuda() ? ", data on the GPU" : ", data from the host") : "") +
                 (amp ? ", autocast " + std::string(dtype_name(*amp)) : "") +
                 (o.compile.enabled ? ", compiled (mode " + o.compile.mode + ")" : ""))
                    .c_str());

  TrainStep train_step(model, *opt, scaler, amp, r.label_smoothing, o.compile, device);
  TrainResult result;
  cuda::AllocatorStats after_first_epoch;  // CUDA: steady state is every epoch after the first
  double train_time = 0, eval_time_img = 0;
  int64_t train_images = 0;
  auto wall0 = Clock::now();
  model->train();
  for (int64_t epoch = first_epoch; epoch < o.epochs; ++epoch) {
    if (o.layer_fusion_topk > 0 && epoch == o.layer_fusion_at) apply_layer_fusion(o, *model, *opt, epoch);
    loader.start_epoch(epoch);
    Progress bar(tty, epoch + 1, o.epochs, steps_per_epoch);
    auto t0 = Clock::now();
    double loss_sum = 0;
    Tensor loss_acc;  // CUDA: the epoch's loss sum kept on the device, read at a progress update, not every step
    int64_t step = 0, epoch_images = 0;
    while (step < steps_per_epoch) {
      auto b = loader.next();
      if (!b) break;
      schedule->apply(*opt, epoch * steps_per_epoch + step);
      Tensor loss = train_step.train(contiguous(b->images.to(device), format), b->labels.to(device));
      if (device.is_cuda()) {
        NoGradGuard no_grad;
        Tensor l = loss.detach().to(DType::Float64);
        loss_acc = loss_acc.defined() ? loss_acc + l : l;
      } else {
        loss_sum += loss.item();
      }
      ++step;
      epoch_images += b->labels.numel();
      const bool show = tty && (step % 10 == 0 || step == steps_per_epoch);
      if (loss_acc.defined() && (show || step == steps_per_epoch)) loss_sum = loss_acc.item();
      if (show)
        bar.update(step, loss_sum / static_cast<double>(step), static_cast<double>(epoch_images) / seconds_since(t0));
    }
    if (loss_acc.defined()) loss_sum = loss_acc.item();  // waits for the epoch's last step
    bar.finish();
    double secs = seconds_since(t0);
    train_time += secs;
    train_images += epoch_images;
    EvalResult ev = evaluate(*model, train_step, *test_loader, o.steps, device, format);
    result.test_acc = ev.acc;
    eval_time_img = ev.img_per_s;
    double ips = static_cast<double>(epoch_images) / secs;
    double mean_loss = step ? loss_sum / static_cast<double>(step) : 0.0;
    result.epochs.push_back({epoch + 1, mean_loss, ev.acc, ips, ev.img_per_s, secs});
    if (o.on_epoch) o.on_epoch(result.epochs.back());
    if (o.json && !o.quiet)
      print_json_line({{"epoch", epoch + 1},
                       {"train_loss", rounded(mean_loss, 6)},
                       {"test_acc", rounded(ev.acc, 6)},
                       {"train_img_per_s", rounded(ips, 2)}});
    else if (!o.quiet)
      std::printf("epoch %lld/%lld  loss %.4f  test acc %.2f%%  %.0f img/s train  %.0f img/s eval  (%.1f s)\n",
                  static_cast<long long>(epoch + 1), static_cast<long long>(o.epochs), mean_loss, 100 * ev.acc, ips,
                  ev.img_per_s, secs);
    std::fflush(stdout);
    if (device.is_cuda() && epoch == first_epoch) after_first_epoch = cuda::allocator_stats(device.index);
    if (!o.save.empty()) {
      nn::TensorDict ck = prefixed(model->state_dict(), "model.");
      for (auto& kv : prefixed(opt->state_dict(), "optim.")) ck.push_back(kv);
      save_safetensors(o.save, ck,
                       {{"model", o.model}, {"width", std::to_string(o.width)}, {"epoch", std::to_string(epoch + 1)},
                        {"seed", std::to_string(o.seed)}, {"data", o.data}});
    }
  }
  result.wall_s = seconds_since(wall0);
  result.first_step_s = train_step.first_train_call_s();
  if (train_step.compiled() && !o.json && !o.quiet) std::printf("%s\n", train_step.summary().c_str());
  if (scaler.is_enabled() && !o.json && !o.quiet)
    std::printf("grad scaler: %lld steps skipped on inf/NaN gradients, final scale %g\n",
                static_cast<long long>(scaler.skipped_steps()), scaler.get_scale());
  if (device.is_cuda() && !o.json && !o.quiet) {
    cuda::AllocatorStats st = cuda::allocator_stats(device.index);
    std::printf("cuda allocator: %llu cudaMalloc / %llu cudaFree calls (%llu / %llu after the first epoch), "
                "%llu of %llu allocations served from the cache, peak %.1f MiB, %.1f MiB reserved\n",
                static_cast<unsigned long long>(st.num_cuda_mallocs), static_cast<unsigned long long>(st.num_cuda_frees),
                static_cast<unsigned long long>(st.num_cuda_mallocs - after_first_epoch.num_cuda_mallocs),
                static_cast<unsigned long long>(st.num_cuda_frees - after_first_epoch.num_cuda_frees),
                static_cast<unsigned long long>(st.cache_hits), static_cast<unsigned long long>(st.num_allocs),
                static_cast<double>(st.peak_allocated_bytes) / (1 << 20), static_cast<double>(st.reserved_bytes) / (1 << 20));
  }
  // The first step (with --compile: capture and compile) is reported on its
  // own, not averaged into the throughput, whenever later steps ran.
  if (result.first_step_s >= 0 && train_time > result.first_step_s && train_images > batch) {
    train_time -= result.first_step_s;
    train_images -= batch;
  }
  result.train_img_per_s = train_time > 0 ? static_cast<double>(train_images) / train_time : 0;
  result.eval_img_per_s = eval_time_img;
  return result;
}

namespace {

// Output paths are checked before any data is loaded or step is trained:
// a typo in --save must not cost an epoch.
void check_output_path(const char* flag, const std::string& path) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) parent = ".";
  std::error_code ec;
  KILN_CHECK(fs::is_directory(parent, ec), "train: ", flag, " ", path, ": the directory ", parent.string(),
             " does not exist; create it first or choose another path");
  KILN_CHECK(!fs::is_directory(path, ec), "train: ", flag, " ", path, " is a directory; name a file in it");
}

void check_input_path(const char* flag, const std::string& path) {
  if (path.empty()) return;
  std::error_code ec;
  KILN_CHECK(std::filesystem::is_regular_file(path, ec), "train: ", flag, " ", path,
             " is not a file (no such file, or a directory)");
}

}  // namespace

void load_fashion_mnist(const std::string& explicit_dir, data::ImageDataset& train_set, data::ImageDataset& test_set) {
  const std::string dir = data::find_fashion_mnist_dir(explicit_dir);
  std::error_code ec;
  KILN_CHECK(std::filesystem::is_directory(dir, ec), "Fashion-MNIST: ", dir,
             " is not a directory (looked up in this order: --data-dir, $KILN_FASHION_MNIST, ",
             data::default_fashion_mnist_dir(), " from Debian's dataset-fashion-mnist package)");
  train_set = data::load_fashion_mnist(dir, true);
  test_set = data::load_fashion_mnist(dir, false);
}

void load_data_sets(const std::string& name, const std::string& data_dir, const char* command,
                    data::ImageDataset& train_set, data::ImageDataset& test_set) {
  if (name == "cifar10") {
    std::string why;
    auto dir = find_cifar10(&why);
    KILN_CHECK(dir.has_value(), command, ": CIFAR-10 not found: ", why,
               "\nimport it once with `kiln data import cifar10 ARCHIVE` (or set KILN_CIFAR10_ARCHIVE), "
               "or use --data fashion-mnist");
    train_set = data::load_cifar10_binary(*dir, true);
    test_set = data::load_cifar10_binary(*dir, false);
  } else if (name == "fashion-mnist") {
    load_fashion_mnist(data_dir, train_set, test_set);
  } else {
    KILN_FAIL(command, ": unknown data set '", name, "'; use --data cifar10 or --data fashion-mnist");
  }
}

Device checked_device(const std::string& name, const char* command) {
  Device d = Device::parse(name);
  if (d.is_cuda())
    KILN_CHECK(cuda::is_available(), command, " --device ", name, ": ", cuda::unavailable_reason(),
               "; run it on a machine with an NVIDIA GPU, or use --device cpu");
  return d;
}

int run_train(const TrainOptions& o) {
  recipe_for(o.model);  // validates the name before any data is loaded
  checked_device(o.device, "train");  // and the device: no GPU must not cost a data import
  check_output_path("--save", o.save);
  check_output_path("--save-init", o.save_init);
  check_input_path("--resume", o.resume);
  check_input_path("--init", o.init);
  const std::string trace = o.profile.empty() ? Profile::env_trace_path() : o.profile;
  check_output_path(o.profile.empty() ? "KILN_PROFILE" : "--profile", trace);

  data::ImageDataset train_set, test_set;
  load_data_sets(o.data, o.data_dir, "train", train_set, test_set);
  // Profiles the training and evaluation, not the data loading above.
  std::optional<Profile> profile;
  if (!trace.empty()) profile.emplace(trace);
  TrainResult r = train(o, train_set, test_set);
  if (profile) {
    profile->stop();
    std::FILE* out = o.json ? stderr : stdout;  // --json keeps stdout to JSON lines
    std::fprintf(out, "profile (trace: %s; open it in https://ui.perfetto.dev or chrome://tracing):\n%s",
                 profile->trace_path().c_str(), profile->table_string().c_str());
    profile.reset();  // writes the trace
  }
  if (o.json)
    print_json_line({{"model", o.model},
                     {"epochs", o.epochs},
                     {"train_img_per_s", rounded(r.train_img_per_s, 2)},
                     {"eval_img_per_s", rounded(r.eval_img_per_s, 2)},
                     {"test_acc", rounded(r.test_acc, 6)},
                     {"wall_s", rounded(r.wall_s, 3)},
                     {"compiled", o.compile.enabled},
                     {"first_step_s", rounded(r.first_step_s, 3)}});
  else
    std::printf("done: test accuracy %.2f%%, %.0f img/s train, %.0f img/s eval, %.1f s\n", 100 * r.test_acc,
                r.train_img_per_s, r.eval_img_per_s, r.wall_s);
  return 0;
}

}  // namespace kiln::cli
