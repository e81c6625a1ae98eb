// max_pool2d and its backward at airbench's three pools (2x2, stride 2,
// batch B, training: with indices), NCHW against nChw16c in and out (as the
// compiler's blocked_layouts pass runs them), interleaved round by round so
// both see the machine's load of the moment; the median round is printed.
//
//   build/bench/pool_layouts [--batch 128] [--rounds 15]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <vector>

#include "bench_util.h"
#include "kiln/kiln.h"
#include "ops/blocked_layout.h"
#include "ops/op_def.h"

using namespace kiln;

int main(int argc, char** argv) {
  CLI::App app{"max_pool2d (with indices) and its backward, NCHW against nChw16c"};
  int64_t batch = 128;
  int rounds = 15;
  app.add_option("--batch", batch, "images per call");
  app.add_option("--rounds", rounds, "interleaved rounds (the median is printed)");
  CLI11_PARSE(app, argc, argv);
  NoGradGuard ng;
  const Attrs pool = Attrs()
                         .set("kernel_size", std::vector<int64_t>{2, 2})
                         .set("stride", std::vector<int64_t>{2, 2})
                         .set("padding", std::vector<int64_t>{0, 0})
                         .set("dilation", std::vector<int64_t>{1, 1})
                         .set("ceil_mode", false);
  const std::string blk = "nChw16c";
  std::printf("input                 fwd NCHW  fwd nChw16c  bwd NCHW  bwd nChw16c  (ms)\n");
  double tot[4] = {0, 0, 0, 0};
  for (auto [c, hw] : std::vector<std::pair<int64_t, int64_t>>{{64, 31}, {256, 15}, {256, 7}}) {
    manual_seed(1);
    const Shape xs{batch, c, hw, hw};
    const Tensor x = randn(xs), xb = to_blocked(x);
    const Attrs fb = Attrs(pool).set("input_layout", blk).set("output_layout", blk);
    const Attrs bp = Attrs(pool).set("input_shape", xs);
    const Attrs bb = Attrs(bp).set("grad_input_layout", blk).set("grad_output_layout", blk);
    Tensors yp = dispatch(OpId::max_pool2d, {x}, pool), yb = dispatch(OpId::max_pool2d, {xb}, fb);
    const Tensor g = randn(yp[0].shape()), gb = to_blocked(g);
    std::vector<double> t[4];
    for (int r = 0; r < rounds; ++r) {
      t[0].push_back(bench::seconds([&] { dispatch(OpId::max_pool2d, {x}, pool); }));
      t[1].push_back(bench::seconds([&] { dispatch(OpId::max_pool2d, {xb}, fb); }));
      t[2].push_back(bench::seconds([&] { dispatch1(OpId::max_pool2d_backward, {g, yp[1]}, bp); }));
      t[3].push_back(bench::seconds([&] { dispatch1(OpId::max_pool2d_backward, {gb, yb[1]}, bb); }));
    }
    std::printf("%-20s", shape_str(xs).c_str());
    for (int k = 0; k < 4; ++k) {
      const double ms = bench::median(t[k]) * 1e3;
      tot[k] += ms;
      std::printf(" %10.2f", ms);
    }
    std::printf("\n");
  }
  std::printf("%-20s %10.2f %10.2f %10.2f %10.2f\n", "all", tot[0], tot[1], tot[2], tot[3]);
  return 0;
}
