// fusion::similar_layers: the most similar pairs of layers by the cosine
// similarity of their flattened weights (kiln/fusion.h).
#include <algorithm>
#include <cmath>

#include "kiln/fusion.h"

namespace kiln::fusion {
namespace {

struct Layer {
  std::string name;
  Tensor weight;
};

// Modules with a "weight" parameter of 2+ dims, in module order. 1-D weights
// are normalization scales: initialized to ones, any two of a width have
// cosine 1 and freezing one saves nothing worth a pair.
std::vector<Layer> weighted_layers(nn::Module& model) {
  std::vector<Layer> out;
  for (auto& [name, m] : model.named_modules()) {
    const Tensor* w = m->named_parameters(/*recurse=*/false).find("weight");
    if (w && w->defined() && w->dim() >= 2) out.push_back({name, *w});
  }
  return out;
}

// dot(a, b) / (max(|a|, eps) * max(|b|, eps)), eps = 1e-8, in float64.
double cosine(const Tensor& a, const Tensor& b) {
  NoGradGuard no_grad;
  Tensor x = a.detach().to(Device::cpu()).to(DType::Float64).contiguous();
  Tensor y = b.detach().to(Device::cpu()).to(DType::Float64).contiguous();
  const double* px = x.data<double>();
  const double* py = y.data<double>();
  double dot = 0, nx = 0, ny = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    dot += px[i] * py[i];
    nx += px[i] * px[i];
    ny += py[i] * py[i];
  }
  constexpr double kEps = 1e-8;
  return dot / (std::max(std::sqrt(nx), kEps) * std::max(std::sqrt(ny), kEps));
}

}  // namespace

std::vector<LayerPair> similar_layers(nn::Module& model, int64_t k) {
  KILN_CHECK(k >= 0, "similar_layers: k must be >= 0 (the number of most similar layer pairs to return), got ", k);
  std::vector<Layer> layers = weighted_layers(model);
  std::vector<LayerPair> pairs;
  for (size_t i = 0; i < layers.size(); ++i)
    for (size_t j = i + 1; j < layers.size(); ++j)
      if (layers[i].weight.shape() == layers[j].weight.shape())
        pairs.push_back({layers[i].name, layers[j].name, cosine(layers[i].weight, layers[j].weight)});
  // Stable: equal scores stay in module order.
  std::stable_sort(pairs.begin(), pairs.end(), [](const LayerPair& x, const LayerPair& y) { return x.cosine > y.cosine; });
  if (static_cast<size_t>(k) < pairs.size()) pairs.resize(static_cast<size_t>(k));
  return pairs;
}

}  // namespace kiln::fusion
