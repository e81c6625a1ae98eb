#include "compiler/codegen/cpp/kernel_cache.h"

#include <cstdlib>

#include "core/atomic_file.h"
#include "core/cache_root.h"
#include "kiln/error.h"

namespace kiln::compiler::codegen {
namespace fs = std::filesystem;

fs::path KernelCache::default_root() { return cache_root(); }

KernelCache::KernelCache(fs::path root) : dir_(std::move(root) / ("cpp-v" + std::to_string(kFormatVersion))) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  KILN_CHECK(!ec && fs::is_directory(dir_), "cannot create the kernel cache directory ", dir_.string(), ": ",
             ec.message(), "; set KILN_CACHE_DIR to a writable directory");
}

bool KernelCache::has_entry(const std::string& key) const {
  std::error_code ec;
  return fs::is_regular_file(entry_path(key), ec);
}

void KernelCache::remove_entry(const std::string& key) const {
  std::error_code ec;
  fs::remove(entry_path(key), ec);
}

int KernelCache::remove_stale_temps(std::chrono::seconds max_age) const {
  int removed = 0;
  std::error_code ec;
  auto now = fs::file_time_type::clock::now();
  for (const fs::path& d : {dir_, compiler_memo_dir()}) {
    for (auto it = fs::directory_iterator(d, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
      if (!is_temp_file_name(it->path().filename().string())) continue;
      std::error_code e2;
      auto t = fs::last_write_time(it->path(), e2);
      if (!e2 && now - t > max_age && fs::remove(it->path(), e2)) ++removed;
    }
    ec.clear();
  }
  return removed;
}

KernelCache::Info KernelCache::info() const {
  Info info;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir_, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    std::string name = it->path().filename().string();
    info.bytes += it->file_size(ec);
    if (is_temp_file_name(name)) ++info.temps;
    else if (it->path().extension() == ".so") ++info.entries;
    else if (it->path().extension() == ".cpp") ++info.sources;
  }
  return info;
}

int64_t KernelCache::clear() const {
  std::error_code ec;
  int64_t n = 0;
  for (auto it = fs::directory_iterator(dir_, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    n += static_cast<int64_t>(fs::remove_all(it->path(), ec));
  }
  return n;
}

}  // namespace kiln::compiler::codegen
