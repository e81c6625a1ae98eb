// `kiln data import cifar10 ARCHIVE|DIR`: writes the official binary layout
// (cifar-10-batches-bin) from the official archive or from an image-folder
// archive with train/ and test/ splits, or from a directory holding either
// unpacked (same bytes out as from the archive), atomically (a temp dir
// renamed at the end).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <cstring>
#include <functional>
#include <iostream>

#include "data/data_internal.h"
#include "kiln/error.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

std::string basename_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// One output file: its name and a function that writes its bytes.
using Emit = std::function<void(const std::function<void(const uint8_t*, size_t)>&)>;
struct OutFile {
  std::string name;
  Emit emit;
};

void write_file(const fs::path& path, const Emit& emit) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  KILN_CHECK(f, "import cifar10: cannot write ", path.string(), ": ", std::strerror(errno));
  bool ok = true;
  emit([&](const uint8_t* data, size_t size) { ok = ok && (size == 0 || std::fwrite(data, 1, size, f) == size); });
  ok = ok && std::fflush(f) == 0 && ::fsync(fileno(f)) == 0;
  ok = (std::fclose(f) == 0) && ok;
  KILN_CHECK(ok, "import cifar10: error writing ", path.string(), " (disk full?)");
}

Emit bytes_of(std::vector<uint8_t> bytes) {
  auto b = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  return [b](const auto& write) { write(b->data(), b->size()); };
}

// Records of dataset rows `rows`: 1 label byte + 3072 CHW bytes each.
Emit records_of(const ImageDataset& ds, std::vector<int64_t> rows) {
  return [&ds, rows = std::move(rows)](const auto& write) {
    constexpr size_t kChunk = 1024;
    std::vector<uint8_t> buf(kChunk * detail::kCifarRecordBytes);
    const uint8_t* img = ds.images.data<uint8_t>();
    const int64_t* lab = ds.labels.data<int64_t>();
    for (size_t start = 0; start < rows.size(); start += kChunk) {
      size_t n = std::min(kChunk, rows.size() - start);
      for (size_t i = 0; i < n; ++i) {
        uint8_t* rec = buf.data() + i * detail::kCifarRecordBytes;
        rec[0] = static_cast<uint8_t>(lab[rows[start + i]]);
        std::memcpy(rec + 1, img + rows[start + i] * 3072, 3072);
      }
      write(buf.data(), n * detail::kCifarRecordBytes);
    }
  };
}

void check_cifar_shape(const ImageDataset& ds) {
  KILN_CHECK(ds.images.size(1) == 3 && ds.images.size(2) == 32 && ds.images.size(3) == 32, "import cifar10: ",
             ds.source, " holds ", ds.images.size(1), "-channel ", ds.images.size(2), "x", ds.images.size(3),
             " images; the CIFAR-10 layout needs 32x32 RGB");
}

