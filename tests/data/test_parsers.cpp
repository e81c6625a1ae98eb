// Data-set parsers on small files made by the test: CIFAR-10 binary, IDX
// (plain and gzip), JPEG/PNG, image folders (directories and archives), and
// corrupt or truncated variants of each, which must raise kiln::Error naming
// the file.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <gtest/gtest.h>
#include <zlib.h>

#include "data/data_internal.h"
#include "data_test_util.h"
#include "kiln/data.h"
#include "testing/errors.h"

namespace kiln::data {
namespace {

using testing::TempDir;
using testing::write_bytes;

// ---------------------------------------------------------------- MD5
TEST(DataMd5, KnownVectors) {
  auto md5 = [](const std::string& s) { return detail::md5_hex(s.data(), s.size()); };
  EXPECT_EQ(md5(""), "d41d8cd98f00b204e9800998ecf8427e");
  EXPECT_EQ(md5("a"), "0cc175b9c0f1b6a831c399e269772661");
  EXPECT_EQ(md5("abc"), "900150983cd24fb0d6963f7d28e17f72");
  EXPECT_EQ(md5("message digest"), "f96b697d7cb7938d525a2f31aaf161d0");
  EXPECT_EQ(md5("abcdefghijklmnopqrstuvwxyz"), "c3fcd3d76192e4007dfb496cca67e13b");
  EXPECT_EQ(md5("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"), "d174ab98d277d9f5a5611c2c9f419d9f");
  EXPECT_EQ(md5("12345678901234567890123456789012345678901234567890123456789012345678901234567890"),
            "57edf4a22be3c955ac49da2e2107b67a");
  EXPECT_EQ(md5(std::string(1000000, 'a')), "7707d6ae4e027c70eea2a935c2296f21");
}

TEST(DataMd5, IncrementalEqualsOneShotAndFile) {
  std::string s;
  for (int i = 0; i < 1000; ++i) s += static_cast<char>(i * 7 + 3);
  for (size_t chunk : {1, 3, 63, 64, 65, 200}) {
    detail::Md5 m;
    for (size_t i = 0; i < s.size(); i += chunk) m.update(s.data() + i, std::min(chunk, s.size() - i));
    EXPECT_EQ(m.hex_digest(), detail::md5_hex(s.data(), s.size())) << chunk;
  }
  TempDir dir;
  write_bytes(dir / "f", std::vector<uint8_t>(s.begin(), s.end()));
  EXPECT_EQ(detail::md5_file_hex(dir / "f"), detail::md5_hex(s.data(), s.size()));
}

// ---------------------------------------------------------------- CIFAR-10 binary
uint8_t cifar_pixel(int64_t record, int64_t j) { return static_cast<uint8_t>((record * 31 + j * 7) & 255); }

std::vector<uint8_t> cifar_file(int64_t first_record, int64_t n) {
  std::vector<uint8_t> b;
  for (int64_t r = first_record; r < first_record + n; ++r) {
    b.push_back(static_cast<uint8_t>(r % 10));
    for (int64_t j = 0; j < 3072; ++j) b.push_back(cifar_pixel(r, j));
  }
  return b;
}

void write_cifar(const std::string& dir, int64_t per_file = 3, int64_t test_n = 2) {
  for (int f = 0; f < 5; ++f) write_bytes(dir + "/data_batch_" + std::to_string(f + 1) + ".bin", cifar_file(f * per_file, per_file));
  write_bytes(dir + "/test_batch.bin", cifar_file(1000, test_n));
}

TEST(DataCifarBinary, ReadsTrainAndTest) {
  TempDir dir;
  write_cifar(dir / "cifar-10-batches-bin");
  EXPECT_TRUE(has_cifar10_binary(dir.path()));
  EXPECT_TRUE(has_cifar10_binary(dir / "cifar-10-batches-bin"));
  for (const std::string& root : {dir.path(), dir / "cifar-10-batches-bin"}) {
    ImageDataset train = load_cifar10_binary(root, true);
    ASSERT_EQ(train.images.shape(), (Shape{15, 3, 32, 32}));
    EXPECT_EQ(train.images.dtype(), DType::UInt8);
    EXPECT_EQ(train.classes, kCifar10Classes);
    auto lab = train.labels.to_vector<int64_t>();
    const uint8_t* px = train.images.data<uint8_t>();
    for (int64_t r = 0; r < 15; ++r) {
      EXPECT_EQ(lab[r], r % 10);
      for (int64_t j : {0, 1, 1023, 1024, 2048, 3071}) EXPECT_EQ(px[r * 3072 + j], cifar_pixel(r, j));
    }
    ImageDataset test = load_cifar10_binary(root, false);
    ASSERT_EQ(test.size(), 2);
    EXPECT_EQ(test.images.data<uint8_t>()[3072 + 5], cifar_pixel(1001, 5));
  }
}

TEST(DataCifarBinary, BadFilesNameTheFile) {
  TempDir dir;
  EXPECT_FALSE(has_cifar10_binary(dir.path()));
  EXPECT_KILN_ERROR(load_cifar10_binary(dir.path(), true), "missing", "data_batch_1.bin", "kiln data import");
  write_cifar(dir.path());
  // Truncated: one byte short.
  auto b = cifar_file(0, 3);
  b.pop_back();
  write_bytes(dir / "data_batch_3.bin", b);
  EXPECT_KILN_ERROR(load_cifar10_binary(dir.path(), true), "data_batch_3.bin", "9218 bytes", "3073");
  EXPECT_NO_THROW(load_cifar10_binary(dir.path(), false));
  // Empty file.
  write_bytes(dir / "test_batch.bin", {});
  EXPECT_KILN_ERROR(load_cifar10_binary(dir.path(), false), "test_batch.bin", "0 bytes");
  // A label byte out of range.
  b = cifar_file(0, 3);
  b[3073] = 200;
  write_bytes(dir / "data_batch_3.bin", b);
  EXPECT_KILN_ERROR(load_cifar10_binary(dir.path(), true), "data_batch_3.bin", "record 1", "label 200");
}

// Issue 7: batches.meta.txt with 300 names made label 200 valid (training then
// failed inside nll_loss). It must list exactly 10 distinct non-empty names.
TEST(DataCifarBinary, MetaFileMustListExactlyTenClasses) {
  TempDir dir;
  write_cifar(dir.path());
  auto b = cifar_file(0, 3);
  b[3073] = 200;
  write_bytes(dir / "data_batch_3.bin", b);
  std::string many;
  for (int i = 0; i < 300; ++i) many += "class" + std::to_string(i) + "\n";
  write_bytes(dir / "batches.meta.txt", std::vector<uint8_t>(many.begin(), many.end()));
  EXPECT_KILN_ERROR(load_cifar10_binary(dir.path(), true), "batches.meta.txt", "more than 10 class names",
                    "exactly 10 distinct non-empty class names");
  auto write_meta = [&](const std::string& text) {
    write_bytes(dir / "batches.meta.txt", std::vector<uint8_t>(text.begin(), text.end()));
  };
  write_meta("a\nb\nc\nd\ne\nf\ng\nh\ni\n");
  EXPECT_KILN_ERROR(load_cifar10_binary(dir.path(), false), "batches.meta.txt", "lists 9 class names");
  write_meta("");
  EXPECT_KILN_ERROR(load_cifar10_binary(dir.path(), false), "batches.meta.txt", "lists 0 class names");
  write_meta("a\nb\nc\nd\ne\nf\ng\nh\ni\na\n");
  EXPECT_KILN_ERROR(load_cifar10_binary(dir.path(), false), "batches.meta.txt", "'a' twice");
  // Ten names with CRLF, surrounding blanks and blank lines (as the official file ends) are fine.
  write_meta(" a\r\nb\r\nc\nd\ne\n\nf\ng\nh\ni\nj \n\n");
  ImageDataset test = load_cifar10_binary(dir.path(), false);
  EXPECT_EQ(test.classes, (std::vector<std::string>{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}));
  // With 10 names, label 200 is caught by the reader naming the file, record and label.
  EXPECT_KILN_ERROR(load_cifar10_binary(dir.path(), true), "data_batch_3.bin", "record 1", "label 200", "0..9");
  std::filesystem::remove(dir / "batches.meta.txt");
  EXPECT_EQ(load_cifar10_binary(dir.path(), false).classes, kCifar10Classes);
}

// ---------------------------------------------------------------- IDX / Fashion-MNIST
std::vector<uint8_t> idx_images(int64_t n, int64_t h, int64_t w, uint32_t magic = 0x803) {
  std::vector<uint8_t> b;
  auto be = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
  };
  be(magic);
  be(static_cast<uint32_t>(n));
  be(static_cast<uint32_t>(h));
  be(static_cast<uint32_t>(w));
  for (int64_t i = 0; i < n * h * w; ++i) b.push_back(static_cast<uint8_t>(i * 13 % 251));
  return b;
}
std::vector<uint8_t> idx_labels(int64_t n, uint32_t magic = 0x801) {
  std::vector<uint8_t> b;
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(magic >> s));
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(uint32_t(n) >> s));
  for (int64_t i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>((i * 3) % 10));
  return b;
}

