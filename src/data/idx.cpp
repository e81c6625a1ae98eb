// Fashion-MNIST (and MNIST-style) IDX files, gzip-compressed or plain.
// IDX: a big-endian magic (0x00000803 = uint8 3-d images, 0x00000801 =
// uint8 1-d labels), one big-endian uint32 per dimension, then the bytes.
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "data/data_internal.h"
#include "kiln/error.h"

namespace kiln::data {
namespace detail {

namespace {

bool is_gzip(const std::vector<uint8_t>& raw) { return raw.size() >= 2 && raw[0] == 0x1f && raw[1] == 0x8b; }

// Inflates an in-memory gzip file (concatenated members too) on demand, so a
// reader takes only the bytes it expects and never more.
class Gunzip {
 public:
  Gunzip(const std::vector<uint8_t>& raw, const std::string& path) : path_(path), compressed_(raw.size()) {
    KILN_CHECK(raw.size() <= UINT32_MAX, "IDX: ", path, " is ", raw.size(), " bytes; kiln reads gzip files up to 4 GiB");
    std::memset(&zs_, 0, sizeof zs_);
    // 15 + 16: gzip wrapper only.
    KILN_ASSERT(inflateInit2(&zs_, 15 + 16) == Z_OK, "inflateInit2 failed");
    zs_.next_in = const_cast<Bytef*>(raw.data());
    zs_.avail_in = static_cast<uInt>(raw.size());
  }
  ~Gunzip() { inflateEnd(&zs_); }
  Gunzip(const Gunzip&) = delete;
  Gunzip& operator=(const Gunzip&) = delete;

  // Fills dst[0, n); fewer bytes only when the stream ended.
  size_t read(uint8_t* dst, size_t n) {
    size_t got = 0;
    while (got < n && !ended_) {
      zs_.next_out = dst + got;
      zs_.avail_out = static_cast<uInt>(std::min<size_t>(n - got, 1u << 30));
      const uInt before = zs_.avail_out;
      int r = inflate(&zs_, Z_NO_FLUSH);
      got += before - zs_.avail_out;
      if (r == Z_STREAM_END) {
        // Concatenated gzip members continue; anything else after the end is ignored.
        if (zs_.avail_in >= 2 && zs_.next_in[0] == 0x1f && zs_.next_in[1] == 0x8b)
          inflateReset(&zs_);
        else
          ended_ = true;
      } else if (r == Z_BUF_ERROR || (r == Z_OK && zs_.avail_in == 0 && zs_.avail_out > 0)) {
        // The input ended mid-stream.
        KILN_FAIL("IDX: ", path_, " is truncated (the gzip stream ends early after ", compressed_,
                  " compressed bytes); download it again");
      } else if (r != Z_OK) {
        KILN_FAIL("IDX: ", path_, " is not valid gzip data (", zs_.msg ? zs_.msg : "inflate error",
                  "); the file is corrupt");
      }
    }
    return got;
  }
  // True when the stream holds no data beyond what was read (reads one byte to see).
  bool at_end() {
    uint8_t extra;
    return read(&extra, 1) == 0;
  }

 private:
  std::string path_;
  size_t compressed_;
  z_stream zs_;
  bool ended_ = false;
};

std::string bound_rule(uint64_t compressed) {
  return "kiln inflates at most " + std::to_string(kMaxInflateRatio) + " times a gzip file's size plus 1 MiB, here " +
         byte_count_str(max_inflated_bytes(compressed)) + " for " + std::to_string(compressed) +
         " compressed bytes; real IDX files compress about 2-5x";
}

}  // namespace

std::string byte_count_str(uint64_t bytes) {
  char buf[64];
  if (bytes >= (uint64_t(1) << 30))
    std::snprintf(buf, sizeof buf, "%.1f GiB (%llu bytes)", bytes / 1073741824.0, static_cast<unsigned long long>(bytes));
  else if (bytes >= (uint64_t(1) << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB (%llu bytes)", bytes / 1048576.0, static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(bytes));
  return buf;
}

std::vector<uint8_t> read_maybe_gzip(const std::string& path) {
  std::vector<uint8_t> raw = read_file(path, "IDX");
  if (!is_gzip(raw)) return raw;
  const uint64_t cap = std::min(max_inflated_bytes(raw.size()), kMaxDeclaredBytes);
  Gunzip gz(raw, path);
  std::vector<uint8_t> out;
  size_t total = 0;
  for (;;) {
    out.resize(static_cast<size_t>(std::min<uint64_t>(std::max<uint64_t>(2 * out.size(), 1 << 16), cap + 1)));
    size_t got = gz.read(out.data() + total, out.size() - total);
    total += got;
    if (total < out.size()) break;  // the stream ended
    KILN_CHECK(total <= cap, "IDX: ", path, " inflates past ", byte_count_str(cap), " (", bound_rule(raw.size()),
               "); the file is corrupt or a decompression bomb");
  }
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

// Reads an IDX file (gzip or plain): the header first, checked against the
// bounds, then exactly the data it declares: a gzip stream is never inflated
// further, and data beyond the declared size is an error.
Idx read_idx(const std::string& path, uint32_t magic, int ndims) {
  std::vector<uint8_t> raw = read_file(path, "IDX");
  const bool gzip = is_gzip(raw);
  std::optional<Gunzip> gz;
  if (gzip) gz.emplace(raw, path);
  const size_t header = 4 + 4 * static_cast<size_t>(ndims);
  Idx idx;
  // The header (all of a plain file: its bytes are already in memory).
  if (gzip) {
    idx.bytes.resize(header);
    idx.bytes.resize(gz->read(idx.bytes.data(), header));
  } else {
    idx.bytes = std::move(raw);
  }
  const auto& b = idx.bytes;
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
  KILN_CHECK(count <= kMaxDeclaredBytes, "IDX: ", path, " declares ", shape_str(idx.dims), " = ",
             (count > (1ULL << 62) ? std::string("more bytes than any file holds") : byte_count_str(static_cast<uint64_t>(count))),
             " of data; kiln reads at most 4 GiB from one IDX file. The header is corrupt.");
  const uint64_t data_bytes = static_cast<uint64_t>(count);
  if (gzip) {
    KILN_CHECK(header + data_bytes <= max_inflated_bytes(raw.size()), "IDX: ", path, " declares ",
               shape_str(idx.dims), " = ", byte_count_str(data_bytes), " of data but is a gzip file of ", raw.size(),
               " bytes; ", bound_rule(raw.size()), ". The file is corrupt or a decompression bomb.");
    idx.bytes.resize(header + data_bytes);
    const size_t n = gz->read(idx.bytes.data() + header, data_bytes);
    KILN_CHECK(n == data_bytes, "IDX: ", path, " is truncated: its header announces ", shape_str(idx.dims),
               " but only ", n, " bytes of data follow");
    KILN_CHECK(gz->at_end(), "IDX: ", path, " holds more data than its header declares (", shape_str(idx.dims), " = ",
               data_bytes, " bytes); the file is corrupt");
  } else {
    const uint64_t have = b.size() - header;
    KILN_CHECK(data_bytes <= have, "IDX: ", path, " is truncated: its header announces ", shape_str(idx.dims),
               " but only ", have, " bytes of data follow");
    KILN_CHECK(data_bytes == have, "IDX: ", path, " holds ", have - data_bytes,
               " bytes more than its header declares (", shape_str(idx.dims), " = ", data_bytes,
               " bytes); the file is corrupt");
  }
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
