// safetensors checkpoints: round trip of every dtype, files written by Python
// (tools/goldens/safetensors_py.py) read by kiln and the other way round, and
// corrupt or truncated files giving a clear kiln::Error, never a crash.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "kiln/optim.h"
#include "kiln/serialize.h"
#include "kiln/kiln.h"
#include "testing/errors.h"
#include "testing/golden.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("kiln_st_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
  static inline int counter_ = 0;
};

std::string read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
void write_file(const std::string& p, const std::string& bytes) {
  // A new file each time: truncating one in place makes ext4 flush it to disk (auto_da_alloc).
  std::filesystem::remove(p);
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
// A file with the given header text (padded) and data bytes.
std::string make_file(std::string header, const std::string& data, uint64_t len_override = 0) {
  uint64_t n = len_override ? len_override : header.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}

nn::TensorDict all_dtypes() {
  return {{"f32", randn({3, 4})},
          {"f64", randn({2, 2}, dtype(DType::Float64))},
          {"bf16", randn({5}).to(DType::BFloat16)},
          {"f16", randn({2, 3}).to(DType::Float16)},
          {"i64", from_vector(std::vector<int64_t>{-3, 0, int64_t{1} << 40}, {3})},
          {"i32", from_vector(std::vector<int64_t>{7, -8}, {1, 2}).to(DType::Int32)},
          {"u8", arange(250, 256, 1, dtype(DType::UInt8))},
          {"bool", from_vector(std::vector<int64_t>{1, 0, 1}, {3}).to(DType::Bool)},
          {"scalar", full({}, 2.5)},
          {"empty", zeros({0, 4})},
          {"strided \"name\" é", randn({4, 3}).t()}};
}

void expect_same(const nn::TensorDict& got, const nn::TensorDict& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(want[i].first);
    EXPECT_EQ(got[i].first, want[i].first);
    EXPECT_TENSOR_CLOSE(got[i].second, want[i].second, 0, 0);
  }
}

TEST(Safetensors, RoundTripEveryDtype) {
  TempDir dir;
  std::string p = dir.file("all.safetensors");
  nn::TensorDict t = all_dtypes();
  save_safetensors(p, t, {{"format", "pt"}, {"epoch", "3"}, {"quote\"", "\n"}});
  std::map<std::string, std::string> meta;
  expect_same(load_safetensors(p, &meta), t);
  EXPECT_EQ(meta, (std::map<std::string, std::string>{{"format", "pt"}, {"epoch", "3"}, {"quote\"", "\n"}}));
  // Layout: header length multiple of 8, JSON header, no temporary file left behind.
  std::string bytes = read_file(p);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  EXPECT_EQ(n % 8, 0u);
  Json h = Json::parse(bytes.substr(8, n));
  EXPECT_EQ(h.at("f32").dump(), R"({"dtype":"F32","shape":[3,4],"data_offsets":[0,48]})");
  EXPECT_EQ(h.at("bool").at("dtype"), "BOOL");
  EXPECT_EQ(h.begin().key(), "__metadata__");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
  // Overwriting replaces the file whole.
  save_safetensors(p, {{"only", ones({2})}});
  EXPECT_EQ(load_safetensors(p, &meta).size(), 1u);
  EXPECT_TRUE(meta.empty());
}

TEST(Safetensors, WriteErrors) {
  TempDir dir;
  EXPECT_KILN_ERROR(save_safetensors(dir.file("a"), {{"x", ones({1})}, {"x", ones({1})}}), "\"x\" appears twice");
  EXPECT_KILN_ERROR(save_safetensors(dir.file("a"), {{"__metadata__", ones({1})}}), "__metadata__");
  EXPECT_KILN_ERROR(save_safetensors(dir.file("a"), {{"u", Tensor()}}), "\"u\" is undefined");
  EXPECT_KILN_ERROR(save_safetensors(dir.file("no/such/dir/a"), {{"x", ones({1})}}), "cannot create", "no/such/dir");
  EXPECT_FALSE(fs::exists(dir.file("a")));
}

