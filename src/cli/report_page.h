// What kiln report measured, and the one self-contained HTML page it becomes
// (inline CSS and SVG charts, no script, nothing fetched: it opens offline).
// report_cmd.cpp measures; this file only draws, so it is testable with
// made-up numbers.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/bench_models.h"
#include "cli/train.h"

namespace kiln::cli {

// The machine and build the numbers came from.
struct MachineInfo {
  std::string cpu_model, isa, os, memory, kiln_version, commit, date, device;
  unsigned logical_cpus = 0;
  int threads = 0;  // OpenMP threads the kernels use
};
// This process's machine (/proc/cpuinfo, OpenMP, the kernels' ISA, the
// source tree's git commit) with `device` the report ran on.
MachineInfo describe_machine(const std::string& device);

// One training run: a curve in the training or layer-fusion charts.
struct TrainingRun {
  std::string label;                // "eager", "compiled (default)", "k = 0 (nothing frozen)"
  std::vector<EpochRecord> epochs;  // empty: not run; `missing` says why
  double train_img_per_s = 0, test_acc = 0;
  std::string missing;  // non-empty: why this run has no data (drawn as a labelled gap, said in the text)
  std::string detail;   // shown beside the run in its table (layer fusion: the frozen pairs)
};

struct ModelReport {
  std::string model;
  std::vector<ModelBenchCase> bench;       // eager first, then each compiled mode, per phase
  std::vector<TrainingRun> training;       // eager, then compiled
  std::vector<TrainingRun> layer_fusion;   // k = 0, 1, ..., K
  std::string layer_fusion_note;           // what the section holds and what it does not yet
  nlohmann::json explain;                  // kiln explain --train --json for the model
  std::string explain_what;                // "train step, batch 8"
};

struct ReportData {
  std::string command;  // the command line that made the report
  std::string settings;  // "3 epochs of 70 steps, cifar10, ..." in words
  MachineInfo machine;
  std::vector<ModelReport> models;
  double wall_s = 0;
};

// The whole page. kiln::Error if a chart has nothing to draw (a model with
// no bench case or no epoch of any run).
std::string report_html(const ReportData& data);

}  // namespace kiln::cli
