// nn::Module: registration order and torch's dotted names, state dicts and
// their errors, train/eval, in-place dtype moves, zero_grad, print(model).
#include <gtest/gtest.h>

#include "kiln/optim.h"
#include "kiln/kiln.h"
#include "testing/errors.h"
#include "testing/golden.h"

namespace kiln {
namespace {

using nn::Sequential;

// A user-defined module in the libtorch style.
struct Block : nn::Module {
  Block() : nn::Module("Block") {
    conv = register_module("conv", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 4, 3).padding(1).bias(false)));
    bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(4));
    scale = register_parameter("scale", ones({1}));
    counter = register_buffer("counter", zeros({2}));
  }
  Tensor forward(const Tensor& x) override { return relu(bn->forward(conv->forward(x))) * scale; }
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::BatchNorm2d> bn;
  Tensor scale, counter;
};

struct Net : nn::Module {
  Net() : nn::Module("Net") {
    block = register_module("block", std::make_shared<Block>());
    head = register_module("head", std::make_shared<Sequential>(std::vector<nn::ModulePtr>{
                                       std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(4 * 4 * 4, 3)}));
  }
  Tensor forward(const Tensor& x) override { return head->forward(block->forward(x)); }
  std::shared_ptr<Block> block;
  std::shared_ptr<Sequential> head;
};

std::vector<std::string> keys(const nn::TensorDict& d) {
  std::vector<std::string> k;
  for (const auto& [n, _] : d) k.push_back(n);
  return k;
}

TEST(Module, DottedNamesInTorchOrder) {
  Net net;
  // torch: module by module, parameters then buffers, then children
  EXPECT_EQ(keys(net.state_dict()),
            (std::vector<std::string>{"block.scale", "block.counter", "block.conv.weight", "block.bn.weight",
                                      "block.bn.bias", "block.bn.running_mean", "block.bn.running_var",
                                      "block.bn.num_batches_tracked", "head.1.weight", "head.1.bias"}));
  EXPECT_EQ(keys(net.named_parameters()), (std::vector<std::string>{"block.scale", "block.conv.weight", "block.bn.weight",
                                                                    "block.bn.bias", "head.1.weight", "head.1.bias"}));
  EXPECT_EQ(keys(net.named_buffers()),
            (std::vector<std::string>{"block.counter", "block.bn.running_mean", "block.bn.running_var",
                                      "block.bn.num_batches_tracked"}));
  EXPECT_TRUE(net.named_parameters(false).empty());
  EXPECT_EQ(keys(net.block->named_parameters(false)), std::vector<std::string>{"scale"});
  EXPECT_EQ(net.parameters().size(), 6u);
  EXPECT_EQ(net.num_parameters(), 1 + 4 * 3 * 9 + 4 + 4 + 64 * 3 + 3);
  for (const Tensor& p : net.parameters()) EXPECT_TRUE(p.requires_grad());
  for (const auto& [n, b] : net.named_buffers()) EXPECT_FALSE(b.requires_grad()) << n;
  // Detached views of the live tensors, as torch's state_dict().
  Tensor last = net.state_dict().back().second;
  EXPECT_TRUE(last.shares_storage(net.head->operator[](1)->named_parameters().back().second));
  EXPECT_FALSE(last.requires_grad());

  std::vector<std::string> mods;
  for (const auto& [n, m] : net.named_modules()) mods.push_back(n + ":" + m->type_name());
  EXPECT_EQ(mods, (std::vector<std::string>{":Net", "block:Block", "block.conv:Conv2d", "block.bn:BatchNorm2d",
                                            "head:Sequential", "head.0:Flatten", "head.1:Linear"}));
  EXPECT_EQ(net.children().size(), 2u);
  EXPECT_EQ(net.named_children()[1].first, "head");
}

TEST(Module, SharedParametersCountOnce) {
  auto lin = std::make_shared<nn::Linear>(3, 3);
  Sequential seq({lin, lin});
  EXPECT_EQ(seq.parameters().size(), 2u);
  EXPECT_EQ(seq.num_parameters(), 12);
  EXPECT_EQ(keys(seq.named_parameters()), (std::vector<std::string>{"0.weight", "0.bias"}));
  EXPECT_EQ(seq.state_dict().size(), 4u);  // torch keeps both names in the state dict
}

