// `kiln data get cifar10`: fetch the official archive with libcurl into a temp
// file, check its published MD5, import it, and only then keep what was
// created. No network, a server error, a stalled transfer, a bad sum: a
// kiln::Error that names the offline route, `kiln data import cifar10 ARCHIVE`,
// and leaves no file or directory behind.
//
// libcurl rather than running the curl program: one process (no dependence on
// curl or wget being installed and on PATH), the exact failure (HTTP status,
// resolver, timeout) instead of an exit code, and a progress display we control.
#include <curl/curl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>

#include "data/data_internal.h"
#include "kiln/error.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

constexpr const char* kCifar10Url = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz";
constexpr const char* kCifar10Md5 = "c32a1d4ab5d03f1284b67883e8d87530";
// The official archive is 170 MB; a larger download is not it.
constexpr curl_off_t kMaxDownloadBytes = curl_off_t(1) << 30;
constexpr long kConnectTimeoutS = 20;
// A transfer slower than 1 KB/s for 60 s counts as stalled.
constexpr long kStallBytesPerS = 1024, kStallSeconds = 60;

[[noreturn]] void fail(const std::string& url, const std::string& why) {
  KILN_FAIL("download cifar10: the download of ", url, " failed (", why,
            "). Without a network, import a copy you have instead: `kiln data import cifar10 ARCHIVE` (the official ",
            "cifar-10-binary.tar.gz, or an image-folder archive such as ../shared/data/cifar10-jpeg.tar.zst), ",
            "or set KILN_CIFAR10_ARCHIVE=ARCHIVE.");
}

// The directories that creating `dir` adds; removed again (deepest first, only
// while empty) unless keep() is called, so a failed download leaves no tree behind.
class CreatedDirs {
 public:
  CreatedDirs(const fs::path& dir, const std::string& url) {
    std::error_code ec;
    for (fs::path p = dir; !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
      added_.push_back(p);
      if (p == p.parent_path()) break;
    }
    fs::create_directories(dir, ec);
    if (ec) {
      remove();
      fail(url, "cannot create " + dir.string() + ": " + ec.message());
    }
  }
  ~CreatedDirs() { remove(); }
  CreatedDirs(const CreatedDirs&) = delete;
  CreatedDirs& operator=(const CreatedDirs&) = delete;
  void keep() { added_.clear(); }

 private:
  void remove() {
    std::error_code ec;
    for (const auto& p : added_) fs::remove(p, ec);  // fails harmlessly on a non-empty directory
    added_.clear();
  }
  std::vector<fs::path> added_;  // deepest first
};

// Progress on stderr: a redrawn bar on a terminal, a line per 10% otherwise.
class Progress {
 public:
  Progress() : tty_(::isatty(STDERR_FILENO) == 1), start_(std::chrono::steady_clock::now()) {}
  void update(curl_off_t now, curl_off_t total) {
    if (now <= 0 || now == last_now_) return;  // libcurl also calls while nothing arrives
    const auto t = std::chrono::steady_clock::now();
    if (tty_) {
      if (t - last_draw_ < std::chrono::milliseconds(100) && !(total > 0 && now == total)) return;
      last_draw_ = t;
      last_now_ = now;
      const double secs = std::chrono::duration<double>(t - start_).count();
      const double mb = 1e-6 * static_cast<double>(now);
      char line[160];
      if (total > 0) {
        const int pct = static_cast<int>(100 * now / total);
        char bar[31];
        const int filled = pct * 30 / 100;
        for (int i = 0; i < 30; ++i) bar[i] = i < filled ? '#' : '.';
        bar[30] = 0;
        std::snprintf(line, sizeof line, "\rkiln: [%s] %3d%%  %.1f/%.1f MB  %.1f MB/s ", bar, pct, mb,
                      1e-6 * static_cast<double>(total), secs > 0 ? mb / secs : 0.0);
      } else {
        std::snprintf(line, sizeof line, "\rkiln: %.1f MB  %.1f MB/s ", mb, secs > 0 ? mb / secs : 0.0);
      }
      std::cerr << line << std::flush;
      drawn_ = true;
    } else if (total > 0) {
      const int tenth = static_cast<int>(10 * now / total);
      if (tenth > last_tenth_) {
        last_tenth_ = tenth;
        std::cerr << "kiln: downloaded " << tenth * 10 << "% of " << total << " bytes\n";
      }
    }
  }
  void finish() {
    if (drawn_) std::cerr << "\n";
    drawn_ = false;
  }

