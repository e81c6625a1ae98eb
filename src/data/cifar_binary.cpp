// CIFAR-10 in the official binary layout (cifar-10-batches-bin): each batch
// file holds records of 1 label byte + 1024 R + 1024 G + 1024 B bytes.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>

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

std::vector<std::string> parse_cifar_class_names(const std::string& name, const uint8_t* data, size_t size) {
  constexpr size_t kClasses = 10;
  std::vector<std::string> names;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (!line.empty()) {
      // More than 10 is already an error: stop before storing a huge file's lines.
      KILN_CHECK(names.size() < kClasses, "CIFAR-10: ", name, " lists more than ", kClasses,
                 " class names; batches.meta.txt must list exactly 10 distinct non-empty class names, one a line ",
                 "(blank lines are ignored), because CIFAR-10 labels are 0..9. Fix the file, or delete it to use ",
                 "the official names (airplane .. truck).");
      KILN_CHECK(std::find(names.begin(), names.end(), line) == names.end(), "CIFAR-10: ", name,
                 " lists the class name '", line, "' twice; batches.meta.txt must list exactly 10 distinct non-empty ",
                 "class names, one a line (blank lines are ignored). Fix the file, or delete it to use the official names.");
      names.emplace_back(line);
    }
    start = end + 1;
  }
  KILN_CHECK(names.size() == kClasses, "CIFAR-10: ", name, " lists ", names.size(),
             " class names; batches.meta.txt must list exactly 10 distinct non-empty class names, one a line ",
             "(blank lines are ignored), because CIFAR-10 labels are 0..9. Fix the file, or delete it to use the ",
             "official names (airplane .. truck).");
  return names;
}

void check_cifar_labels(const std::string& name, const uint8_t* data, size_t size) {
  const int64_t n = cifar_records_in(name, size);
  const int64_t nclasses = static_cast<int64_t>(kCifar10Classes.size());
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t label = data[r * kCifarRecordBytes];
    KILN_CHECK(label < nclasses, "CIFAR-10: ", name, " record ", r, " has label ", int(label), "; expected 0..",
               nclasses - 1, " (CIFAR-10 has ", nclasses, " classes). The file is corrupt or not a CIFAR-10 batch.");
  }
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

// batches.meta.txt lists the class names, one a line; the official names when it is absent.
std::vector<std::string> read_class_names(const std::string& dir) {
  const std::string path = dir + "/batches.meta.txt";
  if (!detail::is_regular_file(path)) return kCifar10Classes;
  std::vector<uint8_t> text = detail::read_file(path, "CIFAR-10");
  return detail::parse_cifar_class_names(path, text.data(), text.size());
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
  int64_t at = 0;
  for (size_t fi = 0; fi < files.size(); ++fi) {
    std::vector<uint8_t> bytes = detail::read_file(files[fi], "CIFAR-10");
    int64_t n = detail::cifar_records_in(files[fi], bytes.size());
    KILN_CHECK(n == counts[fi], "CIFAR-10: ", files[fi], " changed size while being read");
    detail::check_cifar_labels(files[fi], bytes.data(), bytes.size());
    for (int64_t r = 0; r < n; ++r) {
      const uint8_t* rec = bytes.data() + r * detail::kCifarRecordBytes;
      lab[at] = rec[0];
      std::memcpy(img + at * 3072, rec + 1, 3072);
      ++at;
    }
  }
  return ds;
}

}  // namespace kiln::data