void check_fashion(const ImageDataset& ds, int64_t n, int64_t h, int64_t w) {
  ASSERT_EQ(ds.images.shape(), (Shape{n, 1, h, w}));
  EXPECT_EQ(ds.classes.size(), 10u);
  EXPECT_EQ(ds.classes[0], "T-shirt/top");
  EXPECT_EQ(ds.classes[9], "Ankle boot");
  const uint8_t* p = ds.images.data<uint8_t>();
  for (int64_t i = 0; i < n * h * w; ++i) ASSERT_EQ(p[i], static_cast<uint8_t>(i * 13 % 251)) << i;
  auto lab = ds.labels.to_vector<int64_t>();
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(lab[i], (i * 3) % 10);
}

TEST(DataIdx, PlainAndGzip) {
  TempDir dir;
  write_bytes(dir / "train-images-idx3-ubyte.gz", testing::gzip_bytes(idx_images(5, 28, 28)));
  write_bytes(dir / "train-labels-idx1-ubyte.gz", testing::gzip_bytes(idx_labels(5)));
  write_bytes(dir / "t10k-images-idx3-ubyte", idx_images(3, 7, 9));  // plain, odd size
  write_bytes(dir / "t10k-labels-idx1-ubyte", idx_labels(3));
  check_fashion(load_fashion_mnist(dir.path(), true), 5, 28, 28);
  check_fashion(load_fashion_mnist(dir.path(), false), 3, 7, 9);
  // A plain file named .gz still reads.
  write_bytes(dir / "train-labels-idx1-ubyte.gz", idx_labels(5));
  check_fashion(load_fashion_mnist(dir.path(), true), 5, 28, 28);
  EXPECT_EQ(default_fashion_mnist_dir(), "/usr/share/datasets/fashion-mnist");
}