 private:
  bool tty_;
  std::chrono::steady_clock::time_point start_, last_draw_{};
  curl_off_t last_now_ = -1;
  int last_tenth_ = 0;
  bool drawn_ = false;
};

struct Transfer {
  std::FILE* file = nullptr;
  curl_off_t written = 0;
  bool too_big = false;
  bool write_failed = false;
  Progress progress;
};

size_t write_body(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * n;
  if (t->written + static_cast<curl_off_t>(bytes) > kMaxDownloadBytes) {
    t->too_big = true;
    return 0;  // aborts the transfer with CURLE_WRITE_ERROR
  }
  if (bytes > 0 && std::fwrite(data, 1, bytes, t->file) != bytes) {
    t->write_failed = true;
    return 0;
  }
  t->written += static_cast<curl_off_t>(bytes);
  return bytes;
}

int on_progress(void* user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t, curl_off_t) {
  static_cast<Transfer*>(user)->progress.update(dlnow, dltotal);
  return 0;
}

void init_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// Downloads `url` into `path` (created or truncated); throws via fail().
void fetch(const std::string& url, const std::string& path) {
  init_curl_once();
  std::unique_ptr<CURL, void (*)(CURL*)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) fail(url, "libcurl could not start a transfer");
  Transfer t;
  t.file = std::fopen(path.c_str(), "wb");
  if (!t.file) fail(url, "cannot write " + path + ": " + std::strerror(errno));
  char errbuf[CURL_ERROR_SIZE] = {0};
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "https,http,file");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "https,http");
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
  curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "kiln");
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, kConnectTimeoutS);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, kStallBytesPerS);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, kStallSeconds);
  curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, kMaxDownloadBytes);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, write_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, &t);
  const CURLcode rc = curl_easy_perform(c);
  t.progress.finish();
  const bool close_failed = std::fflush(t.file) != 0 || ::fsync(fileno(t.file)) != 0;
  std::fclose(t.file);
  if (rc == CURLE_OK && close_failed) fail(url, "error writing " + path + " (disk full?)");
  if (rc == CURLE_OK) return;
  std::string why;
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  if (rc == CURLE_HTTP_RETURNED_ERROR)
    why = "the server answered HTTP " + std::to_string(status);
  else if (t.too_big || rc == CURLE_FILESIZE_EXCEEDED)
    why = "the file is larger than " + std::to_string(kMaxDownloadBytes >> 20) + " MiB, which the CIFAR-10 archive is not";
  else if (t.write_failed)
    why = "error writing " + path + " (disk full?)";
  else if (rc == CURLE_OPERATION_TIMEDOUT)
    why = std::string(errbuf[0] ? errbuf : curl_easy_strerror(rc)) + "; the transfer stalled (under " +
          std::to_string(kStallBytesPerS) + " bytes/s for " + std::to_string(kStallSeconds) +
          " s) or the connection took over " + std::to_string(kConnectTimeoutS) + " s: no network?";
  else
    why = std::string(errbuf[0] ? errbuf : curl_easy_strerror(rc)) +
          (rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_PROXY
               ? ": no network?"
               : "");
  fail(url, why);
}

}  // namespace

void download_cifar10(const std::string& data_dir) {
  const char* env_url = std::getenv("KILN_CIFAR10_URL");
  const char* env_md5 = std::getenv("KILN_CIFAR10_MD5");
  const std::string url = env_url && *env_url ? env_url : kCifar10Url;
  const std::string md5 = env_md5 && *env_md5 ? env_md5 : kCifar10Md5;
  CreatedDirs created(data_dir, url);
  // The temp file sits next to its destination: same file system, and a
  // failed run removes it with the directories it needed.
  const std::string tmp =
      (fs::path(data_dir) / (".cifar-10-binary.tar.gz.download." + std::to_string(::getpid()))).string();
  std::error_code ec;
  try {
    std::cerr << "kiln: downloading " << url << " ...\n";
    fetch(url, tmp);
    std::string got;
    try {
      got = detail::md5_file_hex(tmp);
    } catch (const Error& e) {
      fail(url, e.what());
    }
    if (got != md5)
      fail(url, "the file's MD5 is " + got + ", not the published " + md5 + ": a broken or altered download");
    std::cerr << "kiln: MD5 " << got << " matches\n";
    import_cifar10(tmp, data_dir);
  } catch (...) {
    fs::remove(tmp, ec);
    throw;  // ~CreatedDirs removes the directories this call made
  }
  fs::remove(tmp, ec);
  created.keep();
}

}  // namespace kiln::data
