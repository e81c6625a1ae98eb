// Dispatch modes: the thread-local stack of scopes that see every op call
// before it runs (DESIGN.md, "The ops table and dispatch").
//
// dispatch() hands a call to the top mode; a mode handles it (records it,
// times it, answers it with meta tensors) and may pass it on with next(),
// which runs the mode below it and, under the last mode, the op itself: a
// composite op's decomposition, a view, or the kernel followed by autograd
// recording (the built-in bottom mode, on while grad mode is on).
//
// While a mode's handle() runs, op calls it makes itself skip that mode and
// the ones above it (so a mode never sees its own work). A decomposition
// re-enters the whole stack: every mode sees the constituents of a composite
// op. A kernel, a view function and a shape rule run with every mode
// excluded, autograd included: the helpers they call (a contiguous copy, a
// reshape) never reach a profiler, the tape or a graph.
#pragma once
#include <vector>

#include "ops/op_def.h"

namespace kiln {

class DispatchMode;

// Continues an op call below the mode that received it.
class NextMode {
 public:
  Tensors operator()(OpId id, Tensors& inputs, const Attrs& attrs) const;

 private:
  friend class ModeStackAccess;
  explicit NextMode(int level) : level_(level) {}
  int level_;  // index of the mode that received the call
};

class DispatchMode {
 public:
  virtual ~DispatchMode() = default;
  virtual const char* mode_name() const = 0;
  virtual Tensors handle(OpId id, Tensors& inputs, const Attrs& attrs, const NextMode& next) = 0;
};

// Pushes `mode` for the scope (the mode must outlive it). Scopes nest
// strictly; popping out of order is an internal error.
class ModeGuard {
 public:
  explicit ModeGuard(DispatchMode& mode);
  ~ModeGuard();
  ModeGuard(const ModeGuard&) = delete;
  ModeGuard& operator=(const ModeGuard&) = delete;

 private:
  DispatchMode* mode_;
};

// Runs the scope below every mode, autograd recording included: what a
// kernel sees. Compiled graphs run their kernels under it too.
class ExcludeModesGuard {
 public:
  ExcludeModesGuard();
  ~ExcludeModesGuard();
  ExcludeModesGuard(const ExcludeModesGuard&) = delete;
  ExcludeModesGuard& operator=(const ExcludeModesGuard&) = delete;

 private:
  int prev_visible_;
  bool prev_excluded_;
};

// Hides `mode` and every mode above it for the scope, as if the scope ran
// inside mode's handler: how a mode runs work of its own (capture runs a
// graph at a graph break) outside handle(). The constituents of a composite
// op called in the scope do not see them either.
class HideModeGuard {
 public:
  explicit HideModeGuard(const DispatchMode& mode);
  ~HideModeGuard();
  HideModeGuard(const HideModeGuard&) = delete;
  HideModeGuard& operator=(const HideModeGuard&) = delete;

 private:
  int prev_visible_;
  int prev_hidden_from_;
};

// Runs the scope on an empty mode stack of its own: the modes of the caller,
// hidden or not, see nothing of it, and the scope may push modes even where
// ModeGuard may not (inside a mode's work). How the compiler traces its own
// derivations (a decomposition, the joint forward and backward) wherever it
// runs: under a capture, a profiler, or inside a graph run.
class FreshModeStack {
 public:
  FreshModeStack();
  ~FreshModeStack();
  FreshModeStack(const FreshModeStack&) = delete;
  FreshModeStack& operator=(const FreshModeStack&) = delete;

 private:
  std::vector<DispatchMode*> prev_stack_;
  int prev_visible_;
  bool prev_excluded_;
  int prev_hidden_from_;
};

// The modes pushed on this thread, bottom first (for tests and explain).
std::vector<const DispatchMode*> active_modes();
// True inside a kernel, view function or shape rule (ExcludeModesGuard).
bool modes_excluded();

// True when an input is a meta tensor: the op then runs its shape rule only.
bool any_meta(TensorSpan inputs);

// Runs an op with no mode above it: the decomposition, view or kernel, then
// autograd recording. dispatch() ends here once the modes have passed it on.
Tensors dispatch_below_modes(OpId id, Tensors& inputs, const Attrs& attrs);

}  // namespace kiln