TEST(DataIdx, BadFilesNameTheFileAndProblem) {
  TempDir dir;
  EXPECT_KILN_ERROR(load_fashion_mnist(dir.path(), true), "missing", "train-images-idx3-ubyte");
  write_bytes(dir / "train-labels-idx1-ubyte.gz", testing::gzip_bytes(idx_labels(5)));
  // Bad magic (labels magic in the images file).
  write_bytes(dir / "train-images-idx3-ubyte.gz", testing::gzip_bytes(idx_images(5, 4, 4, 0x801)));
  EXPECT_KILN_ERROR(load_fashion_mnist(dir.path(), true), "train-images-idx3-ubyte.gz", "bad magic", "0x00000801",
                    "0x00000803");
  // Truncated data (header says 5 images, 4.5 follow).
  auto img = idx_images(5, 4, 4);
  img.resize(img.size() - 8);
  write_bytes(dir / "train-images-idx3-ubyte.gz", testing::gzip_bytes(img));
  EXPECT_KILN_ERROR(load_fashion_mnist(dir.path(), true), "train-images-idx3-ubyte.gz", "truncated", "only 72 bytes");
  // Truncated header.
  write_bytes(dir / "train-images-idx3-ubyte.gz", testing::gzip_bytes({0, 0, 8, 3, 0, 0}));
  EXPECT_KILN_ERROR(load_fashion_mnist(dir.path(), true), "train-images-idx3-ubyte.gz", "truncated", "header");
  // Truncated gzip stream.
  auto gz = testing::gzip_bytes(idx_images(5, 28, 28));
  gz.resize(gz.size() / 2);
  write_bytes(dir / "train-images-idx3-ubyte.gz", gz);
  EXPECT_KILN_ERROR(load_fashion_mnist(dir.path(), true), "train-images-idx3-ubyte.gz", "truncated");
  // Corrupt gzip stream.
  gz = testing::gzip_bytes(idx_images(5, 28, 28));
  for (size_t i = 12; i < gz.size() - 8; i += 3) gz[i] ^= 0x5A;
  write_bytes(dir / "train-images-idx3-ubyte.gz", gz);
  EXPECT_THROW(load_fashion_mnist(dir.path(), true), Error);
  // Images and labels disagree.
  write_bytes(dir / "train-images-idx3-ubyte.gz", testing::gzip_bytes(idx_images(4, 4, 4)));
  EXPECT_KILN_ERROR(load_fashion_mnist(dir.path(), true), "4 images", "5 labels");
  // Label out of range.
  auto lab = idx_labels(4);
  lab.back() = 10;
  write_bytes(dir / "train-labels-idx1-ubyte.gz", lab);
  EXPECT_KILN_ERROR(load_fashion_mnist(dir.path(), true), "train-labels-idx1-ubyte.gz", "label 3 is 10");
}

// An IDX images header (magic 0x803, n x h x w) followed by `data` bytes of zeros.
std::vector<uint8_t> idx_header_then_zeros(uint32_t n, uint32_t h, uint32_t w, size_t data) {
  std::vector<uint8_t> b;
  for (uint32_t v : {0x803u, n, h, w})
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
  b.resize(b.size() + data, 0);
  return b;
}

