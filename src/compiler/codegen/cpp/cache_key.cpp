#include "compiler/codegen/cpp/cache_key.h"

#include <openssl/evp.h>

#include <cstdint>
#include <memory>

#include "kiln/error.h"

namespace kiln::compiler::codegen {

std::string sha256_hex(std::initializer_list<std::string_view> parts) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  KILN_ASSERT(ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1, "EVP_DigestInit_ex(SHA-256) failed");
  for (std::string_view p : parts) {
    uint64_t n = p.size();
    KILN_ASSERT(EVP_DigestUpdate(ctx.get(), &n, sizeof n) == 1 && EVP_DigestUpdate(ctx.get(), p.data(), p.size()) == 1,
                "EVP_DigestUpdate failed");
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  KILN_ASSERT(EVP_DigestFinal_ex(ctx.get(), digest, &len) == 1 && len == 32, "EVP_DigestFinal_ex failed");
  static const char* hex = "0123456789abcdef";
  std::string out(2 * len, '0');
  for (unsigned i = 0; i < len; ++i) {
    out[2 * i] = hex[digest[i] >> 4];
    out[2 * i + 1] = hex[digest[i] & 15];
  }
  return out;
}

}  // namespace kiln::compiler::codegen
