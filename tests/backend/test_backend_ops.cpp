// The backend test driver (as ggml's test-backend-ops): every op case below
// runs on each non-CPU backend present and is compared with the CPU result
// on the same inputs; a few ops' gradients run through the backend and are
// checked against finite differences. Without a CUDA device the CUDA cases
// skip with the reason; the CPU-side checks (the cases' references, the
// no-device errors) always run.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "testing/compare.h"
#include "testing/cuda_skip.h"
#include "ops/conv_fused.h"
#include "ops/op_def.h"
#include "testing/gradcheck.h"

namespace kiln {
namespace {

const Device kCuda = Device::cuda(0);


enum class Inputs { Normal, Positive };

struct OpCase {
  std::string name;
  std::vector<Shape> shapes;  // one per tensor input
  std::function<Tensor(const Tensors&)> fn;
  DType dtype = DType::Float32;
  Inputs inputs = Inputs::Normal;
  double tol = 1e-5;  // relative and absolute, float32
  // Added to the absolute bound: rms_tol times the CPU result's rms. float32
  // convolutions, whose CUDA algorithms (Winograd's transforms) round to a
  // fraction of the output's scale rather than of each element.
  double rms_tol = 0;
};

// gtest (and ctest's test names) print a case by its name.
void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

Tensors make_inputs(const OpCase& c, uint64_t seed) {
  Generator gen(seed);
  Tensors r;
  for (const Shape& s : c.shapes) {
    Tensor t = randn(s, {}, &gen);
    if (c.inputs == Inputs::Positive) t = add(abs(t), 0.1);
    if (c.dtype != DType::Float32) t = t.mul_(4.0).to(c.dtype);  // integers: spread over a few values
    r.push_back(t);
  }
  return r;
}

Tensors on(const Tensors& xs, Device d) {
  Tensors r;
  for (const Tensor& x : xs) r.push_back(x.to(d));
  return r;
}

// Class indices in [0, classes) drawn from a random float tensor (on its device).
Tensor remainder_classes(const Tensor& t, int64_t classes) {
  Tensor u = mul(sigmoid(t), static_cast<double>(classes) - 1e-3);  // (0, classes)
  return clamp(u.to(DType::Int64), 0.0, static_cast<double>(classes - 1));
}

// How many elements are NaN (as float32, so the case compares as numbers).
Tensor isnan_count(const Tensor& t) { return sum(ne(t, t).to(DType::Float32)); }

Conv2dParams conv_params(std::vector<int64_t> stride, std::vector<int64_t> padding, std::vector<int64_t> dilation = {1, 1},
                         int64_t groups = 1) {
  Conv2dParams p;
  p.stride = std::move(stride);
  p.padding = std::move(padding);
  p.dilation = std::move(dilation);
  p.groups = groups;
  return p;
}

// Several outputs compared as one: each flattened (as float32) and joined.
Tensor joined(const Tensors& parts) {
  Tensors flat;
  for (const Tensor& t : parts) flat.push_back(t.flatten().to(DType::Float32));
  return cat(flat, 0);
}

// Convolution (cuDNN), pooling, batch norm: the ops of the zoo's CNNs.
void nn_cases(std::vector<OpCase>& c) {
  const DType f32 = DType::Float32;
  const Inputs normal = Inputs::Normal;
  auto conv = [&](const std::string& name, std::vector<Shape> shapes, Conv2dParams p) {
    const bool bias = shapes.size() > 2;
    // float32: cuDNN may run Winograd (as torch's default), whose transforms
    // round to about 1e-4 of the output's scale (7.6e-5 measured on
    // conv2d_resnet_layer4, H100): 1e-4 relative plus 2e-4 of the rms. TF32
    // (1e-3 of the scale) would fail it.
    auto add = [&](std::string n, std::vector<Shape> s, std::function<Tensor(const Tensors&)> f) {
      OpCase oc{std::move(n), std::move(s), std::move(f), f32, normal, 1e-4};
      oc.rms_tol = 2e-4;
      c.push_back(std::move(oc));
    };
    add(name, shapes, [p, bias](const Tensors& x) { return conv2d(x[0], x[1], bias ? x[2] : Tensor(), p); });
    // The backward ops take a grad_out of the output's shape as a third input.
    const Shape ys = conv2d(zeros(shapes[0]), zeros(shapes[1]), Tensor(), p).shape();
    add(name + "_backward_input", {shapes[0], shapes[1], ys},
        [p](const Tensors& x) { return conv2d_backward_input(x[2], x[1], x[0].shape(), p); });
    add(name + "_backward_weight", {shapes[0], shapes[1], ys},
        [p](const Tensors& x) { return conv2d_backward_weight(x[2], x[0], x[1].shape(), p); });
  };
  conv("conv2d", {{2, 3, 9, 9}, {4, 3, 3, 3}, {4}}, conv_params({1, 1}, {1, 1}));
  conv("conv2d_stride2", {{2, 4, 10, 10}, {6, 4, 3, 3}}, conv_params({2, 2}, {0, 0}));
  conv("conv2d_groups_dilated", {{1, 4, 11, 11}, {6, 2, 3, 3}}, conv_params({1, 1}, {2, 2}, {2, 2}, 2));
  conv("conv2d_1x1", {{4, 16, 5, 5}, {8, 16, 1, 1}}, conv_params({1, 1}, {0, 0}));
  conv("conv2d_wide", {{8, 64, 16, 16}, {64, 64, 3, 3}}, conv_params({1, 1}, {1, 1}));
  // ResNet-18's last stage (4x4 planes, 512 channels) and its strided 1x1 shortcut
  conv("conv2d_resnet_layer4", {{8, 512, 4, 4}, {512, 512, 3, 3}}, conv_params({1, 1}, {1, 1}));
  conv("conv2d_1x1_stride2", {{8, 128, 8, 8}, {256, 128, 1, 1}}, conv_params({2, 2}, {0, 0}));
  // conv2d with a fused activation (nn::fuse_modules, the compiler's
  // fuse_conv_activation): bias, then the activation.
  for (const char* act : {"relu", "gelu"}) {
    OpCase oc{std::string("conv2d_bias_") + act, {{2, 8, 9, 9}, {16, 8, 3, 3}, {16}},
              [act](const Tensors& x) { return conv2d_fused(x[0], x[1], x[2], conv_params({1, 1}, {1, 1}), act); },
              f32, normal, 1e-4};
    oc.rms_tol = 2e-4;
    c.push_back(std::move(oc));
    // bfloat16 channels-last, autocast's layers (16 channels: cuDNN's fused
    // engines want multiples of 8).
    c.push_back({std::string("conv2d_bias_") + act + "_bfloat16_cl", {{4, 16, 8, 8}, {16, 16, 3, 3}, {16}},
                 [act](const Tensors& x) {
                   auto cl = [](const Tensor& t) {
                     return contiguous(t.to(DType::BFloat16), MemoryFormat::ChannelsLast);
                   };
                   return conv2d_fused(cl(x[0]), cl(x[1]), x[2].to(DType::BFloat16), conv_params({1, 1}, {1, 1}), act)
                       .to(DType::Float32);
                 },
                 f32, normal, 5e-2});
  }
  c.push_back({"conv2d_float64", {{2, 3, 7, 7}, {4, 3, 3, 3}},
               [](const Tensors& x) { return conv2d(x[0], x[1], Tensor(), conv_params({1, 1}, {1, 1})); },
               DType::Float64});
  c.push_back({"conv2d_bfloat16", {{4, 16, 8, 8}, {8, 16, 3, 3}}, [](const Tensors& x) {
                 return conv2d(x[0].to(DType::BFloat16), x[1].to(DType::BFloat16), Tensor(), conv_params({1, 1}, {1, 1}))
                     .to(DType::Float32);
               }, f32, normal, 5e-2});
  c.push_back({"conv2d_float16", {{4, 16, 8, 8}, {8, 16, 3, 3}}, [](const Tensors& x) {
                 return conv2d(x[0].to(DType::Float16), x[1].to(DType::Float16), Tensor(), conv_params({1, 1}, {1, 1}))
                     .to(DType::Float32);
               }, f32, normal, 2e-2});

  // pooling: values and indices (the CPU's index convention: into each H*W plane)
  auto pool = [&](const std::string& name, Shape s, std::vector<int64_t> k, std::vector<int64_t> st,
                  std::vector<int64_t> pad, std::vector<int64_t> dil, bool ceil) {
    c.push_back({name, {s}, [=](const Tensors& x) { return max_pool2d(x[0], k, st, pad, dil, ceil); }});
    c.push_back({name + "_indices", {s}, [=](const Tensors& x) {
                   return std::get<1>(max_pool2d_with_indices(x[0], k, st, pad, dil, ceil));
                 }});
    // The backward with the CPU's indices, wherever it runs: indices cross devices.
    c.push_back({name + "_backward", {s}, [=](const Tensors& x) {
                   auto [v, idx] = max_pool2d_with_indices(x[0].to(Device::cpu()), k, st, pad, dil, ceil);
                   return max_pool2d_backward(mul(v, 2.0).to(x[0].device()), idx.to(x[0].device()), s);
                 }});
    c.push_back({"avg_" + name, {s}, [=](const Tensors& x) { return avg_pool2d(x[0], k, st, pad, ceil, true); }});
    c.push_back({"avg_" + name + "_no_pad_count", {s},
                 [=](const Tensors& x) { return avg_pool2d(x[0], k, st, pad, ceil, false); }});
    c.push_back({"avg_" + name + "_backward", {s}, [=](const Tensors& x) {
                   Tensor y = avg_pool2d(x[0], k, st, pad, ceil, false);
                   return avg_pool2d_backward(y, s, k, st.empty() ? k : st, pad, ceil, false);
                 }});
  };
  pool("pool_2x2", {2, 3, 8, 8}, {2, 2}, {}, {0, 0}, {1, 1}, false);
  pool("pool_2x2_odd", {2, 3, 7, 9}, {2, 2}, {}, {0, 0}, {1, 1}, false);
  pool("pool_3x3_s2_p1", {2, 3, 11, 11}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false);
  pool("pool_3x3_s2_ceil", {1, 2, 10, 10}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true);
  c.push_back({"max_pool_dilated", {{1, 2, 12, 12}},
               [](const Tensors& x) { return max_pool2d(x[0], {3, 3}, {1, 1}, {1, 1}, {2, 2}); }});
  c.push_back({"max_pool_ties_indices", {{2, 2, 6, 6}}, [](const Tensors& x) {
                 // clamped: ties everywhere, the first maximum in window order wins
                 return std::get<1>(max_pool2d_with_indices(clamp(x[0], -0.3, 0.3), {3, 3}, {1, 1}, {1, 1}));
               }});
  c.push_back({"max_pool_bfloat16", {{2, 3, 8, 8}},
               [](const Tensors& x) { return max_pool2d(x[0].to(DType::BFloat16), {2, 2}).to(DType::Float32); }});
  c.push_back({"adaptive_avg_pool_1x1", {{4, 8, 5, 5}},
               [](const Tensors& x) { return adaptive_avg_pool2d(x[0], {1, 1}); }});
  c.push_back({"adaptive_max_pool_2x2", {{4, 8, 6, 6}},
               [](const Tensors& x) { return adaptive_max_pool2d(x[0], {2, 2}); }});

  // batch norm: y and the running statistics updated in place
  auto bn_train = [](const Tensors& x, DType dt) {
    const Device d = x[0].device();
    const int64_t C = x[0].shape()[1];
    Tensor rm = zeros({C}, dtype(DType::Float32).with_device(d)), rv = ones({C}, dtype(DType::Float32).with_device(d));
    Tensor y = batch_norm(x[0].to(dt), x[1], x[2], rm, rv, true, 0.1, 1e-5);
    return joined({y, rm, rv});
  };
  c.push_back({"batch_norm_train", {{8, 4, 5, 5}, {4}, {4}},
               [bn_train](const Tensors& x) { return bn_train(x, DType::Float32); }, f32, normal, 1e-4});
  c.push_back({"batch_norm_train_2d", {{32, 6}, {6}, {6}},
               [bn_train](const Tensors& x) { return bn_train(x, DType::Float32); }, f32, normal, 1e-4});
  c.push_back({"batch_norm_train_large", {{64, 16, 32, 32}, {16}, {16}},
               [bn_train](const Tensors& x) { return bn_train(x, DType::Float32); }, f32, normal, 1e-4});
  c.push_back({"batch_norm_train_bfloat16", {{8, 4, 5, 5}, {4}, {4}},
               [bn_train](const Tensors& x) { return bn_train(x, DType::BFloat16); }, f32, normal, 3e-2});
  c.push_back({"batch_norm_eval", {{8, 4, 5, 5}, {4}, {4}, {4}, {4}}, [](const Tensors& x) {
                 return batch_norm(x[0], x[1], x[2], x[3], add(abs(x[4]), 0.5), false, 0.1, 1e-5);
               }, f32, normal, 1e-4});
  c.push_back({"batch_norm_no_affine", {{8, 4, 3, 3}}, [](const Tensors& x) {
                 return batch_norm(x[0], Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
               }, f32, normal, 1e-4});
  c.push_back({"batch_norm_backward", {{8, 4, 5, 5}, {8, 4, 5, 5}, {4}}, [](const Tensors& x) {
                 const double eps = 1e-5;
                 Tensor save_mean = mean(x[0], {0, 2, 3}), save_invstd = rsqrt(add(var(x[0], {0, 2, 3}, 0), eps));
                 auto [gx, gw, gb] = batch_norm_backward(x[1], x[0], x[2], save_mean, save_invstd, true, eps);
                 return joined({gx, gw, gb});
               }, f32, normal, 1e-4});
  c.push_back({"batch_norm_backward_eval", {{8, 4, 5, 5}, {8, 4, 5, 5}, {4}, {4}}, [](const Tensors& x) {
                 Tensor invstd = rsqrt(add(abs(x[3]), 0.5));
                 auto [gx, gw, gb] = batch_norm_backward(x[1], x[0], x[2], mean(x[0], {0, 2, 3}), invstd, false, 1e-5);
                 return joined({gx, gw, gb});
               }, f32, normal, 1e-4});

  // var
  for (auto dims : std::vector<std::vector<int64_t>>{{}, {1}, {0, 2}})
    c.push_back({"var", {{6, 50, 7}}, [dims](const Tensors& x) { return var(x[0], dims); }, f32, normal, 1e-4});
  c.push_back({"var_biased_keepdim", {{6, 50, 7}}, [](const Tensors& x) { return var(x[0], {1}, 0, true); }, f32,
               normal, 1e-4});
}

// Indexing, arange and the random ops (the same Philox stream as the CPU).
void index_and_random_cases(std::vector<OpCase>& c) {
  const DType f32 = DType::Float32;
  const Inputs normal = Inputs::Normal;
  auto index_of = [](const Tensor& like, std::vector<int64_t> v) {
    const int64_t n = static_cast<int64_t>(v.size());
    return from_vector(v, {n}).to(like.device());
  };
  c.push_back({"cat_dim1", {{3, 4}, {3, 2}}, [](const Tensors& x) { return cat({x[0], x[1]}, 1); }});
  c.push_back({"cat_dim0_three", {{2, 5}, {1, 5}, {3, 5}}, [](const Tensors& x) { return cat({x[0], x[1], x[2]}, 0); }});
  c.push_back({"cat_skips_empty", {{4}, {0}, {3}}, [](const Tensors& x) { return cat({x[0], x[1], x[2]}, 0); }});
  c.push_back({"cat_transposed", {{4, 3}, {3, 2}}, [](const Tensors& x) { return cat({x[0].t(), x[1]}, 1); }});
  c.push_back({"stack", {{3, 4}, {3, 4}}, [](const Tensors& x) { return stack({x[0], x[1]}, 1); }});
  c.push_back({"index_select", {{5, 6}}, [index_of](const Tensors& x) {
                 return index_select(x[0], 0, index_of(x[0], {4, 0, -1, 2, 2}));
               }});
  c.push_back({"index_select_dim1", {{3, 6, 4}}, [index_of](const Tensors& x) {
                 return index_select(x[0], 1, index_of(x[0], {5, 1}));
               }});
  c.push_back({"index_add_duplicates", {{5, 3}, {4, 3}}, [index_of](const Tensors& x) {
                 return index_add(x[0], 0, index_of(x[0], {1, 3, 1, -1}), x[1]);
               }, f32, normal, 1e-5});
  c.push_back({"index_add_int64", {{5, 3}, {2, 3}}, [index_of](const Tensors& x) {
                 return index_add(x[0], 0, index_of(x[0], {0, 0}), x[1]);
               }, DType::Int64});
  c.push_back({"gather", {{4, 7}, {4, 5}}, [](const Tensors& x) { return gather(x[0], 1, remainder_classes(x[1], 7)); }});
  c.push_back({"gather_dim0_transposed", {{4, 7}, {3, 4}},
               [](const Tensors& x) { return gather(x[0].t(), 0, remainder_classes(x[1], 7)); }});
  c.push_back({"scatter_add", {{4, 7}, {4, 5}, {4, 6}}, [](const Tensors& x) {
                 return scatter_add(x[0], 1, remainder_classes(x[1], 7), x[2]);
               }, f32, normal, 1e-5});
  c.push_back({"one_hot", {{20}}, [](const Tensors& x) { return one_hot(remainder_classes(x[0], 6), 6); }});
  c.push_back({"arange_float", {{1}}, [](const Tensors& x) {
                 return arange(-1.0, 4.0, 0.25, dtype(DType::Float32).with_device(x[0].device()));
               }});
  c.push_back({"arange_int64", {{1}}, [](const Tensors& x) {
                 return arange(17, dtype(DType::Int64).with_device(x[0].device()));
               }});
  auto opts = [](const Tensor& like, DType dt) { return dtype(dt).with_device(like.device()); };
  for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16}) {
    c.push_back({std::string("rand_") + dtype_name(dt), {{1}}, [opts, dt](const Tensors& x) {
                   Generator gen(123);
                   gen.advance(5);  // an offset inside the stream
                   return rand({1001}, opts(x[0], dt), &gen).to(DType::Float64);
                 }, f32, normal, 0.0});
    c.push_back({std::string("randn_") + dtype_name(dt), {{1}}, [opts, dt](const Tensors& x) {
                   Generator gen(7);
                   return randn({1003}, opts(x[0], dt), &gen).to(DType::Float64);
                 }, f32, normal, dt == DType::Float64 ? 1e-12 : dt == DType::Float32 ? 1e-5 : 1e-2});
  }
  c.push_back({"randint", {{1}}, [opts](const Tensors& x) {
                 Generator gen(9);
                 return randint(-5, 1000, {999}, opts(x[0], DType::Int64), &gen);
               }, f32, normal, 0.0});
  c.push_back({"randint_int32", {{1}}, [opts](const Tensors& x) {
                 Generator gen(9);
                 return randint(0, 7, {33}, opts(x[0], DType::Int32), &gen);
               }, f32, normal, 0.0});
  c.push_back({"bernoulli", {{40, 25}}, [](const Tensors& x) {
                 Generator gen(3);
                 return bernoulli(sigmoid(x[0]), &gen);
               }, f32, normal, 0.0});
  c.push_back({"dropout", {{40, 25}}, [](const Tensors& x) {
                 Generator gen(4);
                 return dropout(x[0], 0.3, true, &gen);
               }, f32, normal, 1e-6});
  c.push_back({"dropout_float64", {{33}}, [](const Tensors& x) {
                 Generator gen(4);
                 return dropout(x[0].to(DType::Float64), 0.5, true, &gen);
               }, f32, normal, 1e-12});
}

std::vector<OpCase> op_cases() {
  using S = std::vector<Shape>;
  std::vector<OpCase> c;
  auto binary = [&](const std::string& name, Tensor (*f)(const Tensor&, const Tensor&), Inputs in = Inputs::Normal) {
    for (const S& shapes : {S{{17}, {17}}, S{{4, 33}, {4, 33}}, S{{2, 3, 5, 7}, {3, 1, 7}}, S{{64, 128}, {128}},
                            S{{3, 1}, {1, 4}}, S{{2, 0}, {0}}})
      c.push_back({name, shapes, [f](const Tensors& x) { return f(x[0], x[1]); }, DType::Float32, in});
  };
  binary("add", add);
  binary("sub", sub);
  binary("mul", mul);
  binary("div", div);
  binary("pow", pow, Inputs::Positive);
  binary("maximum", maximum);
  binary("minimum", minimum);
  binary("eq", eq);
  binary("lt", lt);
  binary("ge", ge);
  c.push_back({"add_number", {{5, 9}}, [](const Tensors& x) { return add(x[0], 2.5); }});
  c.push_back({"mul_int_number", {{1000}}, [](const Tensors& x) { return mul(x[0], 3.0); }});
  c.push_back({"rsub_number", {{8, 8}}, [](const Tensors& x) { return 1.0 - x[0]; }});
  c.push_back({"add_transposed", {{16, 24}, {24, 16}}, [](const Tensors& x) { return add(x[0], x[1].t()); }});
  c.push_back({"add_int64", {{7, 5}, {7, 5}}, [](const Tensors& x) { return add(x[0], x[1]); }, DType::Int64});
  c.push_back({"mul_int32", {{33}, {33}}, [](const Tensors& x) { return mul(x[0], x[1]); }, DType::Int32});
  c.push_back({"div_int64", {{6, 6}, {6, 6}}, [](const Tensors& x) { return div(x[0], add(abs(x[1]), 1.0)); },
               DType::Int64});
  c.push_back({"add_float64", {{9, 9}, {9}}, [](const Tensors& x) { return add(x[0], x[1]); }, DType::Float64});

  auto unary = [&](const std::string& name, std::function<Tensor(const Tensor&)> f, Inputs in = Inputs::Normal) {
    for (const Shape& s : {Shape{1}, Shape{1000}, Shape{3, 5, 7}, Shape{256, 513}, Shape{0}, Shape{3, 0}})
      c.push_back({name, {s}, [f](const Tensors& x) { return f(x[0]); }, DType::Float32, in});
  };
  unary("neg", [](const Tensor& x) { return neg(x); });
  unary("exp", [](const Tensor& x) { return exp(x); });
  unary("log", [](const Tensor& x) { return log(x); }, Inputs::Positive);
  unary("sqrt", [](const Tensor& x) { return sqrt(x); }, Inputs::Positive);
  unary("rsqrt", [](const Tensor& x) { return rsqrt(x); }, Inputs::Positive);
  unary("abs", [](const Tensor& x) { return abs(x); });
  unary("sign", [](const Tensor& x) { return sign(x); });
  unary("relu", [](const Tensor& x) { return relu(x); });
  unary("gelu", [](const Tensor& x) { return gelu(x); });
  unary("gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); });
  unary("sigmoid", [](const Tensor& x) { return sigmoid(x); });
  unary("tanh", [](const Tensor& x) { return tanh(x); });
  unary("erf", [](const Tensor& x) { return erf(x); });
  unary("clamp", [](const Tensor& x) { return clamp(x, -0.5, 0.7); });
  unary("logical_not", [](const Tensor& x) { return logical_not(gt(x, 0.0)); });
  unary("exp_of_permuted", [](const Tensor& x) { return x.dim() == 3 ? exp(x.permute({2, 0, 1})) : exp(x); });
  unary("to_float16", [](const Tensor& x) { return x.to(DType::Float16).to(DType::Float32); });
  unary("to_bfloat16", [](const Tensor& x) { return x.to(DType::BFloat16); });
  unary("to_int64", [](const Tensor& x) { return mul(x, 10.0).to(DType::Int64); });
  unary("to_bool", [](const Tensor& x) { return x.to(DType::Bool); });
  unary("relu_float16", [](const Tensor& x) { return relu(x.to(DType::Float16)); });
  c.push_back({"clamp_int64", {{40}}, [](const Tensors& x) { return clamp(x[0], -2.0, 3.0); }, DType::Int64});
  c.push_back({"gelu_backward", {{31, 7}, {31, 7}}, [](const Tensors& x) { return gelu_backward(x[0], x[1]); }});
  // relu's derivative at relu's outputs (exact zeros), broadcast, in bfloat16
  // (CUDA's 16-bit loop), and at NaN and -0.0 results (no gradient passes).
  c.push_back({"relu_backward", {{31, 7}, {31, 7}},
               [](const Tensors& x) { return relu_backward(x[0], relu(x[1])); }});
  c.push_back({"relu_backward_broadcast", {{4, 9}, {9}}, [](const Tensors& x) { return relu_backward(x[0], x[1]); }});
  c.push_back({"relu_backward_bfloat16", {{64, 33}, {64, 33}}, [](const Tensors& x) {
                 return relu_backward(x[0].to(DType::BFloat16), relu(x[1]).to(DType::BFloat16));
               }});
  c.push_back({"relu_backward_nan_negative_zero", {{50}, {50}}, [](const Tensors& x) {
                 Tensor y = where(lt(x[1], 0.0), scalar_tensor(-0.0), x[1]);
                 y = where(lt(x[1], -1.0), scalar_tensor(std::nan("")), y);
                 return relu_backward(x[0], y);
               }});
  c.push_back({"where", {{4, 9}, {4, 9}, {9}},
               [](const Tensors& x) { return where(gt(x[0], 0.0), x[1], x[2]); }});
  c.push_back({"where_number", {{50}, {50}}, [](const Tensors& x) { return where(lt(x[0], 0.0), x[1], scalar_tensor(0.0)); }});

  // layout
  c.push_back({"contiguous", {{6, 7, 8}}, [](const Tensors& x) { return x[0].permute({1, 2, 0}).contiguous(); }});
  c.push_back({"clone_slice", {{10, 12}}, [](const Tensors& x) { return x[0].slice(1, 1, 11, 3).clone(); }});
  c.push_back({"expand_contiguous", {{5, 1}}, [](const Tensors& x) { return x[0].expand({5, 6}).contiguous(); }});

  // reductions
  for (auto dims : std::vector<std::vector<int64_t>>{{}, {0}, {1}, {2}, {0, 2}, {1, 2}, {0, 1, 2}}) {
    c.push_back({"sum", {{6, 50, 7}}, [dims](const Tensors& x) { return sum(x[0], dims); }, DType::Float32,
                 Inputs::Normal, 1e-4});
    c.push_back({"mean_keepdim", {{6, 50, 7}}, [dims](const Tensors& x) { return mean(x[0], dims, true); },
                 DType::Float32, Inputs::Normal, 1e-4});
  }
  for (auto dims : std::vector<std::vector<int64_t>>{{}, {0}, {2}, {0, 2}}) {
    c.push_back({"amax", {{6, 50, 7}}, [dims](const Tensors& x) { return amax(x[0], dims); }});
    c.push_back({"amin_keepdim", {{6, 50, 7}}, [dims](const Tensors& x) { return amin(x[0], dims, true); }});
  }
  c.push_back({"amax_long_row", {{2, 100000}}, [](const Tensors& x) { return amax(x[0], {1}); }});
  c.push_back({"amax_int64", {{9, 11}}, [](const Tensors& x) { return amax(x[0], {0}); }, DType::Int64});
  c.push_back({"amin_nan_wins", {{4, 8}}, [](const Tensors& x) {
                 Tensor y = x[0].clone();
                 y.slice(1, 3, 4).fill_(std::nan(""));
                 return isnan_count(amin(y, {1}));
               }});
  for (int64_t dim : {0, 1, 2}) {
    c.push_back({"argmax", {{6, 50, 7}}, [dim](const Tensors& x) { return argmax(x[0], dim); }});
    c.push_back({"argmax_keepdim", {{6, 50, 7}}, [dim](const Tensors& x) { return argmax(x[0], dim, true); }});
  }
  c.push_back({"argmax_long_row", {{3, 100000}}, [](const Tensors& x) { return argmax(x[0], 1); }});
  c.push_back({"argmax_ties_and_nan", {{4, 6}}, [](const Tensors& x) {
                 Tensor y = clamp(x[0], -0.2, 0.2);  // ties at the bounds: the first one wins
                 y.slice(0, 2, 3).slice(1, 4, 5).fill_(std::nan(""));
                 return argmax(y, 1);
               }});
  c.push_back({"argmax_int64", {{9, 11}}, [](const Tensors& x) { return argmax(x[0], 0); }, DType::Int64});
  for (int64_t dim : {-1, 0, 1}) {
    c.push_back({"softmax", {{8, 300}}, [dim](const Tensors& x) { return softmax(x[0], dim); }});
    c.push_back({"log_softmax", {{8, 300}}, [dim](const Tensors& x) { return log_softmax(x[0], dim); }});
    c.push_back({"log_softmax_3d", {{4, 5, 6}}, [dim](const Tensors& x) { return log_softmax(x[0], dim); }});
  }
  c.push_back({"softmax_long_row", {{2, 50000}}, [](const Tensors& x) { return softmax(mul(x[0], 10.0), 1); },
               DType::Float32, Inputs::Normal, 1e-5});
  c.push_back({"sum_long_row", {{3, 300000}}, [](const Tensors& x) { return sum(x[0], {1}); }, DType::Float32,
               Inputs::Normal, 1e-4});
  c.push_back({"sum_all_large", {{1 << 20}}, [](const Tensors& x) { return sum(x[0]); }, DType::Float32,
               Inputs::Normal, 1e-4});
  c.push_back({"sum_batch_of_rows", {{512, 10}}, [](const Tensors& x) { return sum(x[0], {0}); }, DType::Float32,
               Inputs::Normal, 1e-4});
  c.push_back({"sum_many_columns", {{70, 200000}}, [](const Tensors& x) { return sum(x[0], {0}); }, DType::Float32,
               Inputs::Normal, 1e-4});
  c.push_back({"mean_long_columns", {{4096, 33}}, [](const Tensors& x) { return mean(x[0], {0}); }, DType::Float32,
               Inputs::Normal, 1e-4});
  c.push_back({"sum_int64", {{9, 11}}, [](const Tensors& x) { return sum(x[0], {1}); }, DType::Int64});
  c.push_back({"mean_float16", {{64, 33}}, [](const Tensors& x) { return mean(x[0].to(DType::Float16), {1}); },
               DType::Float32, Inputs::Normal, 2e-3});
  c.push_back({"sum_of_transposed", {{40, 30}}, [](const Tensors& x) { return sum(x[0].t(), {1}); },
               DType::Float32, Inputs::Normal, 1e-4});

  // matmul (cuBLASLt, full float32)
  auto mm = [&](const std::string& name, S shapes, std::function<Tensor(const Tensors&)> f) {
    c.push_back({name, shapes, f, DType::Float32, Inputs::Normal, 1e-4});
  };
  auto plain = [](const Tensors& x) { return matmul(x[0], x[1]); };
  mm("matmul", {{1, 1}, {1, 1}}, plain);
  mm("matmul", {{7, 13}, {13, 5}}, plain);
  mm("matmul", {{128, 256}, {256, 64}}, plain);
  mm("matmul_vector", {{13}, {13, 5}}, plain);
  mm("matmul_dot", {{100}, {100}}, plain);
  mm("matmul_batched", {{3, 9, 17}, {3, 17, 4}}, plain);
  mm("matmul_broadcast_batch", {{2, 3, 9, 17}, {17, 4}}, plain);
  mm("matmul_broadcast_left", {{9, 17}, {3, 17, 4}}, plain);
  mm("matmul_a_transposed", {{17, 9}, {17, 4}}, [](const Tensors& x) { return matmul(x[0].t(), x[1]); });
  mm("matmul_b_transposed", {{9, 17}, {4, 17}}, [](const Tensors& x) { return matmul(x[0], x[1].t()); });
  mm("matmul_both_transposed", {{17, 9}, {4, 17}}, [](const Tensors& x) { return matmul(x[0].t(), x[1].t()); });
  mm("matmul_sliced", {{9, 40}, {20, 6}}, [](const Tensors& x) { return matmul(x[0].slice(1, 0, 40, 2), x[1]); });
  mm("linear", {{32, 20}, {10, 20}, {10}}, [](const Tensors& x) { return linear(x[0], x[1], x[2]); });
  // linear's bias in cuBLASLt's epilogue: batched input, no bias, a strided
  // bias (no epilogue: the product, then add_), float64 and bfloat16.
  mm("linear_batched", {{3, 7, 20}, {10, 20}, {10}}, [](const Tensors& x) { return linear(x[0], x[1], x[2]); });
  mm("linear_no_bias", {{32, 20}, {10, 20}}, [](const Tensors& x) { return linear(x[0], x[1]); });
  mm("linear_strided_bias", {{32, 20}, {10, 20}, {20}},
     [](const Tensors& x) { return linear(x[0], x[1], x[2].slice(0, 0, 20, 2)); });
  c.push_back({"linear_float64", {{16, 12}, {8, 12}, {8}},
               [](const Tensors& x) { return linear(x[0], x[1], x[2]); }, DType::Float64});
  c.push_back({"linear_bfloat16", {{64, 48}, {32, 48}, {32}},
               [](const Tensors& x) {
                 return linear(x[0].to(DType::BFloat16), x[1].to(DType::BFloat16), x[2].to(DType::BFloat16))
                     .to(DType::Float32);
               },
               DType::Float32, Inputs::Normal, 2e-2});
  c.push_back({"matmul_float64", {{11, 6}, {6, 3}}, plain, DType::Float64});
  c.push_back({"matmul_bfloat16", {{64, 48}, {48, 32}},
               [](const Tensors& x) { return matmul(x[0].to(DType::BFloat16), x[1].to(DType::BFloat16)); },
               DType::Float32, Inputs::Normal, 2e-2});

  // losses (targets drawn from the input: classes 0..9)
  auto targets = [](const Tensor& t, int64_t classes) {
    return remainder_classes(t, classes);
  };
  c.push_back({"cross_entropy", {{32, 10}, {32}}, [targets](const Tensors& x) {
                 return cross_entropy(x[0], targets(x[1], 10));
               }, DType::Float32, Inputs::Normal, 1e-5});
  c.push_back({"cross_entropy_smoothing", {{32, 10}, {32}}, [targets](const Tensors& x) {
                 return cross_entropy(x[0], targets(x[1], 10), 0.1);
               }, DType::Float32, Inputs::Normal, 1e-5});
  c.push_back({"nll_loss_none_ignore", {{16, 5, 3}, {16, 3}}, [targets](const Tensors& x) {
                 Tensor t = targets(x[1], 6);  // class 5 becomes ignore_index
                 t = where(eq(t, 5.0), scalar_tensor(-100.0, DType::Int64), t);
                 return nll_loss(log_softmax(x[0], 1), t, "none");
               }});
  c.push_back({"nll_loss_sum", {{16, 5}, {16}}, [targets](const Tensors& x) {
                 return nll_loss(log_softmax(x[0], 1), targets(x[1], 5), "sum");
               }});

  // factories and in-place updates
  c.push_back({"zeros_like", {{4, 5}}, [](const Tensors& x) { return add(zeros_like(x[0]), x[0]); }});
  c.push_back({"ones_like", {{4, 5}}, [](const Tensors& x) { return mul(ones_like(x[0]), x[0]); }});
  c.push_back({"full_int64", {{3}}, [](const Tensors& x) {
                 return add(full({3}, 7, dtype(DType::Int64).with_device(x[0].device())), 1.0);
               }});
  c.push_back({"fill_strided", {{6, 8}}, [](const Tensors& x) {
                 Tensor y = x[0].clone();
                 Tensor v = y.slice(1, 0, 8, 2);
                 v.fill_(3.0);
                 return y;
               }});
  c.push_back({"copy_into_transposed", {{5, 7}, {7, 5}}, [](const Tensors& x) {
                 Tensor y = x[0].clone();
                 Tensor v = y.t();
                 v.copy_(x[1]);
                 return y;
               }});
  c.push_back({"add_inplace", {{10, 3}, {3}}, [](const Tensors& x) {
                 Tensor y = x[0].clone();
                 y.add_(x[1], -0.5);
                 return y;
               }});
  c.push_back({"addcmul_inplace", {{10, 3}, {10, 3}, {3}}, [](const Tensors& x) {
                 Tensor y = x[0].clone();
                 addcmul_(y, x[1], x[2], 0.25);
                 return y;
               }});
  c.push_back({"addcdiv_inplace", {{10, 3}, {10, 3}, {10, 3}}, [](const Tensors& x) {
                 Tensor y = x[0].clone();
                 addcdiv_(y, x[1], add(abs(x[2]), 1.0), -0.5);
                 return y;
               }});
  c.push_back({"lerp_inplace", {{10, 3}, {10, 3}}, [](const Tensors& x) {
                 Tensor y = x[0].clone();
                 lerp_(y, x[1], 0.9);
                 return y;
               }});
  c.push_back({"mul_inplace_number", {{10, 3}}, [](const Tensors& x) {
                 Tensor y = x[0].clone();
                 y.mul_(1.5);
                 return y;
               }});
  nn_cases(c);
  index_and_random_cases(c);
  return c;
}

std::string case_name(const ::testing::TestParamInfo<OpCase>& info) {
  std::string s = info.param.name;
  for (const Shape& sh : info.param.shapes) {
    s += "_";
    for (int64_t d : sh) s += std::to_string(d) + "x";
    if (!sh.empty()) s.pop_back();
  }
  return s + "_" + std::to_string(info.index);
}

class BackendOps : public ::testing::TestWithParam<OpCase> {};

// The backend's result equals the CPU's: same shape and dtype, values within
// the case's tolerance.
TEST_P(BackendOps, CudaMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  const OpCase& c = GetParam();
  Tensors x = make_inputs(c, 42);
  Tensor want = c.fn(x);
  Tensor got = c.fn(on(x, kCuda));
  ASSERT_EQ(got.device(), kCuda);
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_EQ(got.dtype(), want.dtype());
  Tensor g = got.to(Device::cpu());
  double rms = 0;
  if (want.numel() > 0 && is_floating(want.dtype())) {
    const Tensor w64 = want.to(DType::Float64);
    rms = std::sqrt(mean(mul(w64, w64)).item());
  }
  EXPECT_TRUE(testing::tensors_close(g, want, c.tol, c.tol + c.rms_tol * rms)) << c.name;
  // Convolutions: the error against the output's scale, the figure that
  // docs/cuda.md's per-algorithm tolerances come from.
  if (c.name.rfind("conv2d", 0) == 0 && want.numel() > 0 && is_floating(want.dtype()))
    std::cout << "[ conv error ] " << c.name << ": " << testing::tensor_error(g, want).str() << "; output rms " << rms
              << "\n";
}

// The CPU reference of each float32 case agrees with the same case computed
// in float64 (so a wrong case cannot hide a wrong backend).
TEST_P(BackendOps, CpuReferenceAgreesWithFloat64) {
  const OpCase& c = GetParam();
  if (c.dtype != DType::Float32) GTEST_SKIP() << "not a float32 case";
  Tensors x = make_inputs(c, 7);
  Tensor want = c.fn(x);
  if (want.dtype() != DType::Float32) GTEST_SKIP() << "the case's output is " << dtype_name(want.dtype());
  Tensors x64;
  for (const Tensor& t : x) x64.push_back(t.to(DType::Float64));
  Tensor ref = c.fn(x64);
  EXPECT_TRUE(allclose(want, ref.to(DType::Float32), 1e-4, 1e-4)) << c.name;
}

INSTANTIATE_TEST_SUITE_P(Ops, BackendOps, ::testing::ValuesIn(op_cases()), case_name);

// ---- gradients through the backend ----

struct GradCase {
  std::string name;
  std::vector<Shape> shapes;
  std::function<Tensor(const Tensors&)> fn;
};

std::vector<GradCase> grad_cases() {
  return {
      {"mul_add", {{3, 4}, {4}}, [](const Tensors& x) { return add(mul(x[0], x[1]), x[0]); }},
      {"div_broadcast", {{3, 4}, {3, 1}}, [](const Tensors& x) { return div(x[0], add(mul(x[1], x[1]), 1.0)); }},
      {"exp_tanh_sigmoid", {{5}}, [](const Tensors& x) { return sigmoid(tanh(exp(x[0]))); }},
      {"gelu", {{6}}, [](const Tensors& x) { return gelu(x[0]); }},
      {"relu_backward", {{2, 3}}, [](const Tensors& x) {
         Tensor y = from_vector(std::vector<float>{1.0f, 0.0f, -0.0f, -2.0f, NAN, 0.5f}, {2, 3});
         return relu_backward(x[0], y.to(x[0].device()));
       }},
      {"sum_mean", {{3, 4, 5}}, [](const Tensors& x) { return mean(sum(x[0], {1}), {0}, true); }},
      {"matmul", {{3, 4}, {4, 2}}, [](const Tensors& x) { return matmul(x[0], x[1]); }},
      {"linear_relu", {{5, 3}, {2, 3}, {2}}, [](const Tensors& x) { return relu(linear(x[0], x[1], x[2])); }},
      {"slice_pow", {{6, 4}}, [](const Tensors& x) { return pow(x[0].slice(0, 1, 5, 2), 2.0); }},
      {"softmax", {{3, 5}}, [](const Tensors& x) { return softmax(x[0], 1); }},
      {"log_softmax_dim0", {{4, 3}}, [](const Tensors& x) { return log_softmax(x[0], 0); }},
      {"amax", {{3, 5}}, [](const Tensors& x) { return amax(x[0], {1}); }},
      {"cross_entropy", {{6, 4}}, [](const Tensors& x) {
         Tensor t = from_vector(std::vector<int64_t>{0, 3, 1, 1, 2, 0}, {6}).to(x[0].device());
         return cross_entropy(x[0], t, 0.1);
       }},
      {"conv2d", {{2, 2, 5, 5}, {3, 2, 3, 3}, {3}}, [](const Tensors& x) {
         return conv2d(x[0], x[1], x[2], conv_params({2, 2}, {1, 1}));
       }},
      {"conv2d_groups", {{1, 4, 4, 4}, {4, 2, 2, 2}}, [](const Tensors& x) {
         return conv2d(x[0], x[1], Tensor(), conv_params({1, 1}, {0, 0}, {1, 1}, 2));
       }},
      {"max_pool2d", {{1, 2, 6, 6}}, [](const Tensors& x) { return max_pool2d(x[0], {3, 3}, {2, 2}, {1, 1}); }},
      {"avg_pool2d", {{1, 2, 5, 5}}, [](const Tensors& x) { return avg_pool2d(x[0], {3, 3}, {2, 2}, {1, 1}, true, false); }},
      {"batch_norm_train", {{4, 3, 2, 2}, {3}, {3}}, [](const Tensors& x) {
         return batch_norm(x[0], x[1], x[2], Tensor(), Tensor(), true, 0.1, 1e-5);
       }},
      {"var", {{4, 5}}, [](const Tensors& x) { return var(x[0], {1}); }},
      {"index_select_cat", {{5, 3}, {2, 3}}, [](const Tensors& x) {
         Tensor i = from_vector(std::vector<int64_t>{4, 0, 4}, {3}).to(x[0].device());
         return cat({index_select(x[0], 0, i), x[1]}, 0);
       }},
      {"gather", {{3, 5}}, [](const Tensors& x) {
         Tensor i = from_vector(std::vector<int64_t>{0, 4, 4, 1, 2, 2}, {3, 2}).to(x[0].device());
         return gather(x[0], 1, i);
       }},
  };
}

void PrintTo(const GradCase& c, std::ostream* os) { *os << c.name; }

class BackendGrads : public ::testing::TestWithParam<GradCase> {};

// f runs on CUDA (inputs moved there inside f, the result moved back), so
// the gradient flows through to_device's derivative to the CPU inputs.
TEST_P(BackendGrads, CudaGradientMatchesFiniteDifferences) {
  SKIP_WITHOUT_CUDA();
  const GradCase& c = GetParam();
  Tensors inputs;
  uint64_t seed = 11;
  for (const Shape& s : c.shapes) inputs.push_back(testing::randn_input(s, seed++));
  auto f = [&](const Tensors& x) { return c.fn(on(x, kCuda)).to(Device::cpu()); };
  EXPECT_GRADCHECK(f, inputs);
}

// The same gradients as on the CPU, in float32.
TEST_P(BackendGrads, CudaGradientMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  const GradCase& c = GetParam();
  Tensors cpu_in, cuda_in;
  Generator gen(5);
  for (const Shape& s : c.shapes) {
    Tensor t = randn(s, {}, &gen);
    cpu_in.push_back(t.clone().requires_grad_());
    cuda_in.push_back(t.clone().requires_grad_());
  }
  sum(c.fn(cpu_in)).backward();
  sum(c.fn(on(cuda_in, kCuda))).backward();
  for (size_t i = 0; i < cpu_in.size(); ++i) {
    ASSERT_TRUE(cuda_in[i].grad().defined()) << "input " << i;
    EXPECT_EQ(cuda_in[i].grad().device(), Device::cpu()) << "the gradient moves back to the input's device";
    EXPECT_TRUE(allclose(cuda_in[i].grad(), cpu_in[i].grad(), 1e-4, 1e-4)) << c.name << " input " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Grads, BackendGrads, ::testing::ValuesIn(grad_cases()),
                         [](const ::testing::TestParamInfo<GradCase>& i) { return i.param.name; });

// ---- the device itself ----

TEST(CudaDevice, CopiesRoundTripExactly) {
  SKIP_WITHOUT_CUDA();
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int64, DType::Int32,
                   DType::UInt8, DType::Bool}) {
    Tensor x = mul(randn({3, 1000}), 5.0).to(dt);
    Tensor back = x.to(kCuda).to(Device::cpu());
    EXPECT_EQ(back.dtype(), dt);
    EXPECT_TRUE(allclose(back, x, 0, 0)) << dtype_name(dt);
    Tensor t = x.t().to(kCuda);  // a non-contiguous source
    EXPECT_TRUE(allclose(t.to(Device::cpu()), x.t(), 0, 0)) << dtype_name(dt);
  }
}

TEST(CudaDevice, ItemAndPrintingReadTheDevice) {
  SKIP_WITHOUT_CUDA();
  Tensor x = from_vector(std::vector<float>{1.5f, -2.0f}, {2}).to(kCuda);
  EXPECT_DOUBLE_EQ(sum(x).item(), -0.5);
  EXPECT_NE(x.str().find("device=cuda:0"), std::string::npos) << x.str();
}

// A training-like loop reuses cached blocks: after the first step no
// cudaMalloc, and the cache serves every request.
TEST(CudaDevice, SteadyStateMakesNoCudaMalloc) {
  SKIP_WITHOUT_CUDA();
  Tensor w = randn({256, 128}).to(kCuda).requires_grad_();
  Tensor x = randn({64, 256}).to(kCuda);
  auto step = [&] {
    Tensor loss = mean(relu(matmul(x, w)));
    loss.backward();
    NoGradGuard ng;
    w.add_(w.grad(), -0.01);
    w.set_grad(Tensor());
  };
  step();
  step();
  cuda::AllocatorStats before = cuda::allocator_stats();
  for (int i = 0; i < 10; ++i) step();
  cuda::synchronize();
  cuda::AllocatorStats after = cuda::allocator_stats();
  EXPECT_EQ(after.num_cuda_mallocs, before.num_cuda_mallocs);
  EXPECT_EQ(after.num_cuda_frees, before.num_cuda_frees);
  EXPECT_GT(after.num_allocs, before.num_allocs);
  EXPECT_EQ(after.cache_hits - before.cache_hits, after.num_allocs - before.num_allocs);
  EXPECT_GE(after.reserved_bytes, after.allocated_bytes);
  EXPECT_GE(after.peak_allocated_bytes, after.allocated_bytes);
}

// Training a CNN (cuDNN workspaces, batch norm scratch, index and flag
// scratch all come from the caching allocator): after two warm-up steps, no
// cudaMalloc or cudaFree.
TEST(CudaDevice, CnnTrainingSteadyStateMakesNoCudaMalloc) {
  SKIP_WITHOUT_CUDA();
  manual_seed(5);
  auto model = models::create("airbench", 0.25);
  model->to(kCuda);
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.05).momentum(0.9).nesterov(true));
  Generator gen(6);
  Tensor x = randn({32, 3, 32, 32}, {}, &gen).to(kCuda);
  Tensor y = clamp(mul(sigmoid(randn({32}, {}, &gen)), 10.0).to(DType::Int64), 0.0, 9.0).to(kCuda);
  auto step = [&] {
    opt.zero_grad();
    cross_entropy(model->forward(x), y, 0.2).backward();
    opt.step();
  };
  step();
  step();
  cuda::synchronize();
  cuda::AllocatorStats before = cuda::allocator_stats();
  for (int i = 0; i < 5; ++i) step();
  cuda::synchronize();
  cuda::AllocatorStats after = cuda::allocator_stats();
  EXPECT_EQ(after.num_cuda_mallocs, before.num_cuda_mallocs);
  EXPECT_EQ(after.num_cuda_frees, before.num_cuda_frees);
  EXPECT_GT(after.num_allocs, before.num_allocs);
}

