// The on-disk table of max-autotune's convolution choices (conv_autotune.h).
#include "ops/conv_autotune.h"

#include <omp.h>

#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/atomic_file.h"
#include "core/cache_root.h"
#include "kiln/error.h"

namespace kiln::conv_autotune {
namespace {
namespace fs = std::filesystem;

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      std::string m = line.substr(line.find(':') + 1);
      m.erase(0, m.find_first_not_of(' '));
      for (char& c : m)
        if (c == ' ' || c == '\t') c = '_';
      return m;
    }
  return "unknown_cpu";
}

}  // namespace

// What a measured choice depends on besides the convolution itself.
std::string machine_key() {
  const dnnl_version_t* v = dnnl_version();
  std::ostringstream s;
  s << cpu_model() << "|isa" << static_cast<unsigned>(dnnl::get_effective_cpu_isa()) << "|threads"
    << omp_get_max_threads() << "|onednn" << v->major << '.' << v->minor << '.' << v->patch << "|rules"
    << kChoiceRules;
  return s.str();
}

namespace {

struct Table {
  std::mutex mu;
  bool loaded = false;
  fs::path file;
  std::string machine;
  std::map<std::string, std::string> choice;  // shape key -> choice
  Stats stats;
};
Table& table() {
  static Table t;
  return t;
}

// Reads every well-formed line of the file (all machines: they are written
// back as they were).
std::map<std::string, std::string> read_file(const fs::path& file) {
  std::map<std::string, std::string> lines;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    const size_t tab = line.find('\t');
    if (tab == std::string::npos) continue;
    std::string value = line.substr(tab + 1);
    if (!value.empty() && value.find_first_of(" \t") == std::string::npos) lines[line.substr(0, tab)] = value;
  }
  return lines;
}

void load_locked(Table& t) {
  if (t.loaded) return;
  t.loaded = true;
  t.machine = machine_key();
  try {
    t.file = table_path();
  } catch (const Error&) {
    return;  // no cache directory: choices live for this process only
  }
  t.stats.file = t.file.string();
  const std::string prefix = t.machine + ' ';
  for (const auto& [key, value] : read_file(t.file))
    if (key.rfind(prefix, 0) == 0) {
      t.choice[key.substr(prefix.size())] = value;
      ++t.stats.loaded;
    }
}

}  // namespace

fs::path table_path() { return cache_root() / "autotune-v1" / "conv.tsv"; }

int64_t table_entries() { return static_cast<int64_t>(read_file(table_path()).size()); }

bool clear() {
  reset_for_tests();
  std::error_code ec;
  return fs::remove(table_path(), ec);
}

std::optional<std::string> lookup(const std::string& shape_key) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  load_locked(t);
  auto it = t.choice.find(shape_key);
  if (it == t.choice.end()) return std::nullopt;
  return it->second;
}

void record(const std::string& shape_key, const std::string& choice) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  load_locked(t);
  t.choice[shape_key] = choice;
  ++t.stats.measured;
  if (t.file.empty()) return;
  // Merge with what other processes wrote since this one loaded.
  std::map<std::string, std::string> lines = read_file(t.file);
  lines[t.machine + ' ' + shape_key] = choice;
  std::string text;
  for (const auto& [key, value] : lines) text += key + '\t' + value + '\n';
  try {
    std::error_code ec;
    fs::create_directories(t.file.parent_path(), ec);
    write_file_atomically(t.file, text);
  } catch (const Error&) {
    // An unwritable cache costs only the persistence: the choice holds for
    // this process, and the next one measures again.
  }
}

void record_bf16_choice(const std::string& shape_key, const std::string& choice, const char* who) {
  KILN_CHECK(choice == "bf16" || choice == "bf16-alone" || choice == "float32", who, ": ", choice,
             " is not a choice (bf16, bf16-alone or float32)");
  record(shape_key, choice);
}

Stats stats() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  return t.stats;
}

void reset_for_tests() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.loaded = false;
  t.file.clear();
  t.choice.clear();
  t.stats = Stats{};
}

}  // namespace kiln::conv_autotune
