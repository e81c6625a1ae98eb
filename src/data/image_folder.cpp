// Image-folder data sets (<root>/<class>/<file>.jpg|png) from a directory tree
// or straight from an archive. The files' bytes are read first (one thread:
// the disk or the archive stream is sequential), then decoded in parallel.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <set>

#include "data/data_internal.h"
#include "kiln/error.h"

namespace kiln::data {
namespace detail {

std::vector<std::string_view> path_components(std::string_view path) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (!part.empty() && part != ".") out.push_back(part);
    start = end + 1;
  }
  return out;
}

std::string_view image_class_of(std::string_view path, const std::string& split) {
  auto parts = path_components(path);
  if (parts.size() < 2 || parts.back()[0] == '.' || !has_image_extension(parts.back())) return {};
  if (!split.empty() && (parts.size() < 3 || parts[parts.size() - 3] != split)) return {};
  return parts[parts.size() - 2];
}

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

std::vector<std::string> class_order(const std::set<std::string>& found, const std::vector<std::string>& given,
                                     const std::string& source) {
  if (!given.empty()) {
    for (const auto& c : found)
      KILN_CHECK(std::find(given.begin(), given.end(), c) != given.end(), "image folder ", source,
                 ": class directory '", c, "' is not among the given classes (", join(given), ")");
    return given;
  }
  std::set<std::string> cifar(kCifar10Classes.begin(), kCifar10Classes.end());
  if (found == cifar) return kCifar10Classes;
  return std::vector<std::string>(found.begin(), found.end());
}

// HWC -> CHW.
void to_chw(const DecodedImage& img, uint8_t* dst) {
  const int64_t hw = img.height * img.width, c = img.channels;
  const uint8_t* src = img.pixels.data();
  if (c == 1) {
    std::copy(src, src + hw, dst);
    return;
  }
  if (c == 3) {
    uint8_t* __restrict r = dst;
    uint8_t* __restrict g = dst + hw;
    uint8_t* __restrict b = dst + 2 * hw;
    for (int64_t i = 0; i < hw; ++i) {
      r[i] = src[3 * i];
      g[i] = src[3 * i + 1];
      b[i] = src[3 * i + 2];
    }
    return;
  }
  for (int64_t i = 0; i < hw; ++i)
    for (int64_t k = 0; k < c; ++k) dst[k * hw + i] = src[i * c + k];
}

}  // namespace

ImageDataset decode_image_files(std::vector<ImageFile> files, const std::vector<std::string>& classes,
                                const std::string& source) {
  KILN_CHECK(!files.empty(), "image folder ", source,
             ": no images found (expected <class>/<file>.jpg|.jpeg|.png entries)");
  std::set<std::string> found;
  for (const auto& f : files) found.insert(f.class_name);
  ImageDataset ds;
  ds.classes = class_order(found, classes, source);
  ds.source = source;
  std::vector<int64_t> label(files.size());
  {
    std::map<std::string, int64_t> index;
    for (size_t i = 0; i < ds.classes.size(); ++i) index[ds.classes[i]] = static_cast<int64_t>(i);
    for (size_t i = 0; i < files.size(); ++i) label[i] = index.at(files[i].class_name);
    std::vector<size_t> order(files.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return label[a] != label[b] ? label[a] < label[b] : files[a].name < files[b].name;
    });
    std::vector<ImageFile> sorted_files;
    std::vector<int64_t> sorted_labels;
    sorted_files.reserve(files.size());
    sorted_labels.reserve(files.size());
    for (size_t i : order) {
      sorted_files.push_back(std::move(files[i]));
      sorted_labels.push_back(label[i]);
    }
    files = std::move(sorted_files);
    label = std::move(sorted_labels);
  }

  // The first image fixes the size and channels of the set.
  DecodedImage first = decode_image(files[0].data, files[0].size, files[0].name);
  const int64_t n = static_cast<int64_t>(files.size());
  const int64_t C = first.channels, H = first.height, W = first.width;
  ds.images = Tensor::empty({n, C, H, W}, DType::UInt8);
  ds.labels = Tensor::empty({n}, DType::Int64);
  uint8_t* img = ds.images.data<uint8_t>();
  int64_t* lab = ds.labels.data<int64_t>();
  std::copy(label.begin(), label.end(), lab);
  to_chw(first, img);

  std::atomic<int64_t> first_error{n};
  std::vector<std::string> errors(static_cast<size_t>(n));
#pragma omp parallel for schedule(dynamic, 256) if (n > 256)
  for (int64_t i = 1; i < n; ++i) {
    if (first_error.load(std::memory_order_relaxed) < i) continue;
    const ImageFile& f = files[static_cast<size_t>(i)];
    try {
      DecodedImage d = decode_image(f.data, f.size, f.name, static_cast<int>(C));
      KILN_CHECK(d.height == H && d.width == W, "image folder ", source, ": ", f.name, " is ", d.height, "x",
                 d.width, " but ", files[0].name, " is ", H, "x", W, "; all images of a set must share one size");
      to_chw(d, img + i * C * H * W);
    } catch (const std::exception& e) {
      errors[static_cast<size_t>(i)] = e.what();
      int64_t cur = first_error.load();
      while (i < cur && !first_error.compare_exchange_weak(cur, i)) {
      }
    }
  }
  if (first_error.load() < n) throw Error(errors[static_cast<size_t>(first_error.load())]);
  return ds;
}

}  // namespace detail

ImageDataset load_image_folder(const std::string& root, const std::vector<std::string>& classes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  KILN_CHECK(fs::is_directory(root, ec), "image folder: ", root, " is not a directory");
  std::vector<std::pair<std::string, std::string>> paths;  // (class, path)
  for (const auto& cls : fs::directory_iterator(root, ec)) {
    std::string cname = cls.path().filename().string();
    if (!cls.is_directory() || cname.empty() || cname[0] == '.') continue;
    for (const auto& f : fs::directory_iterator(cls.path(), ec)) {
      std::string fname = f.path().filename().string();
      if (!f.is_regular_file() || fname.empty() || fname[0] == '.' || !detail::has_image_extension(fname)) continue;
      paths.emplace_back(cname, f.path().string());
    }
  }
  KILN_CHECK(!ec, "image folder: cannot list ", root, ": ", ec.message());
  std::vector<std::vector<uint8_t>> bytes(paths.size());
  std::vector<detail::ImageFile> files(paths.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    bytes[i] = detail::read_file(paths[i].second, "image folder");
    files[i] = {paths[i].first, paths[i].second, bytes[i].data(), bytes[i].size()};
  }
  return detail::decode_image_files(std::move(files), classes, root);
}

ImageDataset load_image_folder_archive(const std::string& archive, const std::string& split,
                                       const std::vector<std::string>& classes) {
  auto class_of = [&](std::string_view path) { return detail::image_class_of(path, split); };
  std::vector<detail::ArchiveEntry> entries =
      detail::read_archive(archive, [&](std::string_view p) { return !class_of(p).empty(); });
  std::string source = archive + (split.empty() ? "" : " [" + split + "]");
  KILN_CHECK(!entries.empty(), "image folder archive ", archive, ": no images under ",
             split.empty() ? "" : "<prefix>/" + split + "/", "<class>/<file>.jpg|.jpeg|.png");
  std::vector<detail::ImageFile> files(entries.size());
  for (size_t i = 0; i < entries.size(); ++i)
    files[i] = {std::string(class_of(entries[i].path)), archive + ":" + entries[i].path, entries[i].data.data(),
                entries[i].data.size()};
  return detail::decode_image_files(std::move(files), classes, source);
}

}  // namespace kiln::data