// Issue 7: a gzip IDX inflated with no cap. Now: never past what its header
// declares, declared sizes over 4 GiB refused, and at most 256x the gzip
// file's size + 1 MiB inflated.
TEST(DataIdx, GzipNeverInflatesPastItsHeaderOrTheBound) {
  TempDir dir;
  write_bytes(dir / "t10k-labels-idx1-ubyte", idx_labels(1));
  // The header declares one 28x28 image; 16 MiB of zeros follow (a 16 KB gzip file).
  auto gz = testing::gzip_bytes(idx_header_then_zeros(1, 28, 28, 16u << 20));
  ASSERT_LT(gz.size(), 64u << 10);
  write_bytes(dir / "t10k-images-idx3-ubyte.gz", gz);
  EXPECT_KILN_ERROR(load_fashion_mnist(dir.path(), false), "t10k-images-idx3-ubyte.gz",
                    "more data than its header declares", "[1, 28, 28]");
  // The header declares 10000 28x28 images, all zero: 7.8 MB from an 8 KB gzip
  // file, over 256x + 1 MiB: refused before inflating, naming the bound.
  gz = testing::gzip_bytes(idx_header_then_zeros(10000, 28, 28, 10000 * 28 * 28));
  write_bytes(dir / "t10k-images-idx3-ubyte.gz", gz);
  std::vector<uint8_t> labels = idx_labels(10000);
  write_bytes(dir / "t10k-labels-idx1-ubyte", labels);
  EXPECT_KILN_ERROR(load_fashion_mnist(dir.path(), false), "t10k-images-idx3-ubyte.gz", "declares [10000, 28, 28]",
                    "7.5 MiB (7840000 bytes)", "at most 256 times", "decompression bomb");
  // The same images stored plainly read fine: the bound is on the ratio.
  std::filesystem::remove(dir / "t10k-images-idx3-ubyte.gz");
  write_bytes(dir / "t10k-images-idx3-ubyte", idx_header_then_zeros(10000, 28, 28, 10000 * 28 * 28));
  EXPECT_EQ(load_fashion_mnist(dir.path(), false).size(), 10000);
  std::filesystem::remove(dir / "t10k-images-idx3-ubyte");
  // Over 4 GiB declared (65536 x 256 x 256 = 4 GiB + ...): refused by the header alone.
  write_bytes(dir / "t10k-images-idx3-ubyte.gz", testing::gzip_bytes(idx_header_then_zeros(65537, 256, 256, 64)));
  EXPECT_KILN_ERROR(load_fashion_mnist(dir.path(), false), "t10k-images-idx3-ubyte.gz", "declares [65537, 256, 256]",
                    "at most 4 GiB");
  // read_maybe_gzip (no header to go by) stops at the bound: 8 MiB of zeros is 8 KB of gzip.
  write_bytes(dir / "zeros.gz", testing::gzip_bytes(std::vector<uint8_t>(8u << 20, 0)));
  EXPECT_KILN_ERROR(detail::read_maybe_gzip(dir / "zeros.gz"), "zeros.gz", "inflates past", "decompression bomb");
  write_bytes(dir / "ok.gz", testing::gzip_bytes(std::vector<uint8_t>(1000, 7)));
  EXPECT_EQ(detail::read_maybe_gzip(dir / "ok.gz"), std::vector<uint8_t>(1000, 7));
}

TEST(DataIdx, PlainDataBeyondTheHeaderIsAnError) {
  TempDir dir;
  write_bytes(dir / "t10k-labels-idx1-ubyte", idx_labels(2));
  auto img = idx_images(2, 3, 3);
  img.push_back(0);
  write_bytes(dir / "t10k-images-idx3-ubyte", img);
  EXPECT_KILN_ERROR(load_fashion_mnist(dir.path(), false), "t10k-images-idx3-ubyte", "holds 1 bytes more than",
                    "[2, 3, 3]");
}

// ---------------------------------------------------------------- images
std::vector<uint8_t> pattern_hwc(int h, int w, int c, int salt) {
  std::vector<uint8_t> p(static_cast<size_t>(h * w * c));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k) p[(y * w + x) * c + k] = static_cast<uint8_t>((y * 16 + x * 5 + k * 70 + salt * 37) & 255);
  return p;
}

TEST(DataImages, PngRoundTripExact) {
  for (int c : {1, 3}) {
    auto px = pattern_hwc(5, 7, c, 1);
    auto png = detail::encode_png(px.data(), 5, 7, c);
    auto d = detail::decode_image(png.data(), png.size(), "x.png");
    EXPECT_EQ(d.channels, c);
    EXPECT_EQ(d.height, 5);
    EXPECT_EQ(d.width, 7);
    EXPECT_EQ(d.pixels, px);
  }
  // Grey -> RGB replicates.
  auto g = pattern_hwc(4, 4, 1, 2);
  auto png = detail::encode_png(g.data(), 4, 4, 1);
  auto d = detail::decode_image(png.data(), png.size(), "g.png", 3);
  ASSERT_EQ(d.channels, 3);
  for (size_t i = 0; i < g.size(); ++i)
    for (int k = 0; k < 3; ++k) EXPECT_EQ(d.pixels[i * 3 + k], g[i]);
}

