// Checks that a shared object on disk is whole before dlopen maps it.
//
// glibc's loader trusts the ELF headers: it maps each segment at the offset
// the headers name, and touching a page past the end of a truncated file is
// SIGBUS — a crash, not an error dlopen could return. A cache entry cut short
// (disk full, a copy interrupted, a file system that lost the tail) must be
// caught here, so the JIT can delete and rebuild it instead.
#pragma once
#include <filesystem>
#include <string>

namespace kiln::compiler::codegen {

// True when `so` is a 64-bit ELF file whose headers, loadable segments and
// section header table all lie inside the file. Otherwise false with `why`.
bool elf_file_is_complete(const std::filesystem::path& so, std::string& why);

}  // namespace kiln::compiler::codegen
