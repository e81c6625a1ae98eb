// Writes the committed seed corpus, fuzz/corpus/<target>/: a few tiny valid
// inputs per fuzz target, made with kiln's own writers so they stay in step
// with the formats. Run from the fuzz build: build-fuzz/fuzz/kiln_make_corpus fuzz/corpus
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/data_internal.h"
#include "kiln/kiln.h"

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;
using namespace kiln;

namespace {

fs::path root;

void put(const std::string& target, const std::string& name, const Bytes& bytes) {
  fs::create_directories(root / target);
  std::ofstream f(root / target / name, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}
Bytes read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
Bytes gzip(const Bytes& in) {
  z_stream zs{};
  if (deflateInit2(&zs, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("deflateInit2");
  Bytes out(deflateBound(&zs, in.size()) + 64);
  zs.next_in = const_cast<Bytes::value_type*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  if (deflate(&zs, Z_FINISH) != Z_STREAM_END) throw std::runtime_error("deflate");
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}
Bytes pattern(size_t n, int seed) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>((i * 37 + static_cast<size_t>(seed) * 101) % 251);
  return b;
}
void be32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
}

void safetensors_seeds() {
  fs::path tmp = fs::temp_directory_path() / "kiln-corpus.safetensors";
  auto seed = [&](const std::string& name, const nn::TensorDict& t, const std::map<std::string, std::string>& meta) {
    save_safetensors(tmp, t, meta);
    put("safetensors", name, read(tmp));
  };
  manual_seed(1);
  seed("small", {{"w", randn({2, 3})}, {"i", arange(2)}, {"b", ones({3}).to(DType::Bool)}},
       {{"format", "pt"}, {"epoch", "1"}});
  seed("every_dtype",
       {{"f32", randn({2})}, {"f64", randn({1}, dtype(DType::Float64))}, {"bf16", randn({2}).to(DType::BFloat16)},
        {"f16", randn({2}).to(DType::Float16)}, {"i64", arange(2)}, {"i32", arange(2).to(DType::Int32)},
        {"u8", arange(3).to(DType::UInt8)}, {"bool", zeros({1}).to(DType::Bool)}, {"scalar", full({}, 2.0)},
        {"empty", zeros({0, 2})}},
       {});
  seed("empty", {}, {});
  seed("metadata_only", {}, {{"model", "tutorial"}, {"epoch", "3"}, {"note", "\xc3\xa9\n"}});
  fs::remove(tmp);
}

void cifar_seeds() {
  Bytes one = pattern(3073, 1);
  one[0] = 3;
  put("cifar", "one_record", one);
  Bytes two = one;
  Bytes second = pattern(3073, 2);
  second[0] = 9;
  two.insert(two.end(), second.begin(), second.end());
  put("cifar", "two_records", two);
  std::string meta = "META\nairplane\ncat\ndog\n\n";
  Bytes with_meta(meta.begin(), meta.end());
  Bytes rec = pattern(3073, 3);
  rec[0] = 2;
  with_meta.insert(with_meta.end(), rec.begin(), rec.end());
  put("cifar", "with_meta", with_meta);
}

void idx_seeds() {
  Bytes images, labels;
  be32(images, 0x803);
  for (uint32_t d : {2u, 3u, 3u}) be32(images, d);
  Bytes px = pattern(18, 4);
  images.insert(images.end(), px.begin(), px.end());
  be32(labels, 0x801);
  be32(labels, 2);
  labels.push_back(1);
  labels.push_back(9);
  auto pack = [](const Bytes& a, const Bytes& b) {
    Bytes out{static_cast<uint8_t>(a.size() & 0xff), static_cast<uint8_t>(a.size() >> 8)};
    out.insert(out.end(), a.begin(), a.end());
    out.insert(out.end(), b.begin(), b.end());
    return out;
  };
  put("idx", "plain", pack(images, labels));
  put("idx", "gzip", pack(gzip(images), gzip(labels)));
  put("idx", "gzip_images_plain_labels", pack(gzip(images), labels));
}

void image_seeds() {
  put("image", "grey4x4.png", data::detail::encode_png(pattern(16, 5).data(), 4, 4, 1));
  put("image", "rgb5x7.png", data::detail::encode_png(pattern(105, 6).data(), 5, 7, 3));
  put("image", "rgb16x16.jpg", data::detail::encode_jpeg(pattern(768, 7).data(), 16, 16, 3, 90));
  put("image", "grey8x8.jpg", data::detail::encode_jpeg(pattern(64, 8).data(), 8, 8, 1, 75));
}

void archive_seeds() {
  std::vector<data::detail::ArchiveEntry> files = {
      {"set/train/cat/0.png", data::detail::encode_png(pattern(12, 9).data(), 2, 2, 3)},
      {"set/test/dog/1.png", data::detail::encode_png(pattern(12, 10).data(), 2, 2, 3)},
      {"set/readme.txt", Bytes{'h', 'i', '\n'}}};
  for (const char* ext : {".tar", ".tar.gz", ".tar.zst"}) {
    fs::path tmp = fs::temp_directory_path() / (std::string("kiln-corpus") + ext);
    data::detail::write_archive(tmp, files);
    put("archive", std::string("set") + ext, read(tmp));
    fs::remove(tmp);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: kiln_make_corpus DIR (fuzz/corpus)\n");
    return 2;
  }
  root = argv[1];
  safetensors_seeds();
  cifar_seeds();
  idx_seeds();
  image_seeds();
  archive_seeds();
  return 0;
}