// CIFAR-10 has exactly 10 classes (labels 0..9, and the models kiln trains on it have 10 outputs).
void check_cifar_classes(const ImageDataset& train, const std::string& source) {
  std::string names;
  for (size_t i = 0; i < train.classes.size() && i < 12; ++i) names += (i ? ", " : "") + train.classes[i];
  if (train.classes.size() > 12) names += ", ...";
  KILN_CHECK(train.classes.size() == kCifar10Classes.size(), "import cifar10: ", source, " has ",
             train.classes.size(), " class directories under train/ (", names, "); CIFAR-10 needs exactly ",
             kCifar10Classes.size(), " (train/<class>/<file>.jpg|png, one directory per class)");
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void import_cifar10(const std::string& archive, const std::string& data_dir) {
  const auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  const bool from_dir = fs::is_directory(archive, ec);
  KILN_CHECK(from_dir || detail::is_regular_file(archive), "import cifar10: ", archive,
             " does not exist; name the official cifar-10-binary.tar.gz, an image-folder archive (train/<class>/*.png ",
             "and test/<class>/*.png entries), or a directory holding either unpacked");
  // Names in messages: archive:entry, or dir/file.
  const std::string sep = from_dir ? "/" : ":";
  std::cerr << "kiln: importing CIFAR-10 from " << archive << " ...\n";
  // Only the files an import uses are read (a directory may hold much else).
  auto keep = [](std::string_view p) {
    std::string base = basename_of(std::string(p));
    const auto& train = detail::kCifar10TrainFiles;
    return std::find(train.begin(), train.end(), base) != train.end() || base == detail::kCifar10TestFile ||
           base == "batches.meta.txt" || !detail::image_class_of(p, "train").empty() ||
           !detail::image_class_of(p, "test").empty();
  };
  std::vector<detail::ArchiveEntry> entries =
      from_dir ? detail::read_tree(archive, keep) : detail::read_archive(archive, keep);
  std::cerr << "kiln: read " << entries.size() << " entries in " << seconds_since(t0) << " s\n";

  std::vector<OutFile> out;
  ImageDataset train, test;  // image-folder mode: what the records come from
  std::vector<std::string> wanted = detail::kCifar10TrainFiles;
  wanted.push_back(detail::kCifar10TestFile);
  bool official = false;
  for (const auto& e : entries) official = official || basename_of(e.path) == "data_batch_1.bin";
  if (official) {
    // The class names first: they say how many labels are valid.
    std::vector<uint8_t> meta;
    bool has_meta = false;
    for (const auto& e : entries)
      if (basename_of(e.path) == "batches.meta.txt") {
        detail::parse_cifar_class_names(archive + sep + e.path, e.data.data(), e.data.size());
        meta = e.data;
        has_meta = true;
      }
    if (!has_meta)
      for (const auto& c : kCifar10Classes) meta.insert(meta.end(), c.begin(), c.end()), meta.push_back('\n');
    for (const auto& name : wanted) {
      const detail::ArchiveEntry* found = nullptr;
      for (const auto& e : entries)
        if (basename_of(e.path) == name) found = &e;
      KILN_CHECK(found, "import cifar10: ", archive, " holds data_batch_1.bin but no ", name,
                 "; the archive is incomplete");
      detail::check_cifar_labels(archive + sep + found->path, found->data.data(), found->data.size());
      const uint8_t* data = found->data.data();
      const size_t size = found->data.size();
      out.push_back({name, [data, size](const auto& write) { write(data, size); }});
    }
    out.push_back({"batches.meta.txt", bytes_of(std::move(meta))});
  } else {
    std::vector<detail::ImageFile> split_files[2];
    const char* splits[2] = {"train", "test"};
    for (const auto& e : entries)
      for (int s = 0; s < 2; ++s) {
        std::string_view cls = detail::image_class_of(e.path, splits[s]);
        if (!cls.empty()) split_files[s].push_back({std::string(cls), archive + sep + e.path, e.data.data(), e.data.size()});
      }
    KILN_CHECK(!split_files[0].empty() && !split_files[1].empty(), "import cifar10: ", archive,
               " is neither the official cifar-10-binary.tar.gz (cifar-10-batches-bin/*.bin) nor an image folder with ",
               "train/<class>/<file>.jpg|png and test/<class>/<file>.jpg|png entries (found ", split_files[0].size(),
               " train and ", split_files[1].size(), " test images)");
    train = detail::decode_image_files(std::move(split_files[0]), {}, archive + " [train]");
    check_cifar_classes(train, archive);
    test = detail::decode_image_files(std::move(split_files[1]), train.classes, archive + " [test]");
    check_cifar_shape(train);
    check_cifar_shape(test);
    std::cerr << "kiln: decoded " << train.size() << " train and " << test.size() << " test images in "
              << seconds_since(t0) << " s\n";
    // The official files mix classes in every batch: a fixed-seed shuffle does the same.
    std::vector<int64_t> order = detail::epoch_permutation(train.size(), 0xC1FA510ULL, 0);
    const int64_t nfiles = static_cast<int64_t>(detail::kCifar10TrainFiles.size());
    for (int64_t f = 0; f < nfiles; ++f) {
      int64_t lo = train.size() * f / nfiles, hi = train.size() * (f + 1) / nfiles;
      KILN_CHECK(hi > lo, "import cifar10: ", archive, " has only ", train.size(), " train images; at least ",
                 nfiles, " are needed to fill ", nfiles, " batch files");
      out.push_back({detail::kCifar10TrainFiles[f],
                     records_of(train, std::vector<int64_t>(order.begin() + lo, order.begin() + hi))});
    }
    // The test file too: in folder order its first batches are all one class,
    // and anything that evaluates on a prefix (`kiln train --steps N` tests on
    // the first N batches) would measure airplanes only.
    out.push_back({detail::kCifar10TestFile, records_of(test, detail::epoch_permutation(test.size(), 0x7E57C1FAULL, 0))});
    std::string meta;
    for (const auto& c : train.classes) meta += c + "\n";
    out.push_back({"batches.meta.txt", bytes_of(std::vector<uint8_t>(meta.begin(), meta.end()))});
  }

  fs::create_directories(data_dir, ec);
  KILN_CHECK(!ec, "import cifar10: cannot create ", data_dir, ": ", ec.message());
  const fs::path target = fs::path(data_dir) / "cifar-10-batches-bin";
  const fs::path tmp = fs::path(data_dir) / (".cifar-10-batches-bin.tmp." + std::to_string(::getpid()));
  const fs::path old = fs::path(data_dir) / (".cifar-10-batches-bin.old." + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  try {
    fs::create_directories(tmp);
    for (const auto& f : out) write_file(tmp / f.name, f.emit);
    bool had_old = fs::exists(target);
    if (had_old) fs::rename(target, old);
    fs::rename(tmp, target);
    if (had_old) fs::remove_all(old, ec);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    KILN_FAIL("import cifar10: cannot write ", target.string(), ": ", e.what());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  std::cerr << "kiln: wrote " << target.string() << " in " << seconds_since(t0) << " s\n";
}

}  // namespace kiln::data
