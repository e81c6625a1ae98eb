// MD5 (RFC 1321), used only to check downloads against their published sums.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "data/data_internal.h"
#include "kiln/error.h"

namespace kiln::data::detail {
namespace {

constexpr uint32_t kK[64] = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391};
constexpr int kR[64] = {7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9,  14, 20, 5, 9,
                        14, 20, 5, 9,  14, 20, 5, 9,  14, 20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
                        4, 11, 16, 23, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21};

inline uint32_t rotl(uint32_t x, int c) { return (x << c) | (x >> (32 - c)); }

}  // namespace

Md5::Md5() : s_{0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476} {}

void Md5::block(const uint8_t* p) {
  uint32_t m[16];
  for (int i = 0; i < 16; ++i)
    m[i] = uint32_t(p[4 * i]) | uint32_t(p[4 * i + 1]) << 8 | uint32_t(p[4 * i + 2]) << 16 |
           uint32_t(p[4 * i + 3]) << 24;
  uint32_t a = s_[0], b = s_[1], c = s_[2], d = s_[3];
  for (int i = 0; i < 64; ++i) {
    uint32_t f;
    int g;
    if (i < 16) {
      f = (b & c) | (~b & d);
      g = i;
    } else if (i < 32) {
      f = (d & b) | (~d & c);
      g = (5 * i + 1) % 16;
    } else if (i < 48) {
      f = b ^ c ^ d;
      g = (3 * i + 5) % 16;
    } else {
      f = c ^ (b | ~d);
      g = (7 * i) % 16;
    }
    uint32_t t = d;
    d = c;
    c = b;
    b = b + rotl(a + f + kK[i] + m[g], kR[i]);
    a = t;
  }
  s_[0] += a;
  s_[1] += b;
  s_[2] += c;
  s_[3] += d;
}

void Md5::update(const void* data, size_t size) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  length_ += size;
  if (used_ > 0) {
    size_t take = std::min(size, 64 - used_);
    std::memcpy(buf_ + used_, p, take);
    used_ += take;
    p += take;
    size -= take;
    if (used_ < 64) return;
    block(buf_);
    used_ = 0;
  }
  for (; size >= 64; p += 64, size -= 64) block(p);
  std::memcpy(buf_, p, size);
  used_ = size;
}

std::string Md5::hex_digest() {
  uint64_t bits = length_ * 8;
  uint8_t pad[72] = {0x80};
  size_t padlen = (used_ < 56) ? 56 - used_ : 120 - used_;
  update(pad, padlen);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(bits >> (8 * i));
  update(len, 8);
  KILN_ASSERT(used_ == 0);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (uint32_t w : s_)
    for (int i = 0; i < 4; ++i) {
      uint8_t byte = static_cast<uint8_t>(w >> (8 * i));
      out += hex[byte >> 4];
      out += hex[byte & 15];
    }
  return out;
}

std::string md5_hex(const void* data, size_t size) {
  Md5 m;
  m.update(data, size);
  return m.hex_digest();
}

std::string md5_file_hex(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  KILN_CHECK(f, "md5: cannot open ", path, ": ", std::strerror(errno));
  Md5 m;
  std::vector<uint8_t> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) m.update(buf.data(), n);
  bool err = std::ferror(f);
  std::fclose(f);
  KILN_CHECK(!err, "md5: error reading ", path);
  return m.hex_digest();
}

}  // namespace kiln::data::detail