TEST(CudaDevice, AllocatorSplitsAndMergesBlocks) {
  SKIP_WITHOUT_CUDA();
  cuda::empty_cache();
  cuda::AllocatorStats s0 = cuda::allocator_stats();
  uint64_t segments_made = 0;
  {
    Tensor a = empty({1000}, dtype(DType::Float32).with_device(kCuda));  // 4000 bytes of a 2 MiB segment
    Tensor b = empty({1000}, dtype(DType::Float32).with_device(kCuda));
    cuda::AllocatorStats s1 = cuda::allocator_stats();
    segments_made = s1.num_cuda_mallocs - s0.num_cuda_mallocs;
    EXPECT_LE(segments_made, 1u) << "both blocks come from one segment";
    EXPECT_GE(s1.num_splits - s0.num_splits, 1u);
    EXPECT_NE(a.data_ptr(), b.data_ptr());
  }
  cuda::empty_cache();  // the blocks merged back into whole segments, which go back
  cuda::AllocatorStats s2 = cuda::allocator_stats();
  EXPECT_EQ(s2.reserved_bytes, s0.reserved_bytes);
  EXPECT_EQ(s2.num_cuda_frees - s0.num_cuda_frees, segments_made);
}

// An MLP classifier trained a few AdamW steps on CUDA ends where the same
// model trained on the CPU ends: modules, autograd and optimizer updates all
// run on the device.
TEST(CudaDevice, MlpTrainingMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  auto make_model = [] {
    manual_seed(3);
    return std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
        std::make_shared<nn::Linear>(20, 32), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(32, 5)});
  };
  auto cpu_model = make_model(), gpu_model = make_model();
  gpu_model->to(kCuda);
  optim::AdamW cpu_opt(cpu_model->parameters(), optim::AdamWOptions(1e-2));
  optim::AdamW gpu_opt(gpu_model->parameters(), optim::AdamWOptions(1e-2));
  Generator gen(9);
  Tensor x = randn({64, 20}, {}, &gen);
  Tensor y = clamp(mul(sigmoid(randn({64}, {}, &gen)), 5.0).to(DType::Int64), 0.0, 4.0);
  Tensor gx = x.to(kCuda), gy = y.to(kCuda);
  for (int step = 0; step < 5; ++step) {
    cpu_opt.zero_grad();
    cross_entropy(cpu_model->forward(x), y).backward();
    cpu_opt.step();
    gpu_opt.zero_grad();
    Tensor loss = cross_entropy(gpu_model->forward(gx), gy);
    loss.backward();
    gpu_opt.step();
    EXPECT_EQ(loss.device(), kCuda);
  }
  auto cpu_params = cpu_model->parameters(), gpu_params = gpu_model->parameters();
  ASSERT_EQ(cpu_params.size(), gpu_params.size());
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    EXPECT_EQ(gpu_params[i].device(), kCuda);
    EXPECT_TRUE(allclose(gpu_params[i].to(Device::cpu()), cpu_params[i], 1e-4, 1e-5)) << "parameter " << i;
  }
}