TEST(DataImages, JpegRoundTripClose) {
  // A smooth image survives quality 100 within a few levels.
  std::vector<uint8_t> px(16 * 16 * 3);
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 16; ++x)
      for (int k = 0; k < 3; ++k) px[(y * 16 + x) * 3 + k] = static_cast<uint8_t>(60 + y * 4 + x * 3 + k * 20);
  auto jpg = detail::encode_jpeg(px.data(), 16, 16, 3, 100);
  EXPECT_EQ(detail::sniff_image_format(jpg.data(), jpg.size()), detail::ImageFormat::Jpeg);
  auto d = detail::decode_image(jpg.data(), jpg.size(), "x.jpg");
  ASSERT_EQ(d.channels, 3);
  ASSERT_EQ(d.height, 16);
  int maxdiff = 0;
  for (size_t i = 0; i < px.size(); ++i) maxdiff = std::max(maxdiff, std::abs(int(d.pixels[i]) - int(px[i])));
  EXPECT_LE(maxdiff, 4);
  // Grey JPEG: one channel, or three equal ones on request.
  std::vector<uint8_t> g(16 * 16, 128);
  auto gj = detail::encode_jpeg(g.data(), 16, 16, 1, 90);
  EXPECT_EQ(detail::decode_image(gj.data(), gj.size(), "g.jpg").channels, 1);
  auto g3 = detail::decode_image(gj.data(), gj.size(), "g.jpg", 3);
  ASSERT_EQ(g3.channels, 3);
  EXPECT_EQ(g3.pixels[0], g3.pixels[1]);
  EXPECT_EQ(g3.pixels[1], g3.pixels[2]);
}

TEST(DataImages, CorruptAndTruncatedNameTheFile) {
  auto px = pattern_hwc(16, 16, 3, 3);
  auto jpg = detail::encode_jpeg(px.data(), 16, 16, 3, 90);
  auto png = detail::encode_png(px.data(), 16, 16, 3);
  for (size_t keep : {jpg.size() / 2, size_t(3), size_t(20)}) {
    std::vector<uint8_t> t(jpg.begin(), jpg.begin() + keep);
    EXPECT_KILN_ERROR(detail::decode_image(t.data(), t.size(), "trunc.jpg"), "trunc.jpg", "JPEG");
  }
  std::vector<uint8_t> bad = jpg;
  for (size_t i = 2; i < bad.size(); i += 2) bad[i] = static_cast<uint8_t>(bad[i] * 31 + 7);
  EXPECT_KILN_ERROR(detail::decode_image(bad.data(), bad.size(), "bad.jpg"), "bad.jpg");
  for (size_t keep : {png.size() - 20, png.size() / 2, size_t(8), size_t(12)}) {
    std::vector<uint8_t> t(png.begin(), png.begin() + keep);
    EXPECT_KILN_ERROR(detail::decode_image(t.data(), t.size(), "trunc.png"), "trunc.png", "PNG");
  }
  bad = png;
  for (size_t i = 40; i < bad.size() - 12; ++i) bad[i] ^= 0xA5;
  EXPECT_KILN_ERROR(detail::decode_image(bad.data(), bad.size(), "bad.png"), "bad.png", "PNG");
  std::vector<uint8_t> junk = {'h', 'e', 'l', 'l', 'o'};
  EXPECT_KILN_ERROR(detail::decode_image(junk.data(), junk.size(), "junk.jpg"), "junk.jpg", "neither a JPEG nor a PNG");
  EXPECT_KILN_ERROR(detail::decode_image(nullptr, 0, "empty.png"), "empty.png");
}

