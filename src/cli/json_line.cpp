#include "cli/json_line.h"

#include <cmath>
#include <cstdio>
#include <string>

namespace kiln::cli {

void print_json_line(const JsonLine& line) {
  std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

double rounded(double x, int decimals) {
  if (!std::isfinite(x)) return x;
  const double scale = std::pow(10.0, decimals);
  double r = std::round(x * scale) / scale;
  return std::isfinite(r) ? r : x;
}

}  // namespace kiln::cli
