// The layers of kiln/nn.h: parameters registered as torch names them,
// initialized as torch's reset_parameters(), forward through the public ops.
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "kiln/nn.h"
#include "nn/fused_activation.h"
#include "nn/repr.h"
#include "ops/conv_fused.h"

namespace kiln::nn {

namespace {
void check_pair(const std::vector<int64_t>& v, const char* layer, const char* what, int64_t min) {
  KILN_CHECK(v.size() == 2, layer, ": ", what, " needs 2 values (height, width), got ", v.size());
  KILN_CHECK(v[0] >= min && v[1] >= min, layer, ": ", what, " must be >= ", min, ", got (", v[0], ", ", v[1], ")");
}

// Weight uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) via kaiming_uniform_(a = sqrt(5)),
// bias with the same bound, as torch's Conv/Linear reset_parameters().
void reset_weight_and_bias(Tensor& weight, Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    int64_t fan_in = init::fan_in_out(weight).first;
    double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

std::string tuple2(const std::vector<int64_t>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + (v.size() == 1 ? ",)" : ")");
}
// An int when both values agree (as built from one int), else a tuple.
std::string int_or_tuple(const std::vector<int64_t>& v) {
  if (v.size() == 1 || (v.size() == 2 && v[0] == v[1])) return std::to_string(v[0]);
  return tuple2(v);
}
}  // namespace

// ---- Conv2d ----
Conv2d::Conv2d(const Conv2dOptions& o) : Module("Conv2d"), options(o) {
  KILN_CHECK(o.in_channels() > 0 && o.out_channels() > 0, "Conv2d: in_channels and out_channels must be positive, got ",
             o.in_channels(), " and ", o.out_channels());
  check_pair(o.kernel_size(), "Conv2d", "kernel_size", 1);
  check_pair(o.stride(), "Conv2d", "stride", 1);
  check_pair(o.padding(), "Conv2d", "padding", 0);
  check_pair(o.dilation(), "Conv2d", "dilation", 1);
  KILN_CHECK(o.groups() > 0 && o.in_channels() % o.groups() == 0 && o.out_channels() % o.groups() == 0,
             "Conv2d: groups=", o.groups(), " must divide both in_channels=", o.in_channels(),
             " and out_channels=", o.out_channels());
  weight = register_parameter(
      "weight", empty({o.out_channels(), o.in_channels() / o.groups(), o.kernel_size()[0], o.kernel_size()[1]}));
  if (o.bias()) bias = register_parameter("bias", empty({o.out_channels()}));
  reset_weight_and_bias(weight, bias);
}

Tensor Conv2d::forward(const Tensor& x) {
  KILN_CHECK(x.defined() && x.dim() == 4 && x.size(1) == options.in_channels(), "Conv2d(", options.in_channels(), ", ",
             options.out_channels(), "): expected a 4-D input (N, C, H, W) with C = ", options.in_channels(), ", got ",
             x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  Conv2dParams p;
  p.stride = options.stride();
  p.padding = options.padding();
  p.dilation = options.dilation();
  p.groups = options.groups();
  // The post-op only inside a fused model's forward, which skips the
  // activation op that follows (nn/fused_activation.h); called on its own
  // the layer computes what it always did.
  if (!fused_activation.empty())
    if (detail::FusedActivationMode* mode = detail::active_fused_activation_mode()) {
      Tensor y = conv2d_fused(x, weight, bias, p, fused_activation);
      mode->expect_activation(y, fused_activation);
      return y;
    }
  return conv2d(x, weight, bias, p);
}

// ---- Linear ----
Linear::Linear(const LinearOptions& o) : Module("Linear"), options(o) {
  KILN_CHECK(o.in_features() >= 0 && o.out_features() >= 0, "Linear: in_features and out_features must be >= 0, got ",
             o.in_features(), " and ", o.out_features());
  weight = register_parameter("weight", empty({o.out_features(), o.in_features()}));
  if (o.bias()) bias = register_parameter("bias", empty({o.out_features()}));
  reset_weight_and_bias(weight, bias);
}

Tensor Linear::forward(const Tensor& x) {
  KILN_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == options.in_features(), "Linear(in_features=",
             options.in_features(), ", out_features=", options.out_features(), "): the input's last dimension must be ",
             options.in_features(), ", got shape ", x.defined() ? shape_str(x.shape()) : std::string("(undefined)"),
             x.defined() && x.dim() == 4 ? "; flatten the feature maps first (nn::Flatten)" : "");
  return linear(x, weight, bias);
}

// ---- BatchNorm2d ----
BatchNorm2d::BatchNorm2d(const BatchNorm2dOptions& o) : Module("BatchNorm2d"), options(o) {
  KILN_CHECK(o.num_features() > 0, "BatchNorm2d: num_features must be positive, got ", o.num_features());
  KILN_CHECK(o.eps() > 0, "BatchNorm2d: eps must be positive, got ", o.eps());
  KILN_CHECK(o.momentum() >= 0 && o.momentum() <= 1, "BatchNorm2d: momentum must be in [0, 1], got ", o.momentum());
  int64_t c = o.num_features();
  if (o.affine()) {
    weight = register_parameter("weight", ones({c}));
    bias = register_parameter("bias", zeros({c}));
  }
  if (o.track_running_stats()) {
    running_mean = register_buffer("running_mean", zeros({c}));
    running_var = register_buffer("running_var", ones({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, dtype(DType::Int64)));
  }
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  KILN_CHECK(x.defined() && x.dim() == 4 && x.size(1) == options.num_features(), "BatchNorm2d(",
             options.num_features(), "): expected a 4-D input (N, C, H, W) with C = ", options.num_features(),
             ", got ", x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  if (folded) {
    KILN_CHECK(!is_training(), "BatchNorm2d(", options.num_features(), "): its statistics were folded into the ",
               "preceding convolution by nn::fuse_modules, so it cannot train; fuse a copy of the model for inference ",
               "and train the original");
    return x;
  }
  bool use_batch_stats = is_training() || !running_mean.defined();
  if (is_training() && num_batches_tracked.defined()) {
    NoGradGuard no_grad;
    add_(num_batches_tracked, full({}, 1.0, dtype(DType::Int64)));
  }
  return batch_norm(x, weight, bias, running_mean, running_var, use_batch_stats, options.momentum(), options.eps());
}

// ---- pooling ----
namespace {
Pool2dOptions checked_pool(const Pool2dOptions& o, const char* layer) {
  check_pair(o.kernel_size(), layer, "kernel_size", 1);
  if (!o.stride().empty()) check_pair(o.stride(), layer, "stride", 1);
  check_pair(o.padding(), layer, "padding", 0);
  return o;
}
const std::vector<int64_t>& stride_of(const Pool2dOptions& o) { return o.stride().empty() ? o.kernel_size() : o.stride(); }
}  // namespace

Tensor MaxPool2d::forward(const Tensor& x) {
  checked_pool(options, "MaxPool2d");
  return max_pool2d(x, options.kernel_size(), stride_of(options), options.padding(), {1, 1}, options.ceil_mode());
}

Tensor AvgPool2d::forward(const Tensor& x) {
  checked_pool(options, "AvgPool2d");
  return avg_pool2d(x, options.kernel_size(), stride_of(options), options.padding(), options.ceil_mode(), true);
}

// ---- Sequential ----
Sequential::Sequential(std::vector<ModulePtr> modules) : Module("Sequential") {
  for (auto& m : modules) push_back(std::move(m));
}

Sequential& Sequential::push_back(ModulePtr m) {
  KILN_CHECK(m != nullptr, "Sequential::push_back: the module is null");
  register_module_impl(std::to_string(layers_.size()), m);
  layers_.push_back(std::move(m));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (auto& m : layers_) y = m->forward(y);
  return y;
}

// ---- print(model) ----
std::string py_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[40];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string extra_repr(const Module& m) {
  if (auto* c = dynamic_cast<const Conv2d*>(&m)) {
    const Conv2dOptions& o = c->options;
    std::string s = std::to_string(o.in_channels()) + ", " + std::to_string(o.out_channels()) +
                    ", kernel_size=" + tuple2(o.kernel_size()) + ", stride=" + tuple2(o.stride());
    if (o.padding() != std::vector<int64_t>{0, 0}) s += ", padding=" + tuple2(o.padding());
    if (o.dilation() != std::vector<int64_t>{1, 1}) s += ", dilation=" + tuple2(o.dilation());
    if (o.groups() != 1) s += ", groups=" + std::to_string(o.groups());
    if (!o.bias()) s += ", bias=False";
    return s;
  }
  if (auto* l = dynamic_cast<const Linear*>(&m)) {
    return "in_features=" + std::to_string(l->options.in_features()) +
           ", out_features=" + std::to_string(l->options.out_features()) + ", bias=" + py_bool(l->options.bias());
  }
  if (auto* b = dynamic_cast<const BatchNorm2d*>(&m)) {
    const BatchNorm2dOptions& o = b->options;
    return std::to_string(o.num_features()) + ", eps=" + py_float(o.eps()) + ", momentum=" + py_float(o.momentum()) +
           ", affine=" + py_bool(o.affine()) + ", track_running_stats=" + py_bool(o.track_running_stats());
  }
  if (auto* g = dynamic_cast<const GELU*>(&m)) return "approximate='" + g->approximate + "'";
  if (auto* p = dynamic_cast<const MaxPool2d*>(&m)) {
    const Pool2dOptions& o = p->options;
    return "kernel_size=" + int_or_tuple(o.kernel_size()) + ", stride=" + int_or_tuple(stride_of(o)) +
           ", padding=" + int_or_tuple(o.padding()) + ", dilation=1, ceil_mode=" + py_bool(o.ceil_mode());
  }
  if (auto* p = dynamic_cast<const AvgPool2d*>(&m)) {
    const Pool2dOptions& o = p->options;
    return "kernel_size=" + int_or_tuple(o.kernel_size()) + ", stride=" + int_or_tuple(stride_of(o)) +
           ", padding=" + int_or_tuple(o.padding());
  }
  if (auto* p = dynamic_cast<const AdaptiveAvgPool2d*>(&m))
    return "output_size=" + (p->output_size.size() == 1 ? std::to_string(p->output_size[0]) : tuple2(p->output_size));
  if (auto* p = dynamic_cast<const AdaptiveMaxPool2d*>(&m))
    return "output_size=" + (p->output_size.size() == 1 ? std::to_string(p->output_size[0]) : tuple2(p->output_size));
  if (auto* d = dynamic_cast<const Dropout*>(&m)) return "p=" + py_float(d->p) + ", inplace=False";
  if (auto* f = dynamic_cast<const Flatten*>(&m))
    return "start_dim=" + std::to_string(f->start_dim) + ", end_dim=" + std::to_string(f->end_dim);
  if (dynamic_cast<const ReLU*>(&m) || dynamic_cast<const Sequential*>(&m) || dynamic_cast<const Lambda*>(&m))
    return "";
  return own_parameter_summary(m);
}

}  // namespace kiln::nn
