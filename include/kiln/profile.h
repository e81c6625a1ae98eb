// The profiler: which ops ran, how often, and for how long.
//
//   {
//     kiln::Profile p("trace.json");   // written when p ends; open it in Perfetto
//     ...train step...
//     p.stop();
//     p.table();                        // per-op calls, self/total ms, share of the wall time
//   }
//
// A Profile records every op call made on the thread that created it, while
// it is active: composite ops and, nested inside them, their constituents;
// the ops of backward() and of an optimizer step; never a kernel's internal
// calls. Each call is one complete event in the Chrome trace, so nesting
// shows in Perfetto / chrome://tracing. The table counts SELF time (an op's
// time minus the op calls nested in it), so its rows add up to the time spent
// in ops without counting a composite and its constituents twice.
// Named ranges (ProfileRange: "backward", "optimizer.step", "dataloader.next")
// appear in the trace and below the table; they are not ops.
//
// Ops run on other threads (a DataLoader's workers) are not recorded. Profile
// scopes nest strictly with other dispatch-mode scopes (stop them in reverse
// order of creation); see docs/profiling.md.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

namespace detail {
struct ProfileRecorder;
}

struct OpStats {
  std::string name;
  int64_t calls = 0;
  double self_ms = 0;   // minus the op calls nested inside
  double total_ms = 0;  // including them
  double share = 0;     // self_ms / the profiled wall time
  // CUDA self time (ops with a CUDA input: the stream's time from the call's
  // first queued work to its last, minus the calls nested inside), read when
  // the profile stops; 0 for CPU ops and while the profile is active.
  double cuda_ms = 0;
};

struct RangeStats {
  std::string name;
  int64_t calls = 0;
  double total_ms = 0;
};

class Profile {
 public:
  // Starts recording on this thread.
  Profile();
  // Starts recording; writes the Chrome trace to `trace_path` when the
  // profile ends (an unwritable path is reported on stderr then, not thrown).
  explicit Profile(std::string trace_path);
  ~Profile();
  Profile(const Profile&) = delete;
  Profile& operator=(const Profile&) = delete;

  // Profiles when KILN_PROFILE names a trace file (written when the returned
  // profile ends); nullptr when the variable is unset or empty.
  static std::unique_ptr<Profile> from_env();
  // $KILN_PROFILE, or "" when unset.
  static std::string env_trace_path();

  // Ends recording (idempotent). Stats and the trace stay readable.
  void stop();
  bool active() const;

  // Wall time from the start to stop() (or to now while active).
  double wall_ms() const;
  // The sum of every op call's self time: the time spent in ops.
  double ops_ms() const;
  // One row per op seen, by self time, largest first.
  std::vector<OpStats> op_stats() const;
  // The row of one op by name ("matmul"); calls == 0 when it never ran.
  OpStats op_stats(std::string_view op) const;
  std::vector<RangeStats> range_stats() const;
  // Op calls and ranges recorded.
  size_t num_events() const;

  // The per-op table and the line "ops total X ms of Y ms wall (Z%)".
  std::string table_string() const;
  void table(std::ostream& os) const;
  void table() const;  // to stdout

  // {"traceEvents":[...],"displayTimeUnit":"ms"}, written to a temporary file
  // beside `path` and renamed over it. kiln::Error if it cannot be written.
  void write_chrome_trace(const std::string& path) const;
  const std::string& trace_path() const { return trace_path_; }

 private:
  std::unique_ptr<detail::ProfileRecorder> rec_;
  std::string trace_path_;
};

// A named span of time in the active profile of this thread (the innermost
// one); does nothing without one. For coarse phases, not per op:
//   { kiln::ProfileRange r("backward"); ... }
class ProfileRange {
 public:
  explicit ProfileRange(const char* name);
  ~ProfileRange();
  ProfileRange(const ProfileRange&) = delete;
  ProfileRange& operator=(const ProfileRange&) = delete;

 private:
  detail::ProfileRecorder* rec_;
  uint64_t serial_ = 0;
  size_t event_ = 0;
};

}  // namespace kiln
