// The model zoo against PyTorch (tools/goldens/gen_models.py, tools/torch_models.py): state_dict
// keys, parameter counts, forward in eval and train mode, parameter gradients of sum(logits * r)
// and the running statistics after one train-mode forward, on identical weights.
//
// The weights come from a counter-based hash both sides implement (see gen_models.py), loaded
// with load_state_dict; the goldens are computed by torch in float64. A float32 model is
// compared with float32 tolerances (its convs use Winograd and oneDNN), a float64 one tightly,
// which checks the structure (every layer, its order and its options) exactly.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "kiln/models.h"
#include "testing/golden.h"

namespace kiln {
namespace {

using testing::goldens;

struct KeyInfo {
  std::string key;
  bool param;
  std::string dtype;
  Shape shape;
};

// models_keys.txt: "<case> <key> <param|buffer> <dtype> <d0,d1,...>" ("-": a scalar).
const std::map<std::string, std::vector<KeyInfo>>& golden_keys() {
  static const std::map<std::string, std::vector<KeyInfo>> keys = [] {
    std::map<std::string, std::vector<KeyInfo>> m;
    std::string path = std::string(KILN_GOLDEN_DIR) + "/models_keys.txt";
    std::ifstream f(path);
    KILN_CHECK(f.good(), "cannot open ", path, "; run tools/goldens/gen_models.py");
    std::string line;
    while (std::getline(f, line)) {
      if (line.empty()) continue;
      std::istringstream ss(line);
      std::string c, kind, shape;
      KeyInfo k;
      ss >> c >> k.key >> kind >> k.dtype >> shape;
      k.param = kind == "param";
      if (shape != "-") {
        std::istringstream ds(shape);
        std::string d;
        while (std::getline(ds, d, ',')) k.shape.push_back(std::stoll(d));
      }
      m[c].push_back(k);
    }
    return m;
  }();
  return keys;
}

struct Case {
  const char* name;
  const char* model;
  double width;
  int64_t in_channels, image_size;
  // Deep nets with BatchNorm in train mode, batch 4 and a random upstream gradient are
  // ill-conditioned in float32: a ReLU/max-pool decision flipped by rounding moves single
  // gradient elements by up to a few % of the tensor's largest (torch's own float32 result
  // differs from its float64 one by 3.3% of max, 0.4% normwise on ResNet-18; kiln's by 4.2% and
  // 0.8%). Those cases are checked normwise in float32 with room for that (3% normwise, 15% of
  // max: a wrong kernel or layer is off by O(1)); float64 checks every case elementwise.
  bool float32_elementwise;
  // float64 runs the reference conv loops: ResNet-18 takes ~45 s, airbench width 1 ~9 s.
  bool slow_in_float64;
};
const Case kCases[] = {
    {"tutorial", "tutorial", 1.0, 3, 32, true, false},       {"tutorial_fmnist", "tutorial", 1.0, 1, 28, true, false},
    {"airbench_w025", "airbench", 0.25, 3, 32, true, false}, {"airbench_w1", "airbench", 1.0, 3, 32, false, true},
    {"resnet18", "resnet18", 1.0, 3, 32, false, true},
};

nn::ModulePtr build(const Case& c) { return models::create(c.model, c.width, c.in_channels, 10, c.image_size); }

Tensor gold(const Case& c, const std::string& name) { return goldens("models")[std::string(c.name) + "." + name]; }

// Must match hash_uniform in gen_models.py: splitmix64 of (entry << 40) + i, top 24 bits.
double hash_uniform(uint64_t entry, uint64_t i) {
  uint64_t z = (entry << 40) + i + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 40) / static_cast<double>(1 << 23) - 1.0;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The state dict gen_models.py loads into the torch model, in `dtype` (float32 values).
nn::TensorDict filled_state(const Case& c, DType dt) {
  nn::TensorDict sd;
  const auto& keys = golden_keys().at(c.name);
  for (size_t e = 0; e < keys.size(); ++e) {
    const KeyInfo& k = keys[e];
    if (ends_with(k.key, "num_batches_tracked")) {
      sd.emplace_back(k.key, zeros(k.shape, dtype(DType::Int64)));
      continue;
    }
    int64_t n = numel_of(k.shape);
    std::vector<float> v(static_cast<size_t>(n));
    double scale = k.shape.empty() ? 1.0 : std::sqrt(3.0 / static_cast<double>(n / k.shape[0]));
    for (int64_t i = 0; i < n; ++i) {
      double u = hash_uniform(e, static_cast<uint64_t>(i)), x;
      if (ends_with(k.key, "running_mean"))
        x = 0.1 * u;
      else if (ends_with(k.key, "running_var"))
        x = 1.0 + 0.5 * u;
      else if (ends_with(k.key, "weight") && k.shape.size() == 1)
        x = 1.0 + 0.25 * u;
      else if (ends_with(k.key, "bias"))
        x = 0.1 * u;
      else
        x = u * scale;
      v[static_cast<size_t>(i)] = static_cast<float>(x);
    }
    sd.emplace_back(k.key, from_vector(v, k.shape).to(dt));
  }
  return sd;
}

// Every step-th element, step = ceil(numel / 1024), as gen_models.py's sample().
Tensor sample(const Tensor& t) {
  Tensor flat = t.reshape({-1});
  int64_t n = flat.size(0), step = (n + 1023) / 1024;
  return flat.slice(0, 0, n, step);
}

// |a - e| <= rtol |e| + atol * max|e| (the scale makes atol relative to the tensor's size).
::testing::AssertionResult close_scaled(const Tensor& actual, const Tensor& expected, double rtol, double atol) {
  Tensor e = expected.to(actual.dtype());
  double scale = std::max(1e-30, amax(abs(expected.to(DType::Float64))).item());
  return testing::tensors_close(actual, e, rtol, atol * scale);
}

// ||a - e|| <= tol * ||e|| and max |a - e| <= max_tol * max |e|.
::testing::AssertionResult close_normwise(const Tensor& actual, const Tensor& expected, double tol, double max_tol) {
  Tensor a = actual.to(DType::Float64), e = expected.to(DType::Float64);
  if (a.shape() != e.shape()) {
    return ::testing::AssertionFailure() << "shape " << shape_str(a.shape()) << " vs " << shape_str(e.shape());
  }
  Tensor d = sub(a, e);
  double err = std::sqrt(sum(mul(d, d)).item()), ref = std::sqrt(sum(mul(e, e)).item());
  double max_err = amax(abs(d)).item(), max_ref = amax(abs(e)).item();
  if (err <= tol * ref && max_err <= max_tol * max_ref) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "normwise relative error " << err / ref << " (tolerance " << tol
                                       << "), max error / max " << max_err / max_ref << " (tolerance " << max_tol
                                       << ")";
}

TEST(Models, StateDictKeysAndParameterCountsMatchTorch) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    auto net = build(c);
    const auto& keys = golden_keys().at(c.name);
    nn::TensorDict sd = net->state_dict();
    ASSERT_EQ(sd.size(), keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      EXPECT_EQ(sd[i].first, keys[i].key) << "state_dict entry " << i;
      EXPECT_EQ(shape_str(sd[i].second.shape()), shape_str(keys[i].shape)) << keys[i].key;
      EXPECT_EQ(dtype_name(sd[i].second.dtype()), keys[i].dtype) << keys[i].key;
    }
    std::vector<std::string> params, expected_params;
    for (auto& [k, t] : net->named_parameters()) params.push_back(k);
    for (const KeyInfo& k : keys)
      if (k.param) expected_params.push_back(k.key);
    EXPECT_EQ(params, expected_params);
    EXPECT_EQ(net->num_parameters(), gold(c, "num_params").item<int64_t>());
  }
}

