#include "compiler/codegen/cpp/elf_check.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <vector>

namespace kiln::compiler::codegen {

namespace {

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

bool read_at(int fd, void* buf, size_t n, uint64_t offset) {
  return ::pread(fd, buf, n, static_cast<off_t>(offset)) == static_cast<ssize_t>(n);
}

}  // namespace

bool elf_file_is_complete(const std::filesystem::path& so, std::string& why) {
  Fd f{::open(so.c_str(), O_RDONLY | O_CLOEXEC)};
  struct stat st{};
  if (f.fd < 0 || ::fstat(f.fd, &st) != 0) {
    why = std::string("cannot open: ") + std::strerror(errno);
    return false;
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  Elf64_Ehdr eh{};
  if (!read_at(f.fd, &eh, sizeof eh, 0) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64) {
    why = "not a 64-bit ELF file (" + std::to_string(size) + " bytes)";
    return false;
  }
  if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phoff + uint64_t{eh.e_phnum} * sizeof(Elf64_Phdr) > size) {
    why = "truncated: program headers past the end of the file";
    return false;
  }
  std::vector<Elf64_Phdr> ph(eh.e_phnum);
  if (!ph.empty() && !read_at(f.fd, ph.data(), ph.size() * sizeof(Elf64_Phdr), eh.e_phoff)) {
    why = "cannot read the program headers";
    return false;
  }
  for (const Elf64_Phdr& p : ph) {
    if (p.p_type == PT_LOAD && p.p_offset + p.p_filesz > size) {
      why = "truncated: a loadable segment ends at byte " + std::to_string(p.p_offset + p.p_filesz) + " of " +
            std::to_string(size);
      return false;
    }
  }
  // The linker writes the section header table last: a file cut anywhere
  // loses at least this.
  if (eh.e_shoff + uint64_t{eh.e_shnum} * eh.e_shentsize > size) {
    why = "truncated: the section header table ends past byte " + std::to_string(size);
    return false;
  }
  return true;
}

}  // namespace kiln::compiler::codegen