// Issue 7: a header announcing 8000x8000 pixels in a file of a few hundred
// bytes was allocated (192 MB) before the decoder found the data missing. Now
// the decoded size is bounded by min(256 MiB, 24768 x the file's size) first.
TEST(DataImages, HugeDeclaredDimensionsRefusedBeforeAllocating) {
  auto px = pattern_hwc(8, 8, 3, 4);
  auto png = detail::encode_png(px.data(), 8, 8, 3);
  // IHDR: width at 16, height at 20 (big-endian), CRC over type+data at 29.
  auto put32 = [](std::vector<uint8_t>& b, size_t at, uint32_t v) {
    for (int k = 0; k < 4; ++k) b[at + k] = static_cast<uint8_t>(v >> (24 - 8 * k));
  };
  put32(png, 16, 8000);
  put32(png, 20, 8000);
  put32(png, 29, static_cast<uint32_t>(crc32(0, png.data() + 12, 17)));
  EXPECT_KILN_ERROR(detail::decode_image(png.data(), png.size(), "big.png"), "big.png", "announces 8000x8000",
                    "more than kiln decodes from a", "24768 per file byte");
  auto jpg = detail::encode_jpeg(px.data(), 8, 8, 3, 90);
  // SOF0 (FF C0): length(2) precision(1) height(2) width(2).
  size_t sof = 0;
  for (size_t i = 2; i + 1 < jpg.size(); ++i)
    if (jpg[i] == 0xFF && jpg[i + 1] == 0xC0) {
      sof = i;
      break;
    }
  ASSERT_GT(sof, 0u);
  for (size_t at : {sof + 5, sof + 7}) {
    jpg[at] = 8000 >> 8;
    jpg[at + 1] = 8000 & 255;
  }
  EXPECT_KILN_ERROR(detail::decode_image(jpg.data(), jpg.size(), "big.jpg"), "big.jpg", "announces 8000x8000",
                    "more than kiln decodes from a");
  // A real image of that size is fine when its file is large enough: 600x600 grey noise.
  std::vector<uint8_t> noise(600 * 600);
  uint32_t s = 1;
  for (auto& v : noise) v = static_cast<uint8_t>((s = s * 1664525u + 1013904223u) >> 24);
  auto big = detail::encode_png(noise.data(), 600, 600, 1);
  EXPECT_EQ(detail::decode_image(big.data(), big.size(), "noise.png", 3).pixels.size(), 600u * 600u * 3u);
}

// ---------------------------------------------------------------- image folders
// root/<class>/<i>.png with pattern images; returns the expected CHW bytes per (class, i).
void write_png_folder(const std::string& root, const std::vector<std::string>& classes, int per_class, int h, int w,
                      int c) {
  for (size_t k = 0; k < classes.size(); ++k)
    for (int i = 0; i < per_class; ++i) {
      auto px = pattern_hwc(h, w, c, static_cast<int>(k) * 10 + i);
      write_bytes(root + "/" + classes[k] + "/" + std::to_string(i) + ".png", detail::encode_png(px.data(), h, w, c));
    }
}

void expect_chw(const ImageDataset& ds, int64_t row, const std::vector<uint8_t>& hwc, int h, int w, int c) {
  const uint8_t* p = ds.images.data<uint8_t>() + row * c * h * w;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k) ASSERT_EQ(p[(k * h + y) * w + x], hwc[(y * w + x) * c + k]) << row;
}

TEST(DataImageFolder, DirectoryTree) {
  TempDir dir;
  write_png_folder(dir / "set", {"zebra", "ant", "moth"}, 2, 6, 5, 3);
  write_bytes(dir / "set/ant/notes.txt", {'x'});  // ignored
  ImageDataset ds = load_image_folder(dir / "set");
  EXPECT_EQ(ds.classes, (std::vector<std::string>{"ant", "moth", "zebra"}));
  ASSERT_EQ(ds.images.shape(), (Shape{6, 3, 6, 5}));
  EXPECT_EQ(ds.labels.to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 1, 1, 2, 2}));
  // Row 2 = moth (written as class 2) image 0.
  expect_chw(ds, 2, pattern_hwc(6, 5, 3, 2 * 10 + 0), 6, 5, 3);
  expect_chw(ds, 5, pattern_hwc(6, 5, 3, 0 * 10 + 1), 6, 5, 3);
  // A given class order wins.
  ImageDataset given = load_image_folder(dir / "set", {"zebra", "moth", "ant"});
  EXPECT_EQ(given.labels.to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 1, 1, 2, 2}));
  expect_chw(given, 0, pattern_hwc(6, 5, 3, 0), 6, 5, 3);
  EXPECT_KILN_ERROR(load_image_folder(dir / "set", {"zebra", "ant"}), "'moth'", "not among the given classes");
}

TEST(DataImageFolder, CifarNamesUseOfficialOrderAndGreyFirstImage) {
  TempDir dir;
  write_png_folder(dir / "c", kCifar10Classes, 1, 4, 4, 1);
  ImageDataset ds = load_image_folder(dir / "c");
  EXPECT_EQ(ds.classes, kCifar10Classes);
  ASSERT_EQ(ds.images.shape(), (Shape{10, 1, 4, 4}));
  expect_chw(ds, 3, pattern_hwc(4, 4, 1, 30), 4, 4, 1);  // "cat" is label 3
}