class ModelGolden : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(ModelGolden, ForwardGradientsAndRunningStats) {
  const Case& c = kCases[std::get<0>(GetParam())];
  DType dt = std::get<1>(GetParam());
  bool f32 = dt == DType::Float32;
  if (!f32 && c.slow_in_float64 && !std::getenv("KILN_SLOW_TESTS")) {
    GTEST_SKIP() << c.name << " in float64 runs kiln's reference conv loops (slow); set KILN_SLOW_TESTS=1 to run it";
  }
  double fwd_rtol = f32 ? 1e-4 : 1e-9, fwd_atol = f32 ? 1e-4 : 1e-10;
  double grad_rtol = f32 ? 1e-3 : 1e-8, grad_atol = f32 ? 1e-4 : 1e-10;

  auto net = build(c);
  net->to(dt);
  net->load_state_dict(filled_state(c, dt));
  for (auto& [k, p] : net->named_parameters()) {
    SCOPED_TRACE(k);
    EXPECT_TENSOR_CLOSE(sample(p).to(DType::Float32), gold(c, "init." + k), 0.0, 0.0);
  }
  Tensor x = gold(c, "x").to(dt);

  net->eval();
  {
    NoGradGuard no_grad;
    SCOPED_TRACE("eval logits");
    EXPECT_TRUE(close_scaled(net->forward(x), gold(c, "logits_eval"), fwd_rtol, fwd_atol));
  }

