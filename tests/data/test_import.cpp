// import_cifar10 round trips (official layout and image-folder archives) and
// download_cifar10's failure paths (no network is touched: the URL points at
// a closed local port or a local file).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "data/data_internal.h"
#include "data_test_util.h"
#include "kiln/data.h"
#include "testing/errors.h"
#include "testing/scoped_env.h"

namespace kiln::data {
namespace {

using testing::TempDir;
using testing::write_bytes;

std::vector<uint8_t> random_image(int seed) {
  std::vector<uint8_t> px(32 * 32 * 3);
  uint32_t s = 2654435761u * static_cast<uint32_t>(seed + 1);
  for (auto& p : px) {
    s = s * 1664525u + 1013904223u;
    p = static_cast<uint8_t>(s >> 24);
  }
  return px;
}

// CHW bytes of an HWC image.
std::vector<uint8_t> chw(const std::vector<uint8_t>& hwc) {
  std::vector<uint8_t> out(hwc.size());
  for (int i = 0; i < 1024; ++i)
    for (int k = 0; k < 3; ++k) out[k * 1024 + i] = hwc[i * 3 + k];
  return out;
}

std::vector<uint8_t> row_of(const ImageDataset& ds, int64_t i) {
  const uint8_t* p = ds.images.data<uint8_t>() + i * 3072;
  return std::vector<uint8_t>(p, p + 3072);
}

bool no_temp_dirs(const std::string& dir) {
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string()[0] == '.') return false;
  return true;
}

TEST(DataImport, ImageFolderArchiveRoundTrip) {
  TempDir dir;
  std::vector<detail::ArchiveEntry> entries;
  // (label, CHW bytes) of every train and test image, in folder order.
  std::vector<std::pair<int64_t, std::vector<uint8_t>>> train_expected;
  std::vector<std::pair<int64_t, std::vector<uint8_t>>> test_expected;
  for (int k = 0; k < 10; ++k) {
    for (int i = 0; i < 3; ++i) {
      auto px = random_image(k * 100 + i);
      entries.push_back({"cifar/train/" + kCifar10Classes[k] + "/" + std::to_string(i) + ".png",
                         detail::encode_png(px.data(), 32, 32, 3)});
      train_expected.emplace_back(k, chw(px));
    }
    auto px = random_image(5000 + k);
    entries.push_back({"cifar/test/" + kCifar10Classes[k] + "/0.png", detail::encode_png(px.data(), 32, 32, 3)});
    test_expected.emplace_back(k, chw(px));
  }
  std::reverse(entries.begin(), entries.end());
  const std::string archive = dir / "cifar.tar.zst";
  detail::write_archive(archive, entries);
  const std::string data = dir / "data";
  import_cifar10(archive, data);
  ASSERT_TRUE(has_cifar10_binary(data));
  EXPECT_TRUE(no_temp_dirs(data));
  ImageDataset train = load_cifar10_binary(data, true);
  ASSERT_EQ(train.size(), 30);
  EXPECT_EQ(train.classes, kCifar10Classes);
  auto labels = train.labels.to_vector<int64_t>();
  std::vector<std::pair<int64_t, std::vector<uint8_t>>> got;
  for (int64_t i = 0; i < 30; ++i) got.emplace_back(labels[i], row_of(train, i));
  std::sort(got.begin(), got.end());
  std::sort(train_expected.begin(), train_expected.end());
  EXPECT_TRUE(got == train_expected);
  // Shuffled: the first file (6 records) mixes classes.
  std::set<int64_t> first_file(labels.begin(), labels.begin() + 6);
  EXPECT_GT(first_file.size(), 2u);
  EXPECT_EQ(std::filesystem::file_size(data + "/cifar-10-batches-bin/data_batch_1.bin"), 6u * 3073u);
  ImageDataset test = load_cifar10_binary(data, false);
  ASSERT_EQ(test.size(), 10);
  auto test_labels = test.labels.to_vector<int64_t>();
  std::vector<std::pair<int64_t, std::vector<uint8_t>>> got_test;
  for (int64_t i = 0; i < 10; ++i) got_test.emplace_back(test_labels[i], row_of(test, i));
  // Shuffled too (a prefix of the test file is not one class): the same
  // images, not in folder order.
  EXPECT_NE(got_test, test_expected);
  std::sort(got_test.begin(), got_test.end());
  EXPECT_TRUE(got_test == test_expected);
  // The order is fixed: importing again gives the same files (and replaces the old ones).
  auto before = detail::read_file(data + "/cifar-10-batches-bin/data_batch_2.bin", "test");
  import_cifar10(archive, data);
  EXPECT_EQ(detail::read_file(data + "/cifar-10-batches-bin/data_batch_2.bin", "test"), before);
  EXPECT_TRUE(no_temp_dirs(data));
}

TEST(DataImport, OfficialArchiveCopiesTheBatches) {
  TempDir dir;
  std::vector<detail::ArchiveEntry> entries;
  std::vector<std::string> names = detail::kCifar10TrainFiles;
  names.push_back(detail::kCifar10TestFile);
  for (size_t f = 0; f < names.size(); ++f) {
    std::vector<uint8_t> b;
    for (int r = 0; r < 2; ++r) {
      b.push_back(static_cast<uint8_t>((f + r) % 10));
      auto px = random_image(static_cast<int>(f * 10 + r));
      b.insert(b.end(), px.begin(), px.end());
    }
    entries.push_back({"cifar-10-batches-bin/" + names[f], b});
  }
  entries.push_back({"cifar-10-batches-bin/batches.meta.txt", {}});
  for (const char* c : {"airplane\n", "automobile\n", "bird\n", "cat\n", "deer\n", "dog\n", "frog\n", "horse\n",
                        "ship\n", "truck\n\n"})
    entries.back().data.insert(entries.back().data.end(), c, c + std::strlen(c));
  entries.push_back({"cifar-10-batches-bin/readme.html", {'<', '>'}});
  const std::string archive = dir / "cifar-10-binary.tar.gz";
  detail::write_archive(archive, entries);
  import_cifar10(archive, dir / "d");
  for (size_t f = 0; f < names.size(); ++f)
    EXPECT_EQ(detail::read_file(dir / ("d/cifar-10-batches-bin/" + names[f]), "test"), entries[f].data);
  EXPECT_EQ(load_cifar10_binary(dir / "d", true).classes, kCifar10Classes);

  // A wrong-size batch in the archive is refused, and nothing is written.
  entries[2].data.pop_back();
  detail::write_archive(dir / "bad.tar.gz", entries);
  EXPECT_KILN_ERROR(import_cifar10(dir / "bad.tar.gz", dir / "e"), "data_batch_3.bin", "6145 bytes");
  EXPECT_FALSE(std::filesystem::exists(dir / "e/cifar-10-batches-bin"));
  // Missing batch.
  entries.erase(entries.begin() + 2);
  detail::write_archive(dir / "missing.tar.gz", entries);
  EXPECT_KILN_ERROR(import_cifar10(dir / "missing.tar.gz", dir / "e"), "no data_batch_3.bin");
}

TEST(DataImport, RejectsOtherArchives) {
  TempDir dir;
  detail::write_archive(dir / "x.tar", {{"hello.txt", {'h'}}});
  EXPECT_KILN_ERROR(import_cifar10(dir / "x.tar", dir / "d"), "x.tar", "neither the official");
  EXPECT_KILN_ERROR(import_cifar10(dir / "none.tar.gz", dir / "d"), "none.tar.gz");
}

// The files of data_dir/cifar-10-batches-bin, name -> bytes.
std::vector<std::pair<std::string, std::vector<uint8_t>>> imported_files(const std::string& data_dir) {
  std::vector<std::pair<std::string, std::vector<uint8_t>>> out;
  for (const auto& e : std::filesystem::directory_iterator(data_dir + "/cifar-10-batches-bin"))
    out.emplace_back(e.path().filename().string(), detail::read_file(e.path().string(), "test"));
  std::sort(out.begin(), out.end());
  return out;
}

// Writes `entries` under `root` as plain files (the archive unpacked).
void unpack(const std::vector<detail::ArchiveEntry>& entries, const std::string& root) {
  for (const auto& e : entries) write_bytes(root + "/" + e.path, e.data);
}

std::vector<detail::ArchiveEntry> image_folder_entries(const std::string& prefix, int classes, int per_class) {
  std::vector<detail::ArchiveEntry> entries;
  for (int k = 0; k < classes; ++k)
    for (int i = 0; i < per_class; ++i)
      for (const char* split : {"train", "test"}) {
        auto px = random_image(k * 100 + i + (split[1] == 'e' ? 5000 : 0));
        entries.push_back({prefix + split + "/" + kCifar10Classes[k] + "/" + std::to_string(i) + ".png",
                           detail::encode_png(px.data(), 32, 32, 3)});
      }
  return entries;
}

std::vector<detail::ArchiveEntry> official_entries(int records) {
  std::vector<detail::ArchiveEntry> entries;
  std::vector<std::string> names = detail::kCifar10TrainFiles;
  names.push_back(detail::kCifar10TestFile);
  for (size_t f = 0; f < names.size(); ++f) {
    std::vector<uint8_t> b;
    for (int r = 0; r < records; ++r) {
      b.push_back(static_cast<uint8_t>((f + r) % 10));
      auto px = random_image(static_cast<int>(f * 10 + r));
      b.insert(b.end(), px.begin(), px.end());
    }
    entries.push_back({"cifar-10-batches-bin/" + names[f], b});
  }
  return entries;
}

std::vector<uint8_t> lines(const std::vector<std::string>& names) {
  std::vector<uint8_t> out;
  for (const auto& n : names) out.insert(out.end(), n.begin(), n.end()), out.push_back('\n');
  return out;
}

// Issue 7: `kiln data import cifar10 DIR` said "no such file"; a directory now
// imports exactly as the archive it was packed from.
TEST(DataImport, DirectoryImportsExactlyAsTheArchive) {
  TempDir dir;
  auto folder = image_folder_entries("cifar/", 10, 2);
  detail::write_archive(dir / "folder.tar", folder);
  unpack(folder, dir / "folder");
  write_bytes(dir / "folder/cifar/.hidden/train/cat/x.png", {'x'});  // skipped, as load_image_folder does
  import_cifar10(dir / "folder.tar", dir / "from_tar");
  import_cifar10(dir / "folder", dir / "from_dir");
  auto from_tar = imported_files(dir / "from_tar");
  ASSERT_EQ(from_tar.size(), 7u);
  EXPECT_EQ(from_tar, imported_files(dir / "from_dir"));
  EXPECT_EQ(load_cifar10_binary(dir / "from_dir", true).size(), 20);

  auto official = official_entries(2);
  official.push_back({"cifar-10-batches-bin/batches.meta.txt", lines(kCifar10Classes)});
  detail::write_archive(dir / "official.tar.gz", official);
  unpack(official, dir / "official");
  import_cifar10(dir / "official.tar.gz", dir / "o_tar");
  import_cifar10(dir / "official", dir / "o_dir");
  EXPECT_EQ(imported_files(dir / "o_tar"), imported_files(dir / "o_dir"));
  // The batches directory itself works too.
  import_cifar10(dir / "official/cifar-10-batches-bin", dir / "o_inner");
  EXPECT_EQ(imported_files(dir / "o_tar"), imported_files(dir / "o_inner"));

  // A bad directory names its file with a '/' (no archive:entry).
  write_bytes(dir / "official/cifar-10-batches-bin/data_batch_4.bin", {1, 2, 3});
  EXPECT_KILN_ERROR(import_cifar10(dir / "official", dir / "o_bad"), "official/cifar-10-batches-bin/data_batch_4.bin",
                    "3 bytes");
  EXPECT_FALSE(std::filesystem::exists(dir / "o_bad/cifar-10-batches-bin"));
  EXPECT_KILN_ERROR(import_cifar10(dir / "nothing", dir / "d"), "nothing", "does not exist", "directory");
}

// A directory import reads only the files it uses, and none over 1 GiB
// (sparse files: no disk space is used).
TEST(DataImport, DirectoryReadsOnlyWhatItUsesWithinBounds) {
  TempDir dir;
  unpack(official_entries(1), dir / "src");
  write_bytes(dir / "src/other/movie.bin", {});
  std::filesystem::resize_file(dir / "src/other/movie.bin", 2ull << 30);
  import_cifar10(dir / "src", dir / "d");
  EXPECT_EQ(load_cifar10_binary(dir / "d", true).size(), 5);
  std::filesystem::resize_file(dir / "src/cifar-10-batches-bin/data_batch_2.bin", (1ull << 30) + 1);
  EXPECT_KILN_ERROR(import_cifar10(dir / "src", dir / "e"), "data_batch_2.bin", "1.0 GiB",
                    "kiln reads files up to 1.0 GiB");
}

// Issue 7: a CIFAR batch with label 200 was imported; only `train` caught it.
TEST(DataImport, RejectsLabelsOutOfRange) {
  TempDir dir;
  auto entries = official_entries(3);
  entries[1].data[1 * detail::kCifarRecordBytes] = 200;  // data_batch_2.bin, record 1
  detail::write_archive(dir / "bad.tar.gz", entries);
  EXPECT_KILN_ERROR(import_cifar10(dir / "bad.tar.gz", dir / "d"), "bad.tar.gz:cifar-10-batches-bin/data_batch_2.bin",
                    "record 1", "label 200", "expected 0..9");
  EXPECT_FALSE(std::filesystem::exists(dir / "d/cifar-10-batches-bin"));
  entries[1].data[1 * detail::kCifarRecordBytes] = 10;
  detail::write_archive(dir / "bad10.tar", entries);
  EXPECT_KILN_ERROR(import_cifar10(dir / "bad10.tar", dir / "d"), "data_batch_2.bin", "record 1", "label 10");
  EXPECT_FALSE(std::filesystem::exists(dir / "d/cifar-10-batches-bin"));
  entries[1].data[1 * detail::kCifarRecordBytes] = 9;
  detail::write_archive(dir / "ok.tar", entries);
  import_cifar10(dir / "ok.tar", dir / "d");
  EXPECT_EQ(load_cifar10_binary(dir / "d", true).labels.to_vector<int64_t>()[4], 9);
}

// Issue 7: a batches.meta.txt with 300 names made label 200 valid. The rule:
// exactly 10 distinct non-empty names, one a line, blank lines ignored.
TEST(DataImport, MetaFileMustListExactlyTenClasses) {
  TempDir dir;
  auto entries = official_entries(2);
  entries[0].data[0] = 200;
  std::vector<std::string> many;
  for (int i = 0; i < 300; ++i) many.push_back("class" + std::to_string(i));
  entries.push_back({"cifar-10-batches-bin/batches.meta.txt", lines(many)});
  detail::write_archive(dir / "many.tar", entries);
  EXPECT_KILN_ERROR(import_cifar10(dir / "many.tar", dir / "d"), "many.tar:cifar-10-batches-bin/batches.meta.txt",
                    "more than 10 class names", "exactly 10 distinct non-empty class names");
  entries[0].data[0] = 3;
  entries.back().data = lines({"a", "b", "c"});
  detail::write_archive(dir / "three.tar", entries);
  EXPECT_KILN_ERROR(import_cifar10(dir / "three.tar", dir / "d"), "batches.meta.txt", "lists 3 class names",
                    "exactly 10");
  EXPECT_FALSE(std::filesystem::exists(dir / "d/cifar-10-batches-bin"));
  // Image folders: exactly 10 class directories.
  detail::write_archive(dir / "folder3.tar", image_folder_entries("", 3, 2));
  EXPECT_KILN_ERROR(import_cifar10(dir / "folder3.tar", dir / "d"), "folder3.tar", "has 3 class directories",
                    "airplane, automobile, bird", "exactly 10");
  EXPECT_FALSE(std::filesystem::exists(dir / "d/cifar-10-batches-bin"));
}

using kiln::testing::ScopedEnv;

// An HTTP server on 127.0.0.1 that answers every request with `response`.
class LocalHttpServer {
 public:
  explicit LocalHttpServer(std::string response) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 4) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("LocalHttpServer: cannot listen on 127.0.0.1");
    port_ = ntohs(a.sin_port);
    // Every connection until destruction (EXPECT_KILN_ERROR runs its statement twice).
    thread_ = std::thread([this, response = std::move(response)] {
      for (;;) {
        int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        char buf[4096];
        (void)::recv(c, buf, sizeof buf, 0);  // the request line and headers
        (void)::send(c, response.data(), response.size(), MSG_NOSIGNAL);
        ::close(c);
      }
    });
  }
  ~LocalHttpServer() {
    ::shutdown(fd_, SHUT_RDWR);  // wakes accept() when no request came
    thread_.join();
    ::close(fd_);
  }
  std::string url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + path; }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

