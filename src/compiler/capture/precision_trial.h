// bf16 autocast, chosen for the whole graph: the per-layer choice's blind spot.
//
// Each bfloat16 convolution times bfloat16 against float32 on its own first
// call (ops/conv.cpp), and float32_regions computes in float32 the layers
// that lost. What a layer's timing cannot see is what its bfloat16 costs the
// layers around it: a bfloat16 island among float32 layers leaves the
// float32 graph's fused nChw16c path (its batch norm and ReLU run unfused on
// plain bfloat16, casts at its edges). ResNet-18's train step won 15 of its
// layers' timings on the AMD EPYC VM and ran at 0.93-0.98x of compiled
// float32 (docs/results.md). So capture builds a graph that has bfloat16
// layers twice: as autocast wrote it (with the per-layer choices) and with
// every layer in float32 (Float32Regions::Everywhere), and times the two in
// place, in the running program, on its real inputs: one untimed run of
// each (primitives built, pages touched), then kTimedRuns of each,
// alternating, so that both see the same load. The faster by median is
// kept (autocast's only by a margin), the other freed; the choice goes into the autotuning table
// (ops/conv_autotune.h) under the graph's hash, so a warm start builds only
// the winner and times nothing. Both graphs compute the same step (float32
// master weights and optimizer state either way); the float32 one only
// rounds less, so switching between them mid-training is sound.
//
// It runs where bfloat16 convolutions choose by timing
// (conv_bf16_chosen_by_timing: KILN_CONV_BF16=auto, AVX-512), on the cpp
// backend, for graphs run whole (a train step with its backward captured, an
// eval forward; not a forward split ahead of time for the eager tape).
// KILN_DISABLE_PASSES=precision_trial keeps autocast's graph without timing;
// KILN_LOGS=precision prints each choice; kiln explain shows it per graph.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compiler/graph/executable.h"
#include "compiler/graph/graph.h"

namespace kiln::compiler {

enum class GraphPrecision { Autocast, Float32 };

class PrecisionTrial {
 public:
  static constexpr int kTimedRuns = 3;  // of each graph, after one untimed run of each
  static constexpr int kRuns = 2 * (kTimedRuns + 1);

  explicit PrecisionTrial(std::string key, Graph float32 = {});

  // Which graph the next run runs: autocast's first, then float32, alternating.
  GraphPrecision next() const { return runs_ % 2 == 0 ? GraphPrecision::Autocast : GraphPrecision::Float32; }
  // The run next() named took `seconds` on inputs of `sizes` (a hash of
  // their shapes). A dynamic graph's runs at other sizes than the first
  // timed run's do not count: their times say nothing about the choice.
  void ran(double seconds, uint64_t sizes = 0);
  bool decided() const { return runs_ >= kRuns; }
  // After decided(): autocast's graph where its median time is at most
  // kAutocastMargin of float32's, else float32. Float32 on a near tie: it is
  // the graph compiled float32 runs (the promise is never slower than that),
  // and rounds less. Three runs of each cannot tell 1% apart on these VMs:
  // airbench's train step kept bfloat16 at 186.2 against 187.5 ms and then
  // measured 0.96x of compiled float32.
  static constexpr double kAutocastMargin = 0.97;
  // After decided(): which graph stays (kAutocastMargin).
  GraphPrecision winner() const;
  // After decided(): the choice and its timings, as explain and the log print it.
  std::string summary() const;
  const std::string& key() const { return key_; }

  Graph float32_graph;
  // Built on float32_graph where it lies (an executable keeps a reference to its graph).
  std::unique_ptr<GraphExecutable> float32_executable;

 private:
  std::string key_;
  int runs_ = 0;
  std::vector<double> autocast_s_, float32_s_;  // timed runs only
  uint64_t sizes_ = 0;                          // the first timed run's
};

// What a graph about to run first does about its precision.
struct PrecisionPlan {
  enum Kind { Autocast, Float32, Trial } kind = Autocast;
  Graph float32;     // Float32: the graph with every bfloat16 layer in float32
  std::string key;   // the autotuning table's key (Trial)
  std::string note;  // how the precision was chosen, for explain ("" when there was no choice)
};

// Asked before execution_passes, on `differentiable` (the graph they would
// run on): Autocast (note empty) when it has no bfloat16 layer, the backend
// is not cpp, the CPU does not time bfloat16 layers or the trial is
// disabled; else the choice recorded for it on this machine (Float32 with
// its graph built: autocast's execution_passes need not run), or a Trial,
// which the caller drops if autocast's graph keeps no bfloat16 layer after
// execution_passes (every layer chose float32 on its own).
PrecisionPlan plan_precision(const Graph& differentiable, const std::string& backend);

// `differentiable` after execution_passes with every bfloat16 layer in float32.
Graph float32_everywhere(const Graph& differentiable);

// The autotuning table's key for a graph's whole-graph precision:
// "graph_precision:" and the SHA-256 of its printed IR.
std::string precision_key(const Graph& differentiable);

}  // namespace kiln::compiler
