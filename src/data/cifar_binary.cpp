// CIFAR-10 in the official binary layout (cifar-10-batches-bin): each batch
// file holds records of 1 label byte + 1024 R + 1024 G + 1024 B bytes.
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "data/data_internal.h"
#include "kiln/error.h"

namespace kiln::data {

const std::vector<std::string> kCifar10Classes = {"airplane", "automobile", "bird",  "cat",  "deer",
                                                  "dog",      "frog",       "horse", "ship", "truck"};
const std::vector<float> kCifar10Mean = {0.4914f, 0.4822f, 0.4465f};
const std::vector<float> kCifar10Std = {0.2470f, 0.2435f, 0.2616f};

namespace detail {

const std::vector<std::string> kCifar10TrainFiles = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                                     "data_batch_4.bin", "data_batch_5.bin"};
const char* const kCifar10TestFile = "test_batch.bin";

bool is_regular_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

int64_t file_size_or(const std::string& path, int64_t fallback) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return fallback;
  return static_cast<int64_t>(st.st_size);
}

std::vector<uint8_t> read_file(const std::string& path, const char* what) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  KILN_CHECK(f, what, ": cannot open ", path, ": ", std::strerror(errno));
  std::vector<uint8_t> out;
  int64_t size = file_size_or(path, -1);
  if (size > 0) out.reserve(static_cast<size_t>(size));
  uint8_t buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.insert(out.end(), buf, buf + n);
  bool err = std::ferror(f);
  std::fclose(f);
  KILN_CHECK(!err, what, ": error reading ", path);
  return out;
}

int64_t cifar_records_in(const std::string& name, size_t nbytes) {
  KILN_CHECK(nbytes > 0 && nbytes % kCifarRecordBytes == 0, "CIFAR-10: ", name, " has ", nbytes,
             " bytes; expected a whole number of ", kCifarRecordBytes,
             "-byte records (1 label byte + 3072 pixel bytes; the official files hold 10000 records = ",
             kCifarRecordsPerFile * kCifarRecordBytes, " bytes). The file is truncated or not a CIFAR-10 batch.");
  return static_cast<int64_t>(nbytes) / kCifarRecordBytes;
}

}  // namespace detail

namespace {

std::string batches_dir(const std::string& dir) {
  std::string inner = dir + "/cifar-10-batches-bin";
  if (detail::is_regular_file(inner + "/" + detail::kCifar10TestFile) ||
      detail::is_regular_file(inner + "/" + detail::kCifar10TrainFiles[0]))
    return inner;
  return dir;
}

// batches.meta.txt lists the class names, one a line; the official order otherwise.
std::vector<std::string> read_class_names(const std::string& dir) {
  std::ifstream in(dir + "/batches.meta.txt");
  if (!in) return kCifar10Classes;
  std::vector<std::string> names;
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty()) names.push_back(line);
  }
  return names.empty() ? kCifar10Classes : names;
}

}  // namespace

bool has_cifar10_binary(const std::string& dir) {
  std::string d = batches_dir(dir);
  for (const auto& f : detail::kCifar10TrainFiles)
    if (!detail::is_regular_file(d + "/" + f)) return false;
  return detail::is_regular_file(d + "/" + detail::kCifar10TestFile);
}

ImageDataset load_cifar10_binary(const std::string& dir, bool train) {
  std::string d = batches_dir(dir);
  std::vector<std::string> files;
  if (train)
    for (const auto& f : detail::kCifar10TrainFiles) files.push_back(d + "/" + f);
  else
    files.push_back(d + "/" + detail::kCifar10TestFile);

  int64_t total = 0;
  std::vector<int64_t> counts;
  for (const auto& f : files) {
    int64_t size = detail::file_size_or(f, -1);
    KILN_CHECK(size >= 0, "CIFAR-10: missing ", f, " (expected the official binary layout ",
               "cifar-10-batches-bin/{data_batch_1..5.bin,test_batch.bin} under ", dir,
               "; run `kiln data import cifar10 ARCHIVE` or `kiln data get cifar10`)");
    counts.push_back(detail::cifar_records_in(f, static_cast<size_t>(size)));
    total += counts.back();
  }
  ImageDataset ds;
  ds.classes = read_class_names(d);
  ds.source = d + (train ? " (train)" : " (test)");
  ds.images = Tensor::empty({total, 3, 32, 32}, DType::UInt8);
  ds.labels = Tensor::empty({total}, DType::Int64);
  uint8_t* img = ds.images.data<uint8_t>();
  int64_t* lab = ds.labels.data<int64_t>();
  const int64_t nclasses = static_cast<int64_t>(ds.classes.size());
  int64_t at = 0;
  for (size_t fi = 0; fi < files.size(); ++fi) {
    std::vector<uint8_t> bytes = detail::read_file(files[fi], "CIFAR-10");
    int64_t n = detail::cifar_records_in(files[fi], bytes.size());
    KILN_CHECK(n == counts[fi], "CIFAR-10: ", files[fi], " changed size while being read");
    for (int64_t r = 0; r < n; ++r) {
      const uint8_t* rec = bytes.data() + r * detail::kCifarRecordBytes;
      KILN_CHECK(rec[0] < nclasses, "CIFAR-10: ", files[fi], " record ", r, " has label ", int(rec[0]),
                 "; expected 0..", nclasses - 1, ". The file is corrupt or not a CIFAR-10 batch.");
      lab[at] = rec[0];
      std::memcpy(img + at * 3072, rec + 1, 3072);
      ++at;
    }
  }
  return ds;
}

}  // namespace kiln::data