TEST(Safetensors, ReadsFileWrittenByPython) {
  std::map<std::string, std::string> meta;
  nn::TensorDict got = load_safetensors(std::string(KILN_GOLDEN_DIR) + "/modules_py.safetensors", &meta);
  EXPECT_EQ(meta.at("format"), "pt");
  EXPECT_EQ(meta.at("note"), "written by tools/goldens/gen_modules.py \xc3\xa9");
  const auto& g = testing::goldens("modules");
  EXPECT_EQ(got.size(), 10u);
  for (const auto& [name, t] : got) {
    SCOPED_TRACE(name);
    EXPECT_TENSOR_CLOSE(t, g["st." + name], 0, 0);
  }
  // The tutorial net's first conv weight, loaded into a kiln module.
  nn::Conv2d conv(nn::Conv2dOptions(3, 6, 5));
  for (const auto& [name, t] : got)
    if (name == "model.0.weight") conv.load_state_dict({{"weight", t}, {"bias", zeros({6})}});
  EXPECT_TENSOR_CLOSE(conv.weight, g["seq_tutorial.sd.0.weight"], 0, 0);
}

TEST(Safetensors, PythonReadsKilnFile) {
  const std::string py = "/usr/bin/python3";
  const std::string tool = std::string(KILN_GOLDEN_DIR) + "/../../tools/goldens/safetensors_py.py";
  if (std::system((py + " -c 'import torch' >/dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << "needs Debian's python3-torch at " << py << " to read the file in Python";
  TempDir dir;
  std::string p = dir.file("k.safetensors");
  nn::TensorDict t = all_dtypes();
  save_safetensors(p, t, {{"format", "pt"}});
  FILE* f = ::popen((py + " " + tool + " summary " + p + " 2>&1").c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, f)) out.append(buf, n);
  ASSERT_EQ(::pclose(f), 0) << out;
  Json v = Json::parse(out);
  EXPECT_EQ(v.at("metadata").at("format"), "pt");
  const Json& tensors = v.at("tensors");
  for (const auto& [name, tensor] : t) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(tensors.contains(name));
    const Json& s = tensors.at(name);
    EXPECT_EQ(s.at("dtype"), dtype_name(tensor.dtype()));
    Shape shape = s.at("shape").get<Shape>();
    EXPECT_EQ(shape, tensor.shape());
    std::vector<double> vals = tensor.to_vector<double>();
    double sum = 0;
    for (double x : vals) sum += x;
    EXPECT_NEAR(s.at("sum").get<double>(), sum, 1e-9 * (1 + std::abs(sum)));
    if (!vals.empty()) {
      EXPECT_EQ(s.at("first").get<double>(), vals[0]);
    }
  }
}

TEST(Safetensors, CorruptFilesGiveClearErrors) {
  TempDir dir;
  std::string p = dir.file("bad.safetensors");
  auto expect_error = [&](const std::string& bytes, std::initializer_list<const char*> parts) {
    write_file(p, bytes);
    std::string msg;
    ASSERT_TRUE(testing::throws_user_error([&] { load_safetensors(p); }, msg)) << bytes;
    EXPECT_NE(msg.find(p), std::string::npos) << msg;
    for (const char* part : parts) EXPECT_NE(msg.find(part), std::string::npos) << "lacks \"" << part << "\": " << msg;
  };
  const std::string ok = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string data8(8, '\0');
  write_file(p, make_file(ok, data8));
  EXPECT_EQ(load_safetensors(p).size(), 1u);  // the base case is valid

  expect_error("", {"0 bytes", "too short"});
  expect_error("abc", {"too short"});
  expect_error(make_file(ok, data8, 1000), {"header length 1000 runs past the end"});
  expect_error(make_file(ok, data8, ~uint64_t{1}), {"runs past the end"});
  expect_error(make_file("[1]", ""), {"does not start with '{'"});
  expect_error(make_file("{\"x\": ", ""), {"not valid JSON"});
  expect_error(make_file(R"({"x":{"dtype":"I16","shape":[2],"data_offsets":[0,4]}})", std::string(4, '\0')),
               {"tensor \"x\"", "dtype \"I16\" is not supported"});
  expect_error(make_file(R"({"x":{"shape":[2],"data_offsets":[0,8]}})", data8), {"missing \"dtype\""});
  expect_error(make_file(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data8), {"non-negative"});
  expect_error(make_file(R"({"x":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", data8), {"non-negative"});
  expect_error(make_file(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data8),
               {"hold 8 bytes", "need 12"});
  expect_error(make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "1234"),
               {"run past the end of the data section", "truncated"});
  expect_error(make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", data8), {"begin <= end"});
  expect_error(make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", data8), {"[begin, end]"});
  expect_error(make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("y":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                         data8),
               {"overlaps"});
  expect_error(make_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data8), {"belong to no tensor"});
  expect_error(make_file(ok, data8 + "xx"), {"10 bytes but the tensors cover 8"});
  expect_error(make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                         data8),
               {"names \"x\" twice"});
  expect_error(make_file(R"({"__metadata__":{"a":1}})", ""), {"metadata \"a\" must be a string"});
  expect_error(make_file(R"({"x":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", data8),
               {"too large"});
  expect_error(make_file(R"({"x":{"dtype":"F32","shape":[4611686018427387904,4,0],"data_offsets":[0,0]}})", ""),
               {"too large"});
  EXPECT_KILN_ERROR(load_safetensors(dir.file("missing.safetensors")), "cannot open", "missing.safetensors");
  EXPECT_KILN_ERROR(load_safetensors(dir.path().string()), "not a regular file");
}

