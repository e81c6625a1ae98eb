// kiln::Profile: the recorder (a dispatch mode), the per-op table and the
// Chrome trace (https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU).
#include "runtime/profiler.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kiln/error.h"

namespace kiln {
namespace detail {
namespace {

thread_local ProfileRecorder* t_active = nullptr;
uint64_t next_serial() {
  static std::atomic<uint64_t> serial{0};
  return ++serial;
}

}  // namespace

ProfileRecorder* active_profile_recorder() { return t_active; }

ProfileRecorder::ProfileRecorder()
    : t0(std::chrono::steady_clock::now()),
      serial(next_serial()),
      pid(static_cast<int>(::getpid())),
      tid(static_cast<int>(::gettid())) {
  events.reserve(4096);
  shape_pool.reserve(4096 * 8);
  open_ops.reserve(64);
  guard.emplace(*this);
  prev = t_active;
  t_active = this;
}

ProfileRecorder::~ProfileRecorder() { stop(); }

void ProfileRecorder::stop() {
  if (!guard) return;
  stop_ns = now_ns();
  guard.reset();
  // Recorders stop in reverse order (ModeGuard enforces it), so this one is innermost.
  t_active = prev;
  read_device_times();
}

void ProfileRecorder::read_device_times() {
  if (device_events.empty()) return;
  // Events complete in stream order; the last one recorded may be on another
  // device's stream, so wait for each pair's end as it is read.
  for (ProfileEvent& e : events) {
    if (e.device_pair < 0) continue;
    const DevicePair& d = device_events[static_cast<size_t>(e.device_pair)];
    d.end->synchronize();
    e.device_ns = static_cast<int64_t>(static_cast<double>(d.begin->elapsed_ms(*d.end)) * 1e6);
    e.device_self_ns = e.device_ns;
  }
  for (const ProfileEvent& e : events)
    if (e.device_ns >= 0 && e.parent >= 0) events[static_cast<size_t>(e.parent)].device_self_ns -= e.device_ns;
  device_events.clear();  // the CUDA events go back now; the times stay
  has_device_times = true;
}

int64_t ProfileRecorder::now_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
}

Tensors ProfileRecorder::handle(OpId id, Tensors& inputs, const Attrs& attrs, const NextMode& next) {
  const size_t index = events.size();
  ProfileEvent& e = events.emplace_back();
  e.op = id;
  e.shapes_begin = static_cast<uint32_t>(shape_pool.size());
  for (const Tensor& t : inputs) {
    if (!t.defined()) {
      shape_pool.push_back(-1);
      continue;
    }
    const Shape& s = t.shape();
    shape_pool.push_back(static_cast<int64_t>(t.dtype()));
    shape_pool.push_back(static_cast<int64_t>(s.size()));
    shape_pool.insert(shape_pool.end(), s.begin(), s.end());
  }
  e.shapes_end = static_cast<uint32_t>(shape_pool.size());
  e.parent = open_ops.empty() ? -1 : static_cast<int32_t>(open_ops.back().event);
  int cuda_device = -1;
  for (const Tensor& t : inputs)
    if (t.defined() && t.device().is_cuda()) {
      cuda_device = t.device().index;
      break;
    }
  open_ops.push_back({index, 0});
  if (cuda_device >= 0) {
    events[index].device_pair = static_cast<int32_t>(device_events.size());
    device_events.push_back({std::make_unique<cuda::Event>(), std::make_unique<cuda::Event>()});
    device_events.back().begin->record(cuda::current_stream(cuda_device));
  }
  // The clock is read last before the op and first after it: the recording
  // itself falls between op calls, where it shows as time outside ops.
  const int64_t begin = now_ns();
  events[index].begin_ns = begin;
  auto finish = [&] {
    const int64_t dur = now_ns() - begin;
    // (device_events may have grown inside the call: index it again.)
    if (cuda_device >= 0)
      device_events[static_cast<size_t>(events[index].device_pair)].end->record(cuda::current_stream(cuda_device));
    ProfileEvent& done = events[index];
    done.dur_ns = dur;
    done.self_ns = dur - open_ops.back().child_ns;
    open_ops.pop_back();
    if (!open_ops.empty()) open_ops.back().child_ns += dur;
  };
  Tensors out;
  try {
    out = next(id, inputs, attrs);
  } catch (...) {
    finish();
    throw;
  }
  finish();
  return out;
}

size_t ProfileRecorder::begin_range(const char* name) {
  int32_t r = 0;
  while (r < static_cast<int32_t>(range_names.size()) && range_names[r] != name) ++r;
  if (r == static_cast<int32_t>(range_names.size())) range_names.emplace_back(name);
  ProfileEvent& e = events.emplace_back();
  e.range = r;
  e.begin_ns = now_ns();
  return events.size() - 1;
}

void ProfileRecorder::end_range(size_t event) {
  ProfileEvent& e = events[event];
  e.dur_ns = now_ns() - e.begin_ns;
  e.self_ns = e.dur_ns;
}

const char* ProfileRecorder::event_name(const ProfileEvent& e) const {
  return e.range >= 0 ? range_names[e.range].c_str() : op_name(e.op);
}

std::string ProfileRecorder::input_shapes(const ProfileEvent& e) const {
  std::string s;
  for (uint32_t i = e.shapes_begin; i < e.shapes_end;) {
    if (!s.empty()) s += ", ";
    const int64_t dtype = shape_pool[i++];
    if (dtype < 0) {
      s += "None";
      continue;
    }
    s += dtype_name(static_cast<DType>(dtype));
    s += '[';
    const int64_t ndim = shape_pool[i++];
    for (int64_t d = 0; d < ndim; ++d) {
      if (d) s += ", ";
      s += std::to_string(shape_pool[i++]);
    }
    s += ']';
  }
  return s;
}

}  // namespace detail

