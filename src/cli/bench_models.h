// One case of `kiln bench models` as a function, so kiln report measures
// exactly what the bench command does (docs/benchmarks.md) instead of a copy.
#pragma once
#include <cstdint>
#include <string>

#include "cli/commands.h"
#include "kiln/device.h"

namespace kiln::cli {

// One model in one mode (eager, default, ...) and phase (train, eval).
struct ModelBenchCase {
  std::string model, mode, phase;
  double img_per_s = 0;
  double compile_s = -1;  // the first call less the second; -1: eager (nothing compiled)
  double warm_s = -1;     // the same in a second process on the warm kernel cache; -1: not measured
  int steps = 0;          // timed steps
  // CUDA: cudaMalloc / cudaFree calls during the timed steps (steady state: 0); -1 on the CPU.
  int64_t cuda_mallocs = -1, cuda_frees = -1;
  int warmup_steps = 5;   // calls before the timed steps (CUDA: until one makes no cudaMalloc)
};

// Times the case: its first call (cold compile), warm-up calls, then steps for
// about 2 s (at most o.steps when set), and, for a compiled mode unless
// o.no_warm, the warm start in a second run of this program.
ModelBenchCase measure_model_case(const BenchModelsOptions& o, const std::string& model, const std::string& mode,
                                  const std::string& phase, Device dev);

}  // namespace kiln::cli
