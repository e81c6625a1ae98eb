// Batch norm with its activation fused (the compiler's fuse_norm_activation
// pass, src/compiler/passes/fuse_norm_activation.h), op by op: for the batch
// norms of airbench (GELU) and ResNet-18 (ReLU) at batch B in training mode,
// the forward as batch_norm then the activation against batch_norm with
// activation=..., and the backward as the activation's backward then
// batch_norm_backward against batch_norm_backward with the activation, each
// in the layout the compiled step runs it in (nChw16c, or NCHW for airbench's
// last one), interleaved round by round so both see the machine's load of
// the moment; the median round of each is printed. Then ResNet-18's block
// tails, batch norm -> add(shortcut) -> ReLU, forward: batch_norm and the
// add + ReLU as the compiled step ran them (one generated kernel) against
// batch_norm with the residual and the activation fused.
//
//   build/bench/norm_activation [--batch 128] [--rounds 15]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_util.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "ops/blocked_layout.h"
#include "ops/op_def.h"

using namespace kiln;

namespace {

struct Layer {
  const char* model;
  int64_t c, hw;
  bool gelu, blocked;
  int count;  // how many batch norms of this shape the model's train step has
};

Attrs act_attrs(const Layer& L) { return L.gelu ? Attrs().set("approximate", std::string("none")) : Attrs(); }
Attrs with_layout(Attrs a, const Layer& L) { return L.blocked ? a.set("layout", std::string(kNChw16c)) : a; }

struct Operands {
  Tensor x, gz, w, b, rm, rv, mean, invstd, y, z;  // y = batch_norm(x), z = act(y)
};

double forward_ms(const Layer& L, Operands& o, bool fused) {
  Attrs a = with_layout(Attrs().set("training", true).set("momentum", 0.4).set("eps", 1e-12), L);
  const char* act = L.gelu ? "gelu" : "relu";
  return 1e3 * bench::seconds([&] {
    if (fused) {
      dispatch(OpId::batch_norm, {o.x, o.w, o.b, o.rm, o.rv}, a.set("activation", std::string(act)));
      return;
    }
    Tensors bn = dispatch(OpId::batch_norm, {o.x, o.w, o.b, o.rm, o.rv}, a);
    dispatch(L.gelu ? OpId::gelu : OpId::relu, {bn[0]}, act_attrs(L));
  });
}

double backward_ms(const Layer& L, Operands& o, bool fused) {
  Attrs a = with_layout(Attrs().set("training", true).set("eps", 1e-12), L);
  const char* act = L.gelu ? "gelu" : "relu";
  return 1e3 * bench::seconds([&] {
    if (fused) {
      dispatch(OpId::batch_norm_backward, {o.gz, o.x, o.w, o.mean, o.invstd, o.b},
               a.set("activation", std::string(act)));
      return;
    }
    // ReLU's backward reads its output, GELU's its input (both saved by the forward).
    Tensor gy = L.gelu ? dispatch1(OpId::gelu_backward, {o.gz, o.y}, act_attrs(L))
                       : dispatch1(OpId::relu_backward, {o.gz, o.z});
    dispatch(OpId::batch_norm_backward, {gy, o.x, o.w, o.mean, o.invstd}, a);
  });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"batch norm and its ReLU/GELU apart against fused (the fuse_norm_activation pass), forward and "
               "backward, at airbench's and ResNet-18's shapes"};
  int64_t batch = 128;
  int rounds = 15;
  app.add_option("--batch", batch, "images per call");
  app.add_option("--rounds", rounds, "interleaved rounds (the median is printed)");
  CLI11_PARSE(app, argc, argv);
  NoGradGuard ng;
  const Layer layers[] = {
      {"airbench", 64, 15, true, true, 2},   {"airbench", 256, 7, true, true, 2},
      {"airbench", 256, 3, true, true, 1},   {"airbench", 256, 3, true, false, 1},
      {"resnet18", 64, 32, false, true, 3},  {"resnet18", 128, 16, false, true, 2},
      {"resnet18", 256, 8, false, true, 2},  {"resnet18", 512, 4, false, true, 2},
  };
  std::printf("model     layer (x count)            fwd apart  fwd fused  bwd apart  bwd fused   (ms, median of %d)\n",
              rounds);
  for (const char* model : {"airbench", "resnet18"}) {
    double tot[4] = {0, 0, 0, 0};
    for (const Layer& L : layers) {
      if (std::string(L.model) != model) continue;
      manual_seed(1);
      Operands o;
      Tensor x = randn({batch, L.c, L.hw, L.hw}).mul(2.0).add(0.3), gz = randn({batch, L.c, L.hw, L.hw});
      o.x = L.blocked ? to_blocked(x) : x;
      o.gz = L.blocked ? to_blocked(gz) : gz;
      o.w = rand({L.c}).add(0.5), o.b = randn({L.c}).mul(0.1), o.rm = zeros({L.c}), o.rv = ones({L.c});
      Tensors bn = dispatch(OpId::batch_norm, {o.x, o.w, o.b, o.rm, o.rv},
                            with_layout(Attrs().set("training", true).set("momentum", 0.4).set("eps", 1e-12), L));
      o.y = bn[0], o.mean = bn[1], o.invstd = bn[2];
      o.z = dispatch1(L.gelu ? OpId::gelu : OpId::relu, {o.y}, act_attrs(L));
      std::vector<double> t[4];
      for (int r = 0; r < rounds + 1; ++r)
        for (int fused = 0; fused < 2; ++fused) {
          const double f = forward_ms(L, o, fused), b = backward_ms(L, o, fused);
          if (r == 0) continue;  // first touch of the outputs' memory
          t[fused].push_back(f);
          t[2 + fused].push_back(b);
        }
      double m[4];
      for (int i = 0; i < 4; ++i) tot[i] += L.count * (m[i] = bench::median(t[i]));
      std::printf("%-9s %3lld ch %2lldx%-2lld %-7s %-5s (x%d) %9.3f  %9.3f  %9.3f  %9.3f\n", L.model, (long long)L.c,
                  (long long)L.hw, (long long)L.hw, L.blocked ? "nChw16c" : "NCHW", L.gelu ? "gelu" : "relu", L.count,
                  m[0], m[1], m[2], m[3]);
    }
    std::printf("%-9s all, per train step         %9.3f  %9.3f  %9.3f  %9.3f   fused / apart: fwd %.3f, bwd %.3f\n",
                model, tot[0], tot[1], tot[2], tot[3], tot[1] / tot[0], tot[3] / tot[2]);
  }
  // ResNet-18's block tails (each block's second batch norm), forward.
  struct Tail {
    int64_t c, hw;
  };
  auto add_relu = compile([](const Tensor& y, const Tensor& r) { return relu(add(y, r)); },
                          CompileOptions().backend("cpp").name("add_relu"));
  double tot[2] = {0, 0};
  std::printf("\nresnet18 block tails (x2 each)       tail apart  tail fused   (forward ms, median of %d)\n", rounds);
  for (Tail T : {Tail{64, 32}, Tail{128, 16}, Tail{256, 8}, Tail{512, 4}}) {
    manual_seed(2);
    Tensor x = to_blocked(randn({batch, T.c, T.hw, T.hw})), r = to_blocked(randn({batch, T.c, T.hw, T.hw}));
    Tensor w = rand({T.c}).add(0.5), b = randn({T.c}).mul(0.1), rm = zeros({T.c}), rv = ones({T.c});
    Attrs a = Attrs().set("training", true).set("momentum", 0.4).set("eps", 1e-12).set("layout", std::string(kNChw16c));
    std::vector<double> t[2];
    for (int round = 0; round < rounds + 1; ++round) {
      const double apart = 1e3 * bench::seconds([&] {
        add_relu(dispatch(OpId::batch_norm, {x, w, b, rm, rv}, a)[0], r);
      });
      const double fused = 1e3 * bench::seconds([&] {
        dispatch(OpId::batch_norm, {x, w, b, rm, rv, r}, Attrs(a).set("activation", std::string("relu")));
      });
      if (round == 0) continue;  // the compile, first touches
      t[0].push_back(apart);
      t[1].push_back(fused);
    }
    const double m0 = bench::median(t[0]), m1 = bench::median(t[1]);
    tot[0] += 2 * m0, tot[1] += 2 * m1;
    std::printf("resnet18 %3lld ch %2lldx%-2lld nChw16c relu      %9.3f  %9.3f\n", (long long)T.c, (long long)T.hw,
                (long long)T.hw, m0, m1);
  }
  std::printf("resnet18 tails, per train step         %9.3f  %9.3f   fused / apart %.3f\n", tot[0], tot[1],
              tot[1] / tot[0]);
  return 0;
}
