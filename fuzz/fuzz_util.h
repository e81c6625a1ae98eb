// Shared by the fuzz targets: the readers under test take paths, so each
// input is written to a scratch file first (a private directory per process,
// removed at exit). kiln::Error is the expected outcome for a bad input; an
// InternalError (a broken invariant) or any other exception is a bug, so it
// aborts and libFuzzer saves the input.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "kiln/error.h"

namespace kiln::fuzz {

inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/kiln-fuzz-XXXXXX";
    if (!::mkdtemp(pattern.data())) {
      std::perror("kiln fuzz: mkdtemp");
      std::abort();
    }
    static struct Cleanup {
      std::filesystem::path p;
      ~Cleanup() {
        std::error_code ec;
        std::filesystem::remove_all(p, ec);
      }
    } cleanup{pattern};
    return std::filesystem::path(pattern);
  }();
  return dir;
}

inline void write_file(const std::filesystem::path& path, const uint8_t* data, size_t size) {
  // A new file each time: truncating one in place makes ext4 flush it to disk
  // (auto_da_alloc), which would cost milliseconds per input.
  std::error_code ec;
  std::filesystem::remove(path, ec);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!f) {
    std::fprintf(stderr, "kiln fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
}

// Runs f; a kiln::Error is fine, an InternalError aborts (other exceptions
// escape and abort as uncaught).
template <typename F>
void expect_clean(F&& f) {
  try {
    f();
  } catch (const InternalError& e) {
    std::fprintf(stderr, "kiln fuzz: internal error (a kiln bug): %s\n", e.what());
    std::abort();
  } catch (const Error&) {
  }
}

}  // namespace kiln::fuzz
