// A user-written nn::Module trained for a few steps with kiln's data loader
// and optimizer, built against an installed kiln (see CMakeLists.txt).
//   custom_module --steps 5 [--data fashion-mnist|cifar10] [--data-dir DIR] [--save FILE]
// Prints the loss of each step; exits 0 when every loss is finite.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <kiln/kiln.h>

using namespace kiln;

// A small CNN written the way the zoo's models are (docs/custom-modules.md):
// children through register_module, a hand-made classifier through
// register_parameter, and a buffer that is saved but not trained.
class SmallCNN : public nn::Module {
 public:
  SmallCNN(int64_t in_channels, int64_t num_classes) : Module("SmallCNN") {
    conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(
                                         nn::Conv2dOptions(in_channels, 16, 3).padding(1).bias(false)));
    bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(16));
    conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(16, 32, 3).padding(1)));
    // Parameters registered directly: initialized like nn::Linear.
    head_weight = register_parameter("head_weight", empty({num_classes, 32}));
    head_bias = register_parameter("head_bias", zeros({num_classes}));
    {
      NoGradGuard no_grad;
      nn::init::kaiming_uniform_(head_weight, std::sqrt(5.0));
    }
    // A buffer: part of state_dict() (so it is checkpointed), not of parameters().
    batches_seen = register_buffer("batches_seen", zeros({}, dtype(DType::Int64)));
  }

  Tensor forward(const Tensor& x) override {
    Tensor h = relu(bn1->forward(conv1->forward(x)));
    h = max_pool2d(h, {2, 2});
    h = relu(conv2->forward(h));
    h = flatten(adaptive_avg_pool2d(h, {1, 1}), 1);  // [N, 32]
    if (is_training()) {
      NoGradGuard no_grad;
      batches_seen.add_(ones_like(batches_seen));
    }
    return linear(h, head_weight, head_bias);
  }

  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1;
  Tensor head_weight, head_bias, batches_seen;
};

namespace {

[[noreturn]] void usage(const std::string& why, int code = 2) {
  std::fprintf(stderr,
               "custom_module: %s\nusage: custom_module [--steps N] [--data fashion-mnist|cifar10] "
               "[--data-dir DIR] [--save FILE]\n",
               why.c_str());
  std::exit(code);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t steps = 5;
  std::string data_name = "fashion-mnist", data_dir, save;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--steps") {
      std::string v = value();
      char* end = nullptr;
      long long n = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 1 || n > 1000000)
        usage("--steps expects an integer in 1..1000000, got '" + v + "'");
      steps = n;
    } else if (a == "--data") {
      data_name = value();
    } else if (a == "--data-dir") {
      data_dir = value();
    } else if (a == "--save") {
      save = value();
    } else if (a == "--help" || a == "-h") {
      usage("trains a small user-written CNN for a few steps", 0);
    } else {
      usage("unknown argument '" + a + "'");
    }
  }

  try {
    data::ImageDataset train;
    std::vector<float> mean, stdv;
    if (data_name == "fashion-mnist") {
      train = data::load_fashion_mnist(data_dir.empty() ? data::default_fashion_mnist_dir() : data_dir, true);
      mean = {0.2860f};
      stdv = {0.3530f};
    } else if (data_name == "cifar10") {
      const char* env = std::getenv("KILN_DATA");
      train = data::load_cifar10_binary(!data_dir.empty() ? data_dir : env && *env ? env : "data", true);
      mean = data::kCifar10Mean;
      stdv = data::kCifar10Std;
    } else {
      usage("unknown data set '" + data_name + "'; use fashion-mnist or cifar10");
    }

    manual_seed(0);
    auto model = std::make_shared<SmallCNN>(train.images.size(1), 10);
    optim::SGD opt(model->parameters(), optim::SGDOptions(0.05).momentum(0.9));

    data::DataLoaderOptions lo;
    lo.batch_size = 64;
    lo.mean = mean;
    lo.std = stdv;
    lo.workers = 1;
    data::DataLoader loader(std::make_shared<data::ImageDataset>(std::move(train)), lo);
    loader.start_epoch(0);

    std::printf("SmallCNN: %lld parameters in %zu tensors; state_dict keys:",
                static_cast<long long>(model->num_parameters()), model->parameters().size());
    for (const auto& [key, t] : model->state_dict()) std::printf(" %s", key.c_str());
    std::printf("\n");

    bool finite = true;
    model->train();
    for (int64_t step = 1; step <= steps; ++step) {
      auto batch = loader.next();
      if (!batch) {
        loader.start_epoch(step);
        batch = loader.next();
      }
      Tensor loss = cross_entropy(model->forward(batch->images), batch->labels);
      opt.zero_grad();
      loss.backward();
      opt.step();
      double l = loss.item();
      finite = finite && std::isfinite(l);
      std::printf("step %lld/%lld loss %.4f\n", static_cast<long long>(step), static_cast<long long>(steps), l);
      std::fflush(stdout);
    }
    if (!save.empty()) {
      save_safetensors(save, model->state_dict(), {{"model", "SmallCNN"}});
      std::printf("saved %s\n", save.c_str());
    }
    std::printf(finite ? "losses finite\n" : "a loss was not finite\n");
    return finite ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "custom_module: %s\n", e.what());
    return 1;
  }
}
