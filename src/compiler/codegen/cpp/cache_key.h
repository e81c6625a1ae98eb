// Content hashes that name kernel-cache entries.
#pragma once
#include <initializer_list>
#include <string>
#include <string_view>

namespace kiln::compiler::codegen {

// SHA-256 (OpenSSL) of the parts, each length-prefixed so that ("ab", "c")
// and ("a", "bc") differ, as 64 lowercase hex digits. A cryptographic hash
// because the key is the only thing tying a .so on disk to its source: a
// collision would load the wrong kernel without any error.
std::string sha256_hex(std::initializer_list<std::string_view> parts);

}  // namespace kiln::compiler::codegen
