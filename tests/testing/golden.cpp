#include "testing/golden.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

namespace kiln::testing {

Goldens::Goldens(const std::string& family) : path_(std::string(KILN_GOLDEN_DIR) + "/" + family + ".bin") {
  std::ifstream f(path_, std::ios::binary);
  KILN_CHECK(f.good(), "golden file ", path_, " is missing; run tools/make_goldens.sh");
  std::vector<char> buf((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t pos = 0;
  auto need = [&](size_t n) {
    KILN_CHECK(pos + n <= buf.size(), "golden file ", path_, " is truncated at byte ", pos);
  };
  auto read = [&](void* dst, size_t n) {
    need(n);
    std::memcpy(dst, buf.data() + pos, n);
    pos += n;
  };
  char magic[4];
  read(magic, 4);
  KILN_CHECK(std::memcmp(magic, "KGLD", 4) == 0, "golden file ", path_, " has a bad magic number");
  uint32_t count;
  read(&count, 4);
  for (uint32_t i = 0; i < count; ++i) {
    uint16_t len;
    read(&len, 2);
    need(len);
    std::string name(buf.data() + pos, len);
    pos += len;
    uint8_t code, ndim;
    read(&code, 1);
    read(&ndim, 1);
    KILN_CHECK(code < kNumDTypes, "golden file ", path_, ": bad dtype code for ", name);
    Shape shape(ndim);
    for (auto& s : shape) read(&s, 8);
    DType dt = static_cast<DType>(code);
    size_t bytes = static_cast<size_t>(numel_of(shape)) * itemsize(dt);
    need(bytes);
    tensors_[name] = from_blob(buf.data() + pos, shape, dt);
    pos += bytes;
  }
}

Tensor Goldens::operator[](const std::string& name) const {
  auto it = tensors_.find(name);
  KILN_CHECK(it != tensors_.end(), "golden file ", path_, " has no tensor '", name,
             "'; regenerate it with tools/make_goldens.sh");
  return it->second;
}

const Goldens& goldens(const std::string& family) {
  static std::map<std::string, std::unique_ptr<Goldens>> loaded;
  auto it = loaded.find(family);
  if (it == loaded.end()) it = loaded.emplace(family, std::make_unique<Goldens>(family)).first;
  return *it->second;
}

Tensor with_golden_layout(const std::string& name, Tensor t) {
  if (name.size() > 2 && name.compare(name.size() - 2, 2, "_T") == 0) return t.t();
  return t;
}

}  // namespace kiln::testing
