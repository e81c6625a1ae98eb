// JPEG and PNG decoding (detail::decode_image, format sniffed from the
// bytes). The input's length picks the channels asked for: own, grey or RGB.
#include "data/data_internal.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int kWant[] = {0, 1, 3};
  kiln::fuzz::expect_clean([&] {
    auto img = kiln::data::detail::decode_image(data, size, "fuzz-input", kWant[size % 3]);
    // The decoder's promise: pixels match the announced size.
    if (img.pixels.size() != static_cast<size_t>(img.height * img.width * img.channels)) std::abort();
  });
  return 0;
}
