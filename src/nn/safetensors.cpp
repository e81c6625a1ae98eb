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
#include <random>
#include <set>

#include "core/json.h"
#include "kiln/serialize.h"

namespace kiln {

namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // as the reference reader

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
  // Header and the tensors' bytes, in the given order.
  json::Value header = json::Value::object();
  if (!metadata.empty()) {
    json::Value meta = json::Value::object();
    for (const auto& [k, v] : metadata) meta.set(k, json::Value::string(v));
    header.set("__metadata__", std::move(meta));
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
    json::Value shape = json::Value::array();
    for (int64_t s : c.shape()) shape.push_back(json::Value::integer(s));
    uint64_t nbytes = c.nbytes();
    json::Value info = json::Value::object();
    info.set("dtype", json::Value::string(st_name(c.dtype())));
    info.set("shape", std::move(shape));
    info.set("data_offsets", json::Value::array({json::Value::integer(static_cast<int64_t>(offset)),
                                                 json::Value::integer(static_cast<int64_t>(offset + nbytes))}));
    header.set(name, std::move(info));
    offset += nbytes;
    data.push_back(c);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
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
  json::Value header;
  try {
    header = json::parse(text);
  } catch (const Error& e) {
    KILN_FAIL(where, "the header is not valid JSON (", e.what(), ")");
  }
  KILN_CHECK(header.is_object(), where, "the header is a JSON ", header.kind_name(), ", expected an object");

  const uint64_t data_size = size - 8 - n;
  std::vector<Entry> entries;
  std::set<std::string> seen;
  if (metadata) metadata->clear();
  for (const auto& [name, v] : header.members()) {
    KILN_CHECK(seen.insert(name).second, where, "the header names \"", name, "\" twice");
    if (name == "__metadata__") {
      KILN_CHECK(v.is_object(), where, "\"__metadata__\" must be an object of strings, got a ", v.kind_name());
      for (const auto& [k, mv] : v.members()) {
        KILN_CHECK(mv.is_string(), where, "metadata \"", k, "\" must be a string, got a ", mv.kind_name());
        if (metadata) (*metadata)[k] = mv.as_string();
      }
      continue;
    }
    const std::string what = where + "tensor \"" + name + "\": ";
    KILN_CHECK(v.is_object(), what, "expected an object {dtype, shape, data_offsets}, got a ", v.kind_name());
    const json::Value* dt = v.find("dtype");
    const json::Value* shape = v.find("shape");
    const json::Value* offs = v.find("data_offsets");
    KILN_CHECK(dt && shape && offs, what, "missing ", !dt ? "\"dtype\"" : !shape ? "\"shape\"" : "\"data_offsets\"");
    KILN_CHECK(dt->is_string(), what, "\"dtype\" must be a string, got a ", dt->kind_name());
    Entry e;
    e.name = name;
    KILN_CHECK(st_dtype(dt->as_string(), &e.dtype), what, "dtype \"", dt->as_string(),
               "\" is not supported by kiln (supported: F32, F64, BF16, F16, I64, I32, U8, BOOL)");
    KILN_CHECK(shape->is_array(), what, "\"shape\" must be an array, got a ", shape->kind_name());
    // numel * itemsize, checked for overflow
    uint64_t bytes = itemsize(e.dtype);
    bool overflow = false;
    for (const json::Value& s : shape->items()) {
      int64_t d = -1;
      try {
        d = s.as_int64();
      } catch (const Error&) {
        KILN_FAIL(what, "shape entries must be non-negative integers, got ", s.dump());
      }
      KILN_CHECK(d >= 0, what, "shape entries must be non-negative integers, got ", d);
      e.shape.push_back(d);
      if (d == 0) continue;
      if (bytes > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d)) overflow = true;
      bytes *= static_cast<uint64_t>(d);
    }
    // (An empty tensor's other dimensions must still multiply without overflow.)
    KILN_CHECK(!overflow && bytes <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), what, "shape ",
               shape_str(e.shape), " is too large");
    if (std::find(e.shape.begin(), e.shape.end(), 0) != e.shape.end()) bytes = 0;
    KILN_CHECK(offs->is_array() && offs->items().size() == 2, what,
               "\"data_offsets\" must be an array [begin, end], got ", offs->dump());
    int64_t b = -1, en = -1;
    try {
      b = offs->items()[0].as_int64();
      en = offs->items()[1].as_int64();
    } catch (const Error&) {
      KILN_FAIL(what, "\"data_offsets\" must hold integers, got ", offs->dump());
    }
    KILN_CHECK(b >= 0 && en >= b, what, "bad data_offsets [", b, ", ", en, "]: need 0 <= begin <= end");
    e.begin = static_cast<uint64_t>(b);
    e.end = static_cast<uint64_t>(en);
    KILN_CHECK(e.end <= data_size, what, "data_offsets [", b, ", ", en, "] run past the end of the data section (",
               data_size, " bytes); the file is truncated or corrupt");
    KILN_CHECK(e.end - e.begin == bytes, what, "data_offsets [", b, ", ", en, "] hold ", e.end - e.begin,
               " bytes, but dtype ", dt->as_string(), " and shape ", shape_str(e.shape), " need ", bytes);
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