TEST(DataDownload, FailureNamesTheImportCommand) {
  TempDir dir;
  ScopedEnv url("KILN_CIFAR10_URL", "http://127.0.0.1:9/cifar-10-binary.tar.gz");
  EXPECT_KILN_ERROR(download_cifar10(dir / "d"), "download", "failed", "127.0.0.1:9",
                    "kiln data import cifar10 ARCHIVE", "KILN_CIFAR10_ARCHIVE");
  EXPECT_FALSE(has_cifar10_binary(dir / "d"));
}

// Issue 7: a failed download with a nonexistent KILN_DATA created that tree.
TEST(DataDownload, FailureLeavesNoDirectoriesBehind) {
  TempDir dir;
  ScopedEnv url("KILN_CIFAR10_URL", "http://127.0.0.1:9/cifar-10-binary.tar.gz");
  EXPECT_KILN_ERROR(download_cifar10(dir / "a/b/data"), "download", "failed", "no network?");
  EXPECT_FALSE(std::filesystem::exists(dir / "a"));
  // An existing directory stays, with what it held, and gets no temp file.
  write_bytes(dir / "kept/notes.txt", {'n'});
  EXPECT_KILN_ERROR(download_cifar10(dir / "kept"), "download", "failed");
  EXPECT_TRUE(no_temp_dirs(dir / "kept"));
  EXPECT_TRUE(std::filesystem::exists(dir / "kept/notes.txt"));
  EXPECT_KILN_ERROR(download_cifar10(dir / "kept/new/deeper"), "download", "failed");
  EXPECT_FALSE(std::filesystem::exists(dir / "kept/new"));
  EXPECT_TRUE(std::filesystem::exists(dir / "kept"));
}

