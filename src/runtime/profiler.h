// The recorder behind kiln::Profile (include/kiln/profile.h): a dispatch mode
// that times each op call it sees, plus named ranges.
//
// Requires: it runs on the thread that pushed it (the mode stack is
// thread-local), and op calls nest strictly (a composite's constituents run
// inside its handle()). Guarantees: one event per op call, in order of
// begin; each op event's self time is its duration minus the durations of
// the op events directly inside it, so the self times of all events add up
// to the time spent inside top-level op calls. Recording an op costs two
// clock reads and vector pushes (the input shapes go to a flat pool and
// become strings only when the trace is written).
//
// CUDA time: an op call with a CUDA input also records a pair of CUDA events
// on its device's current stream around the call; stop() waits for the last
// one and reads each pair's elapsed time (device_ns), and each call's device
// self time as the host's (minus the calls directly inside). The elapsed
// time is the stream's time from the op's first queued work to its last,
// gaps included: when the GPU outruns the host's launches it reads as the
// launch time, as it would be in the step.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/cuda.h"
#include "kiln/profile.h"
#include "ops/dispatch_mode.h"

namespace kiln::detail {

struct ProfileEvent {
  int64_t begin_ns = 0;  // since the recorder started
  int64_t dur_ns = -1;   // -1 while open
  int64_t self_ns = 0;   // op calls: dur_ns minus the op calls directly inside
  uint32_t shapes_begin = 0, shapes_end = 0;  // the inputs, in ProfileRecorder::shape_pool
  int32_t range = -1;  // index into range_names; -1: an op call
  OpId op{};
  int32_t parent = -1;         // the op call directly around this one; -1: none
  int32_t device_pair = -1;    // index into ProfileRecorder::device_events; -1: no CUDA input
  int64_t device_ns = -1;      // CUDA elapsed time, read by stop(); -1: none
  int64_t device_self_ns = 0;  // device_ns minus the calls directly inside
};

struct ProfileRecorder final : DispatchMode {
  ProfileRecorder();
  ~ProfileRecorder() override;
  const char* mode_name() const override { return "profile"; }
  Tensors handle(OpId id, Tensors& inputs, const Attrs& attrs, const NextMode& next) override;

  // Pops the mode and stops the clock (idempotent); reads the CUDA times.
  void stop();
  void read_device_times();
  bool active() const { return guard.has_value(); }
  int64_t now_ns() const;
  int64_t wall_ns() const { return stop_ns >= 0 ? stop_ns : now_ns(); }

  size_t begin_range(const char* name);
  void end_range(size_t event);

  // "float32[2, 3], int64[4]" for an event's inputs.
  std::string input_shapes(const ProfileEvent& e) const;
  const char* event_name(const ProfileEvent& e) const;

  std::chrono::steady_clock::time_point t0;
  int64_t stop_ns = -1;
  std::vector<ProfileEvent> events;
  // Per input: dtype (-1: undefined tensor), ndim, then the dims.
  std::vector<int64_t> shape_pool;
  struct OpenOp {
    size_t event;
    int64_t child_ns;
  };
  std::vector<OpenOp> open_ops;
  std::vector<std::string> range_names;
  // Begin/end CUDA events of the op calls with a CUDA input.
  struct DevicePair {
    std::unique_ptr<cuda::Event> begin, end;
  };
  std::vector<DevicePair> device_events;
  bool has_device_times = false;
  ProfileRecorder* prev = nullptr;  // the recorder active on this thread before this one
  uint64_t serial = 0;              // unique per recorder, so a range outliving one is dropped
  int pid = 0, tid = 0;
  std::optional<ModeGuard> guard;
};

// This thread's innermost active recorder, or nullptr.
ProfileRecorder* active_profile_recorder();

}  // namespace kiln::detail
