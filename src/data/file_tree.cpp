// A directory tree read as if it were an archive (detail::read_tree), so that
// `kiln data import cifar10 DIR` takes an unpacked copy exactly as it takes the archive.
#include <algorithm>
#include <filesystem>

#include "data/data_internal.h"
#include "kiln/error.h"

namespace kiln::data::detail {

std::vector<ArchiveEntry> read_tree(const std::string& root, const std::function<bool(std::string_view path)>& keep) {
  namespace fs = std::filesystem;
  std::error_code ec;
  KILN_CHECK(fs::is_directory(root, ec), "directory: ", root, " is not a directory");
  std::vector<std::string> paths;  // relative to root, '/'-separated
  fs::recursive_directory_iterator it(root, fs::directory_options::none, ec), end;
  KILN_CHECK(!ec, "directory: cannot list ", root, ": ", ec.message());
  for (; it != end; it.increment(ec)) {
    KILN_CHECK(!ec, "directory: cannot list ", root, ": ", ec.message());
    const fs::path& p = it->path();
    if (p.filename().string().starts_with(".")) {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file(ec)) continue;
    std::string rel = p.lexically_relative(root).generic_string();
    if (keep(rel)) paths.push_back(std::move(rel));
  }
  KILN_CHECK(!ec, "directory: cannot list ", root, ": ", ec.message());
  std::sort(paths.begin(), paths.end());
  std::vector<ArchiveEntry> out;
  out.reserve(paths.size());
  for (auto& rel : paths) {
    const std::string path = (fs::path(root) / rel).string();
    const int64_t size = file_size_or(path, 0);
    KILN_CHECK(static_cast<uint64_t>(size) <= kMaxArchiveEntryBytes, "directory: ", path, " is ",
               byte_count_str(static_cast<uint64_t>(size)), "; kiln reads files up to ",
               byte_count_str(kMaxArchiveEntryBytes), " here (a CIFAR-10 batch is 30 MB)");
    std::vector<uint8_t> bytes = read_file(path, "directory");
    out.push_back({std::move(rel), std::move(bytes)});
  }
  return out;
}

}  // namespace kiln::data::detail
