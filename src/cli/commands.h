// The kiln program's subcommands, one file each.
#pragma once

namespace kiln::cli {
// kiln demo: a few eager training steps of a small CNN, loss falling.
int run_demo(int argc, char** argv);
// kiln bench ops [--json] [--cases a,b] [--reps N]: times the op cases of bench/vs_torch.sh.
int run_bench_ops(int argc, char** argv);
}  // namespace kiln::cli