TEST(DataDownload, HttpErrorSaysTheStatus) {
  TempDir dir;
  LocalHttpServer server("HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nConnection: close\r\n\r\nnot found");
  ScopedEnv url("KILN_CIFAR10_URL", server.url("/cifar-10-binary.tar.gz"));
  EXPECT_KILN_ERROR(download_cifar10(dir / "d"), "the server answered HTTP 404", "kiln data import cifar10 ARCHIVE");
  EXPECT_FALSE(std::filesystem::exists(dir / "d"));
}

TEST(DataDownload, ChecksTheMd5ThenImports) {
  TempDir dir;
  std::vector<detail::ArchiveEntry> entries;
  std::vector<std::string> names = detail::kCifar10TrainFiles;
  names.push_back(detail::kCifar10TestFile);
  for (const auto& n : names) entries.push_back({"cifar-10-batches-bin/" + n, std::vector<uint8_t>(3073, 1)});
  const std::string archive = dir / "local.tar.gz";
  detail::write_archive(archive, entries);
  ScopedEnv url("KILN_CIFAR10_URL", "file://" + archive);
  // The published sum does not match this file.
  EXPECT_KILN_ERROR(download_cifar10(dir / "d"), "MD5", "c32a1d4ab5d03f1284b67883e8d87530",
                    "kiln data import cifar10 ARCHIVE");
  EXPECT_FALSE(std::filesystem::exists(dir / "d"));
  ScopedEnv md5("KILN_CIFAR10_MD5", detail::md5_file_hex(archive));
  download_cifar10(dir / "d");
  EXPECT_TRUE(has_cifar10_binary(dir / "d"));
  EXPECT_EQ(load_cifar10_binary(dir / "d", false).size(), 1);
  EXPECT_TRUE(no_temp_dirs(dir / "d"));
}

// Over HTTP, with stderr not a terminal: the progress is a line per 10%.
TEST(DataDownload, ServedArchiveShowsProgress) {
  TempDir dir;
  auto entries = official_entries(1);
  detail::write_archive(dir / "served.tar", entries);
  auto body = detail::read_file(dir / "served.tar", "test");
  std::string response = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
                         "\r\nConnection: close\r\n\r\n" + std::string(body.begin(), body.end());
  LocalHttpServer server(response);
  ScopedEnv url("KILN_CIFAR10_URL", server.url("/cifar-10-binary.tar.gz"));
  ScopedEnv md5("KILN_CIFAR10_MD5", detail::md5_hex(body.data(), body.size()));
  ::testing::internal::CaptureStderr();
  download_cifar10(dir / "a/d");
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("downloaded 100% of " + std::to_string(body.size()) + " bytes"), std::string::npos) << err;
  EXPECT_NE(err.find("MD5"), std::string::npos) << err;
  EXPECT_EQ(load_cifar10_binary(dir / "a/d", true).size(), 5);
  EXPECT_TRUE(no_temp_dirs(dir / "a/d"));
}

}  // namespace
}  // namespace kiln::data
