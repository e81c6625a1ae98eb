// The compiler's nChw16c values between convolutions
// (src/compiler/passes/blocked_layouts.h), op by op: airbench's three
// ConvGroups (conv -> max_pool2d -> batch norm -> GELU -> conv -> batch norm
// -> GELU) at batch B, training mode, forward and backward, each timed with
// every value NCHW and with every value the pass makes nChw16c blocked (the
// first group's input, the 24-channel stem's output, stays NCHW; each
// group's output is blocked, as the next group reads it), interleaved round
// by round so both see the machine's load of the moment; the median round
// of each is printed.
//
//   build/bench/blocked_layouts [--batch 128] [--rounds 9]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_util.h"
#include "kiln/kiln.h"
#include "ops/blocked_layout.h"
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
Attrs bn_attrs() { return Attrs().set("training", true).set("momentum", 0.4).set("eps", 1e-12); }
Attrs gelu_attrs() { return Attrs().set("approximate", std::string("none")); }
// `a` with each of `names` set to nChw16c when `on`.
Attrs with(Attrs a, bool on, std::initializer_list<const char*> names) {
  if (on)
    for (const char* n : names) a.set(n, std::string("nChw16c"));
  return a;
}
// One ConvGroup's operands and the values its backward reads.
struct Group {
  Group(int64_t c_, int64_t o_, int64_t hw_, bool b) : c(c_), o(o_), hw(hw_), blocked_input(b) {}
  int64_t c, o, hw;
  bool blocked_input;  // whether its input can be nChw16c (channels a multiple of 16)
  Tensor x, xb, w1, w2, gamma, beta, rm, rv, grad;
  Tensors saved;  // what the forward leaves for the backward, per run
};

void forward(Group& G, bool blocked) {
  const bool bin = blocked && G.blocked_input;
  const Tensor& x = bin ? G.xb : G.x;
  Tensor y1 = dispatch1(OpId::conv2d, {x, G.w1}, with(with(conv_attrs(), bin, {"in_layout"}), blocked, {"out_layout"}));
  Tensors p = dispatch(OpId::max_pool2d, {y1}, with(pool_attrs(), blocked, {"input_layout", "output_layout"}));
  Tensors b1 = dispatch(OpId::batch_norm, {p[0], G.gamma, G.beta, G.rm, G.rv}, with(bn_attrs(), blocked, {"layout"}));
  Tensor h1 = dispatch1(OpId::gelu, {b1[0]}, gelu_attrs());
  Tensor y2 = dispatch1(OpId::conv2d, {h1, G.w2}, with(conv_attrs(), blocked, {"in_layout", "out_layout"}));
  Tensors b2 = dispatch(OpId::batch_norm, {y2, G.gamma, G.beta, G.rm, G.rv}, with(bn_attrs(), blocked, {"layout"}));
  Tensor h2 = dispatch1(OpId::gelu, {b2[0]}, gelu_attrs());
  G.saved = {x, p[0], p[1], b1[0], b1[1], b1[2], h1, y2, b2[0], b2[1], b2[2], h2};
}

void backward(Group& G, bool blocked) {
  const bool bin = blocked && G.blocked_input;
  const Tensors& s = G.saved;
  const Tensor& x = s[0];
  Attrs bb = with(Attrs().set("training", true).set("eps", 1e-12), blocked, {"layout"});
  Tensor g = blocked ? to_blocked(G.grad) : G.grad;
  g = dispatch1(OpId::gelu_backward, {g, s[8]}, gelu_attrs());
  g = dispatch(OpId::batch_norm_backward, {g, s[7], G.gamma, s[9], s[10]}, bb)[0];
  Attrs ci = conv_attrs().set("input_shape", Shape{x.shape()[0], G.o, G.hw / 2, G.hw / 2});
  Attrs cw = conv_attrs().set("weight_shape", G.w2.shape());
  Tensor gh = dispatch1(OpId::conv2d_backward_input, {g, G.w2},
                        with(ci, blocked, {"grad_out_layout", "grad_input_layout"}));
  dispatch1(OpId::conv2d_backward_weight, {g, s[6]}, with(cw, blocked, {"grad_out_layout", "input_layout"}));
  g = dispatch1(OpId::gelu_backward, {gh, s[3]}, gelu_attrs());
  g = dispatch(OpId::batch_norm_backward, {g, s[1], G.gamma, s[4], s[5]}, bb)[0];
  Attrs pa = pool_attrs().set("input_shape", Shape{x.shape()[0], G.o, G.hw, G.hw});
  g = dispatch1(OpId::max_pool2d_backward, {g, s[2]}, with(pa, blocked, {"grad_input_layout", "grad_output_layout"}));
  Attrs ci1 = conv_attrs().set("input_shape", G.x.shape()), cw1 = conv_attrs().set("weight_shape", G.w1.shape());
  dispatch1(OpId::conv2d_backward_input, {g, G.w1},
            with(with(ci1, blocked, {"grad_out_layout"}), bin, {"grad_input_layout"}));
  dispatch1(OpId::conv2d_backward_weight, {g, x}, with(with(cw1, blocked, {"grad_out_layout"}), bin, {"input_layout"}));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"airbench's ConvGroups, every value NCHW against nChw16c between the convolutions "
               "(the blocked_layouts pass)"};
  int64_t batch = 128;
  int rounds = 9;
  app.add_option("--batch", batch, "images per call");
  app.add_option("--rounds", rounds, "interleaved rounds (the median is printed)");
  CLI11_PARSE(app, argc, argv);
  NoGradGuard ng;
  std::printf("ConvGroup                     fwd NCHW ms  fwd nChw16c ms  bwd NCHW ms  bwd nChw16c ms\n");
  double tot[4] = {0, 0, 0, 0};
  for (Group G : {Group{24, 64, 31, false}, Group{64, 256, 15, true}, Group{256, 256, 7, true}}) {
    manual_seed(1);
    G.x = randn({batch, G.c, G.hw, G.hw});
    if (G.blocked_input) G.xb = to_blocked(G.x);
    G.w1 = randn({G.o, G.c, 3, 3}).mul(0.05);
    G.w2 = randn({G.o, G.o, 3, 3}).mul(0.05);
    G.gamma = ones({G.o}), G.beta = zeros({G.o}), G.rm = zeros({G.o}), G.rv = ones({G.o});
    G.grad = randn({batch, G.o, G.hw / 2, G.hw / 2});
    std::vector<double> t[4];
    for (int r = 0; r < rounds + 1; ++r) {
      for (int blocked = 0; blocked < 2; ++blocked) {
        double f = bench::seconds([&] { forward(G, blocked); });
        double b = bench::seconds([&] { backward(G, blocked); });
        if (r == 0) continue;  // primitive creation
        t[blocked].push_back(f * 1e3);
        t[2 + blocked].push_back(b * 1e3);
      }
    }
    double m[4];
    for (int i = 0; i < 4; ++i) tot[i] += m[i] = bench::median(t[i]);
    std::printf("%3lld->%3lld ch, %2lldx%-2lld          %11.2f  %14.2f  %11.2f  %14.2f\n", (long long)G.c,
                (long long)G.o, (long long)G.hw, (long long)G.hw, m[0], m[1], m[2], m[3]);
  }
  std::printf("all three                     %11.2f  %14.2f  %11.2f  %14.2f\n", tot[0], tot[1], tot[2], tot[3]);
  std::printf("nChw16c / NCHW: forward %.3f, backward %.3f\n", tot[1] / tot[0], tot[3] / tot[2]);
  return 0;
}
