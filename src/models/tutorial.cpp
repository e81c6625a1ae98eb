// The PyTorch CIFAR-10 tutorial's Net (pytorch.org/tutorials/beginner/blitz/cifar10_tutorial):
// keys conv1.weight ... fc3.bias, identical to tools/torch_models.py's TutorialCNN.
#include "kiln/error.h"
#include "kiln/models.h"

namespace kiln::models {
namespace {

class TutorialCNN : public nn::Module {
 public:
  TutorialCNN(int64_t in_channels, int64_t num_classes, int64_t image_size) : Module("TutorialCNN") {
    KILN_CHECK(in_channels > 0 && num_classes > 0, "tutorial_cnn: in_channels and num_classes must be positive, got ",
               in_channels, " and ", num_classes);
    // conv k5 -> pool 2 -> conv k5 -> pool 2 (floor), as the tutorial's 32 -> 28 -> 14 -> 10 -> 5.
    int64_t side = ((image_size - 4) / 2 - 4) / 2;
    KILN_CHECK(image_size >= 14 && side >= 1, "tutorial_cnn: image_size ", image_size,
               " is too small; the two 5x5 convs and 2x2 pools need at least 14 pixels");
    conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(in_channels, 6, 5)));
    pool = register_module("pool", std::make_shared<nn::MaxPool2d>(nn::Pool2dOptions(2).stride({2, 2})));
    conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(6, 16, 5)));
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(16 * side * side, 120));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(120, 84));
    fc3 = register_module("fc3", std::make_shared<nn::Linear>(84, num_classes));
  }

  Tensor forward(const Tensor& x) override {
    Tensor h = pool->forward(relu(conv1->forward(x)));
    h = pool->forward(relu(conv2->forward(h)));
    h = flatten(h, 1);
    h = relu(fc1->forward(h));
    h = relu(fc2->forward(h));
    return fc3->forward(h);
  }

  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::MaxPool2d> pool;
  std::shared_ptr<nn::Linear> fc1, fc2, fc3;
};

}  // namespace

std::shared_ptr<nn::Module> tutorial_cnn(int64_t in_channels, int64_t num_classes, int64_t image_size) {
  return std::make_shared<TutorialCNN>(in_channels, num_classes, image_size);
}

}  // namespace kiln::models
