// Archive reading through libarchive (detail::read_archive: tar, gzip, zstd,
// zip, ... sniffed by libarchive), keeping every regular entry.
#include "data/data_internal.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = kiln::fuzz::scratch_dir() / "input.tar";
  kiln::fuzz::write_file(path, data, size);
  kiln::fuzz::expect_clean([&] { kiln::data::detail::read_archive(path, [](std::string_view) { return true; }); });
  return 0;
}
