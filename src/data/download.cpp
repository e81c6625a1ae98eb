// `kiln data get cifar10`: fetch the official archive with curl (or wget),
// check its published MD5, import it. No network, no curl, a bad sum: a
// kiln::Error that names the offline route, `kiln data import cifar10 ARCHIVE`.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "data/data_internal.h"
#include "kiln/error.h"

extern char** environ;

namespace kiln::data {
namespace {

constexpr const char* kCifar10Url = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz";
constexpr const char* kCifar10Md5 = "c32a1d4ab5d03f1284b67883e8d87530";

// Runs argv[0] from PATH; returns its exit status, 127 when it cannot start.
int run_program(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid;
  if (posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return 127;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return 127;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

[[noreturn]] void fail(const std::string& url, const std::string& why) {
  KILN_FAIL("download cifar10: the download of ", url, " failed (", why,
            "). Without a network, import a copy you have instead: `kiln data import cifar10 ARCHIVE` (the official ",
            "cifar-10-binary.tar.gz, or an image-folder archive such as ../shared/data/cifar10-jpeg.tar.zst), ",
            "or set KILN_CIFAR10_ARCHIVE=ARCHIVE.");
}

}  // namespace

void download_cifar10(const std::string& data_dir) {
  namespace fs = std::filesystem;
  const char* env_url = std::getenv("KILN_CIFAR10_URL");
  const char* env_md5 = std::getenv("KILN_CIFAR10_MD5");
  const std::string url = env_url && *env_url ? env_url : kCifar10Url;
  const std::string md5 = env_md5 && *env_md5 ? env_md5 : kCifar10Md5;
  std::error_code ec;
  fs::create_directories(data_dir, ec);
  if (ec) fail(url, "cannot create " + data_dir + ": " + ec.message());
  const std::string tmp =
      (fs::path(data_dir) / (".cifar-10-binary.tar.gz.download." + std::to_string(::getpid()))).string();
  std::cerr << "kiln: downloading " << url << " ...\n";
  int rc = run_program({"curl", "-fL", "--silent", "--show-error", "--connect-timeout", "20", "--max-time", "1800",
                        "-o", tmp, url});
  std::string why;
  if (rc == 127) {
    rc = run_program({"wget", "-q", "--timeout=20", "--tries=2", "-O", tmp, url});
    if (rc == 127) why = "neither curl nor wget could be run";
    else if (rc != 0) why = "wget exited with status " + std::to_string(rc);
  } else if (rc != 0) {
    why = "curl exited with status " + std::to_string(rc) + (rc == 6 || rc == 7 || rc == 28 ? ": no network?" : "");
  }
  if (!why.empty()) {
    fs::remove(tmp, ec);
    fail(url, why);
  }
  std::string got;
  try {
    got = detail::md5_file_hex(tmp);
  } catch (const Error& e) {
    fs::remove(tmp, ec);
    fail(url, e.what());
  }
  if (got != md5) {
    fs::remove(tmp, ec);
    fail(url, "the file's MD5 is " + got + ", not the published " + md5 + ": a broken or altered download");
  }
  std::cerr << "kiln: MD5 " << got << " matches\n";
  try {
    import_cifar10(tmp, data_dir);
  } catch (...) {
    fs::remove(tmp, ec);
    throw;
  }
  fs::remove(tmp, ec);
}

}  // namespace kiln::data