// The exact bytes kiln writes (as before the switch to nlohmann-json): metadata
// first and sorted, tensors in the given order, each {dtype, shape,
// data_offsets}, UTF-8 written raw, the header padded with spaces to 8 bytes.
TEST(Safetensors, WritesTheByteExactLayout) {
  TempDir dir;
  std::string p = dir.file("exact.safetensors");
  save_safetensors(p, {{"b\xc3\xa9", full({2}, 1.0)}, {"a", from_vector(std::vector<int64_t>{1, 2}, {1, 2})}},
                   {{"format", "pt"}, {"epoch", "3"}, {"q", "\"\n\x01"}});
  std::string header = R"({"__metadata__":{"epoch":"3","format":"pt","q":"\"\n\u0001"},)"
                       "\"b\xc3\xa9\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                       R"("a":{"dtype":"I64","shape":[1,2],"data_offsets":[8,24]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string data(8, '\0');
  float one = 1.0f;
  std::memcpy(data.data(), &one, 4);
  std::memcpy(data.data() + 4, &one, 4);
  for (int64_t v : {int64_t{1}, int64_t{2}}) data.append(reinterpret_cast<const char*>(&v), 8);
  EXPECT_EQ(read_file(p), make_file(header, data));
}

// Regression cases for header robustness (issue 7). Each says what the
// hand-written reader did with it.
TEST(Safetensors, HeaderRobustness) {
  TempDir dir;
  std::string p = dir.file("bad.safetensors");
  const std::string data8(8, '\0');
  // A key repeated inside a tensor's entry: the old reader took the first
  // "dtype" and loaded the file; nlohmann alone would silently take the last.
  // The reference implementation (serde) refuses a duplicate field; so do we.
  write_file(p, make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"dtype":"I32"}})", data8));
  EXPECT_KILN_ERROR(load_safetensors(p), p.c_str(), "names \"dtype\" twice");
  // A top-level name twice (the old reader already refused it).
  write_file(p, make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("x":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})",
                          data8));
  EXPECT_KILN_ERROR(load_safetensors(p), p.c_str(), "names \"x\" twice");
  // Invalid UTF-8 in a name: the old reader loaded it; the reference reader
  // (and Python) refuse a header that is not UTF-8.
  write_file(p, make_file("{\"x\xff\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data8));
  EXPECT_KILN_ERROR(load_safetensors(p), p.c_str(), "not valid JSON", "UTF-8");
  // Deep nesting is refused early (the old reader refused it at 256 levels).
  write_file(p, make_file("{\"x\":" + std::string(100000, '[') + std::string(100000, ']') + "}", ""));
  EXPECT_KILN_ERROR(load_safetensors(p), p.c_str(), "nests more than 16 levels");
  // Offsets beyond int64 and of the wrong type (the old reader refused both).
  write_file(p, make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551615]}})", data8));
  EXPECT_KILN_ERROR(load_safetensors(p), p.c_str(), "\"data_offsets\" must hold non-negative integers");
  write_file(p, make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":["0",8]}})", data8));
  EXPECT_KILN_ERROR(load_safetensors(p), p.c_str(), "\"data_offsets\" must hold non-negative integers", "[\"0\",8]");
  write_file(p, make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[-8,8]}})", data8));
  EXPECT_KILN_ERROR(load_safetensors(p), p.c_str(), "non-negative integers");
  write_file(p, make_file(R"({"x":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", data8));
  EXPECT_KILN_ERROR(load_safetensors(p), p.c_str(), "\"dtype\" must be a string, got an integer");
  write_file(p, make_file(R"({"x":{"dtype":"F32","shape":{"0":2},"data_offsets":[0,8]}})", data8));
  EXPECT_KILN_ERROR(load_safetensors(p), p.c_str(), "\"shape\" must be an array, got an object");
  write_file(p, make_file(R"({"x":{"dtype":"F32","shape":[true],"data_offsets":[0,8]}})", data8));
  EXPECT_KILN_ERROR(load_safetensors(p), p.c_str(), "shape entries must be non-negative integers, got true");
  write_file(p, make_file(R"({"x":{"dtype":"F32","shape":[1e1],"data_offsets":[0,8]}})", data8));
  EXPECT_KILN_ERROR(load_safetensors(p), p.c_str(), "shape entries must be non-negative integers");
  write_file(p, make_file(R"({"__metadata__":[],"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data8));
  EXPECT_KILN_ERROR(load_safetensors(p), p.c_str(), "\"__metadata__\" must be an object of strings, got an array");
  write_file(p, make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} {})", data8));
  EXPECT_KILN_ERROR(load_safetensors(p), p.c_str(), "not valid JSON");
  write_file(p, make_file(R"({"x":NaN})", ""));
  EXPECT_KILN_ERROR(load_safetensors(p), p.c_str(), "not valid JSON");
  write_file(p, make_file(R"({"x":{"dtype":"F32","shape":[1e999],"data_offsets":[0,8]}})", data8));
  EXPECT_KILN_ERROR(load_safetensors(p), p.c_str(), "not valid JSON");
  // Overlapping tensors of equal size, and a tensor past the data.
  write_file(p, make_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("y":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
                          data8));
  EXPECT_KILN_ERROR(load_safetensors(p), p.c_str(), "overlaps");
  write_file(p, make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", data8));
  EXPECT_KILN_ERROR(load_safetensors(p), p.c_str(), "run past the end of the data section");
  // A header length over the 100 MB cap, in a file long enough to hold it
  // (sparse, so the test writes nothing): refused before reading the header
  // (the old reader refused it too).
  {
    std::filesystem::remove(p);
    std::ofstream f(p, std::ios::binary);
    f << make_file("", "", 200'000'000);
  }
  std::filesystem::resize_file(p, 200'000'100);
  EXPECT_KILN_ERROR(load_safetensors(p), p.c_str(), "header length 200000000 is over the 100000000-byte limit");
}

