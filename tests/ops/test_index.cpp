// cat, stack, index_select/index_add, gather/scatter_add, one_hot against
// PyTorch goldens (tools/goldens/gen_reduce.py) and finite differences.
#include "testing/golden.h"
#include "testing/gradcheck.h"

namespace kiln {
namespace {

using testing::Goldens;
using testing::randn_input;

const Goldens& G() { return testing::goldens("index"); }

TEST(Index, GoldenCatStack) {
  Tensor a = G()["a"], b = G()["b"], c = G()["c"];
  EXPECT_TENSOR_CLOSE(cat({a, b}, 0), G()["cat0"], 0, 0);
  EXPECT_TENSOR_CLOSE(cat({a, c}, 1), G()["cat1"], 0, 0);
  EXPECT_TENSOR_CLOSE(cat({a, c}, -1), G()["cat1"], 0, 0);
  EXPECT_TENSOR_CLOSE(cat({a, G()["ai"]}, 0), G()["cat_f_i"], 0, 0);
  EXPECT_TENSOR_CLOSE(cat({a, G()["ad"]}, 0), G()["cat_f_d"], 0, 0);
  Tensor adf = G()["ad"].to(DType::Float32);
  EXPECT_TENSOR_CLOSE(stack({a, adf}, 0), G()["stack0"], 0, 0);
  EXPECT_TENSOR_CLOSE(stack({a, adf}, 2), G()["stack2"], 0, 0);
  EXPECT_TENSOR_CLOSE(cat({a.t(), c.t()}, 0), G()["cat1"].t().contiguous(), 0, 0);  // non-contiguous inputs
  EXPECT_TENSOR_CLOSE(cat({zeros({0}), a}, 0), a, 0, 0);                              // legacy empty skip
}

TEST(Index, GoldenSelectGatherScatter) {
  Tensor x = G()["x"];
  EXPECT_TENSOR_CLOSE(index_select(x, 0, G()["isel_idx0"]), G()["isel0"], 0, 0);
  EXPECT_TENSOR_CLOSE(index_select(x, 2, G()["isel_idx2"]), G()["isel2"], 0, 0);
  EXPECT_TENSOR_CLOSE(index_select(x.transpose(0, 1), 1, G()["idx"]), G()["isel_t"], 0, 0);
  EXPECT_TENSOR_CLOSE(gather(x, 1, G()["gidx"]), G()["gather1"], 0, 0);
  EXPECT_TENSOR_CLOSE(gather(x, 0, G()["gidx0"]), G()["gather0"], 0, 0);
  EXPECT_TENSOR_CLOSE(scatter_add(x, 1, G()["gidx"], G()["src"]), G()["scatter_add1"], 1e-6, 1e-6);
  EXPECT_TENSOR_CLOSE(index_add(x, 0, G()["idx"], ones({4, 4, 3})), G()["index_add0"], 1e-6, 1e-6);
  EXPECT_TENSOR_CLOSE(one_hot(G()["labels"]), G()["one_hot"], 0, 0);
  EXPECT_TENSOR_CLOSE(one_hot(G()["labels"], 6), G()["one_hot6"], 0, 0);
  // negative indices count from the end
  Tensor neg = from_vector(std::vector<int64_t>{-1}, {1});
  EXPECT_TENSOR_CLOSE(index_select(x, 0, neg), x.slice(0, 4, 5), 0, 0);
}

TEST(Index, Gradients) {
  Tensor a = randn_input({2, 3}, 1), b = randn_input({4, 3}, 2), c = randn_input({2, 5}, 3), x = randn_input({4, 3, 2}, 4);
  auto f_cat0 = [](const std::vector<Tensor>& v) { return cat({v[0], v[1]}, 0); };
  EXPECT_GRADCHECK(f_cat0, (std::vector<Tensor>{a, b}));
  auto f_cat1 = [](const std::vector<Tensor>& v) { return cat({v[0], v[1].detach(), v[2]}, 1); };
  EXPECT_GRADCHECK(f_cat1, (std::vector<Tensor>{a, a.detach(), c}));
  auto f_stack = [](const std::vector<Tensor>& v) { return stack({v[0], v[1]}, 1); };
  EXPECT_GRADCHECK(f_stack, (std::vector<Tensor>{a, a}));
  Tensor idx = from_vector(std::vector<int64_t>{2, 0, 2, 3}, {4});
  for (int64_t d : {0, 1, 2}) {
    Tensor i = d == 0 ? idx : from_vector(std::vector<int64_t>{1, 0, 1}, {3});
    auto f_sel = [&](const std::vector<Tensor>& v) { return index_select(v[0], d, i); };
    EXPECT_GRADCHECK(f_sel, std::vector<Tensor>{x});
  }
  Tensor src = randn_input({4, 3, 2}, 5);
  auto f_iadd = [&](const std::vector<Tensor>& v) { return index_add(v[0], 0, idx, v[1]); };
  EXPECT_GRADCHECK(f_iadd, (std::vector<Tensor>{x, src}));
  Generator gen(6);
  Tensor gi = randint(0, 3, {4, 5, 2}, dtype(DType::Int64), &gen);
  auto f_gather = [&](const std::vector<Tensor>& v) { return gather(v[0], 1, gi); };
  EXPECT_GRADCHECK(f_gather, std::vector<Tensor>{x});
  Tensor s2 = randn_input({4, 5, 2}, 7);
  auto f_scatter = [&](const std::vector<Tensor>& v) { return scatter_add(v[0], 1, gi, v[1]); };
  EXPECT_GRADCHECK(f_scatter, (std::vector<Tensor>{x, s2}));
}

TEST(Index, Errors) {
  Tensor x = zeros({3, 4});
  EXPECT_THROW(index_select(x, 0, from_vector(std::vector<int64_t>{3}, {1})), Error);
  EXPECT_THROW(index_select(x, 1, from_vector(std::vector<int64_t>{-5}, {1})), Error);
  EXPECT_THROW(index_select(x, 0, from_vector(std::vector<float>{0}, {1})), Error);
  EXPECT_THROW(gather(x, 1, from_vector(std::vector<int64_t>{4}, {1, 1})), Error);
  EXPECT_THROW(gather(x, 1, from_vector(std::vector<int64_t>{0, 0, 0, 0}, {4, 1})), Error);
  EXPECT_THROW(scatter_add(x, 0, from_vector(std::vector<int64_t>{7}, {1, 1}), ones({1, 1})), Error);
  EXPECT_THROW(index_add(x, 0, from_vector(std::vector<int64_t>{9}, {1}), ones({1, 4})), Error);
  EXPECT_THROW(index_add(x, 0, from_vector(std::vector<int64_t>{0}, {1}), ones({2, 4})), Error);
  EXPECT_THROW(one_hot(from_vector(std::vector<int64_t>{0, 5}, {2}), 3), Error);
  EXPECT_THROW(one_hot(from_vector(std::vector<int64_t>{-1}, {1})), Error);
  EXPECT_THROW(cat({x, zeros({3, 5})}, 0), Error);
  EXPECT_THROW(cat({x, zeros({3})}, 0), Error);
  EXPECT_THROW(cat({}, 0), Error);
  EXPECT_THROW(stack({x, zeros({4, 3})}), Error);
  try {
    cat({x, zeros({2, 5})}, 0);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 5]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln
