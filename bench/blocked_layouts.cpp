// The compiler's nChw16c values between a convolution and its max-pool
// (src/compiler/passes/blocked_layouts.h), op by op: airbench's three
// conv -> max_pool2d layers at batch B, forward (conv2d, max_pool2d) and
// backward (max_pool2d_backward, conv2d_backward_input, _weight), each chain
// timed NCHW and nChw16c, interleaved round by round so both see the
// machine's load of the moment; the median round of each is printed.
//
//   build/bench/blocked_layouts [--batch 128] [--rounds 9]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_util.h"
#include "kiln/kiln.h"
#include "ops/op_def.h"

using namespace kiln;

namespace {

Attrs conv_attrs() {
  return Attrs()
      .set("stride", std::vector<int64_t>{1, 1})
      .set("padding", std::vector<int64_t>{1, 1})
      .set("dilation", std::vector<int64_t>{1, 1})
      .set("groups", int64_t{1});
}
Attrs pool_attrs() {
  return Attrs()
      .set("kernel_size", std::vector<int64_t>{2, 2})
      .set("stride", std::vector<int64_t>{2, 2})
      .set("padding", std::vector<int64_t>{0, 0})
      .set("dilation", std::vector<int64_t>{1, 1})
      .set("ceil_mode", false);
}
Attrs with(Attrs a, const char* name) { return a.set(name, std::string("nChw16c")); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"conv -> max_pool2d chains of airbench, NCHW against nChw16c (the blocked_layouts pass)"};
  int64_t batch = 128;
  int rounds = 9;
  app.add_option("--batch", batch, "images per call");
  app.add_option("--rounds", rounds, "interleaved rounds (the median is printed)");
  CLI11_PARSE(app, argc, argv);
  NoGradGuard ng;
  struct Layer {
    int64_t c, o, hw;
  };
  std::printf("layer                         fwd NCHW ms  fwd nChw16c ms  bwd NCHW ms  bwd nChw16c ms\n");
  double tot[4] = {0, 0, 0, 0};
  for (Layer L : {Layer{24, 64, 31}, Layer{64, 256, 15}, Layer{256, 256, 7}}) {
    manual_seed(1);
    Tensor x = randn({batch, L.c, L.hw, L.hw}), w = randn({L.o, L.c, 3, 3}).mul(0.05);
    const Shape ps{batch, L.o, L.hw / 2, L.hw / 2};
    Tensor gp = randn(ps);
    Tensor idx;
    auto forward = [&](bool blocked) {
      Tensor y = dispatch1(OpId::conv2d, {x, w}, blocked ? with(conv_attrs(), "out_layout") : conv_attrs());
      Tensors p = dispatch(OpId::max_pool2d, {y}, blocked ? with(pool_attrs(), "input_layout") : pool_attrs());
      idx = p[1];
    };
    auto backward = [&](bool blocked) {
      Attrs pa = pool_attrs().set("input_shape", Shape{batch, L.o, L.hw, L.hw});
      Tensor gy = dispatch1(OpId::max_pool2d_backward, {gp, idx}, blocked ? with(pa, "grad_input_layout") : pa);
      Attrs ci = conv_attrs().set("input_shape", x.shape()), cw = conv_attrs().set("weight_shape", w.shape());
      dispatch1(OpId::conv2d_backward_input, {gy, w}, blocked ? with(ci, "grad_out_layout") : ci);
      dispatch1(OpId::conv2d_backward_weight, {gy, x}, blocked ? with(cw, "grad_out_layout") : cw);
    };
    std::vector<double> t[4];
    for (int r = 0; r < rounds + 1; ++r) {
      for (int blocked = 0; blocked < 2; ++blocked) {
        double f = bench::seconds([&] { forward(blocked); });
        double b = bench::seconds([&] { backward(blocked); });
        if (r == 0) continue;  // primitive creation
        t[blocked].push_back(f * 1e3);
        t[2 + blocked].push_back(b * 1e3);
      }
    }
    double m[4];
    for (int i = 0; i < 4; ++i) tot[i] += m[i] = bench::median(t[i]);
    std::printf("%3lld->%3lld ch, %2lldx%-2lld          %11.2f  %14.2f  %11.2f  %14.2f\n", (long long)L.c,
                (long long)L.o, (long long)L.hw, (long long)L.hw, m[0], m[1], m[2], m[3]);
  }
  std::printf("all three                     %11.2f  %14.2f  %11.2f  %14.2f\n", tot[0], tot[1], tot[2], tot[3]);
  std::printf("nChw16c / NCHW: forward %.3f, backward %.3f\n", tot[1] / tot[0], tot[3] / tot[2]);
  return 0;
}