TEST(Safetensors, RefusesToWriteInvalidUtf8) {
  // The old writer wrote these bytes raw: a header no safetensors reader accepts.
  TempDir dir;
  std::string p = dir.file("u.safetensors");
  EXPECT_KILN_ERROR(save_safetensors(p, {{"w\xff", ones({1})}}), "tensor name", "not valid UTF-8");
  EXPECT_KILN_ERROR(save_safetensors(p, {{"w", ones({1})}}, {{"note", "\xc3"}}), "metadata \"note\"",
                    "not valid UTF-8");
  EXPECT_FALSE(fs::exists(p));
}

TEST(Safetensors, FuzzedAndTruncatedFilesNeverCrash) {
  TempDir dir;
  std::string src = dir.file("src.safetensors"), p = dir.file("fuzz.safetensors");
  save_safetensors(src, {{"a", randn({3, 2})}, {"b", zeros({2}, dtype(DType::Int64))}, {"c", full({}, 1.0)}},
                   {{"k", "v"}});
  const std::string good = read_file(src);
  // Every truncation.
  for (size_t len = 0; len < good.size(); ++len) {
    write_file(p, good.substr(0, len));
    EXPECT_THROW(load_safetensors(p), Error) << len;
  }
  // Random byte edits in the length and the header.
  std::mt19937 rng(11);
  int loaded = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string bytes = good;
    int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      size_t at = rng() % std::min<size_t>(bytes.size(), 200);
      bytes[at] = (rng() % 2) ? static_cast<char>(rng()) : "0123456789{}[]\",:-"[rng() % 18];
    }
    write_file(p, bytes);
    try {
      nn::TensorDict t = load_safetensors(p);
      ++loaded;
    } catch (const InternalError& e) {
      FAIL() << "internal error: " << e.what();
    } catch (const Error&) {
    }
  }
  EXPECT_LT(loaded, 3000);
}

