// fusion::freeze_similar: the freeze and tie policies of Layer Fusion (kiln/fusion.h).
#include <unordered_set>

#include "kiln/fusion.h"

namespace kiln::fusion {
namespace {

std::shared_ptr<nn::Module> module_named(nn::Module& model, const std::string& name) {
  for (auto& [n, m] : model.named_modules())
    if (n == name) return m;
  KILN_FAIL("freeze_similar: no module named '", name, "'");
}

// The later layer stops training: its weight gradient, its optimizer update
// and its optimizer state go; the earlier layer, which the input reaches
// first, keeps adapting for both.
void freeze(nn::Module& layer) {
  for (auto& [_, p] : layer.named_parameters()) {
    p.requires_grad_(false);
    p.set_grad(Tensor());
  }
}

// b's weight becomes a's parameter: the member the layer's forward reads and
// the registered parameter (so b.weight no longer appears in parameters()).
void tie(nn::Module& a, nn::Module& b, const std::string& b_name) {
  Tensor shared = *a.named_parameters(false).find("weight");
  if (auto* c = dynamic_cast<nn::Conv2d*>(&b)) c->weight = shared;
  else if (auto* l = dynamic_cast<nn::Linear*>(&b)) l->weight = shared;
  else
    KILN_FAIL("freeze_similar: policy tie supports Conv2d and Linear layers; '", b_name, "' is a ", b.type_name(),
              ", whose forward may read its own weight member; use policy freeze");
  b.replace_parameter("weight", shared);
}

}  // namespace

Policy parse_policy(const std::string& name) {
  if (name == "freeze") return Policy::Freeze;
  if (name == "tie") return Policy::Tie;
  KILN_FAIL("layer fusion: unknown policy '", name, "'; use freeze or tie");
}

const char* policy_name(Policy p) { return p == Policy::Freeze ? "freeze" : "tie"; }

std::vector<LayerPair> freeze_similar(nn::Module& model, int64_t k, Policy policy) {
  std::vector<LayerPair> pairs = similar_layers(model, k);
  for (const LayerPair& p : pairs) {
    auto b = module_named(model, p.b);
    if (policy == Policy::Freeze) freeze(*b);
    else tie(*module_named(model, p.a), *b, p.b);
  }
  return pairs;
}

std::vector<Tensor> trainable_parameters(const nn::Module& model) {
  std::vector<Tensor> out;
  for (const Tensor& t : model.parameters())
    if (t.requires_grad()) out.push_back(t);
  return out;
}

}  // namespace kiln::fusion
