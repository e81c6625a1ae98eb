// The Fashion-MNIST IDX reader (load_fashion_mnist, test split), plain or
// gzip (sniffed from the bytes). Input: a little-endian u16 L, L bytes of the
// images file, then the labels file.
#include "fuzz_util.h"
#include "kiln/data.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto dir = kiln::fuzz::scratch_dir() / "idx";
  static const bool made = std::filesystem::create_directories(dir);
  (void)made;
  if (size < 2) return 0;
  size_t images = std::min<size_t>(size - 2, data[0] | size_t{data[1]} << 8);
  kiln::fuzz::write_file(dir / "t10k-images-idx3-ubyte", data + 2, images);
  kiln::fuzz::write_file(dir / "t10k-labels-idx1-ubyte", data + 2 + images, size - 2 - images);
  kiln::fuzz::expect_clean([&] { kiln::data::load_fashion_mnist(dir, false); });
  return 0;
}
