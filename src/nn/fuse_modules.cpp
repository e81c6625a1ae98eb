// nn::fuse_modules: eager Operator Fusion for inference (kiln/fusion.h).
//
// The zoo models (and most user models) call their layers from hand-written
// forward code, so which layer feeds which is not in the module tree: the
// first forward records the ops it dispatches, and the parameters each op
// reads say which module made it. A conv whose only consumer is an eval
// batch norm gets the norm folded into its weight and bias; a conv (folded
// or not) whose only consumer is ReLU or erf-GELU gets it as a oneDNN post-op.
#include <unordered_map>

#include "kiln/fusion.h"
#include "nn/fused_activation.h"
#include "ops/dispatch_mode.h"

namespace kiln::nn {
namespace {

struct OpRecord {
  OpId id;
  Tensors inputs, outputs;  // held, so addresses stay unique while planning
  Attrs attrs;
};

class RecordMode : public DispatchMode {
 public:
  const char* mode_name() const override { return "fuse_modules_record"; }
  Tensors handle(OpId id, Tensors& inputs, const Attrs& attrs, const NextMode& next) override {
    Tensors in = inputs;  // before next(), which may move them on
    Tensors out = next(id, inputs, attrs);
    records.push_back({id, std::move(in), out, attrs});
    return out;
  }
  std::vector<OpRecord> records;
};

const TensorImpl* impl_of(const Tensor& t) { return t.defined() ? t.impl() : nullptr; }

// conv.weight <- weight * scale, conv.bias <- bias * scale + shift, with
// scale = gamma / sqrt(var + eps) and shift = beta - mean * scale, in float64.
void fold_batch_norm(Conv2d& conv, const BatchNorm2d& bn) {
  NoGradGuard no_grad;
  const DType dt = conv.weight.dtype();
  const int64_t O = conv.weight.size(0);
  Tensor var = bn.running_var.to(DType::Float64), mean = bn.running_mean.to(DType::Float64);
  Tensor scale = rsqrt(add(var, bn.options.eps()));
  if (bn.weight.defined()) scale = mul(scale, bn.weight.to(DType::Float64));
  Tensor shift = neg(mul(mean, scale));
  if (bn.bias.defined()) shift = add(shift, bn.bias.to(DType::Float64));
  Tensor w = mul(conv.weight.to(DType::Float64), scale.view({O, 1, 1, 1}));
  copy_(conv.weight, w.to(dt));
  if (conv.bias.defined()) {
    Tensor b = add(mul(conv.bias.to(DType::Float64), scale), shift);
    copy_(conv.bias, b.to(dt));
  } else {
    conv.bias = shift.to(dt).contiguous();
  }
}

}  // namespace

FusedModel::FusedModel(std::shared_ptr<Module> model) : Module("FusedModel"), model_(std::move(model)) {
  KILN_CHECK(model_ != nullptr, "fuse_modules: the model is null");
  register_module("model", model_);
  eval();
}

Tensor FusedModel::forward(const Tensor& x) {
  KILN_CHECK(!is_training(), "fuse_modules: a fused model runs inference only (its batch norms are folded into ",
             "its convolutions); call eval() on it, and train the original model");
  if (!planned_) return plan(x);
  detail::FusedActivationMode mode;
  ModeGuard guard(mode);
  Tensor y = model_->forward(x);
  mode.finish();
  return y;
}

Tensor FusedModel::plan(const Tensor& x) {
  RecordMode rec;
  Tensor y;
  {
    ModeGuard guard(rec);
    y = model_->forward(x);
  }
  std::unordered_map<const TensorImpl*, std::pair<std::string, Conv2d*>> convs;
  std::unordered_map<const TensorImpl*, std::pair<std::string, BatchNorm2d*>> norms;
  for (auto& [name, m] : model_->named_modules()) {
    if (auto* c = dynamic_cast<Conv2d*>(m.get())) convs[impl_of(c->weight)] = {name, c};
    if (auto* b = dynamic_cast<BatchNorm2d*>(m.get()); b && b->running_mean.defined() && !b->folded)
      norms[impl_of(b->running_mean)] = {name, b};
  }
  // Who reads each value; the model's output counts as one more reader.
  std::unordered_map<const TensorImpl*, std::vector<size_t>> readers;
  const size_t kOutput = rec.records.size();
  for (size_t i = 0; i < rec.records.size(); ++i)
    for (const Tensor& t : rec.records[i].inputs)
      if (t.defined()) readers[t.impl()].push_back(i);
  readers[impl_of(y)].push_back(kOutput);
  std::unordered_map<const Module*, int> calls;
  for (const OpRecord& r : rec.records) {
    if (r.id == OpId::conv2d && convs.count(impl_of(r.inputs[1]))) ++calls[convs[impl_of(r.inputs[1])].second];
    if (r.id == OpId::batch_norm && norms.count(impl_of(r.inputs[3]))) ++calls[norms[impl_of(r.inputs[3])].second];
  }
  // The record that alone reads `t`, or nullptr.
  auto only_reader = [&](const Tensor& t) -> const OpRecord* {
    const auto& rd = readers[impl_of(t)];
    return rd.size() == 1 && rd[0] != kOutput ? &rec.records[rd[0]] : nullptr;
  };
  for (const OpRecord& r : rec.records) {
    if (r.id != OpId::conv2d || r.attrs.has("activation") || !convs.count(impl_of(r.inputs[1]))) continue;
    auto [conv_name, conv] = convs[impl_of(r.inputs[1])];
    if (calls[conv] != 1) continue;
    std::string line = conv_name;
    Tensor out = r.outputs[0];
    const OpRecord* next = only_reader(out);
    if (next && next->id == OpId::batch_norm && impl_of(next->inputs[0]) == impl_of(out) &&
        !next->attrs.b("training") && norms.count(impl_of(next->inputs[3]))) {
      auto [bn_name, bn] = norms[impl_of(next->inputs[3])];
      if (calls[bn] == 1) {
        fold_batch_norm(*conv, *bn);
        bn->folded = true;
        line += " + " + bn_name + " (folded)";
        out = next->outputs[0];
        next = only_reader(out);
      }
    }
    if (next && impl_of(next->inputs[0]) == impl_of(out) &&
        (next->id == OpId::relu ||
         (next->id == OpId::gelu && next->attrs.has("approximate") && next->attrs.s("approximate") == "none"))) {
      conv->fused_activation = next->id == OpId::relu ? "relu" : "gelu";
      line += " + " + conv->fused_activation + " (post-op)";
    }
    if (line != conv_name) fused_.push_back(line);
  }
  planned_ = true;
  return y;
}

std::shared_ptr<FusedModel> fuse_modules(std::shared_ptr<Module> model) {
  return std::make_shared<FusedModel>(std::move(model));
}

}  // namespace kiln::nn