// max |got - want| relative to want's largest magnitude.
double scaled_error(const Tensor& got, const Tensor& want) {
  Tensor g = got.to(Device::cpu()).to(DType::Float64), w = want.to(Device::cpu()).to(DType::Float64);
  const double err = amax(abs(sub(g, w))).item(), scale = amax(abs(w)).item();
  return scale > 0 ? err / scale : err;
}

class CudaZoo : public ::testing::TestWithParam<std::string> {};

// Each zoo model in training mode (batch norm on batch statistics), one
// forward and backward in `dt`: its output and every parameter's gradient on
// CUDA are within `tol` of a float64 CPU run (relative to each tensor's
// largest magnitude), or as close as the network's own conditioning allows:
// within 3x the error of the same run on the CPU, or of a CPU run whose input
// is perturbed by `perturbation` (a rounding-sized change; batch norm over
// small batches amplifies such changes in the gradients a thousandfold, in
// the CPU's own float32 run too). The float64 variant (no perturbation)
// checks the kernels tightly.
void expect_zoo_model_matches_cpu(const std::string& name, DType dt, double tol, double perturbation) {
  Generator gen(21);
  Tensor x = randn({8, 3, 32, 32}, {}, &gen);
  Tensor y = clamp(mul(sigmoid(randn({8}, {}, &gen)), 10.0).to(DType::Int64), 0.0, 9.0);
  Tensor x_perturbed = mul(x, add(mul(randn({8, 3, 32, 32}, {}, &gen), perturbation), 1.0));
  struct Run {
    Tensor out;
    std::vector<Tensor> grads;
  };
  auto run = [&](Device device, DType t, const Tensor& input) {
    manual_seed(17);
    auto model = models::create(name);
    model->to(t);
    model->to(device);
    Run r;
    r.out = model->forward(input.to(t).to(device));
    EXPECT_EQ(r.out.device(), device);
    cross_entropy(r.out, y.to(device)).backward();
    for (const Tensor& p : model->parameters()) r.grads.push_back(p.grad().defined() ? p.grad() : Tensor());
    return r;
  };
  Run ref = run(Device::cpu(), DType::Float64, x), cpu = run(Device::cpu(), dt, x);
  Run pert = perturbation > 0 ? run(Device::cpu(), dt, x_perturbed) : cpu, gpu = run(kCuda, dt, x);
  auto check = [&](const Tensor& g, const Tensor& c, const Tensor& p, const Tensor& r, const std::string& what) {
    ASSERT_TRUE(g.defined()) << name << " " << what;
    const double cpu_err = scaled_error(c, r), pert_err = scaled_error(p, r), gpu_err = scaled_error(g, r);
    EXPECT_LE(gpu_err, std::max({3 * cpu_err, 3 * pert_err, tol}))
        << name << " " << dtype_name(dt) << " " << what << " " << shape_str(r.shape()) << ": CPU error " << cpu_err
        << ", perturbed CPU error " << pert_err << ", largest magnitude " << amax(abs(r)).item();
  };
  check(gpu.out, cpu.out, pert.out, ref.out, "output");
  // The output's errors, printed: a forward error well above the CPU's would
  // explain gradients amplifying it (the log of a device run keeps them).
  std::cout << name << " " << dtype_name(dt) << " output error against float64: CPU " << scaled_error(cpu.out, ref.out)
            << ", perturbed CPU " << scaled_error(pert.out, ref.out) << ", CUDA " << scaled_error(gpu.out, ref.out)
            << "\n";
  ASSERT_EQ(gpu.grads.size(), ref.grads.size());
  for (size_t i = 0; i < ref.grads.size(); ++i)
    check(gpu.grads[i], cpu.grads[i], pert.grads[i], ref.grads[i], "gradient of parameter " + std::to_string(i));
}