TEST(Safetensors, ModelAndOptimizerCheckpointRoundTrip) {
  TempDir dir;
  manual_seed(4);
  nn::Sequential a({std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 4, 3)), std::make_shared<nn::BatchNorm2d>(4),
                    std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(16, 2)});
  optim::SGD oa(a.parameters(), optim::SGDOptions(0.05).momentum(0.9).nesterov(true));
  Tensor x = randn({2, 3, 4, 4});
  for (int i = 0; i < 2; ++i) {
    oa.zero_grad();
    a.forward(x).sum().backward();
    oa.step();
  }
  // One file: model tensors under "model.", optimizer state under "optim.", as a trainer would.
  nn::TensorDict ck;
  for (auto& [k, t] : a.state_dict()) ck.emplace_back("model." + k, t);
  for (auto& [k, t] : oa.state_dict()) ck.emplace_back("optim." + k, t);
  std::string p = dir.file("ck.safetensors");
  save_safetensors(p, ck, {{"epoch", "2"}});

  manual_seed(5);
  nn::Sequential b({std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 4, 3)), std::make_shared<nn::BatchNorm2d>(4),
                    std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(16, 2)});
  optim::SGD ob(b.parameters(), {});
  nn::TensorDict model, opt;
  for (auto& [k, t] : load_safetensors(p)) {
    if (k.starts_with("model.")) model.emplace_back(k.substr(6), t);
    else opt.emplace_back(k.substr(6), t);
  }
  b.load_state_dict(model);
  ob.load_state_dict(opt);
  EXPECT_TRUE(ob.options.nesterov());
  oa.zero_grad();
  ob.zero_grad();
  a.forward(x).sum().backward();
  b.forward(x).sum().backward();
  oa.step();
  ob.step();
  for (size_t i = 0; i < a.state_dict().size(); ++i)
    EXPECT_TENSOR_CLOSE(a.state_dict()[i].second, b.state_dict()[i].second, 0, 0) << a.state_dict()[i].first;
}

}  // namespace
}  // namespace kiln
