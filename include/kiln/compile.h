// kiln::compile: capture a function (or a module's forward) as graphs and run
// those instead of dispatching op by op (DESIGN.md, "Data flow").
//
//   auto step = kiln::compile([&](const Tensor& x, const Tensor& y) {
//     Tensor loss = cross_entropy(model->forward(x), y);
//     opt.zero_grad();
//     loss.backward();
//     opt.step();
//     return loss;
//   });
//   for (...) Tensor loss = step(x, y);
//
// The first call traces: ops record graph nodes and return placeholders
// (meta tensors), and the graph runs when the function returns. Later calls
// replay: each op only checks that it matches the next recorded node, and the
// recorded graph runs. Values that vary per step (learning rates, random
// seeds, C++ numbers in op calls) are graph inputs, so changing them never
// recompiles. Reading a computed value (item(), data access, printing) is a
// graph break: the graph so far runs, the real value returns and capture
// goes on in a new graph. A call whose ops differ from every recorded
// variant (another branch taken, another input shape) records a new variant,
// up to options.recompile_limit; after that the function runs eagerly and the
// reason is logged once (KILN_LOGS=recompiles).
#pragma once
#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include "kiln/source_location.h"
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/arg.h"
#include "kiln/nn.h"
#include "kiln/tensor.h"

namespace kiln {

struct CompileOptions {
  CompileOptions() = default;
  // "default" | "reduce-overhead" | "max-autotune" (max-autotune also times
  // oneDNN's algorithms per convolution in place: docs/compile.md;
  // reduce-overhead is default until CUDA graphs come).
  KILN_ARG(std::string, mode) = "default";
  // A graph break is a kiln::Error naming the op and the source location.
  KILN_ARG(bool, fullgraph) = false;
  // The batch size (dim 0 of the tensor arguments) is a symbol: other sizes
  // reuse the graph instead of recompiling.
  KILN_ARG(bool, dynamic) = false;
  // "cpp" (the default: pointwise ops and reductions as generated, fused C++
  // kernels, the rest on the eager kernels: docs/loop-ir.md; a graph on a
  // CUDA device runs on the interpreter until the CUDA generator comes);
  // "interpreter" (runs graphs with the eager kernels, nothing generated).
  KILN_ARG(std::string, backend) = "cpp";
  KILN_ARG(int, recompile_limit) = 8;
  KILN_ARG(std::string, name) = "compiled";
};

// What happened so far, for tests, explain and the curious.
struct CompileStats {
  int64_t calls = 0;
  int64_t eager_calls = 0;  // after falling back
  int variants = 0;         // recorded variants (the first and every recompile)
  int recompiles = 0;       // variants after the first
  int graph_breaks = 0;     // distinct breaks recorded
  bool fell_back = false;
  std::string fallback_reason;
  // Under bf16 autocast on the CPU: how the latest graph's precision was
  // chosen (the graph as autocast wrote it or in float32, timed whole:
  // docs/autocast.md, "Whole graphs"); "" when no graph had a choice.
  std::string precision;
};

namespace compiler {
class CompiledState;
}

namespace detail {

// One call of a compiled function: selects or records a variant, installs
// capture for the call's scope, and at finish() runs the last graph.
class CompileCall {
 public:
  CompileCall(compiler::CompiledState& state, uint64_t key, std::vector<const TensorImpl*> tensor_args);
  ~CompileCall();
  CompileCall(const CompileCall&) = delete;
  CompileCall& operator=(const CompileCall&) = delete;
  bool eager() const { return eager_; }
  void finish();

 private:
  compiler::CompiledState& state_;
  bool eager_ = false;
  bool finished_ = false;
};

std::shared_ptr<compiler::CompiledState> make_compiled_state(const CompileOptions& options);
CompileStats stats_of(const compiler::CompiledState& state);

// Non-tensor arguments are guarded by value: hashed into the variant key.
inline void hash_mix(uint64_t& h, uint64_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); }
template <class T>
void add_arg(uint64_t& key, std::vector<const TensorImpl*>& tensors, const T& a) {
  using U = std::remove_cvref_t<T>;
  if constexpr (std::is_same_v<U, Tensor>) {
    tensors.push_back(a.impl());
  } else if constexpr (std::is_arithmetic_v<U> || std::is_enum_v<U>) {
    hash_mix(key, std::hash<U>{}(a));
  } else if constexpr (std::is_same_v<U, std::string>) {
    hash_mix(key, std::hash<std::string>{}(a));
  } else if constexpr (std::is_same_v<U, std::vector<Tensor>>) {
    for (const Tensor& t : a) tensors.push_back(t.impl());
  }
  // Other arguments (modules, references to user objects) are not guarded:
  // what they do reaches capture as op calls, which replay checks.
}

}  // namespace detail

template <class F>
class Compiled {
 public:
  Compiled(F fn, const CompileOptions& options, std::function<uint64_t()> extra_key = {})
      : fn_(std::move(fn)), state_(detail::make_compiled_state(options)), extra_key_(std::move(extra_key)) {}

  template <class... Args>
  decltype(auto) operator()(Args&&... args) {
    uint64_t key = extra_key_ ? extra_key_() : 0;
    std::vector<const TensorImpl*> tensors;
    (detail::add_arg(key, tensors, args), ...);
    detail::CompileCall call(*state_, key, std::move(tensors));
    if (call.eager()) return fn_(std::forward<Args>(args)...);
    if constexpr (std::is_void_v<std::invoke_result_t<F&, Args...>>) {
      fn_(std::forward<Args>(args)...);
      call.finish();
    } else {
      auto result = fn_(std::forward<Args>(args)...);
      call.finish();
      return result;
    }
  }

  CompileStats stats() const { return detail::stats_of(*state_); }
  const compiler::CompiledState& state() const { return *state_; }

 private:
  F fn_;
  std::shared_ptr<compiler::CompiledState> state_;
  std::function<uint64_t()> extra_key_;
};

template <class F>
Compiled<F> compile(F fn, const CompileOptions& options = {}) {
  return Compiled<F>(std::move(fn), options);
}

// A module's forward, guarded on its training flag.
inline auto compile(std::shared_ptr<nn::Module> module, const CompileOptions& options = {}) {
  nn::Module* m = module.get();
  auto forward = [module](const Tensor& x) { return module->forward(x); };
  return Compiled<decltype(forward)>(forward, options, [m] { return m->is_training() ? 1ull : 2ull; });
}
// Any module type (std::make_shared<nn::Sequential>(...)) compiles as a module.
template <class M>
  requires std::derived_from<M, nn::Module>
auto compile(std::shared_ptr<M> module, const CompileOptions& options = {}) {
  return compile(std::static_pointer_cast<nn::Module>(std::move(module)), options);
}

}  // namespace kiln