TEST_P(CudaZoo, ForwardAndGradientsMatchCpu) {
  SKIP_WITHOUT_CUDA();
  expect_zoo_model_matches_cpu(GetParam(), DType::Float32, 1e-3, 1e-5);
}

// float64 on both devices (cuDNN's double convolutions, the float64 paths of
// every kernel): no float32 rounding to amplify, so a tight bound; a kernel
// bug shows here even where float32 noise would hide it.
TEST_P(CudaZoo, ForwardAndGradientsMatchCpuInFloat64) {
  SKIP_WITHOUT_CUDA();
  expect_zoo_model_matches_cpu(GetParam(), DType::Float64, 1e-9, 0.0);
}

// bfloat16 weights and activations (each op computes in float32 and rounds
// its output, on both devices): 8 bits of mantissa, so a 5e-2 tolerance.
TEST_P(CudaZoo, ForwardAndGradientsMatchCpuInBFloat16) {
  SKIP_WITHOUT_CUDA();
  expect_zoo_model_matches_cpu(GetParam(), DType::BFloat16, 5e-2, 4e-3);
}

INSTANTIATE_TEST_SUITE_P(Models, CudaZoo, ::testing::Values("tutorial", "resnet18", "airbench"));

TEST(CudaDevice, BadTargetIsAClearError) {
  SKIP_WITHOUT_CUDA();
  Tensor logits = randn({4, 3}).to(kCuda);
  Tensor t = from_vector(std::vector<int64_t>{0, 1, 7, 2}, {4}).to(kCuda);
  std::string msg;
  try {
    cross_entropy(logits, t);
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("target 7 is out of range for 3 classes"), std::string::npos) << msg;
}

