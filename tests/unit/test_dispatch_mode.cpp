// The dispatch mode stack: what each mode sees, in which order, and that
// kernels' internal op calls reach no mode and no tape.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "ops/dispatch_mode.h"

namespace kiln {
namespace {

// Logs "tag:op" for every call it sees, then passes it on.
class LoggingMode : public DispatchMode {
 public:
  LoggingMode(std::string tag, std::vector<std::string>& log) : tag_(std::move(tag)), log_(log) {}
  const char* mode_name() const override { return "logging"; }
  Tensors handle(OpId id, Tensors& inputs, const Attrs& attrs, const NextMode& next) override {
    log_.push_back(tag_ + ":" + op_name(id));
    return next(id, inputs, attrs);
  }

 private:
  std::string tag_;
  std::vector<std::string>& log_;
};

TEST(DispatchMode, SeesEachOpOnceAndNotTheKernelsInternals) {
  Tensor a = randn({4, 6}).t();  // non-contiguous: matmul's kernel makes a contiguous copy itself
  Tensor b = randn({4, 5});
  std::vector<std::string> log;
  LoggingMode mode("m", log);
  {
    ModeGuard g(mode);
    Tensor c = matmul(a, b);
    EXPECT_EQ(c.shape(), (Shape{6, 5}));
  }
  EXPECT_EQ(log, (std::vector<std::string>{"m:matmul"}));
}

TEST(DispatchMode, ModesNestTopFirstAndSeeCompositeConstituents) {
  Tensor x = randn({2, 3}).t();
  std::vector<std::string> log;
  LoggingMode outer("outer", log), inner("inner", log);
  ModeGuard g1(outer);
  ModeGuard g2(inner);  // pushed last: sees calls first
  Tensor y = x.reshape({6});  // composite: non-contiguous input, so reshape copies then views
  EXPECT_EQ(y.shape(), (Shape{6}));
  ASSERT_GE(log.size(), 4u);
  EXPECT_EQ(log[0], "inner:reshape");
  EXPECT_EQ(log[1], "outer:reshape");
  // The decomposition re-enters the whole stack, top first.
  EXPECT_EQ(log[2].rfind("inner:", 0), 0u) << log[2];
  EXPECT_EQ(log[3].rfind("outer:", 0), 0u) << log[3];
}

// A mode that answers add with its own result never reaches the kernel;
// ops it calls itself skip it.
class AddTwiceMode : public DispatchMode {
 public:
  int seen = 0;
  const char* mode_name() const override { return "add-twice"; }
  Tensors handle(OpId id, Tensors& inputs, const Attrs& attrs, const NextMode& next) override {
    ++seen;
    if (id != OpId::add) return next(id, inputs, attrs);
    Tensor once = add(inputs[0], inputs[1]);  // not seen by this mode again
    return {add(once, inputs[1])};
  }
};

TEST(DispatchMode, HandlerCallsSkipTheirOwnMode) {
  AddTwiceMode mode;
  Tensor a = full({2}, 1.0), b = full({2}, 10.0);
  Tensor r;
  {
    ModeGuard g(mode);
    r = add(a, b);
  }
  EXPECT_EQ(mode.seen, 1);
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{21, 21}));
  EXPECT_TRUE(active_modes().empty());
}

TEST(DispatchMode, AutogradRecordsBelowModesAndNotInsideKernels) {
  Tensor w = randn({3, 4}).requires_grad_();
  Tensor x = randn({5, 4});
  std::vector<std::string> log;
  LoggingMode mode("m", log);
  Tensor y;
  {
    ModeGuard g(mode);
    y = linear(x, w);  // composite: matmul of a transposed weight
  }
  ASSERT_TRUE(y.requires_grad());
  y.sum().backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().shape(), (Shape{3, 4}));
  // Backward ran after the scope: the mode saw only the forward.
  for (const std::string& s : log) EXPECT_EQ(s.rfind("m:", 0), 0u);
}

TEST(DispatchMode, ExcludeModesGuardHidesEveryMode) {
  Tensor w = randn({3}).requires_grad_();
  std::vector<std::string> log;
  LoggingMode mode("m", log);
  ModeGuard g(mode);
  {
    ExcludeModesGuard excluded;
    EXPECT_TRUE(modes_excluded());
    Tensor y = mul(w, 2.0);
    EXPECT_FALSE(y.requires_grad());  // autograd is a mode too
  }
  EXPECT_FALSE(modes_excluded());
  EXPECT_TRUE(log.empty());
}

// HideModeGuard hides a mode and those above it, for the constituents of a
// composite op too: a capture running its graph must not record the
// contiguous copy a generated kernel's channels-last input needs (it did, and
// the run recursed into itself until the stack overflowed).
TEST(DispatchMode, HiddenModesStayHiddenFromCompositeConstituents) {
  Tensor x = contiguous(randn({2, 3, 4, 5}), MemoryFormat::ChannelsLast);
  std::vector<std::string> log;
  LoggingMode outer("outer", log), inner("inner", log);
  ModeGuard g1(outer);
  ModeGuard g2(inner);
  {
    HideModeGuard hidden(inner);  // inner hidden, outer still sees calls
    Tensor y = x.contiguous();    // composite: copy of a non-contiguous input
    EXPECT_TRUE(y.is_contiguous());
    EXPECT_FALSE(y.is_meta());
  }
  ASSERT_FALSE(log.empty());
  for (const std::string& s : log) EXPECT_EQ(s.rfind("outer:", 0), 0u) << s;
  EXPECT_EQ(log.front(), "outer:contiguous");
  EXPECT_EQ(log.back(), "outer:copy");
  log.clear();
  {
    HideModeGuard hidden(outer);  // both hidden
    (void)x.contiguous();
  }
  EXPECT_TRUE(log.empty());
  (void)x.contiguous();  // out of the scopes: both see it and its copy again
  EXPECT_EQ(log, (std::vector<std::string>{"inner:contiguous", "outer:contiguous", "inner:copy", "outer:copy"}));
}

}  // namespace
}  // namespace kiln