TEST(Module, RegistrationErrors) {
  struct Bad : nn::Module {
    Bad() : nn::Module("Bad") {}
    void add(const std::string& n) { register_parameter(n, zeros({1})); }
    void add_buffer(const std::string& n) { register_buffer(n, zeros({1})); }
    void add_module(const std::string& n, nn::ModulePtr m) { register_module(n, m); }
    void add_computed() { register_parameter("c", mul(ones({1}).requires_grad_(), 2.0)); }
  } bad;
  bad.add("w");
  EXPECT_KILN_ERROR(bad.add("w"), "Bad", "\"w\"", "already taken");
  EXPECT_KILN_ERROR(bad.add_buffer("w"), "already taken");
  EXPECT_KILN_ERROR(bad.add("a.b"), "may not contain '.'");
  EXPECT_KILN_ERROR(bad.add(""), "empty");
  EXPECT_KILN_ERROR(bad.add_module("m", nullptr), "null");
  EXPECT_KILN_ERROR(bad.add_computed(), "grad_fn", "detach()");
  EXPECT_KILN_ERROR(bad.forward(ones({1})), "Bad", "no single-input forward");
}

TEST(Module, StateDictRoundTripAndCopiesIntoSameTensors) {
  manual_seed(1);
  Net a;
  manual_seed(2);
  Net b;
  Tensor w_before = b.block->conv->weight;
  EXPECT_FALSE(allclose(a.block->conv->weight, b.block->conv->weight));
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.block->conv->weight.impl(), w_before.impl());  // copied into, not replaced
  for (size_t i = 0; i < a.state_dict().size(); ++i)
    EXPECT_TRUE(allclose(a.state_dict()[i].second, b.state_dict()[i].second)) << a.state_dict()[i].first;
  Tensor x = randn({2, 3, 4, 4});
  a.eval();
  b.eval();
  EXPECT_TENSOR_CLOSE(a.forward(x), b.forward(x), 0, 0);
}

TEST(Module, LoadStateDictListsEveryProblemAtOnce) {
  Net net;
  nn::TensorDict sd = net.state_dict();
  nn::TensorDict bad;
  for (auto& [n, t] : sd) {
    if (n == "block.bn.running_var" || n == "head.1.bias") continue;                 // missing
    if (n == "head.1.weight") bad.emplace_back(n, zeros({3, 65}));                  // mis-shaped
    else if (n == "block.conv.weight") bad.emplace_back(n, zeros({4, 3, 5, 5}));   // mis-shaped
    else bad.emplace_back(n, t);
  }
  bad.emplace_back("block.extra", zeros({1}));  // unexpected
  EXPECT_KILN_ERROR(net.load_state_dict(bad), "into Net", "missing key(s) (2)", "\"block.bn.running_var\"",
                    "\"head.1.bias\"", "unexpected key(s) (1): \"block.extra\"",
                    "size mismatch for \"head.1.weight\": copying a tensor of shape [3, 65]",
                    "the shape in the current model is [3, 64]", "size mismatch for \"block.conv.weight\"",
                    "strict=false");
  // Nothing was copied by the failed load.
  EXPECT_NE(net.block->conv->weight.to_vector<float>()[0], 0.0f);
  // Non-strict: missing/unexpected are fine, shapes still are not.
  EXPECT_KILN_ERROR(net.load_state_dict(bad, false), "size mismatch for \"head.1.weight\"");
  nn::TensorDict partial = {{"head.1.bias", full({3}, 7.0)}, {"nonsense", zeros({2})}};
  net.load_state_dict(partial, false);
  EXPECT_EQ(net.head->operator[](1)->named_parameters()[1].second.to_vector<float>(), std::vector<float>(3, 7.0f));
  nn::TensorDict twice = sd;
  twice.push_back(sd[0]);
  EXPECT_KILN_ERROR(net.load_state_dict(twice), "more than once", "\"block.scale\"");
}

// load_state_dict(strict = false) reports what it skipped, as torch's
// _IncompatibleKeys; a strict load that succeeds reports nothing.
TEST(Module, NonStrictLoadReturnsMissingAndUnexpectedKeys) {
  Net net;
  nn::TensorDict partial = {{"head.1.bias", full({3}, 7.0)}, {"nonsense", zeros({2})}, {"also.bad", zeros({1})}};
  nn::LoadStateDictResult r = net.load_state_dict(partial, false);
  EXPECT_EQ(r.unexpected_keys, (std::vector<std::string>{"nonsense", "also.bad"}));
  std::vector<std::string> want_missing;
  for (const auto& [n, t] : net.state_dict())
    if (n != "head.1.bias") want_missing.push_back(n);
  EXPECT_EQ(r.missing_keys, want_missing);
  nn::LoadStateDictResult full_load = net.load_state_dict(net.state_dict());
  EXPECT_TRUE(full_load.missing_keys.empty());
  EXPECT_TRUE(full_load.unexpected_keys.empty());
}

