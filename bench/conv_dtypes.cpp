// float32 against bfloat16 convolutions, layer by layer, on this CPU: each
// convolution of a zoo model at batch B (forward, backward-data,
// backward-weights) timed in both dtypes, interleaved round by round so that
// both see the machine's load of the moment. This is the measurement behind
// conv.cpp's choice of bfloat16 kernels under autocast (oneDNN's bfloat16
// runs on AMX or AVX512-BF16; float32 runs Winograd on 3x3 layers).
//
//   build/bench/conv_dtypes [--model airbench] [--batch 128] [--width 1] [--rounds 5]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "bench_util.h"
#include "kiln/kiln.h"
#include "ops/dispatch_mode.h"

using namespace kiln;

namespace {

struct Layer {
  Shape x, w;
  Conv2dParams p;
};

// Records the conv2d calls a forward pass makes (input shape, weight shape,
// parameters) as a dispatch mode sees them.
class ConvRecorder : public DispatchMode {
 public:
  std::vector<Layer> layers;
  const char* mode_name() const override { return "conv_recorder"; }
  Tensors handle(OpId id, Tensors& inputs, const Attrs& attrs, const NextMode& next) override {
    if (id == OpId::conv2d) {
      Conv2dParams p;
      p.stride = attrs.ints("stride");
      p.padding = attrs.ints("padding");
      p.dilation = attrs.ints("dilation");
      p.groups = attrs.i("groups");
      layers.push_back({inputs[0].shape(), inputs[1].shape(), p});
    }
    return next(id, inputs, attrs);
  }
};

std::vector<Layer> conv_layers(nn::Module& m, const Shape& input) {
  Tensor x = randn(input);
  ConvRecorder rec;
  NoGradGuard ng;
  m.eval();
  {
    ModeGuard guard(rec);
    m.forward(x);
  }
  return rec.layers;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("float32 vs bfloat16 convolutions per layer");
  std::string model = "airbench";
  int64_t batch = 128;
  double width = 1.0;
  int rounds = 5;
  double grad_scale = 1.0;
  app.add_option("--model", model);
  app.add_option("--batch", batch);
  app.add_option("--width", width);
  app.add_option("--rounds", rounds);
  app.add_option("--grad-scale", grad_scale, "scale of the output gradients (small: the magnitudes of training)");
  CLI11_PARSE(app, argc, argv);

  auto m = models::create(model, model == "airbench" ? width : 1.0);
  std::vector<Layer> layers = conv_layers(*m, {batch, 3, 32, 32});
  std::printf("%s batch %lld: %zu convolutions; ms per call, median of %d interleaved rounds\n", model.c_str(),
              static_cast<long long>(batch), layers.size(), rounds);
  std::printf("%-34s %-8s %9s %9s %7s\n", "input -> weight", "pass", "f32 ms", "bf16 ms", "f32/bf16");
  double tot32 = 0, tot16 = 0;
  for (const Layer& l : layers) {
    Tensor x = randn(l.x), w = randn(l.w);
    Tensor y = conv2d(x, w, Tensor(), l.p);
    Tensor gy = mul(randn(y.shape()), grad_scale);
    Tensor xb = x.to(DType::BFloat16), wb = w.to(DType::BFloat16), gyb = gy.to(DType::BFloat16);
    const char* passes[] = {"fwd", "bwd-data", "bwd-wei"};
    for (int pass = 0; pass < 3; ++pass) {
      auto run = [&](bool bf) {
        const Tensor& a = bf ? xb : x;
        const Tensor& b = bf ? wb : w;
        const Tensor& g = bf ? gyb : gy;
        if (pass == 0) conv2d(a, b, Tensor(), l.p);
        else if (pass == 1) conv2d_backward_input(g, b, l.x, l.p);
        else conv2d_backward_weight(g, a, l.w, l.p);
      };
      run(false);
      run(true);
      std::vector<double> t32, t16;
      for (int r = 0; r < rounds; ++r) {
        t32.push_back(bench::seconds([&] { run(false); }));
        t16.push_back(bench::seconds([&] { run(true); }));
      }
      double a = bench::median(t32) * 1e3, b = bench::median(t16) * 1e3;
      tot32 += a, tot16 += b;
      std::printf("%-34s %-8s %9.2f %9.2f %6.2fx\n", (shape_str(l.x) + " " + shape_str(l.w)).c_str(), passes[pass],
                  a, b, a / b);
    }
  }
  std::printf("all: f32 %.1f ms, bf16 %.1f ms, f32/bf16 %.2fx\n", tot32, tot16, tot32 / tot16);
  return 0;
}
