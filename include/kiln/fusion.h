// Layer Fusion and eager Operator Fusion (docs/layer-fusion.md).
//
// Layer Fusion: layers whose weights point the same way (high cosine
// similarity) do redundant work; freeze one of each similar pair, or tie it
// to the other, and the frozen layer's weight gradient, optimizer update and
// optimizer state disappear.
//   auto pairs = kiln::fusion::freeze_similar(*model, 2);           // freeze the later layer of the 2 closest pairs
//   optim::SGD opt(kiln::fusion::trainable_parameters(*model), ...);
//
// Operator Fusion for eager inference: nn::fuse_modules folds eval batch
// norms into the preceding convolutions and runs conv + ReLU/GELU as one
// oneDNN convolution with an eltwise post-op.
//   auto fused = kiln::nn::fuse_modules(model);   // eval mode; the first forward plans the fusion
//   Tensor logits = fused->forward(x);
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/nn.h"

namespace kiln::fusion {

// Two layers with the same weight shape and the cosine similarity of their
// flattened weights; `a` comes before `b` in module order.
struct LayerPair {
  std::string a, b;
  double cosine = 0;
};

// Every pair of layers (modules with a registered "weight" parameter of 2 or
// more dimensions: convolutions and linear layers; 1-D normalization scales
// are left out) with equal weight shapes, by cosine similarity (computed in
// float64: dot / (max(|a|, 1e-8) * max(|b|, 1e-8))), highest first, ties in
// module order; the first k (all of them when k exceeds their number).
// kiln::Error for k < 0.
std::vector<LayerPair> similar_layers(nn::Module& model, int64_t k);

enum class Policy {
  Freeze,  // the later layer of each pair (b) stops training: requires_grad off for its parameters
  Tie,     // b's weight becomes a's parameter: one tensor, gradients of both uses summed by autograd
};
// "freeze" | "tie"; kiln::Error naming both for anything else.
Policy parse_policy(const std::string& name);
const char* policy_name(Policy p);

// similar_layers(model, k), then the policy applied to each pair in order;
// returns the pairs. Build the optimizer after (or tell it with
// Optimizer::set_params(trainable_parameters(model))): tied weights appear
// once in model.parameters(), frozen ones get no optimizer state.
std::vector<LayerPair> freeze_similar(nn::Module& model, int64_t k, Policy policy = Policy::Freeze);

// The parameters that require grad, each once, in module order.
std::vector<Tensor> trainable_parameters(const nn::Module& model);

}  // namespace kiln::fusion

namespace kiln::nn {

// A model whose eval forward runs with fused operators (nn::fuse_modules).
class FusedModel : public Module {
 public:
  explicit FusedModel(std::shared_ptr<Module> model);
  Tensor forward(const Tensor& x) override;
  // What was fused, one line each ("block1.conv2 + block1.norm2 + gelu"),
  // known after the first forward.
  const std::vector<std::string>& fused() const { return fused_; }
  bool planned() const { return planned_; }

 private:
  // Runs the model once unfused while recording its ops, then fuses.
  Tensor plan(const Tensor& x);
  std::shared_ptr<Module> model_;
  bool planned_ = false;
  std::vector<std::string> fused_;
};

// Wraps `model` (put in eval mode) for inference with fused operators. The
// first forward runs the model as it is while recording its ops, and from
// what it saw fuses each convolution whose only consumer is an eval batch norm
// (folded into the convolution's weight and bias: the model's parameters
// change in place, so fuse a copy if the original must train on) and each
// convolution (or conv + folded batch norm) whose only consumer is a ReLU or
// an erf GELU (one oneDNN convolution with an eltwise post-op; the activation
// op that the model's code calls is skipped). Later forwards run fused.
// A fused output read by any op other than its activation is a kiln::Error.
std::shared_ptr<FusedModel> fuse_modules(std::shared_ptr<Module> model);

}  // namespace kiln::nn