// Lookup by name (a miss names the key and its near matches) and by prefix.
TEST(TensorDict, LookupByNameAndPrefix) {
  Net net;
  nn::TensorDict sd = net.state_dict();
  EXPECT_EQ(sd.at("head.1.weight").shape(), (Shape{3, 64}));
  EXPECT_EQ(sd.at("block.conv.weight").impl()->storage, net.block->conv->weight.impl()->storage);
  EXPECT_TRUE(sd.contains("block.bn.running_var"));
  EXPECT_FALSE(sd.contains("block.bn"));
  EXPECT_EQ(sd.find("nope"), nullptr);
  EXPECT_EQ(sd.at(0).first, sd.front().first);  // the vector's at(index) still works
  EXPECT_KILN_ERROR(sd.at("head.1.weigth"), "no key \"head.1.weigth\"", "did you mean \"head.1.weight\"");
  EXPECT_KILN_ERROR(sd.at("conv.weight"), "no key \"conv.weight\"", "\"block.conv.weight\"");
  EXPECT_KILN_ERROR(sd.at("zzzzzzzzzzzzzzzzzzzz"), "no key", "keys()");

  nn::TensorDict bn = sd.with_prefix("block.bn");
  EXPECT_EQ(bn.keys(), sd.with_prefix("block.bn.").keys());
  EXPECT_EQ(bn.keys(), (std::vector<std::string>{"weight", "bias", "running_mean", "running_var",
                                                 "num_batches_tracked"}));
  EXPECT_EQ(bn.at("running_var").impl(), sd.at("block.bn.running_var").impl());
  EXPECT_TRUE(sd.with_prefix("block.b").empty());  // whole path components only
  EXPECT_EQ(sd.with_prefix("").size(), sd.size());
  // A module's sub-dict loads into that module.
  nn::BatchNorm2d fresh(4);
  EXPECT_TRUE(fresh.load_state_dict(bn).missing_keys.empty());
}

TEST(Module, LoadStateDictCastsDtypes) {
  nn::BatchNorm2d bn(3);
  nn::TensorDict sd = {{"weight", from_vector(std::vector<double>{1, 2, 3}, {3})},
                       {"bias", zeros({3})},
                       {"running_mean", zeros({3})},
                       {"running_var", ones({3})},
                       {"num_batches_tracked", full({}, 5.0, dtype(DType::Int64))}};
  bn.load_state_dict(sd);
  EXPECT_EQ(bn.weight.dtype(), DType::Float32);
  EXPECT_EQ(bn.weight.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 5);
}

TEST(Module, TrainEvalRecursive) {
  Net net;
  EXPECT_TRUE(net.is_training());
  net.eval();
  for (const auto& [n, m] : net.named_modules()) EXPECT_FALSE(m->is_training()) << n;
  net.train();
  for (const auto& [n, m] : net.named_modules()) EXPECT_TRUE(m->is_training()) << n;
  // BatchNorm counts training batches only.
  Tensor x = randn({2, 3, 4, 4});
  net.forward(x);
  net.forward(x);
  net.eval();
  net.forward(x);
  EXPECT_EQ(net.block->bn->num_batches_tracked.item<int64_t>(), 2);
}

TEST(Module, ToDtypeKeepsIdentitiesForOptimizers) {
  Net net;
  Tensor w = net.block->conv->weight;
  TensorImpl* impl = w.impl();
  optim::SGD opt(net.parameters(), optim::SGDOptions(0.1));
  net.to(DType::Float64);
  EXPECT_EQ(net.block->conv->weight.impl(), impl);
  EXPECT_EQ(w.dtype(), DType::Float64);
  EXPECT_TRUE(w.requires_grad());
  EXPECT_EQ(net.block->bn->running_mean.dtype(), DType::Float64);
  EXPECT_EQ(net.block->bn->num_batches_tracked.dtype(), DType::Int64);  // integer buffers stay
  EXPECT_EQ(opt.params()[1].dtype(), DType::Float64);
  // Training still works end to end in float64 with the optimizer built before.
  Tensor x = randn({2, 3, 4, 4}, dtype(DType::Float64));
  Tensor loss = net.forward(x).sum();
  loss.backward();
  EXPECT_EQ(w.grad().dtype(), DType::Float64);
  std::vector<double> before = w.to_vector<double>();
  opt.step();
  EXPECT_NE(w.to_vector<double>(), before);
  net.to(DType::Float32);
  EXPECT_EQ(w.dtype(), DType::Float32);
  EXPECT_EQ(w.grad().dtype(), DType::Float32);  // grads follow, as in torch
  EXPECT_KILN_ERROR(net.to(DType::Int32), "floating dtype");
  EXPECT_THROW(net.to(Device::cuda()), Error);
  EXPECT_EQ(w.dtype(), DType::Float32);  // unchanged after the failed move
}

