// Archives (.tar, .tar.gz, .tar.zst, ...) read and written with libarchive,
// entry by entry in memory: image folders are decoded without unpacking.
#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "data/data_internal.h"
#include "kiln/error.h"

namespace kiln::data::detail {
namespace {

struct ArchiveCloser {
  bool reading;
  void operator()(struct archive* a) const {
    if (reading)
      archive_read_free(a);
    else
      archive_write_free(a);
  }
};
using ArchivePtr = std::unique_ptr<struct archive, ArchiveCloser>;

bool ends_with(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

}  // namespace

std::vector<ArchiveEntry> read_archive(const std::string& path,
                                       const std::function<bool(std::string_view path)>& keep) {
  KILN_CHECK(is_regular_file(path), "archive: cannot open ", path, ": no such file");
  ArchivePtr a(archive_read_new(), ArchiveCloser{true});
  KILN_ASSERT(a, "archive_read_new failed");
  archive_read_support_filter_all(a.get());
  archive_read_support_format_tar(a.get());
  archive_read_support_format_gnutar(a.get());
  archive_read_support_format_zip(a.get());
  if (archive_read_open_filename(a.get(), path.c_str(), 1 << 20) != ARCHIVE_OK)
    KILN_FAIL("archive: cannot read ", path, ": ", archive_error_string(a.get()),
              " (expected a .tar, .tar.gz or .tar.zst archive)");
  // The bounds (data_internal.h): the decompressed stream, skipped entries
  // included, at most max_inflated_bytes(archive size); a kept entry at most
  // kMaxArchiveEntryBytes and never past its declared size; all kept entries
  // together within the same stream bound.
  const uint64_t archive_bytes = static_cast<uint64_t>(std::max<int64_t>(file_size_or(path, 0), 0));
  const uint64_t cap = max_inflated_bytes(archive_bytes);
  auto bomb = [&](uint64_t bytes) {
    KILN_FAIL("archive: ", path, " inflates past kiln's bound of ", byte_count_str(cap), ": it holds ",
              byte_count_str(bytes), " or more, where kiln reads at most ", kMaxInflateRatio,
              " times an archive's size plus 1 MiB (this one is ", archive_bytes,
              " bytes; archives of images compress about 1:1). The archive is corrupt or a decompression bomb.");
  };
  auto stream_pos = [&] { return static_cast<uint64_t>(std::max<la_int64_t>(archive_filter_bytes(a.get(), 0), 0)); };
  uint64_t kept = 0;
  std::vector<ArchiveEntry> out;
  struct archive_entry* entry;
  int64_t seen = 0;
  for (;;) {
    int r = archive_read_next_header(a.get(), &entry);
    if (r == ARCHIVE_EOF) break;
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
      KILN_FAIL("archive: ", path, " is corrupt or truncated after ", seen, " entries: ",
                archive_error_string(a.get()) ? archive_error_string(a.get()) : "unknown error");
    ++seen;
    const bool sized = archive_entry_size_is_set(entry);
    const uint64_t declared = sized ? static_cast<uint64_t>(std::max<la_int64_t>(archive_entry_size(entry), 0)) : 0;
    // Checked before the next header skips this entry's data by inflating it.
    if (stream_pos() + declared > cap) bomb(stream_pos() + declared);
    if (archive_entry_filetype(entry) != AE_IFREG) continue;
    const char* name = archive_entry_pathname(entry);
    if (!name || !keep(name)) continue;
    ArchiveEntry e;
    e.path = name;
    KILN_CHECK(declared <= kMaxArchiveEntryBytes, "archive: ", path, " entry ", e.path, " declares ",
               byte_count_str(declared), "; kiln reads entries up to ", byte_count_str(kMaxArchiveEntryBytes),
               " (a CIFAR-10 batch is 30 MB). The archive is corrupt.");
    if (kept + declared > cap) bomb(kept + declared);
    if (declared > 0) e.data.reserve(static_cast<size_t>(declared));
    const void* buf;
    size_t size;
    la_int64_t offset;
    for (;;) {
      int rr = archive_read_data_block(a.get(), &buf, &size, &offset);
      if (rr == ARCHIVE_EOF) break;
      if (rr != ARCHIVE_OK && rr != ARCHIVE_WARN)
        KILN_FAIL("archive: ", path, " is corrupt or truncated in entry ", e.path, ": ",
                  archive_error_string(a.get()) ? archive_error_string(a.get()) : "unknown error");
      KILN_CHECK(offset >= 0, "archive: bad data offset in ", path, " entry ", e.path);
      const uint64_t end = static_cast<uint64_t>(offset) + size;
      KILN_CHECK(!sized || end <= declared, "archive: ", path, " entry ", e.path, " holds more than the ", declared,
                 " bytes its header declares; the archive is corrupt");
      KILN_CHECK(end <= kMaxArchiveEntryBytes, "archive: ", path, " entry ", e.path, " is larger than ",
                 byte_count_str(kMaxArchiveEntryBytes), ", the most kiln reads from one entry. The archive is corrupt.");
      if (end > e.data.size() && kept + (end - e.data.size()) > cap) bomb(kept + (end - e.data.size()));
      if (stream_pos() > cap) bomb(stream_pos());
      if (end > e.data.size()) kept += end - e.data.size();
      const auto* bytes = static_cast<const uint8_t*>(buf);
      if (static_cast<size_t>(offset) == e.data.size()) {
        e.data.insert(e.data.end(), bytes, bytes + size);
      } else {
        size_t end = static_cast<size_t>(offset) + size;
        if (e.data.size() < end) e.data.resize(end);  // sparse holes stay zero
        std::memcpy(e.data.data() + offset, bytes, size);
      }
    }
    if (archive_entry_size_is_set(entry))
      KILN_CHECK(static_cast<int64_t>(e.data.size()) == archive_entry_size(entry), "archive: ", path,
                 " is truncated: entry ", e.path, " has ", e.data.size(), " of its ", archive_entry_size(entry),
                 " bytes");
    out.push_back(std::move(e));
  }
  return out;
}

void write_archive(const std::string& path, const std::vector<ArchiveEntry>& files) {
  ArchivePtr a(archive_write_new(), ArchiveCloser{false});
  KILN_ASSERT(a, "archive_write_new failed");
  archive_write_set_format_pax_restricted(a.get());
  if (ends_with(path, ".tar.gz") || ends_with(path, ".tgz"))
    archive_write_add_filter_gzip(a.get());
  else if (ends_with(path, ".tar.zst"))
    KILN_CHECK(archive_write_add_filter_zstd(a.get()) == ARCHIVE_OK, "archive: libarchive cannot write zstd: ",
               archive_error_string(a.get()));
  else
    KILN_CHECK(ends_with(path, ".tar"), "archive: cannot tell the format of ", path,
               " (use .tar, .tar.gz or .tar.zst)");
  if (archive_write_open_filename(a.get(), path.c_str()) != ARCHIVE_OK)
    KILN_FAIL("archive: cannot write ", path, ": ", archive_error_string(a.get()));
  for (const auto& f : files) {
    struct archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, f.path.c_str());
    archive_entry_set_size(e, static_cast<la_int64_t>(f.data.size()));
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    int r = archive_write_header(a.get(), e);
    archive_entry_free(e);
    KILN_CHECK(r == ARCHIVE_OK, "archive: cannot write ", path, ": ", archive_error_string(a.get()));
    if (!f.data.empty())
      KILN_CHECK(archive_write_data(a.get(), f.data.data(), f.data.size()) == static_cast<la_ssize_t>(f.data.size()),
                 "archive: cannot write ", path, ": ", archive_error_string(a.get()));
  }
  KILN_CHECK(archive_write_close(a.get()) == ARCHIVE_OK, "archive: cannot finish ", path, ": ",
             archive_error_string(a.get()));
}

}  // namespace kiln::data::detail
