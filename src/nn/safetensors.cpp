// safetensors checkpoints (https://github.com/huggingface/safetensors):
//   u64 little-endian N | N bytes of JSON header | data
// header: {"__metadata__": {str: str}, name: {"dtype": "F32", "shape": [..],
// "data_offsets": [begin, end]}, ...}, offsets relative to the data section.
// The writer pads the header with spaces to a multiple of 8 bytes (so the
// data is aligned) and writes atomically. The reader checks everything the
// reference implementation checks (header bounds, JSON, dtypes, shapes, the
// offsets tiling the data section exactly) and reports it as a kiln::Error
// naming the file.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <string_view>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "kiln/serialize.h"

namespace kiln {

namespace {

// Order-preserving, so headers are written (and read back) in document order.
using Json = nlohmann::ordered_json;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // as the reference reader
// A safetensors header nests three deep ({name: {"shape": [..]}}); anything
// much deeper is not a checkpoint, and refusing it early bounds the work.
constexpr int kMaxHeaderDepth = 16;

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypes[] = {
    {DType::Float32, "F32"}, {DType::Float64, "F64"}, {DType::BFloat16, "BF16"}, {DType::Float16, "F16"},
    {DType::Int64, "I64"},   {DType::Int32, "I32"},   {DType::UInt8, "U8"},      {DType::Bool, "BOOL"},
};

const char* st_name(DType t) {
  for (const auto& d : kDTypes)
    if (d.dtype == t) return d.name;
  KILN_ASSERT(false, "no safetensors name for ", dtype_name(t));
}

bool st_dtype(const std::string& name, DType* out) {
  for (const auto& d : kDTypes)
    if (name == d.name) {
      *out = d.dtype;
      return true;
    }
  return false;
}

std::string errno_text() { return std::strerror(errno); }

// ---- writing ----
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0 && errno == EINTR) continue;
    KILN_CHECK(w > 0, "save_safetensors: writing ", path, " failed: ", errno_text());
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// The header text, padded with spaces to a multiple of 8 bytes so the data
// section is aligned (as the reference writer). Non-ASCII is written as UTF-8
// (not \u escapes); invalid UTF-8 is refused, since no reader accepts it.
std::string dump_header(const Json& header, const std::string& path, const nn::TensorDict& tensors,
                        const std::map<std::string, std::string>& metadata) {
  std::string text;
  try {
    text = header.dump();
  } catch (const Json::type_error&) {
    auto valid = [](const std::string& s) {
      try {
        (void)Json(s).dump();
        return true;
      } catch (const Json::type_error&) {
        return false;
      }
    };
    for (const auto& [k, v] : metadata)
      KILN_CHECK(valid(k) && valid(v), "save_safetensors(", path, "): metadata \"", k,
                 "\" is not valid UTF-8; safetensors headers are UTF-8 JSON");
    for (const auto& [name, t] : tensors)
      KILN_CHECK(valid(name), "save_safetensors(", path, "): the tensor name \"", name,
                 "\" is not valid UTF-8; safetensors headers are UTF-8 JSON");
    throw;
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

std::string dir_of(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

void save_safetensors(const std::string& path, const nn::TensorDict& tensors,
                      const std::map<std::string, std::string>& metadata) {
  KILN_CHECK(!path.empty(), "save_safetensors: the path is empty");
  // Header and the tensors' bytes, in the given order (ordered_json keeps
  // insertion order: __metadata__ first, then the tensors as given, each as
  // {"dtype", "shape", "data_offsets"}, the layout kiln has always written).
  Json header = Json::object();
  if (!metadata.empty()) {
    Json meta = Json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  std::set<std::string> names;
  std::vector<Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    KILN_CHECK(name != "__metadata__", "save_safetensors(", path, "): a tensor may not be called \"__metadata__\"");
    KILN_CHECK(names.insert(name).second, "save_safetensors(", path, "): the name \"", name,
               "\" appears twice; tensor names in a checkpoint must be unique");
    KILN_CHECK(t.defined(), "save_safetensors(", path, "): tensor \"", name, "\" is undefined");
    Tensor c = t.detach().to(Device::cpu()).contiguous();
    Json shape = Json::array();
    for (int64_t s : c.shape()) shape.push_back(s);
    uint64_t nbytes = c.nbytes();
    Json info = Json::object();
    info["dtype"] = st_name(c.dtype());
    info["shape"] = std::move(shape);
    info["data_offsets"] = Json::array({offset, offset + nbytes});
    header[name] = std::move(info);
    offset += nbytes;
    data.push_back(c);
  }
  std::string text = dump_header(header, path, tensors, metadata);
  uint64_t n = text.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));

  // Temporary file next to the target, then fsync + rename: readers see the
  // old file or the whole new one, never a torn checkpoint.
  std::random_device rd;
  std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(rd());
  Fd f;
  f.fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  KILN_CHECK(f.fd >= 0, "save_safetensors: cannot create ", tmp, " (next to ", path, "): ", errno_text(),
             "; check that the directory exists and is writable");
  try {
    write_all(f.fd, len, 8, tmp);
    write_all(f.fd, text.data(), text.size(), tmp);
    for (const Tensor& c : data)
      if (c.nbytes()) write_all(f.fd, c.data_ptr(), c.nbytes(), tmp);
    KILN_CHECK(::fsync(f.fd) == 0, "save_safetensors: fsync of ", tmp, " failed: ", errno_text());
    int fd = f.fd;
    f.fd = -1;
    KILN_CHECK(::close(fd) == 0, "save_safetensors: closing ", tmp, " failed: ", errno_text());
    KILN_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "save_safetensors: renaming ", tmp, " to ", path,
               " failed: ", errno_text());
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  // Make the rename itself durable (best effort: some filesystems refuse).
  Fd dir;
  dir.fd = ::open(dir_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir.fd >= 0) (void)::fsync(dir.fd);
}

// ---- reading ----
namespace {

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

void read_at(int fd, void* dst, uint64_t n, uint64_t at, const std::string& path) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, std::min<uint64_t>(n, uint64_t{1} << 30), static_cast<off_t>(at));
    if (r < 0 && errno == EINTR) continue;
    KILN_CHECK(r >= 0, "load_safetensors(", path, "): read failed: ", errno_text());
    KILN_CHECK(r > 0, "load_safetensors(", path, "): the file ended early (truncated while reading?)");
    p += r;
    n -= static_cast<uint64_t>(r);
    at += static_cast<uint64_t>(r);
  }
}

