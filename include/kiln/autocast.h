// Mixed precision: run a model's matrix products in bfloat16 or float16 while
// its parameters (the "master weights"), their gradients and the optimizer
// stay float32. docs/autocast.md says which op runs in which dtype.
//
//   {
//     kiln::autocast ac(DType::BFloat16);   // on CPU and CUDA alike
//     Tensor logits = model->forward(x);    // conv/linear in bf16, batch norm on bf16
//     loss = cross_entropy(logits, y);      // float32
//   }
//   loss.backward();                        // parameters' grads are float32
//
// Within the scope every op call consults one policy table
// (src/ops/autocast_policy.cpp): matrix products cast their floating inputs
// to the autocast dtype, ops that need range or long sums (softmax, losses,
// sum, exp, ...) cast 16-bit inputs up to float32, ops that need one dtype
// run in the widest, the rest run as they come. The casts are ordinary ops,
// so autograd carries gradients back through them to the float32 master
// weights in float32. A parameter (a leaf that requires grad) is cast once
// per scope and reused until it changes (an optimizer step bumps its version)
// or a backward pass consumes the cast's graph.
//
// Wrap the forward pass and the loss only: backward() ignores autocast
// (derivatives run in the dtypes the forward chose), and optimizer steps are
// in-place ops, which autocast leaves alone. Scopes nest: the innermost one
// decides, and `autocast(dt, /*enabled=*/false)` runs its scope in full
// precision inside an autocast region. With float16, scale the loss with
// optim::GradScaler (kiln/grad_scaler.h) so small gradients do not flush to
// zero. Scopes are per thread and nest strictly with the other dispatch-mode
// scopes (kiln::Profile, compile's capture). With kiln::compile, open the
// scope inside the compiled function (capture records the casts); calling a
// compiled function inside a scope is a kiln::Error that says so.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "kiln/dtype.h"

namespace kiln {

namespace detail {
class AutocastMode;
}

class autocast {
 public:
  // dtype: DType::BFloat16 or DType::Float16 (kiln::Error otherwise).
  // cache: reuse one cast per parameter within the scope.
  explicit autocast(DType dtype, bool enabled = true, bool cache = true);
  ~autocast();
  autocast(const autocast&) = delete;
  autocast& operator=(const autocast&) = delete;

 private:
  std::unique_ptr<detail::AutocastMode> mode_;
};

// The dtype the innermost enabled autocast scope of this thread casts to;
// nullopt outside autocast (or inside a disabled scope).
std::optional<DType> autocast_dtype();

// Parses "bf16" / "bfloat16" / "fp16" / "float16" (the CLI's --autocast);
// kiln::Error naming the accepted spellings otherwise.
DType parse_autocast_dtype(const std::string& name);

}  // namespace kiln
