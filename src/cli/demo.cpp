// kiln demo: the tutorial CNN trained eagerly on CIFAR-10 for 2 epochs, with
// test accuracy and images/s. Finds CIFAR-10 as train does ($KILN_DATA, then
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
  std::printf("kiln demo: eager training of the PyTorch tutorial CNN (compiled mode arrives with the compiler)\n");
  TrainResult r = train(o, train_set, test_set);
  std::printf("\n%-10s %12s %16s %15s\n", "mode", "test acc", "train img/s", "eval img/s");
  std::printf("%-10s %11.2f%% %16.0f %15.0f\n", "eager", 100 * r.test_acc, r.train_img_per_s, r.eval_img_per_s);
  return 0;
}

}  // namespace kiln::cli
