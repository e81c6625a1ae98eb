// Neural-network modules in the libtorch style: a Module registers its
// parameters, buffers and children, so parameters(), train()/eval(), to(),
// zero_grad() and state_dict()/load_state_dict() work for every model.
//   auto conv = std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 64, 3).padding(1).bias(false));
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/arg.h"
#include "kiln/memory_format.h"
#include "kiln/ops.h"

namespace kiln::nn {

// A named, ordered tensor dictionary (state dicts, checkpoints): a vector of
// (name, tensor) pairs, with lookup by name and by prefix.
class TensorDict : public std::vector<std::pair<std::string, Tensor>> {
 public:
  using vector::vector;
  using vector::at;
  // The tensor named `name`; kiln::Error naming the key and its closest
  // matches when there is none.
  const Tensor& at(const std::string& name) const;
  Tensor& at(const std::string& name);
  // The tensor named `name`, or nullptr.
  const Tensor* find(const std::string& name) const;
  bool contains(const std::string& name) const { return find(name) != nullptr; }
  // The entries under a dotted prefix, with it removed: with_prefix("layer1.0")
  // (or "layer1.0.") of a ResNet's state dict holds "conv1.weight", "bn1.bias", ...
  // Empty when nothing is under it.
  TensorDict with_prefix(const std::string& prefix) const;
  std::vector<std::string> keys() const;
};

// The keys load_state_dict(state, strict = false) skipped (torch's
// _IncompatibleKeys): the module's keys absent from the state, and the
// state's keys the module does not have.
struct LoadStateDictResult {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
};

class Module : public std::enable_shared_from_this<Module> {
 public:
  explicit Module(std::string type_name = "Module") : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Single-input modules override this; others expose their own forward.
  virtual Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  const std::string& type_name() const { return type_name_; }

  // Parameters (requires_grad leaves), recursively, in registration order.
  std::vector<Tensor> parameters(bool recurse = true) const;
  // "conv1.weight", "layer1.0.bn1.running_mean", ...
  TensorDict named_parameters(bool recurse = true) const;
  TensorDict named_buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  std::vector<std::shared_ptr<Module>> children() const;
  // Every module in the tree (this one first), with dotted names ("" for this one).
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules(const std::string& prefix = "");

  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Moves/casts parameters and buffers in place (their identities stay, so
  // optimizers built before keep working). Floating buffers follow dtype.
  void to(Device device);
  void to(DType dtype);
  // Lays out every 4-d floating parameter and buffer (convolution weights)
  // in `format`, as PyTorch's module.to(memory_format=...): with
  // MemoryFormat::ChannelsLast and channels-last inputs, CUDA convolutions
  // run NHWC end to end with no weight copies per step.
  void to(MemoryFormat format);
  // Sets every parameter's grad to undefined (set_to_none, torch's default).
  void zero_grad();

  // Parameters and buffers by dotted name.
  TensorDict state_dict() const;
  // Copies values into the existing tensors. strict: missing/unexpected keys
  // are errors; shape mismatches are always errors (all listed at once).
  // Returns the missing and unexpected keys (both empty when strict).
  LoadStateDictResult load_state_dict(const TensorDict& state, bool strict = true);

  int64_t num_parameters() const;
  // Replaces the registered parameter `name` of this module (not of a child)
  // with `t`, which may be another module's parameter: weight tying
  // (kiln::fusion's tie policy). A layer that keeps the tensor in a member
  // (Conv2d::weight) must have the member set too. kiln::Error for an unknown name.
  void replace_parameter(const std::string& name, Tensor t);
  // A tree of modules with their parameter shapes, like print(model) in torch.
  std::string str() const;

 protected:
  Tensor& register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  Tensor& register_buffer(const std::string& name, Tensor t);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    register_module_impl(name, m);
    return m;
  }
  // Hook for modules that hold submodules in containers.
  void register_module_impl(const std::string& name, std::shared_ptr<Module> m);

  bool training_ = true;

