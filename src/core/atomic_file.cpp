#include "core/atomic_file.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "kiln/error.h"

namespace kiln {
namespace fs = std::filesystem;

fs::path unique_temp_path(const fs::path& dir, std::string_view stem, std::string_view suffix) {
  static std::atomic<uint64_t> counter{0};
  std::string name = std::string(stem) + ".tmp." + std::to_string(getpid()) + "." +
                     std::to_string(counter.fetch_add(1)) + std::string(suffix);
  return dir / name;
}

bool is_temp_file_name(const std::string& filename) { return filename.find(".tmp.") != std::string::npos; }

void publish_file(const fs::path& temp, const fs::path& target) {
  KILN_CHECK(std::rename(temp.c_str(), target.c_str()) == 0, "cannot move ", temp.string(), " to ", target.string(),
             ": ", std::strerror(errno), " (is the directory writable?)");
}

void write_file_atomically(const fs::path& target, std::string_view content) {
  fs::path temp = unique_temp_path(target.parent_path(), target.filename().string(), "");
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.close();
    KILN_CHECK(out.good(), "cannot write ", temp.string(), " (is the directory writable, or the disk full?)");
  }
  publish_file(temp, target);
}

}  // namespace kiln