TEST(Module, ZeroGradSetsToNone) {
  Net net;
  net.forward(randn({2, 3, 4, 4})).sum().backward();
  for (const Tensor& p : net.parameters()) EXPECT_TRUE(p.grad().defined());
  net.zero_grad();
  for (const Tensor& p : net.parameters()) EXPECT_FALSE(p.grad().defined());
}

TEST(Module, PrintsLikeTorch) {
  Sequential m({std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 6, 5)),
                std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 64, 3).padding(1).bias(false)),
                std::make_shared<nn::Conv2d>(nn::Conv2dOptions(4, 8, {2, 3}).stride(2).dilation(2).groups(2)),
                std::make_shared<nn::Linear>(4, 5),
                std::make_shared<nn::Linear>(nn::LinearOptions(4, 5).bias(false)),
                std::make_shared<nn::BatchNorm2d>(6),
                std::make_shared<nn::BatchNorm2d>(nn::BatchNorm2dOptions(6).affine(false).momentum(0.6).eps(1e-12)),
                std::make_shared<nn::ReLU>(),
                std::make_shared<nn::GELU>(),
                std::make_shared<nn::GELU>("tanh"),
                std::make_shared<nn::MaxPool2d>(2),
                std::make_shared<nn::MaxPool2d>(nn::Pool2dOptions({2, 3}).stride(std::vector<int64_t>{1, 1}).padding(std::vector<int64_t>{1, 1}).ceil_mode(true)),
                std::make_shared<nn::AvgPool2d>(2),
                std::make_shared<nn::AdaptiveAvgPool2d>(std::vector<int64_t>{1, 1}),
                std::make_shared<nn::AdaptiveMaxPool2d>(std::vector<int64_t>{2}),
                std::make_shared<nn::Dropout>(0.25),
                std::make_shared<nn::Flatten>(),
                std::make_shared<Sequential>(std::vector<nn::ModulePtr>{std::make_shared<nn::ReLU>()})});
  // print(model) of the same torch.nn.Sequential under PyTorch 1.13
  EXPECT_EQ(m.str(), R"(Sequential(
  (0): Conv2d(3, 6, kernel_size=(5, 5), stride=(1, 1))
  (1): Conv2d(3, 64, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False)
  (2): Conv2d(4, 8, kernel_size=(2, 3), stride=(2, 2), dilation=(2, 2), groups=2)
  (3): Linear(in_features=4, out_features=5, bias=True)
  (4): Linear(in_features=4, out_features=5, bias=False)
  (5): BatchNorm2d(6, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)
  (6): BatchNorm2d(6, eps=1e-12, momentum=0.6, affine=False, track_running_stats=True)
  (7): ReLU()
  (8): GELU(approximate='none')
  (9): GELU(approximate='tanh')
  (10): MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)
  (11): MaxPool2d(kernel_size=(2, 3), stride=1, padding=1, dilation=1, ceil_mode=True)
  (12): AvgPool2d(kernel_size=2, stride=2, padding=0)
  (13): AdaptiveAvgPool2d(output_size=(1, 1))
  (14): AdaptiveMaxPool2d(output_size=2)
  (15): Dropout(p=0.25, inplace=False)
  (16): Flatten(start_dim=1, end_dim=-1)
  (17): Sequential(
    (0): ReLU()
  )
))");
  EXPECT_EQ(Sequential().str(), "Sequential()");
  Net net;
  EXPECT_EQ(net.block->str(), R"(Block(
  scale=[1], counter=[2]
  (conv): Conv2d(3, 4, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False)
  (bn): BatchNorm2d(4, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)
))");
}

}  // namespace
}  // namespace kiln