TEST(DataImageFolder, BadImagesNameTheFile) {
  TempDir dir;
  write_png_folder(dir / "s", {"a", "b"}, 2, 6, 6, 3);
  auto px = pattern_hwc(5, 6, 3, 0);
  write_bytes(dir / "s/b/9.png", detail::encode_png(px.data(), 5, 6, 3));
  EXPECT_KILN_ERROR(load_image_folder(dir / "s"), "9.png", "5x6", "6x6", "one size");
  std::filesystem::remove(dir / "s/b/9.png");
  auto jpg = detail::encode_jpeg(pattern_hwc(6, 6, 3, 0).data(), 6, 6, 3, 90);
  jpg.resize(jpg.size() - 30);
  write_bytes(dir / "s/a/broken.jpg", jpg);
  EXPECT_KILN_ERROR(load_image_folder(dir / "s"), "broken.jpg", "JPEG");
  EXPECT_KILN_ERROR(load_image_folder(dir / "nope"), "not a directory");
  std::filesystem::create_directories(dir / "empty/a");
  EXPECT_KILN_ERROR(load_image_folder(dir / "empty"), "no images");
}

std::vector<detail::ArchiveEntry> png_entries(const std::string& prefix, const std::vector<std::string>& classes,
                                              int per_class, int h, int w, int salt) {
  std::vector<detail::ArchiveEntry> out;
  for (size_t k = 0; k < classes.size(); ++k)
    for (int i = per_class - 1; i >= 0; --i) {  // reverse order: the loader sorts
      auto px = pattern_hwc(h, w, 3, salt + static_cast<int>(k) * 10 + i);
      char name[16];
      std::snprintf(name, sizeof name, "%04d.png", i);
      out.push_back({prefix + classes[k] + "/" + name, detail::encode_png(px.data(), h, w, 3)});
    }
  return out;
}

TEST(DataImageFolder, ArchivesTarGzAndZst) {
  TempDir dir;
  auto entries = png_entries("data/train/", {"b", "a"}, 3, 4, 4, 0);
  auto test = png_entries("data/test/", {"b", "a"}, 1, 4, 4, 100);
  entries.insert(entries.end(), test.begin(), test.end());
  entries.push_back({"data/README", {'h', 'i'}});
  for (const char* ext : {".tar", ".tar.gz", ".tar.zst"}) {
    std::string path = dir / (std::string("set") + ext);
    detail::write_archive(path, entries);
    ImageDataset train = load_image_folder_archive(path, "train");
    EXPECT_EQ(train.classes, (std::vector<std::string>{"a", "b"})) << ext;
    ASSERT_EQ(train.images.shape(), (Shape{6, 3, 4, 4}));
    EXPECT_EQ(train.labels.to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0, 1, 1, 1}));
    expect_chw(train, 0, pattern_hwc(4, 4, 3, 10 + 0), 4, 4, 3);  // a/0000
    expect_chw(train, 5, pattern_hwc(4, 4, 3, 0 + 2), 4, 4, 3);   // b/0002
    ImageDataset t = load_image_folder_archive(path, "test");
    ASSERT_EQ(t.size(), 2);
    expect_chw(t, 1, pattern_hwc(4, 4, 3, 100), 4, 4, 3);
    EXPECT_KILN_ERROR(load_image_folder_archive(path, "valid"), "no images", path.c_str());
  }
}

