// kiln demo: eager training of a small CNN (the PyTorch CIFAR-10 tutorial's
// shape: conv 3->6 k5, pool, conv 6->16 k5, pool, 400->120->84->10) on
// synthetic 32x32 images whose class sets a colour/brightness pattern, so the
// loss visibly falls. The training issue replaces the data with CIFAR-10.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "kiln/kiln.h"

namespace kiln::cli {
namespace {

struct Param {
  Tensor value;
  Tensor momentum;
};

Tensor kaiming_uniform(const Shape& shape, int64_t fan_in, Generator& gen) {
  double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));  // PyTorch's default for conv/linear
  Tensor t = sub(mul(rand(shape, {}, &gen), 2 * bound), bound);
  return t.detach().requires_grad_(true);
}

}  // namespace

int run_demo(int argc, char** argv) {
  int steps = 150;
  int64_t batch = 64;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (a == "--batch" && i + 1 < argc) batch = std::atoll(argv[++i]);
    else KILN_FAIL("demo: unknown argument '", a, "'; use --steps N --batch B");
  }
  KILN_CHECK(steps > 0 && batch > 0, "demo: --steps and --batch must be positive");

  Generator gen(0);
  // Parameters of the tutorial CNN.
  std::vector<Tensor> params = {
      kaiming_uniform({6, 3, 5, 5}, 75, gen),   kaiming_uniform({6}, 75, gen),
      kaiming_uniform({16, 6, 5, 5}, 150, gen), kaiming_uniform({16}, 150, gen),
      kaiming_uniform({120, 400}, 400, gen),    kaiming_uniform({120}, 400, gen),
      kaiming_uniform({84, 120}, 120, gen),     kaiming_uniform({84}, 120, gen),
      kaiming_uniform({10, 84}, 84, gen),       kaiming_uniform({10}, 84, gen)};
  std::vector<Tensor> velocity;
  for (const Tensor& p : params) velocity.push_back(zeros(p.shape()));

  // Synthetic classes: each class has a fixed random 3x32x32 prototype; an
  // image is its prototype plus noise.
  Tensor prototypes = randn({10, 3, 32, 32}, {}, &gen);
  auto forward = [&](const Tensor& x) {
    Tensor h = max_pool2d(relu(conv2d(x, params[0], params[1])), {2, 2});
    h = max_pool2d(relu(conv2d(h, params[2], params[3])), {2, 2});
    h = h.flatten(1);
    h = relu(linear(h, params[4], params[5]));
    h = relu(linear(h, params[6], params[7]));
    return linear(h, params[8], params[9]);
  };

  std::printf("kiln demo: eager training of the tutorial CNN on synthetic 32x32 images (batch %lld, %d steps)\n",
              static_cast<long long>(batch), steps);
  const double lr = 0.02, mom = 0.9;
  double first_loss = 0, last_loss = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int step = 1; step <= steps; ++step) {
    Tensor labels = randint(0, 10, {batch}, dtype(DType::Int64), &gen);
    Tensor x = add(index_select(prototypes, 0, labels), mul(randn({batch, 3, 32, 32}, {}, &gen), 1.5));
    Tensor loss = cross_entropy(forward(x), labels);
    loss.backward();
    {
      NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) {  // SGD with momentum, as torch.optim.SGD
        Tensor g = params[i].grad();
        mul_(velocity[i], mom);
        add_(velocity[i], g);
        add_(params[i], velocity[i], -lr);
        params[i].set_grad(Tensor());
      }
    }
    double l = loss.item();
    if (step == 1) first_loss = l;
    last_loss = l;
    if (step == 1 || step % 10 == 0 || step == steps) std::printf("step %3d  loss %.4f\n", step, l);
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("loss %.4f -> %.4f in %.2f s (%.0f images/s, eager, %s)\n", first_loss, last_loss, secs,
              static_cast<double>(steps * batch) / secs, last_loss < first_loss ? "falling" : "NOT falling");
  return last_loss < first_loss ? 0 : 1;
}

}  // namespace kiln::cli
