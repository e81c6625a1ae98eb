// kiln demo: the tutorial CNN trained eagerly on CIFAR-10 for 2 epochs, with
// test accuracy and images/s. Finds CIFAR-10 as train does ($KILN_DATA, then
// $KILN_CIFAR10_ARCHIVE, then a download) and otherwise falls back to
// Fashion-MNIST, saying why.
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "cli/train.h"
#include "kiln/kiln.h"

namespace kiln::cli {

int run_demo(int argc, char** argv) {
  TrainOptions o;
  o.model = "tutorial";
  o.epochs = 2;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--epochs" && i + 1 < argc) o.epochs = std::stoll(argv[++i]);
    else if (a == "--steps" && i + 1 < argc) o.steps = std::stoll(argv[++i]);
    else KILN_FAIL("demo: unknown argument '", a, "'; use --epochs N or --steps N");
  }
  data::ImageDataset train_set, test_set;
  std::string why;
  if (auto dir = find_cifar10(&why)) {
    o.data = "cifar10";
    train_set = data::load_cifar10_binary(*dir, true);
    test_set = data::load_cifar10_binary(*dir, false);
  } else {
    std::printf("CIFAR-10 is not available (%s)\nfalling back to Fashion-MNIST from %s\n", why.c_str(),
                data::default_fashion_mnist_dir().c_str());
    o.data = "fashion-mnist";
    train_set = data::load_fashion_mnist(data::default_fashion_mnist_dir(), true);
    test_set = data::load_fashion_mnist(data::default_fashion_mnist_dir(), false);
  }
  std::printf("kiln demo: eager training of the PyTorch tutorial CNN (compiled mode arrives with the compiler)\n");
  TrainResult r = train(o, train_set, test_set);
  std::printf("\n%-10s %12s %16s %15s\n", "mode", "test acc", "train img/s", "eval img/s");
  std::printf("%-10s %11.2f%% %16.0f %15.0f\n", "eager", 100 * r.test_acc, r.train_img_per_s, r.eval_img_per_s);
  return 0;
}

}  // namespace kiln::cli