TEST(DataImageFolder, TruncatedAndCorruptArchives) {
  TempDir dir;
  auto entries = png_entries("train/", {"a", "b"}, 20, 8, 8, 0);
  for (const char* ext : {".tar", ".tar.gz", ".tar.zst"}) {
    std::string path = dir / (std::string("set") + ext);
    detail::write_archive(path, entries);
    auto bytes = detail::read_file(path, "test");
    std::vector<uint8_t> half(bytes.begin(), bytes.begin() + bytes.size() / 2);
    std::string cut = dir / (std::string("cut") + ext);
    write_bytes(cut, half);
    EXPECT_KILN_ERROR(load_image_folder_archive(cut, "train"), cut.c_str());
  }
  std::string junk = dir / "junk.tar.gz";
  write_bytes(junk, {0x1f, 0x8b, 8, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  EXPECT_KILN_ERROR(load_image_folder_archive(junk, "train"), "junk.tar.gz");
  EXPECT_KILN_ERROR(load_image_folder_archive(dir / "missing.tar", "train"), "missing.tar", "no such file");
  // A corrupt image inside the archive names the archive and the entry.
  auto bad = entries;
  bad[7].data.resize(bad[7].data.size() / 2);
  detail::write_archive(dir / "bad.tar", bad);
  EXPECT_KILN_ERROR(load_image_folder_archive(dir / "bad.tar", "train"), "bad.tar:", bad[7].path.c_str());
}

// Issue 7: archive entries inflated with no cap. Now the decompressed stream
// (skipped entries too) is at most 256x the archive's size + 1 MiB, and an
// entry's data never goes past the size its header declares.
TEST(DataImageFolder, ArchiveInflationIsBounded) {
  TempDir dir;
  auto entries = png_entries("train/", {"a", "b"}, 2, 4, 4, 0);
  entries.push_back({"train/zeros.bin", std::vector<uint8_t>(8u << 20, 0)});  // skipped, but inflated to skip it
  for (const char* ext : {".tar.gz", ".tar.zst"}) {
    const std::string path = dir / (std::string("bomb") + ext);
    detail::write_archive(path, entries);
    ASSERT_LT(std::filesystem::file_size(path), 64u << 10) << ext;
    EXPECT_KILN_ERROR(load_image_folder_archive(path, "train"), path.c_str(), "inflates past",
                      "at most 256 times an archive's size", "decompression bomb");
  }
  // Plain tar: the same bytes are fine (the bound is on the ratio).
  detail::write_archive(dir / "plain.tar", entries);
  EXPECT_EQ(load_image_folder_archive(dir / "plain.tar", "train").size(), 4);

  // An entry whose header declares 2 GiB in a 3 KB tar: refused before reading it.
  detail::write_archive(dir / "one.tar", {entries[0]});
  auto tar = detail::read_file(dir / "one.tar", "test");
  ASSERT_GE(tar.size(), 1024u);
  std::snprintf(reinterpret_cast<char*>(tar.data() + 124), 12, "%011o", 020000000000u);  // size field, octal
  std::memset(tar.data() + 148, ' ', 8);  // checksum: sum of the header with this field as spaces
  unsigned sum = 0;
  for (int i = 0; i < 512; ++i) sum += tar[i];
  std::snprintf(reinterpret_cast<char*>(tar.data() + 148), 8, "%06o", sum);
  write_bytes(dir / "huge.tar", tar);
  EXPECT_KILN_ERROR(load_image_folder_archive(dir / "huge.tar", "train"), "huge.tar", "inflates past",
                    "holds 2.0 GiB");
}

}  // namespace
}  // namespace kiln::data

namespace kiln::data {
namespace {

// Random corruptions (flipped bytes, truncation) of each format: a parser may
// accept the bytes or throw kiln::Error, nothing else (no crash, no other exception).
template <typename F>
void fuzz(const std::vector<uint8_t>& valid, F&& parse, int rounds, uint32_t seed) {
  uint32_t s = seed;
  auto rnd = [&] { return s = s * 1664525u + 1013904223u, s >> 8; };
  for (int r = 0; r < rounds; ++r) {
    std::vector<uint8_t> b = valid;
    if (r % 3 == 0) {
      b.resize(rnd() % b.size());
    } else {
      int flips = 1 + static_cast<int>(rnd() % 8);
      for (int k = 0; k < flips; ++k) b[rnd() % b.size()] = static_cast<uint8_t>(rnd());
    }
    try {
      parse(b);
    } catch (const InternalError& e) {
      ADD_FAILURE() << "round " << r << ": internal error " << e.what();
    } catch (const Error&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << "round " << r << ": non-kiln exception " << e.what();
    }
  }
}

TEST(DataFuzz, CorruptedFilesGiveKilnErrorsOnly) {
  auto px = pattern_hwc(12, 10, 3, 5);
  auto jpg = detail::encode_jpeg(px.data(), 12, 10, 3, 80);
  fuzz(jpg, [](const std::vector<uint8_t>& b) { detail::decode_image(b.data(), b.size(), "f.jpg"); }, 300, 1);
  auto png = detail::encode_png(px.data(), 12, 10, 3);
  fuzz(png, [](const std::vector<uint8_t>& b) { detail::decode_image(b.data(), b.size(), "f.png"); }, 300, 2);
  TempDir dir;
  write_bytes(dir / "t10k-labels-idx1-ubyte", idx_labels(6));
  fuzz(testing::gzip_bytes(idx_images(6, 5, 5)), [&](const std::vector<uint8_t>& b) {
    write_bytes(dir / "t10k-images-idx3-ubyte.gz", b);
    load_fashion_mnist(dir.path(), false);
  }, 150, 3);
  auto entries = png_entries("train/", {"a", "b"}, 3, 6, 6, 0);
  detail::write_archive(dir / "ok.tar.gz", entries);
  auto tgz = detail::read_file(dir / "ok.tar.gz", "test");
  fuzz(tgz, [&](const std::vector<uint8_t>& b) {
    write_bytes(dir / "f.tar.gz", b);
    load_image_folder_archive(dir / "f.tar.gz", "train");
  }, 150, 4);
  detail::write_archive(dir / "ok.tar", entries);
  auto tar = detail::read_file(dir / "ok.tar", "test");
  fuzz(tar, [&](const std::vector<uint8_t>& b) {
    write_bytes(dir / "f.tar", b);
    load_image_folder_archive(dir / "f.tar", "train");
  }, 150, 5);
}

}  // namespace
}  // namespace kiln::data