// "a string", "an array", ... for messages.
std::string kind_of(const Json& v) {
  std::string k = v.is_number_integer() ? "integer" : v.is_number() ? "number" : v.type_name();
  return (k == "array" || k == "object" || k == "integer" ? "an " : "a ") + k;
}

// A value quoted in a message, cut short (a hostile header may hold megabytes).
std::string excerpt(const Json& v) {
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// A non-negative integer that fits int64, or nullopt (fractions, negatives,
// 1e3, strings...).
std::optional<uint64_t> as_size(const Json& v) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return u;
    return std::nullopt;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  return std::nullopt;
}

// Parses the header, refusing what nlohmann would otherwise accept silently:
// a key repeated in one object (the last would win) and deep nesting.
Json parse_header(const std::string& text, const std::string& where) {
  std::vector<std::unordered_set<std::string>> keys;  // one set per open object
  auto check = [&](int depth, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        KILN_CHECK(depth < kMaxHeaderDepth, where, "the header nests more than ", kMaxHeaderDepth,
                   " levels deep; not a safetensors header");
        if (event == Json::parse_event_t::object_start) keys.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        keys.pop_back();
        break;
      case Json::parse_event_t::key: {
        const auto& key = parsed.get_ref<const std::string&>();
        KILN_CHECK(keys.back().insert(key).second, where, "the header names \"", key, "\" twice");
        break;
      }
      default:
        break;
    }
    return true;
  };
  try {
    return Json::parse(text, check);
  } catch (const Json::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 6: ..." without the bracketed id.
    std::string_view msg = e.what();
    if (size_t close = msg.find("] "); msg.starts_with("[json.exception.") && close != std::string_view::npos)
      msg.remove_prefix(close + 2);
    KILN_FAIL(where, "the header is not valid JSON (", msg, ")");
  }
}

}  // namespace