// ---------------------------------------------------------------------------
// Profile
// ---------------------------------------------------------------------------

namespace {
constexpr double kNsPerMs = 1e6;

// An event still open (a range around the read) ends now.
int64_t duration_so_far(const detail::ProfileRecorder& rec, const detail::ProfileEvent& e) {
  return e.dur_ns >= 0 ? e.dur_ns : rec.wall_ns() - e.begin_ns;
}
}  // namespace

Profile::Profile() : rec_(std::make_unique<detail::ProfileRecorder>()) {}

Profile::Profile(std::string trace_path) : Profile() { trace_path_ = std::move(trace_path); }

Profile::~Profile() {
  stop();
  if (trace_path_.empty()) return;
  try {
    write_chrome_trace(trace_path_);
  } catch (const std::exception& e) {
    std::cerr << "kiln: profile trace not written: " << e.what() << "\n";
  }
}

std::string Profile::env_trace_path() {
  const char* path = std::getenv("KILN_PROFILE");
  return path ? path : "";
}

std::unique_ptr<Profile> Profile::from_env() {
  std::string path = env_trace_path();
  if (path.empty()) return nullptr;
  return std::make_unique<Profile>(std::move(path));
}

void Profile::stop() { rec_->stop(); }
bool Profile::active() const { return rec_->active(); }
double Profile::wall_ms() const { return static_cast<double>(rec_->wall_ns()) / kNsPerMs; }
size_t Profile::num_events() const { return rec_->events.size(); }

double Profile::ops_ms() const {
  int64_t ns = 0;
  for (const detail::ProfileEvent& e : rec_->events)
    if (e.range < 0 && e.dur_ns >= 0) ns += e.self_ns;
  return static_cast<double>(ns) / kNsPerMs;
}

std::vector<OpStats> Profile::op_stats() const {
  struct Acc {
    int64_t calls = 0, self_ns = 0, total_ns = 0, device_self_ns = 0;
  };
  std::vector<Acc> acc(kNumOps);
  for (const detail::ProfileEvent& e : rec_->events) {
    if (e.range >= 0 || e.dur_ns < 0) continue;
    Acc& a = acc[static_cast<size_t>(e.op)];
    ++a.calls;
    a.self_ns += e.self_ns;
    a.total_ns += e.dur_ns;
    if (e.device_ns >= 0) a.device_self_ns += e.device_self_ns;
  }
  const double wall = wall_ms();
  std::vector<OpStats> rows;
  for (int i = 0; i < kNumOps; ++i) {
    if (acc[i].calls == 0) continue;
    OpStats s;
    s.name = op_name(static_cast<OpId>(i));
    s.calls = acc[i].calls;
    s.self_ms = static_cast<double>(acc[i].self_ns) / kNsPerMs;
    s.total_ms = static_cast<double>(acc[i].total_ns) / kNsPerMs;
    s.cuda_ms = static_cast<double>(acc[i].device_self_ns) / kNsPerMs;
    s.share = wall > 0 ? s.self_ms / wall : 0;
    rows.push_back(std::move(s));
  }
  std::stable_sort(rows.begin(), rows.end(), [](const OpStats& a, const OpStats& b) { return a.self_ms > b.self_ms; });
  return rows;
}

OpStats Profile::op_stats(std::string_view op) const {
  for (OpStats& s : op_stats())
    if (s.name == op) return s;
  OpStats none;
  none.name = op;
  return none;
}

