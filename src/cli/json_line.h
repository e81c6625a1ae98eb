// The machine-readable lines of kiln's --json output: one JSON object per
// line on stdout (bench/vs_torch.sh and tests read them line by line).
#pragma once
#include <nlohmann/json.hpp>

namespace kiln::cli {

// Keys keep the order they are written in, so lines read like the docs.
using JsonLine = nlohmann::ordered_json;

// Prints `line` compactly on stdout followed by a newline, and flushes.
void print_json_line(const JsonLine& line);

// `x` rounded to `decimals` places (nlohmann writes the shortest form that
// reads back exactly, so 1234.5 stays 1234.5); NaN and infinities are kept
// and print as null.
double rounded(double x, int decimals);

}  // namespace kiln::cli
