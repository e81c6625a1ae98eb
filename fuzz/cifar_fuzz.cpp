// The CIFAR-10 binary reader (load_cifar10_binary, test split). An input that
// starts with "META\n" carries a batches.meta.txt up to the first "\n\n";
// the rest is test_batch.bin.
#include <string_view>

#include "fuzz_util.h"
#include "kiln/data.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto dir = kiln::fuzz::scratch_dir() / "cifar";
  static const bool made = std::filesystem::create_directories(dir);
  (void)made;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::filesystem::remove(dir / "batches.meta.txt");
  if (in.starts_with("META\n")) {
    size_t end = in.find("\n\n");
    std::string_view meta = in.substr(5, end == std::string_view::npos ? std::string_view::npos : end - 5);
    kiln::fuzz::write_file(dir / "batches.meta.txt", reinterpret_cast<const uint8_t*>(meta.data()), meta.size());
    in = end == std::string_view::npos ? std::string_view() : in.substr(end + 2);
  }
  kiln::fuzz::write_file(dir / "test_batch.bin", reinterpret_cast<const uint8_t*>(in.data()), in.size());
  kiln::fuzz::expect_clean([&] { kiln::data::load_cifar10_binary(dir, false); });
  return 0;
}
