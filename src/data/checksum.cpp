// MD5 through OpenSSL's libcrypto (EVP), used only to check downloads against
// their published sums.
#include <openssl/evp.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "data/data_internal.h"
#include "kiln/error.h"

namespace kiln::data::detail {

Md5::Md5() : ctx_(EVP_MD_CTX_new()) {
  KILN_ASSERT(ctx_, "EVP_MD_CTX_new failed (out of memory)");
  KILN_ASSERT(EVP_DigestInit_ex(ctx_, EVP_md5(), nullptr) == 1, "EVP_DigestInit_ex(MD5) failed");
}

Md5::~Md5() { EVP_MD_CTX_free(ctx_); }

void Md5::update(const void* data, size_t size) {
  KILN_ASSERT(!finished_, "Md5::update after hex_digest");
  if (size > 0) KILN_ASSERT(EVP_DigestUpdate(ctx_, data, size) == 1, "EVP_DigestUpdate failed");
}

std::string Md5::hex_digest() {
  KILN_ASSERT(!finished_, "Md5::hex_digest called twice");
  finished_ = true;
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  KILN_ASSERT(EVP_DigestFinal_ex(ctx_, digest, &len) == 1 && len == 16, "EVP_DigestFinal_ex failed");
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 15];
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
