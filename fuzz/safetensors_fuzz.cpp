// The safetensors reader (load_safetensors) on arbitrary file contents.
#include "fuzz_util.h"
#include "kiln/serialize.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = kiln::fuzz::scratch_dir() / "input.safetensors";
  kiln::fuzz::write_file(path, data, size);
  kiln::fuzz::expect_clean([&] {
    std::map<std::string, std::string> meta;
    kiln::load_safetensors(path, &meta);
  });
  return 0;
}