nn::TensorDict load_safetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  const std::string where = "load_safetensors(" + path + "): ";
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  KILN_CHECK(f.fd >= 0, where, "cannot open the file: ", errno_text());
  struct stat st {};
  KILN_CHECK(::fstat(f.fd, &st) == 0, where, "cannot stat the file: ", errno_text());
  KILN_CHECK(S_ISREG(st.st_mode), where, "not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  KILN_CHECK(size >= 8, where, "the file is ", size,
             " bytes, too short for the 8-byte header length; it is not a safetensors file or it is truncated");
  unsigned char len[8];
  read_at(f.fd, len, 8, 0, path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(len[i]) << (8 * i);
  KILN_CHECK(n <= size - 8, where, "the header length ", n, " runs past the end of the file (", size,
             " bytes); the file is truncated or not a safetensors file");
  KILN_CHECK(n <= kMaxHeaderBytes, where, "the header length ", n, " is over the ", kMaxHeaderBytes, "-byte limit");
  KILN_CHECK(n >= 2, where, "the header is ", n, " bytes, too short to hold a JSON object");
  std::string text(n, '\0');
  read_at(f.fd, text.data(), n, 8, path);
  KILN_CHECK(text[0] == '{', where, "the header does not start with '{'; not a safetensors file");
  const Json header = parse_header(text, where);
  KILN_CHECK(header.is_object(), where, "the header is ", kind_of(header), ", expected an object");

  const uint64_t data_size = size - 8 - n;
  std::vector<Entry> entries;
  if (metadata) metadata->clear();
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      KILN_CHECK(v.is_object(), where, "\"__metadata__\" must be an object of strings, got ", kind_of(v));
      for (const auto& [k, mv] : v.items()) {
        KILN_CHECK(mv.is_string(), where, "metadata \"", k, "\" must be a string, got ", kind_of(mv));
        if (metadata) (*metadata)[k] = mv.get<std::string>();
      }
      continue;
    }
    const std::string what = where + "tensor \"" + name + "\": ";
    KILN_CHECK(v.is_object(), what, "expected an object {dtype, shape, data_offsets}, got ", kind_of(v));
    auto dt = v.find("dtype"), shape = v.find("shape"), offs = v.find("data_offsets");
    KILN_CHECK(dt != v.end() && shape != v.end() && offs != v.end(), what, "missing ",
               dt == v.end() ? "\"dtype\"" : shape == v.end() ? "\"shape\"" : "\"data_offsets\"");
    KILN_CHECK(dt->is_string(), what, "\"dtype\" must be a string, got ", kind_of(*dt));
    const std::string& dtype = dt->get_ref<const std::string&>();
    Entry e;
    e.name = name;
    KILN_CHECK(st_dtype(dtype, &e.dtype), what, "dtype \"", dtype,
               "\" is not supported by kiln (supported: F32, F64, BF16, F16, I64, I32, U8, BOOL)");
    KILN_CHECK(shape->is_array(), what, "\"shape\" must be an array, got ", kind_of(*shape));
    // numel * itemsize, checked for overflow
    uint64_t bytes = itemsize(e.dtype);
    bool overflow = false;
    for (const Json& s : *shape) {
      std::optional<uint64_t> d = as_size(s);
      KILN_CHECK(d.has_value(), what, "shape entries must be non-negative integers, got ", excerpt(s));
      e.shape.push_back(static_cast<int64_t>(*d));
      if (*d == 0) continue;
      if (bytes > std::numeric_limits<uint64_t>::max() / *d) overflow = true;
      bytes *= *d;
    }
    // (An empty tensor's other dimensions must still multiply without overflow.)
    KILN_CHECK(!overflow && bytes <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), what, "shape ",
               shape_str(e.shape), " is too large");
    if (std::find(e.shape.begin(), e.shape.end(), 0) != e.shape.end()) bytes = 0;
    KILN_CHECK(offs->is_array() && offs->size() == 2, what, "\"data_offsets\" must be an array [begin, end], got ",
               excerpt(*offs));
    std::optional<uint64_t> b = as_size((*offs)[0]), en = as_size((*offs)[1]);
    KILN_CHECK(b && en, what, "\"data_offsets\" must hold non-negative integers, got ", excerpt(*offs));
    KILN_CHECK(*en >= *b, what, "bad data_offsets [", *b, ", ", *en, "]: need 0 <= begin <= end");
    e.begin = *b;
    e.end = *en;
    KILN_CHECK(e.end <= data_size, what, "data_offsets [", *b, ", ", *en,
               "] run past the end of the data section (", data_size, " bytes); the file is truncated or corrupt");
    KILN_CHECK(e.end - e.begin == bytes, what, "data_offsets [", *b, ", ", *en, "] hold ", e.end - e.begin,
               " bytes, but dtype ", dtype, " and shape ", shape_str(e.shape), " need ", bytes);
    entries.push_back(std::move(e));
  }

  // The tensors must tile the data section: no overlap, no gap, no tail.
  std::vector<const Entry*> by_offset;
  for (const Entry& e : entries) by_offset.push_back(&e);
  std::stable_sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t cursor = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : by_offset) {
    KILN_CHECK(e->begin >= cursor, where, "tensor \"", e->name, "\" (bytes ", e->begin, "..", e->end,
               ") overlaps tensor \"", prev ? prev->name : "", "\" (ending at ", cursor, ")");
    KILN_CHECK(e->begin == cursor, where, "bytes ", cursor, "..", e->begin, " of the data section belong to no tensor",
               " (before tensor \"", e->name, "\"); the header is corrupt");
    cursor = e->end;
    prev = e;
  }
  KILN_CHECK(cursor == data_size, where, "the data section has ", data_size, " bytes but the tensors cover ", cursor,
             "; the header and the data disagree");

  nn::TensorDict out;
  for (const Entry* e : by_offset) {
    Tensor t = Tensor::empty(e->shape, e->dtype);
    if (e->end > e->begin) read_at(f.fd, t.data_ptr(), e->end - e->begin, 8 + n + e->begin, path);
    if (e->dtype == DType::Bool) {
      // Any byte other than 0/1 would be an invalid bool.
      auto* p = static_cast<unsigned char*>(t.data_ptr());
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = p[i] != 0;
    }
    out.emplace_back(e->name, std::move(t));
  }
  return out;
}

}  // namespace kiln
