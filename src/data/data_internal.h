// Helpers shared by the files of src/data (not public API): file and archive
// reading, image decoding, MD5, the batch assembly of the DataLoader.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/data.h"

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX, kept out of this header

namespace kiln::data::detail {

// ---- size bounds: no crafted file makes a reader allocate without limit ----
// Decompressed data may be at most kMaxInflateRatio times its compressed size
// plus kInflateSlackBytes (small files are never refused). Real data sets
// compress 1-5x (Fashion-MNIST IDX 1.8x, MNIST 4.7x, archives of JPEG/PNG about
// 1x); deflate's own limit, 1032:1, is reached only by runs of one byte.
constexpr uint64_t kMaxInflateRatio = 256;
constexpr uint64_t kInflateSlackBytes = uint64_t(1) << 20;
// No single declared size (an IDX header, an archive entry kiln keeps) over this.
constexpr uint64_t kMaxDeclaredBytes = uint64_t(4) << 30;
// The largest archive entry kiln keeps in memory (a CIFAR-10 batch is 30 MB).
constexpr uint64_t kMaxArchiveEntryBytes = uint64_t(1) << 30;
inline uint64_t max_inflated_bytes(uint64_t compressed_bytes) {
  return compressed_bytes * kMaxInflateRatio + kInflateSlackBytes;
}
std::string byte_count_str(uint64_t bytes);  // "3.5 MiB (3670016 bytes)"

// ---- files (cifar_binary.cpp) ----
// The whole file; throws kiln::Error naming `what` and the path when it cannot be read.
std::vector<uint8_t> read_file(const std::string& path, const char* what);
bool is_regular_file(const std::string& path);
int64_t file_size_or(const std::string& path, int64_t fallback);
// The number of records in a CIFAR-10 binary batch of `nbytes` (records of
// 1 label byte + 3072 CHW pixel bytes); kiln::Error naming `name` unless whole.
int64_t cifar_records_in(const std::string& name, size_t nbytes);
// Throws kiln::Error naming `name`, the record index and the label when a
// record's label is not 0..9 (or the size is not whole records).
void check_cifar_labels(const std::string& name, const uint8_t* data, size_t size);
// The class names of a batches.meta.txt: exactly 10 distinct non-empty names,
// one a line (surrounding blanks trimmed, blank lines ignored), else kiln::Error naming `name`.
std::vector<std::string> parse_cifar_class_names(const std::string& name, const uint8_t* data, size_t size);
constexpr int64_t kCifarRecordBytes = 1 + 3 * 32 * 32;
constexpr int64_t kCifarRecordsPerFile = 10000;
extern const std::vector<std::string> kCifar10TrainFiles;  // data_batch_1.bin .. data_batch_5.bin
extern const char* const kCifar10TestFile;                 // test_batch.bin

// ---- archives (archive.cpp) ----
struct ArchiveEntry {
  std::string path;
  std::vector<uint8_t> data;
};
// Reads the regular-file entries of a .tar/.tar.gz/.tar.zst/... archive
// whose path `keep` accepts, in archive order. Throws kiln::Error naming the
// archive on a missing, truncated or corrupt archive, and past the size
// bounds above (max_inflated_bytes of the archive's size; kMaxArchiveEntryBytes).
std::vector<ArchiveEntry> read_archive(const std::string& archive,
                                       const std::function<bool(std::string_view path)>& keep);
// The same for a directory tree: its regular files whose path relative to
// `root` ('/'-separated) `keep` accepts, sorted by that path; entries whose
// name starts with '.' (and what lies under them) are skipped.
std::vector<ArchiveEntry> read_tree(const std::string& root, const std::function<bool(std::string_view path)>& keep);
// Writes `files` (path, bytes) as a tar archive; compression chosen from the
// extension (.tar, .tar.gz/.tgz, .tar.zst). Used by tests and tools.
void write_archive(const std::string& archive, const std::vector<ArchiveEntry>& files);

// ---- image decoding (image_decode.cpp) ----
struct DecodedImage {
  int64_t height = 0, width = 0, channels = 0;  // channels 1 or 3
  std::vector<uint8_t> pixels;                  // HWC
};
enum class ImageFormat { Unknown, Jpeg, Png };
ImageFormat sniff_image_format(const uint8_t* data, size_t size);
// Decodes a JPEG or PNG (sniffed from the bytes). `want_channels` 0 keeps the
// image's own (1 for grey, 3 for colour; alpha dropped), 1 or 3 converts.
// Any decoder error throws kiln::Error naming `name`.
DecodedImage decode_image(const uint8_t* data, size_t size, const std::string& name, int want_channels = 0);
// Encoders for tests: pixels HWC, channels 1 or 3.
std::vector<uint8_t> encode_jpeg(const uint8_t* pixels, int height, int width, int channels, int quality = 95);
std::vector<uint8_t> encode_png(const uint8_t* pixels, int height, int width, int channels);
bool has_image_extension(std::string_view path);

// ---- image folders (image_folder.cpp) ----
struct ImageFile {
  std::string class_name;
  std::string name;  // for messages: path or archive!entry
  const uint8_t* data = nullptr;
  size_t size = 0;
};
// Decodes `files` (in parallel) into a dataset; classes ordered by
// `classes` when given, else CIFAR-10's order when the names are CIFAR-10's,
// else sorted. Images are ordered by (class, name).
ImageDataset decode_image_files(std::vector<ImageFile> files, const std::vector<std::string>& classes,
                                const std::string& source);
// Splits "a/b/c" into components, dropping empty ones and ".".
std::vector<std::string_view> path_components(std::string_view path);
// The class of an archive entry <any prefix>/<split>/<class>/<file>.jpg|png
// (<any prefix>/<class>/<file> when split is empty); empty when it is not one.
std::string_view image_class_of(std::string_view path, const std::string& split);

// ---- MD5 (checksum.cpp: OpenSSL's libcrypto) ----
class Md5 {
 public:
  Md5();
  ~Md5();
  Md5(const Md5&) = delete;
  Md5& operator=(const Md5&) = delete;
  void update(const void* data, size_t size);
  std::string hex_digest();  // finishes; call once
 private:
  evp_md_ctx_st* ctx_;  // OpenSSL's EVP_MD_CTX
  bool finished_ = false;
};
std::string md5_hex(const void* data, size_t size);
std::string md5_file_hex(const std::string& path);

// ---- gzip (idx.cpp) ----
// The file's bytes, gunzipped when it is gzip (plain files pass through);
// kiln::Error when it would inflate past max_inflated_bytes(file size) or
// kMaxDeclaredBytes. The IDX reader itself inflates no further than its header declares.
std::vector<uint8_t> read_maybe_gzip(const std::string& path);

// ---- DataLoader internals (augment.cpp) ----
// Keys for Philox streams derived from (seed, epoch, purpose).
uint64_t mix_key(uint64_t seed, uint64_t epoch, uint64_t purpose);
// The order of an epoch: a seeded permutation of [0, n).
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);
// One image's augmentation, drawn from (seed, epoch, index).
struct ImageAugment {
  bool flip = false;
  int crop_y = 0, crop_x = 0;            // in [0, 2 * crop_padding]
  int translate_y = 0, translate_x = 0;  // in [0, 2 * translate]
};
ImageAugment draw_augment(const AugmentOptions& opt, uint64_t seed, int64_t epoch, int64_t index);
// Per-channel affine map pixel -> (pixel / 255 - mean) / std.
struct Normalizer {
  std::vector<float> scale, bias;
};
Normalizer make_normalizer(int64_t channels, const std::vector<float>& mean, const std::vector<float>& std);
// Writes one augmented, normalized image (src uint8 CHW, dst float CHW).
void assemble_image(const uint8_t* src, int64_t channels, int64_t height, int64_t width, const AugmentOptions& opt,
                    const ImageAugment& aug, const Normalizer& norm, float* dst);

// ---- the DataLoader on a CUDA device (device_loader.cpp) ----
// The data set resident on the device: images uint8 [N, C, H, W], labels int64 [N].
struct DeviceDataset {
  Tensor images, labels;
};
// Copies a contiguous uint8 image set and its int64 labels to `device` once
// (kiln::Error, naming the DataLoader, without a usable CUDA device).
DeviceDataset upload_dataset(const Tensor& images, const Tensor& labels, Device device);
// The batch of images order[start, start + count) of `epoch`, assembled on the
// device: the augmentation draws on the host, one async copy of them, one kernel.
Batch build_device_batch(const DeviceDataset& data, const DataLoaderOptions& opt, const Normalizer& norm,
                         int64_t epoch, const int64_t* order, int64_t count);

}  // namespace kiln::data::detail
