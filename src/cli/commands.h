// The kiln program's subcommands, one file each.
#pragma once

namespace kiln::cli {
// kiln demo: the tutorial CNN trained on CIFAR-10 (or Fashion-MNIST), accuracy and images/s.
int run_demo(int argc, char** argv);
// kiln train --model ... --data ... (see docs/training.md).
int run_train(int argc, char** argv);
// kiln data import|get cifar10 ...
int run_data(int argc, char** argv);
// kiln bench ops [--json] [--cases a,b] [--reps N]: times the op cases of bench/vs_torch.sh.
int run_bench_ops(int argc, char** argv);
}  // namespace kiln::cli
