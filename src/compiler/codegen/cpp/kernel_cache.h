// The on-disk layout of compiled C++ kernels: where an entry lives, how it
// appears atomically, and housekeeping (stale temporaries, --info, --clear).
// It knows nothing about compilers; CppJit (jit_compiler.h) decides what to
// build and when.
//
// Layout (docs/kernel-cache.md):
//   <root>/cpp-v<kFormatVersion>/<key>.so     an entry: present = complete
//   <root>/cpp-v<kFormatVersion>/<key>.cpp    its source (also kept when the compile failed)
//   <root>/cpp-v<kFormatVersion>/compilers/   memoized `<compiler> --version` answers
//   <anything>.tmp.<pid>.<n>[.so|.cpp|.log]   in-progress or abandoned: ignored, removed when old
// <root> is KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln.
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>

namespace kiln::compiler::codegen {

class KernelCache {
 public:
  // Bumped when the key recipe, the flags' meaning or the layout changes, so
  // an old kiln's entries are never read by a new one (they sit in their own
  // directory until `kiln cache --clear`).
  static constexpr int kFormatVersion = 1;

  // KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln.
  static std::filesystem::path default_root();

  // Creates <root>/cpp-v<kFormatVersion> if needed (an unwritable root is a kiln::Error).
  explicit KernelCache(std::filesystem::path root);

  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path entry_path(const std::string& key) const { return dir_ / (key + ".so"); }
  std::filesystem::path source_path(const std::string& key) const { return dir_ / (key + ".cpp"); }
  std::filesystem::path compiler_memo_dir() const { return dir_ / "compilers"; }
  bool has_entry(const std::string& key) const;
  // Removes a broken entry so the next lookup misses and rebuilds it.
  void remove_entry(const std::string& key) const;

  // Deletes temporaries (in-progress names) older than max_age: what killed
  // compiles leave behind. Younger ones may belong to a compile running now
  // in another process. Returns how many it deleted.
  int remove_stale_temps(std::chrono::seconds max_age) const;

  struct Info {
    int64_t entries = 0;  // complete .so entries
    int64_t sources = 0;  // kept .cpp files
    int64_t temps = 0;    // in-progress or abandoned temporaries
    uint64_t bytes = 0;   // all files together
  };
  Info info() const;
  // Removes every file of this format version (entries, sources, temps,
  // compiler memos); returns how many.
  int64_t clear() const;

 private:
  std::filesystem::path dir_;
};

}  // namespace kiln::compiler::codegen
