#include "core/cache_root.h"

#include <cstdlib>

#include "kiln/error.h"

namespace kiln {

std::filesystem::path cache_root() {
  if (const char* d = std::getenv("KILN_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::filesystem::path(x) / "kiln";
  const char* home = std::getenv("HOME");
  KILN_CHECK(home && *home, "kiln's cache needs a directory: set KILN_CACHE_DIR (or HOME or XDG_CACHE_HOME)");
  return std::filesystem::path(home) / ".cache" / "kiln";
}

}  // namespace kiln