 private:
  std::string type_name_;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};
using ModulePtr = std::shared_ptr<Module>;

// Builder-style options, as libtorch: Conv2dOptions(3, 64, 3).padding(1).bias(false)
struct Conv2dOptions {
  Conv2dOptions(int64_t in, int64_t out, int64_t k) : in_channels_(in), out_channels_(out), kernel_size_({k, k}) {}
  Conv2dOptions(int64_t in, int64_t out, std::vector<int64_t> k)
      : in_channels_(in), out_channels_(out), kernel_size_(std::move(k)) {}
  KILN_ARG(int64_t, in_channels);
  KILN_ARG(int64_t, out_channels);
  KILN_ARG(std::vector<int64_t>, kernel_size);
  KILN_ARG(std::vector<int64_t>, stride) = {1, 1};
  KILN_ARG(std::vector<int64_t>, padding) = {0, 0};
  KILN_ARG(std::vector<int64_t>, dilation) = {1, 1};
  KILN_ARG(int64_t, groups) = 1;
  KILN_ARG(bool, bias) = true;
  auto& stride(int64_t s) { stride_ = {s, s}; return *this; }
  auto& padding(int64_t p) { padding_ = {p, p}; return *this; }
  auto& dilation(int64_t d) { dilation_ = {d, d}; return *this; }
};

struct LinearOptions {
  LinearOptions(int64_t in, int64_t out) : in_features_(in), out_features_(out) {}
  KILN_ARG(int64_t, in_features);
  KILN_ARG(int64_t, out_features);
  KILN_ARG(bool, bias) = true;
};

struct BatchNorm2dOptions {
  explicit BatchNorm2dOptions(int64_t c) : num_features_(c) {}
  KILN_ARG(int64_t, num_features);
  KILN_ARG(double, eps) = 1e-5;
  KILN_ARG(double, momentum) = 0.1;
  KILN_ARG(bool, affine) = true;
  KILN_ARG(bool, track_running_stats) = true;
};

struct Pool2dOptions {
  Pool2dOptions(int64_t k) : kernel_size_({k, k}) {}  // NOLINT: Pool2dOptions(2) reads well
  Pool2dOptions(std::vector<int64_t> k) : kernel_size_(std::move(k)) {}  // NOLINT
  KILN_ARG(std::vector<int64_t>, kernel_size);
  KILN_ARG(std::vector<int64_t>, stride) = {};  // empty: kernel_size
  KILN_ARG(std::vector<int64_t>, padding) = {0, 0};
  KILN_ARG(bool, ceil_mode) = false;
};

class Conv2d : public Module {
 public:
  explicit Conv2d(const Conv2dOptions& o);
  Tensor forward(const Tensor& x) override;
  Conv2dOptions options;
  Tensor weight, bias;
  // Set by nn::fuse_modules (kiln/fusion.h): "relu" or "gelu" is applied as
  // the convolution's oneDNN post-op while a fused model's forward runs;
  // empty: none.
  std::string fused_activation;
};

class Linear : public Module {
 public:
  explicit Linear(const LinearOptions& o);
  Linear(int64_t in, int64_t out) : Linear(LinearOptions(in, out)) {}
  Tensor forward(const Tensor& x) override;
  LinearOptions options;
  Tensor weight, bias;
};

class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(const BatchNorm2dOptions& o);
  explicit BatchNorm2d(int64_t c) : BatchNorm2d(BatchNorm2dOptions(c)) {}
  Tensor forward(const Tensor& x) override;
  BatchNorm2dOptions options;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  // Set by nn::fuse_modules when the running statistics were folded into the
  // preceding convolution: forward is the identity, eval mode only.
  bool folded = false;
};

class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override { return relu(x); }
};

class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none") : Module("GELU"), approximate(std::move(approximate)) {}
  Tensor forward(const Tensor& x) override { return gelu(x, approximate); }
  std::string approximate;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(const Pool2dOptions& o) : Module("MaxPool2d"), options(o) {}
  Tensor forward(const Tensor& x) override;
  Pool2dOptions options;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(const Pool2dOptions& o) : Module("AvgPool2d"), options(o) {}
  Tensor forward(const Tensor& x) override;
  Pool2dOptions options;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(std::vector<int64_t> out) : Module("AdaptiveAvgPool2d"), output_size(std::move(out)) {}
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool2d(x, output_size); }
  std::vector<int64_t> output_size;
};

class AdaptiveMaxPool2d : public Module {
 public:
  explicit AdaptiveMaxPool2d(std::vector<int64_t> out) : Module("AdaptiveMaxPool2d"), output_size(std::move(out)) {}
  Tensor forward(const Tensor& x) override { return adaptive_max_pool2d(x, output_size); }
  std::vector<int64_t> output_size;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5) : Module("Dropout"), p(p) {}
  Tensor forward(const Tensor& x) override { return dropout(x, p, is_training()); }
  double p;
};

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : Module("Flatten"), start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override { return flatten(x, start_dim, end_dim); }
  int64_t start_dim, end_dim;
};

// Children named "0", "1", ... run in order.
class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  explicit Sequential(std::vector<ModulePtr> modules);
  Sequential& push_back(ModulePtr m);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return layers_.size(); }
  ModulePtr operator[](size_t i) const { return layers_.at(i); }

 private:
  std::vector<ModulePtr> layers_;
};

// Wraps a function as a module (for Sequential): nn::Lambda("scale", [](auto& x) { return x * 0.1; })
class Lambda : public Module {
 public:
  Lambda(std::string name, std::function<Tensor(const Tensor&)> f) : Module(std::move(name)), f_(std::move(f)) {}
  Tensor forward(const Tensor& x) override { return f_(x); }

 private:
  std::function<Tensor(const Tensor&)> f_;
};

// ---- initialization, matching PyTorch's defaults ----
namespace init {
// Uniform(-bound, bound), bound = gain * sqrt(3 / fan), gain for leaky_relu(a).
void kaiming_uniform_(Tensor& t, double a = 0.0, Generator* gen = nullptr);
void kaiming_normal_(Tensor& t, double a = 0.0, Generator* gen = nullptr);
void uniform_(Tensor& t, double low, double high, Generator* gen = nullptr);
void normal_(Tensor& t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
void constant_(Tensor& t, double value);
// (fan_in, fan_out) of a weight [out, in, k...].
std::pair<int64_t, int64_t> fan_in_out(const Tensor& w);
}  // namespace init

// ---- functional losses (same as the ops) ----
inline Tensor cross_entropy_loss(const Tensor& logits, const Tensor& target, double label_smoothing = 0.0,
                                 const std::string& reduction = "mean") {
  return cross_entropy(logits, target, label_smoothing, reduction);
}

}  // namespace kiln::nn
