// KILN_LOGS: the compiler's event log (compiler/log.h).
#include "compiler/log.h"

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <set>

namespace kiln::compiler {
namespace {

constexpr std::array<const char*, kNumLogCategories> kNames = {"graph_breaks", "recompiles", "guards", "graphs",
                                                               "aot",          "precision"};
constexpr size_t kKeptPerCategory = 4096;
constexpr int kUnread = -1;

struct LogState {
  std::atomic<int> mask{kUnread};  // bit per category; kUnread until KILN_LOGS is read
  std::mutex mu;                   // guards the rest and the writes to stderr
  std::array<std::set<std::string, std::less<>>, kNumLogCategories> once_keys;
  std::array<std::deque<std::string>, kNumLogCategories> kept;
};

LogState& state() {
  static LogState s;
  return s;
}


// The categories a KILN_LOGS value names; one warning line for unknown names.
int parse_spec(std::string_view spec) {
  int mask = 0;
  std::string unknown;
  for (std::string_view name : comma_list(spec)) {
    if (name == "all") {
      mask = (1 << kNumLogCategories) - 1;
      continue;
    }
    int i = 0;
    while (i < kNumLogCategories && name != kNames[i]) ++i;
    if (i < kNumLogCategories) mask |= 1 << i;
    else unknown += (unknown.empty() ? "'" : ", '") + std::string(name) + "'";
  }
  if (!unknown.empty()) {
    std::string valid;
    for (const char* n : kNames) valid += std::string(n) + ", ";
    std::fprintf(stderr, "[kiln] KILN_LOGS: unknown category %s; valid: %sall\n", unknown.c_str(), valid.c_str());
  }
  return mask;
}

// Sets the categories and forgets what was logged; the caller holds s.mu.
void apply_spec(LogState& s, std::string_view spec) {
  for (auto& keys : s.once_keys) keys.clear();
  for (auto& kept : s.kept) kept.clear();
  s.mask.store(parse_spec(spec), std::memory_order_release);
}

void apply_env(LogState& s) {
  const char* env = std::getenv("KILN_LOGS");
  apply_spec(s, env ? env : "");
}

int current_mask() {
  LogState& s = state();
  int mask = s.mask.load(std::memory_order_acquire);
  if (mask != kUnread) [[likely]]
    return mask;
  std::lock_guard<std::mutex> lock(s.mu);
  mask = s.mask.load(std::memory_order_acquire);
  if (mask != kUnread) return mask;  // another thread read it first
  apply_env(s);
  return s.mask.load(std::memory_order_acquire);
}

// Prints and keeps one message; the caller holds s.mu.
void emit(LogState& s, LogCategory c, std::string_view message) {
  const char* name = kNames[static_cast<size_t>(c)];
  std::fprintf(stderr, "[kiln:%s] %.*s\n", name, static_cast<int>(message.size()), message.data());
  auto& kept = s.kept[static_cast<size_t>(c)];
  if (kept.size() == kKeptPerCategory) kept.pop_front();
  kept.emplace_back(message);
}

}  // namespace

std::vector<std::string_view> comma_list(std::string_view list) {
  std::vector<std::string_view> items;
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

const char* log_category_name(LogCategory c) { return kNames[static_cast<size_t>(c)]; }

bool log_enabled(LogCategory c) { return (current_mask() >> static_cast<int>(c)) & 1; }

void log_event(LogCategory c, std::string_view message) {
  if (!log_enabled(c)) return;
  LogState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  emit(s, c, message);
}

void log_once(LogCategory c, std::string_view key, std::string_view message) {
  if (!log_enabled(c)) return;
  LogState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.once_keys[static_cast<size_t>(c)].emplace(key).second) return;
  emit(s, c, message);
}

std::vector<std::string> logged_events(LogCategory c) {
  LogState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  const auto& kept = s.kept[static_cast<size_t>(c)];
  return std::vector<std::string>(kept.begin(), kept.end());
}

void configure_logs(std::string_view spec) {
  LogState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  apply_spec(s, spec);
}

void reset_logs() {
  LogState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  apply_env(s);
}

std::string source_location_str(const SourceLocation& loc) {
  std::string s = loc.file_name();
  s += ':';
  s += std::to_string(loc.line());
  if (*loc.function_name() != '\0') {
    s += " in ";
    s += loc.function_name();
  }
  return s;
}

}  // namespace kiln::compiler
