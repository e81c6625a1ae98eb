// An airbench94-style net (github.com/KellerJordan/airbench, airbench94.py) with a width
// multiplier: a 2x2 "whitening" conv (bias) + GELU, three ConvGroups (conv3x3 -> maxpool 2 -> BN
// -> GELU -> conv3x3 -> BN -> GELU), global max-pool, linear without bias, output times 1/9.
// Keys (whiten.weight, block1.conv1.weight, block1.norm1.running_mean, ..., linear.weight) match
// tools/torch_models.py's Airbench. At 32x32: 31 after the stem, 15, 7, 3 after the pools.
//
// Choices, the same on the PyTorch side:
// - BatchNorm momentum 0.4 in PyTorch's convention (running = 0.6 * running + 0.4 * batch): what
//   airbench94's "batchnorm_momentum 0.6" means, since it passes momentum=1-0.6 to nn.BatchNorm2d.
//   eps 1e-12 as airbench94. Unlike airbench94 the BN weight stays trainable (it freezes it at 1).
// - Convs start as airbench94's Conv.reset_parameters: bias zero, dirac (identity) on the first
//   in_channels output channels, PyTorch's default init for the rest. The data-dependent whitening
//   init of the stem belongs to the training recipe, not to the model.
#include <algorithm>
#include <cmath>

#include "kiln/error.h"
#include "kiln/models.h"

namespace kiln::models {
namespace {

constexpr double kBnMomentum = 0.4;
constexpr double kBnEps = 1e-12;
constexpr double kOutputScale = 1.0 / 9.0;

int64_t round_to_8(double c) { return std::max<int64_t>(8, 8 * static_cast<int64_t>(std::floor(c / 8 + 0.5))); }

void dirac_init(nn::Conv2d& conv) {
  NoGradGuard no_grad;
  if (conv.bias.defined()) conv.bias.zero_();
  Tensor& w = conv.weight;
  int64_t n = std::min(w.size(0), w.size(1));
  w.slice(0, 0, n).zero_();
  for (int64_t i = 0; i < n; ++i)
    w.select(0, i).select(0, i).select(0, w.size(2) / 2).select(0, w.size(3) / 2).fill_(1.0);
}

std::shared_ptr<nn::Conv2d> dirac_conv(const nn::Conv2dOptions& o) {
  auto c = std::make_shared<nn::Conv2d>(o);
  dirac_init(*c);
  return c;
}

std::shared_ptr<nn::BatchNorm2d> airbench_bn(int64_t c) {
  return std::make_shared<nn::BatchNorm2d>(nn::BatchNorm2dOptions(c).momentum(kBnMomentum).eps(kBnEps));
}

class ConvGroup : public nn::Module {
 public:
  ConvGroup(int64_t in, int64_t out) : Module("ConvGroup") {
    conv1 = register_module("conv1", dirac_conv(nn::Conv2dOptions(in, out, 3).padding(1).bias(false)));
    pool = register_module("pool", std::make_shared<nn::MaxPool2d>(nn::Pool2dOptions(2)));
    norm1 = register_module("norm1", airbench_bn(out));
    conv2 = register_module("conv2", dirac_conv(nn::Conv2dOptions(out, out, 3).padding(1).bias(false)));
    norm2 = register_module("norm2", airbench_bn(out));
    activ = register_module("activ", std::make_shared<nn::GELU>());
  }

  Tensor forward(const Tensor& x) override {
    Tensor h = activ->forward(norm1->forward(pool->forward(conv1->forward(x))));
    return activ->forward(norm2->forward(conv2->forward(h)));
  }

  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::MaxPool2d> pool;
  std::shared_ptr<nn::BatchNorm2d> norm1, norm2;
  std::shared_ptr<nn::GELU> activ;
};

class Airbench : public nn::Module {
 public:
  Airbench(double width, int64_t num_classes, int64_t in_channels) : Module("Airbench") {
    KILN_CHECK(width > 0 && std::isfinite(width), "airbench: width must be a positive number, got ", width);
    KILN_CHECK(in_channels > 0 && num_classes > 0, "airbench: in_channels and num_classes must be positive, got ",
               in_channels, " and ", num_classes);
    int64_t stem = std::max<int64_t>(1, static_cast<int64_t>(std::floor(24 * width + 0.5)));
    int64_t w1 = round_to_8(64 * width), w2 = round_to_8(256 * width), w3 = round_to_8(256 * width);
    whiten = register_module("whiten", dirac_conv(nn::Conv2dOptions(in_channels, stem, 2).bias(true)));
    activ = register_module("activ", std::make_shared<nn::GELU>());
    block1 = register_module("block1", std::make_shared<ConvGroup>(stem, w1));
    block2 = register_module("block2", std::make_shared<ConvGroup>(w1, w2));
    block3 = register_module("block3", std::make_shared<ConvGroup>(w2, w3));
    linear = register_module("linear", std::make_shared<nn::Linear>(nn::LinearOptions(w3, num_classes).bias(false)));
  }

  Tensor forward(const Tensor& x) override {
    KILN_CHECK(x.dim() == 4 && x.size(2) >= 9 && x.size(3) >= 9, "airbench: expects [N, C, H, W] images of at least ",
               "9x9 (a 2x2 stem and three 2x2 pools), got ", shape_str(x.shape()));
    Tensor h = activ->forward(whiten->forward(x));
    h = block3->forward(block2->forward(block1->forward(h)));
    h = amax(h, {2, 3});  // global max-pool; airbench94's MaxPool2d(3) on the 3x3 map at 32x32
    return mul(linear->forward(h), kOutputScale);
  }

  std::shared_ptr<nn::Conv2d> whiten;
  std::shared_ptr<nn::GELU> activ;
  std::shared_ptr<ConvGroup> block1, block2, block3;
  std::shared_ptr<nn::Linear> linear;
};

}  // namespace

std::shared_ptr<nn::Module> airbench(double width, int64_t num_classes, int64_t in_channels) {
  return std::make_shared<Airbench>(width, num_classes, in_channels);
}

}  // namespace kiln::models
