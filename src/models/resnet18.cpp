// ResNet-18 for CIFAR as in kuangliu/pytorch-cifar: 3x3 stem without max-pool, two BasicBlocks
// per stage (64/128/256/512, stride 1/2/2/2), 1x1 conv + BN projection shortcuts where the shape
// changes, global average pool, linear 512 -> classes. Keys (conv1.weight, layer2.0.shortcut.0.weight,
// layer2.0.shortcut.1.running_mean, linear.bias, ...) match tools/torch_models.py's ResNet18.
#include "kiln/error.h"
#include "kiln/models.h"

namespace kiln::models {
namespace {

std::shared_ptr<nn::Conv2d> conv3x3(int64_t in, int64_t out, int64_t stride) {
  return std::make_shared<nn::Conv2d>(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}

class BasicBlock : public nn::Module {
 public:
  BasicBlock(int64_t in_planes, int64_t planes, int64_t stride) : Module("BasicBlock") {
    conv1 = register_module("conv1", conv3x3(in_planes, planes, stride));
    bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(planes));
    conv2 = register_module("conv2", conv3x3(planes, planes, 1));
    bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(planes));
    // torch registers an empty Sequential for the identity shortcut; it holds no state, so
    // leaving it out keeps the state_dict identical.
    if (stride != 1 || in_planes != planes) {
      shortcut = register_module(
          "shortcut",
          std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
              std::make_shared<nn::Conv2d>(nn::Conv2dOptions(in_planes, planes, 1).stride(stride).bias(false)),
              std::make_shared<nn::BatchNorm2d>(planes)}));
    }
  }

  Tensor forward(const Tensor& x) override {
    Tensor out = relu(bn1->forward(conv1->forward(x)));
    out = bn2->forward(conv2->forward(out));
    return relu(add(out, shortcut ? shortcut->forward(x) : x));
  }

  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
  std::shared_ptr<nn::Sequential> shortcut;  // null: identity
};

class ResNet18 : public nn::Module {
 public:
  ResNet18(int64_t num_classes, int64_t in_channels) : Module("ResNet18") {
    KILN_CHECK(in_channels > 0 && num_classes > 0, "resnet18: in_channels and num_classes must be positive, got ",
               in_channels, " and ", num_classes);
    conv1 = register_module("conv1", conv3x3(in_channels, 64, 1));
    bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(64));
    const int64_t planes[4] = {64, 128, 256, 512};
    const int64_t strides[4] = {1, 2, 2, 2};
    int64_t in_planes = 64;
    for (int i = 0; i < 4; ++i) {
      auto layer = std::make_shared<nn::Sequential>();
      layer->push_back(std::make_shared<BasicBlock>(in_planes, planes[i], strides[i]));
      layer->push_back(std::make_shared<BasicBlock>(planes[i], planes[i], 1));
      layers[i] = register_module("layer" + std::to_string(i + 1), layer);
      in_planes = planes[i];
    }
    linear = register_module("linear", std::make_shared<nn::Linear>(512, num_classes));
  }

  Tensor forward(const Tensor& x) override {
    Tensor out = relu(bn1->forward(conv1->forward(x)));
    for (auto& layer : layers) out = layer->forward(out);
    // kuangliu uses avg_pool2d(out, 4), the same as a global average at 32x32; the global
    // pool also serves other image sizes.
    out = flatten(adaptive_avg_pool2d(out, {1, 1}), 1);
    return linear->forward(out);
  }

  std::shared_ptr<nn::Conv2d> conv1;
  std::shared_ptr<nn::BatchNorm2d> bn1;
  std::shared_ptr<nn::Sequential> layers[4];
  std::shared_ptr<nn::Linear> linear;
};

}  // namespace

std::shared_ptr<nn::Module> resnet18(int64_t num_classes, int64_t in_channels) {
  return std::make_shared<ResNet18>(num_classes, in_channels);
}

}  // namespace kiln::models