TEST(CudaDevice, StreamsAndEvents) {
  SKIP_WITHOUT_CUDA();
  cuda::Stream s = cuda::Stream::create();
  Tensor x = randn({1 << 16});
  Tensor want = exp(x);
  Tensor got;
  {
    cuda::StreamGuard g(s);
    EXPECT_EQ(cuda::current_stream(), s);
    cuda::Event start, end;
    start.record();
    got = exp(x.to(kCuda));
    end.record();
    end.synchronize();
    EXPECT_TRUE(end.query());
    EXPECT_GE(start.elapsed_ms(end), 0.0f);
  }
  EXPECT_EQ(cuda::current_stream(), cuda::Stream());
  EXPECT_TRUE(allclose(got.to(Device::cpu()), want, 1e-5, 1e-5));
}

TEST(CudaDevice, MixedDevicesAreAClearError) {
  SKIP_WITHOUT_CUDA();
  Tensor a = ones({3}).to(kCuda), b = ones({3});
  try {
    add(a, b);
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("different devices"), std::string::npos) << e.what();
  }
  try {
    b.copy_(a);
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("move it with .to(cpu)"), std::string::npos) << e.what();
  }
}

// ---- without a device (this machine's CI): clear errors, never a crash ----

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool says_why_no_cuda(const std::string& msg) {
  return msg.find("no CUDA device") != std::string::npos ||
         msg.find("kiln was built without CUDA") != std::string::npos;
}

