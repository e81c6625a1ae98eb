// kiln demo: the tutorial CNN trained on CIFAR-10 for 2 epochs eagerly and
// then compiled, ending in a table of test accuracy, images/s and the
// speed-up per mode. Finds CIFAR-10 as train does ($KILN_DATA, then
// $KILN_CIFAR10_ARCHIVE, then a download) and otherwise falls back to
// Fashion-MNIST (--data-dir, $KILN_FASHION_MNIST, Debian's copy), saying why.
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "cli/train.h"
#include "kiln/kiln.h"

namespace kiln::cli {

int run_demo(const DemoOptions& d) {
  TrainOptions o;
  o.model = "tutorial";
  o.epochs = d.epochs;
  o.steps = d.steps;
  data::ImageDataset train_set, test_set;
  std::string why;
  if (auto dir = find_cifar10(&why)) {
    o.data = "cifar10";
    train_set = data::load_cifar10_binary(*dir, true);
    test_set = data::load_cifar10_binary(*dir, false);
  } else {
    std::printf("CIFAR-10 is not available (%s)\nfalling back to Fashion-MNIST from %s\n", why.c_str(),
                data::find_fashion_mnist_dir(d.data_dir).c_str());
    std::fflush(stdout);
    o.data = "fashion-mnist";
    load_fashion_mnist(d.data_dir, train_set, test_set);
  }
  // The same seed, data order and initial weights for both runs: the rows
  // differ only in how the steps run.
  std::printf("kiln demo: the PyTorch tutorial CNN trained and evaluated eagerly, then compiled (kiln::compile, "
              "generated C++ kernels), side by side\n\n-- eager --\n");
  std::fflush(stdout);
  TrainResult eager = train(o, train_set, test_set);
  std::printf("\n-- compiled --\n");
  std::fflush(stdout);
  o.compile.enabled = true;
  TrainResult compiled = train(o, train_set, test_set);

  std::printf("\n%-10s %9s %12s %11s %16s\n", "mode", "test acc", "train img/s", "eval img/s", "first step (s)");
  auto row = [](const char* mode, const TrainResult& r) {
    std::printf("%-10s %8.2f%% %12.0f %11.0f %16.2f\n", mode, 100 * r.test_acc, r.train_img_per_s, r.eval_img_per_s,
                r.first_step_s >= 0 ? r.first_step_s : 0.0);
  };
  row("eager", eager);
  row("compiled", compiled);
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  std::printf("compiled / eager: train %.2fx, eval %.2fx (one run each on this machine; `kiln bench models` "
              "measures them side by side)\n",
              ratio(compiled.train_img_per_s, eager.train_img_per_s), ratio(compiled.eval_img_per_s, eager.eval_img_per_s));
  // The accuracies differ by training's drift, not by a wrong result: a
  // compiled step matches eager's within 1e-4 (ctest), and thousands of SGD
  // steps amplify rounding differences as a change of seed would.
  std::printf("test accuracies: compiled %+.2f points against eager (each step agrees within 1e-4; over %d epoch%s "
              "SGD amplifies rounding differences as another seed would)\n",
              100 * (compiled.test_acc - eager.test_acc), static_cast<int>(o.epochs), o.epochs == 1 ? "" : "s");
  return 0;
}

}  // namespace kiln::cli
