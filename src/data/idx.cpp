// Fashion-MNIST (and MNIST-style) IDX files, gzip-compressed or plain.
// IDX: a big-endian magic (0x00000803 = uint8 3-d images, 0x00000801 =
// uint8 1-d labels), one big-endian uint32 per dimension, then the bytes.
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "data/data_internal.h"
#include "kiln/error.h"

namespace kiln::data {
namespace detail {

std::vector<uint8_t> read_maybe_gzip(const std::string& path) {
  std::vector<uint8_t> raw = read_file(path, "IDX");
  if (raw.size() < 2 || raw[0] != 0x1f || raw[1] != 0x8b) return raw;
  z_stream zs;
  std::memset(&zs, 0, sizeof zs);
  // 15 + 16: gzip wrapper only.
  KILN_ASSERT(inflateInit2(&zs, 15 + 16) == Z_OK, "inflateInit2 failed");
  std::vector<uint8_t> out;
  out.resize(std::max<size_t>(raw.size() * 4, 1 << 16));
  zs.next_in = raw.data();
  zs.avail_in = static_cast<uInt>(raw.size());
  int r = Z_OK;
  for (;;) {
    if (zs.total_out == out.size()) out.resize(out.size() * 2);
    zs.next_out = out.data() + zs.total_out;
    zs.avail_out = static_cast<uInt>(std::min<size_t>(out.size() - zs.total_out, 1u << 30));
    r = inflate(&zs, Z_NO_FLUSH);
    if (r == Z_STREAM_END) {
      // Concatenated gzip members continue; anything else after the end is ignored.
      if (zs.avail_in >= 2 && zs.next_in[0] == 0x1f && zs.next_in[1] == 0x8b) {
        inflateReset(&zs);
        continue;
      }
      break;
    }
    if (r == Z_OK) continue;
    if (r == Z_BUF_ERROR) break;  // the input ended mid-stream: truncated
    std::string msg = zs.msg ? zs.msg : "inflate error";
    inflateEnd(&zs);
    KILN_FAIL("IDX: ", path, " is not valid gzip data (", msg, "); the file is corrupt");
  }
  size_t total = zs.total_out;
  inflateEnd(&zs);
  KILN_CHECK(r == Z_STREAM_END, "IDX: ", path, " is truncated (the gzip stream ends early after ", raw.size(),
             " compressed bytes); download it again");
  out.resize(total);
  return out;
}

namespace {

uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

struct Idx {
  std::vector<uint8_t> bytes;
  std::vector<int64_t> dims;
  size_t data_offset = 0;
};

Idx read_idx(const std::string& path, uint32_t magic, int ndims) {
  Idx idx;
  idx.bytes = read_maybe_gzip(path);
  const auto& b = idx.bytes;
  size_t header = 4 + 4 * static_cast<size_t>(ndims);
  KILN_CHECK(b.size() >= 4, "IDX: ", path, " is truncated: ", b.size(), " bytes, shorter than the 4-byte magic");
  uint32_t m = be32(b.data());
  char want[16], got[16];
  std::snprintf(want, sizeof want, "0x%08X", magic);
  std::snprintf(got, sizeof got, "0x%08X", m);
  KILN_CHECK(m == magic, "IDX: ", path, " has bad magic ", got, "; expected ", want,
             (magic == 0x803 ? " (uint8 images, 3 dims)" : " (uint8 labels, 1 dim)"),
             ". It is not an IDX file of that kind, or it is corrupt.");
  KILN_CHECK(b.size() >= header, "IDX: ", path, " is truncated: ", b.size(), " bytes, shorter than its ", header,
             "-byte header");
  // The product in 128 bits: a corrupt header may announce more than 2^64 bytes.
  unsigned __int128 count = 1;
  for (int i = 0; i < ndims; ++i) {
    idx.dims.push_back(be32(b.data() + 4 + 4 * i));
    count *= static_cast<uint64_t>(idx.dims.back());
  }
  idx.data_offset = header;
  KILN_CHECK(count <= b.size() - header, "IDX: ", path, " is truncated: its header announces ",
             shape_str(idx.dims), (count > (1ULL << 62) ? " (more bytes than any file holds)" : ""),
             " but only ", b.size() - header, " bytes of data follow");
  return idx;
}

std::string find_idx(const std::string& dir, const std::string& stem) {
  for (const char* suffix : {".gz", ""}) {
    std::string p = dir + "/" + stem + suffix;
    if (is_regular_file(p)) return p;
  }
  KILN_FAIL("Fashion-MNIST: missing ", dir, "/", stem, ".gz (or ", stem,
            " uncompressed). Install Debian's dataset-fashion-mnist package (files in ",
            default_fashion_mnist_dir(), ") or point at a directory holding the four IDX files.");
}

}  // namespace
}  // namespace detail

std::string default_fashion_mnist_dir() { return "/usr/share/datasets/fashion-mnist"; }

std::string find_fashion_mnist_dir(const std::string& explicit_dir) {
  if (!explicit_dir.empty()) return explicit_dir;
  const char* env = std::getenv("KILN_FASHION_MNIST");
  if (env && *env) return env;
  return default_fashion_mnist_dir();
}

ImageDataset load_fashion_mnist(const std::string& dir, bool train) {
  const std::string prefix = train ? "train" : "t10k";
  std::string ipath = detail::find_idx(dir, prefix + "-images-idx3-ubyte");
  std::string lpath = detail::find_idx(dir, prefix + "-labels-idx1-ubyte");
  detail::Idx images = detail::read_idx(ipath, 0x00000803, 3);
  detail::Idx labels = detail::read_idx(lpath, 0x00000801, 1);
  const int64_t n = images.dims[0], h = images.dims[1], w = images.dims[2];
  KILN_CHECK(labels.dims[0] == n, "Fashion-MNIST: ", ipath, " holds ", n, " images but ", lpath, " holds ",
             labels.dims[0], " labels; the files do not belong together");
  ImageDataset ds;
  ds.classes = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  ds.source = dir + (train ? " (train)" : " (test)");
  ds.images = Tensor::empty({n, 1, h, w}, DType::UInt8);
  ds.labels = Tensor::empty({n}, DType::Int64);
  std::memcpy(ds.images.data<uint8_t>(), images.bytes.data() + images.data_offset, static_cast<size_t>(n * h * w));
  int64_t* lab = ds.labels.data<int64_t>();
  const uint8_t* l = labels.bytes.data() + labels.data_offset;
  for (int64_t i = 0; i < n; ++i) {
    KILN_CHECK(l[i] < 10, "Fashion-MNIST: ", lpath, " label ", i, " is ", int(l[i]),
               "; expected 0..9. The file is corrupt.");
    lab[i] = l[i];
  }
  return ds;
}

}  // namespace kiln::data