TEST(NoCudaDevice, MovingATensorThereIsAClearError) {
  if (cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  std::string msg = error_of([] { ones({2, 3}).to(kCuda); });
  EXPECT_TRUE(says_why_no_cuda(msg)) << msg;
  EXPECT_NE(msg.find("to(cuda:0)"), std::string::npos) << msg;
}

TEST(NoCudaDevice, MakingATensorThereIsAClearError) {
  if (cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  std::string msg = error_of([] { zeros({4}, dtype(DType::Float32).with_device(kCuda)); });
  EXPECT_TRUE(says_why_no_cuda(msg)) << msg;
  msg = error_of([] { Tensor::empty({4}, DType::Float32, kCuda); });
  EXPECT_TRUE(says_why_no_cuda(msg)) << msg;
  EXPECT_NE(msg.find("float32[4]"), std::string::npos) << msg;
}

TEST(NoCudaDevice, ApiAnswersWithoutThrowing) {
  if (cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EQ(cuda::device_count(), 0);
  EXPECT_TRUE(says_why_no_cuda(cuda::unavailable_reason())) << cuda::unavailable_reason();
  cuda::AllocatorStats s = cuda::allocator_stats();
  EXPECT_EQ(s.num_cuda_mallocs, 0u);
  EXPECT_EQ(s.allocated_bytes, 0u);
  cuda::empty_cache();
  EXPECT_TRUE(says_why_no_cuda(error_of([] { cuda::synchronize(); })));
  EXPECT_TRUE(says_why_no_cuda(error_of([] { cuda::Stream::create(); })));
}

// The CUDA backend adds its kernels to the ops table with register_kernel;
// a build without it has none.
TEST(BackendRegistry, CudaKernelsAreRegisteredExactlyInCudaBuilds) {
  const int cuda = static_cast<int>(DeviceType::CUDA);
  for (OpId id : {OpId::add, OpId::exp, OpId::sum, OpId::matmul, OpId::copy, OpId::full, OpId::conv2d,
                  OpId::max_pool2d, OpId::batch_norm, OpId::gather, OpId::randn, OpId::dropout}) {
    EXPECT_EQ(op_def(id).kernels[cuda] != nullptr, cuda::built_with_cuda()) << op_name(id);
  }
  EXPECT_NE(op_def(OpId::to_device).kernels[cuda], nullptr);
}

TEST(BackendRegistry, ToSameDeviceIsTheTensorItself) {
  Tensor x = ones({2});
  Tensor y = x.to(Device::cpu());
  EXPECT_TRUE(y.shares_storage(x));
}

}  // namespace
}  // namespace kiln