std::vector<RangeStats> Profile::range_stats() const {
  std::vector<RangeStats> rows(rec_->range_names.size());
  for (size_t i = 0; i < rows.size(); ++i) rows[i].name = rec_->range_names[i];
  for (const detail::ProfileEvent& e : rec_->events) {
    if (e.range < 0) continue;
    ++rows[e.range].calls;
    rows[e.range].total_ms += static_cast<double>(duration_so_far(*rec_, e)) / kNsPerMs;
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const RangeStats& a, const RangeStats& b) { return a.total_ms > b.total_ms; });
  return rows;
}

std::string Profile::table_string() const {
  std::vector<OpStats> rows = op_stats();
  size_t width = 24;
  for (const OpStats& s : rows) width = std::max(width, s.name.size() + 2);
  std::ostringstream os;
  os << std::fixed;
  // CUDA self time, when some op had a CUDA input (header comment of
  // runtime/profiler.h): what each op kept the GPU's stream busy.
  const bool cuda = rec_->has_device_times;
  os << std::left << std::setw(static_cast<int>(width)) << "op" << std::right << std::setw(10) << "calls"
     << std::setw(12) << "self ms" << std::setw(12) << "total ms" << std::setw(9) << "share";
  if (cuda) os << std::setw(12) << "cuda ms";
  os << "\n";
  for (const OpStats& s : rows) {
    os << std::left << std::setw(static_cast<int>(width)) << s.name << std::right << std::setw(10) << s.calls
       << std::setprecision(3) << std::setw(12) << s.self_ms << std::setw(12) << s.total_ms << std::setprecision(1)
       << std::setw(8) << 100 * s.share << "%";
    if (cuda) os << std::setprecision(3) << std::setw(12) << s.cuda_ms;
    os << "\n";
  }
  const double wall = wall_ms(), ops = ops_ms();
  os << std::setprecision(1) << "ops total " << ops << " ms of " << wall << " ms wall ("
     << (wall > 0 ? 100 * ops / wall : 0.0) << "%)\n";
  std::vector<RangeStats> ranges = range_stats();
  if (!ranges.empty()) {
    os << std::left << std::setw(static_cast<int>(width)) << "range" << std::right << std::setw(10) << "calls"
       << std::setw(12) << "total ms" << "\n";
    for (const RangeStats& r : ranges)
      os << std::left << std::setw(static_cast<int>(width)) << r.name << std::right << std::setw(10) << r.calls
         << std::setprecision(3) << std::setw(12) << r.total_ms << "\n";
  }
  return os.str();
}

void Profile::table(std::ostream& os) const { os << table_string(); }
void Profile::table() const { table(std::cout); }

void Profile::write_chrome_trace(const std::string& path) const {
  KILN_CHECK(!path.empty(), "write_chrome_trace: empty path; name a file such as trace.json");
  nlohmann::json events = nlohmann::json::array();
  for (const detail::ProfileEvent& e : rec_->events) {
    nlohmann::json ev = {{"name", rec_->event_name(e)},
                         {"cat", e.range >= 0 ? "range" : "op"},
                         {"ph", "X"},
                         {"ts", static_cast<double>(e.begin_ns) / 1e3},
                         {"dur", static_cast<double>(duration_so_far(*rec_, e)) / 1e3},
                         {"pid", rec_->pid},
                         {"tid", rec_->tid}};
    if (e.range < 0 && e.shapes_end > e.shapes_begin) ev["args"] = {{"inputs", rec_->input_shapes(e)}};
    if (e.device_ns >= 0) ev["args"]["cuda_us"] = static_cast<double>(e.device_ns) / 1e3;
    events.push_back(std::move(ev));
  }
  nlohmann::json trace = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};

  // Written beside the target and renamed over it: a reader never sees half a trace.
  namespace fs = std::filesystem;
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    KILN_CHECK(out, "write_chrome_trace: cannot create ", tmp, " (next to ", path, "): ", std::strerror(errno),
               "; check that the directory exists and is writable");
    out << trace.dump();
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      KILN_FAIL("write_chrome_trace: writing ", tmp, " failed: ", std::strerror(errno), "; is the disk full?");
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    KILN_FAIL("write_chrome_trace: renaming ", tmp, " to ", path, " failed: ", ec.message());
  }
}

// ---------------------------------------------------------------------------
// ProfileRange
// ---------------------------------------------------------------------------

ProfileRange::ProfileRange(const char* name) : rec_(detail::t_active) {
  if (rec_ == nullptr) [[likely]]
    return;
  serial_ = rec_->serial;
  event_ = rec_->begin_range(name);
}

ProfileRange::~ProfileRange() {
  if (rec_ == nullptr) [[likely]]
    return;
  // The profile may have ended inside the range: only the same, still active
  // recorder closes it (a stopped one shows it open until its stop time).
  if (detail::t_active == rec_ && rec_->serial == serial_) rec_->end_range(event_);
}

}  // namespace kiln