  net->train();
  Tensor logits = net->forward(x);
  {
    SCOPED_TRACE("train logits");
    EXPECT_TRUE(close_scaled(logits, gold(c, "logits_train"), fwd_rtol, fwd_atol));
  }
  sum(mul(logits, gold(c, "r").to(dt))).backward();
  for (auto& [k, p] : net->named_parameters()) {
    SCOPED_TRACE("grad of " + k);
    ASSERT_TRUE(p.grad().defined());
    if (f32 && !c.float32_elementwise) {
      EXPECT_TRUE(close_normwise(sample(p.grad()), gold(c, "grad." + k), 3e-2, 0.15));
    } else {
      EXPECT_TRUE(close_scaled(sample(p.grad()), gold(c, "grad." + k), grad_rtol, grad_atol));
    }
  }
  for (auto& [k, b] : net->named_buffers()) {
    SCOPED_TRACE("after one train forward: " + k);
    if (b.dtype() == DType::Int64) {
      EXPECT_EQ(b.item<int64_t>(), gold(c, "after_train." + k).item<int64_t>());
    } else {
      EXPECT_TRUE(close_scaled(b, gold(c, "after_train." + k), fwd_rtol, fwd_atol));
    }
  }
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<int, DType>>& info) {
  return std::string(kCases[std::get<0>(info.param)].name) + "_" + dtype_name(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Zoo, ModelGolden,
                         ::testing::Combine(::testing::Range(0, static_cast<int>(std::size(kCases))),
                                            ::testing::Values(DType::Float32, DType::Float64)),
                         case_name);

TEST(Models, OutputShapes) {
  NoGradGuard no_grad;
  EXPECT_EQ(models::tutorial_cnn(1, 10, 28)->forward(zeros({2, 1, 28, 28})).shape(), (Shape{2, 10}));
  EXPECT_EQ(models::airbench(0.25, 7, 1)->forward(zeros({2, 1, 28, 28})).shape(), (Shape{2, 7}));
  EXPECT_EQ(models::resnet18(100)->forward(zeros({1, 3, 16, 16})).shape(), (Shape{1, 100}));
}

// airbench94's Conv.reset_parameters: identity on the first in_channels outputs, zero bias.
TEST(Models, AirbenchDiracInit) {
  auto net = models::airbench(0.25);
  nn::TensorDict sd = net->state_dict();
  for (auto& [k, t] : sd) {
    if (t.dim() != 4) continue;
    SCOPED_TRACE(k);
    int64_t n = std::min(t.size(0), t.size(1));
    Tensor head = t.slice(0, 0, n).to(DType::Float64).contiguous();
    Tensor want = zeros(head.shape(), dtype(DType::Float64));
    for (int64_t i = 0; i < n; ++i)
      want.select(0, i).select(0, i).select(0, t.size(2) / 2).select(0, t.size(3) / 2).fill_(1.0);
    EXPECT_TENSOR_CLOSE(head, want, 0.0, 0.0);
    if (t.size(0) > n) {
      EXPECT_GT(amax(abs(t.slice(0, n, t.size(0)))).item(), 0.0);
    }
  }
  for (auto& [k, t] : sd) {
    if (ends_with(k, "whiten.bias")) {
      EXPECT_EQ(amax(abs(t)).item(), 0.0);
    }
  }
}

void expect_error(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no kiln::Error; expected one mentioning '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Models, ClearErrors) {
  expect_error([] { models::create("vgg16"); }, "valid names: tutorial, resnet18, airbench");
  expect_error([] { models::create("resnet18", 0.5); }, "applies only to airbench");
  expect_error([] { models::create("airbench", 0.0); }, "width must be a positive number");
  expect_error([] { models::tutorial_cnn(3, 10, 12); }, "too small");
  expect_error([] { models::resnet18(0); }, "must be positive");
  expect_error([] { models::airbench(0.25)->forward(zeros({1, 3, 8, 8})); }, "at least 9x9");
  auto net = models::create("airbench", 0.25);
  expect_error([&] { net->forward(zeros({1, 1, 32, 32})); }, "C = 3");
}

}  // namespace
}  // namespace kiln
