// DType sizes and names, PyTorch's type promotion (promote_types and
// result_type with 0-dim tensors and wrapped numbers), and the 16-bit float
// conversions. Expected values are PyTorch 1.13's answers, hard-coded.
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "ops/op_def.h"

namespace kiln {
namespace {

constexpr DType kAll[] = {DType::Bool,    DType::UInt8,    DType::Int32,   DType::Int64,
                          DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};

TEST(DType, ItemsizeAndNames) {
  const size_t sizes[] = {1, 1, 4, 8, 2, 2, 4, 8};
  const char* names[] = {"bool", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"};
  for (int i = 0; i < kNumDTypes; ++i) {
    EXPECT_EQ(itemsize(kAll[i]), sizes[i]) << names[i];
    EXPECT_STREQ(dtype_name(kAll[i]), names[i]);
    std::ostringstream os;
    os << kAll[i];
    EXPECT_EQ(os.str(), names[i]);
  }
  EXPECT_EQ(itemsize(dtype_v<Half>), 2u);
  EXPECT_EQ(sizeof(Half), 2u);
  EXPECT_EQ(sizeof(BFloat16), 2u);
}

TEST(DType, Categories) {
  for (DType t : kAll) {
    bool f = t == DType::Float16 || t == DType::BFloat16 || t == DType::Float32 || t == DType::Float64;
    EXPECT_EQ(is_floating(t), f) << t;
    EXPECT_EQ(is_integral(t), !f) << t;
  }
}

TEST(DType, VisitDTypeGivesMatchingCppType) {
  for (DType t : kAll) {
    DType seen = visit_dtype(t, []<typename T>() { return dtype_v<T>; });
    EXPECT_EQ(seen, t);
  }
}

// torch.promote_types(a, b) for every pair, rows and columns in kAll order.
TEST(DType, PromoteTypesMatchesTorch) {
  using D = DType;
  const DType expected[8][8] = {
      {D::Bool, D::UInt8, D::Int32, D::Int64, D::Float16, D::BFloat16, D::Float32, D::Float64},
      {D::UInt8, D::UInt8, D::Int32, D::Int64, D::Float16, D::BFloat16, D::Float32, D::Float64},
      {D::Int32, D::Int32, D::Int32, D::Int64, D::Float16, D::BFloat16, D::Float32, D::Float64},
      {D::Int64, D::Int64, D::Int64, D::Int64, D::Float16, D::BFloat16, D::Float32, D::Float64},
      {D::Float16, D::Float16, D::Float16, D::Float16, D::Float16, D::Float32, D::Float32, D::Float64},
      {D::BFloat16, D::BFloat16, D::BFloat16, D::BFloat16, D::Float32, D::BFloat16, D::Float32, D::Float64},
      {D::Float32, D::Float32, D::Float32, D::Float32, D::Float32, D::Float32, D::Float32, D::Float64},
      {D::Float64, D::Float64, D::Float64, D::Float64, D::Float64, D::Float64, D::Float64, D::Float64},
  };
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j)
      EXPECT_EQ(promote_types(kAll[i], kAll[j]), expected[i][j]) << kAll[i] << " with " << kAll[j];
}

// ---- result_type: dimensioned tensors > 0-dim tensors > wrapped numbers ----
Tensor dimmed(DType t) { return Tensor::empty({3}, t); }
Tensor zero_dim(DType t) { return Tensor::empty({}, t); }
// A Python number: scalar_tensor makes a wrapped 0-dim tensor.
Tensor number(double v, DType t) { return scalar_tensor(v, t); }

DType rt(std::initializer_list<Tensor> ts) {
  Tensors v(ts);
  return result_type(v);
}

TEST(DType, ScalarTensorIsAWrappedNumber) {
  Tensor s = scalar_tensor(2.5);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.dtype(), DType::Float32);
  EXPECT_TRUE(s.impl()->wrapped_number);
  EXPECT_DOUBLE_EQ(s.item(), 2.5);
  EXPECT_EQ(scalar_tensor(3, DType::Int64).dtype(), DType::Int64);
}

TEST(DType, ResultTypeOfTensorsOnly) {
  EXPECT_EQ(rt({dimmed(DType::Int32), dimmed(DType::Float16)}), DType::Float16);
  EXPECT_EQ(rt({dimmed(DType::UInt8), dimmed(DType::Int32)}), DType::Int32);
  EXPECT_EQ(rt({dimmed(DType::BFloat16), dimmed(DType::Float16)}), DType::Float32);
  EXPECT_EQ(rt({dimmed(DType::Bool), dimmed(DType::Bool)}), DType::Bool);
  EXPECT_EQ(rt({dimmed(DType::Float64)}), DType::Float64);
}

// Each case is torch.result_type(x, y) in PyTorch 1.13.
TEST(DType, ResultTypeWithZeroDimTensors) {
  EXPECT_EQ(rt({dimmed(DType::Int32), zero_dim(DType::Float64)}), DType::Float64);
  EXPECT_EQ(rt({dimmed(DType::Float16), zero_dim(DType::Float64)}), DType::Float16);
  EXPECT_EQ(rt({dimmed(DType::Bool), zero_dim(DType::Int32)}), DType::Int32);
  EXPECT_EQ(rt({dimmed(DType::Int32), zero_dim(DType::Int64)}), DType::Int32);
  EXPECT_EQ(rt({dimmed(DType::UInt8), zero_dim(DType::Int64)}), DType::UInt8);
  EXPECT_EQ(rt({dimmed(DType::BFloat16), zero_dim(DType::Float16)}), DType::BFloat16);
  EXPECT_EQ(rt({dimmed(DType::Float16), zero_dim(DType::Int64)}), DType::Float16);
  EXPECT_EQ(rt({zero_dim(DType::Int32), zero_dim(DType::Float16)}), DType::Float16);
  // order does not matter
  EXPECT_EQ(rt({zero_dim(DType::Float64), dimmed(DType::Int32)}), DType::Float64);
  EXPECT_EQ(rt({zero_dim(DType::Float64), dimmed(DType::Float16)}), DType::Float16);
}

TEST(DType, ResultTypeWithWrappedNumbers) {
  // tensor op Python int
  EXPECT_EQ(rt({dimmed(DType::Int32), number(2, DType::Int64)}), DType::Int32);
  EXPECT_EQ(rt({dimmed(DType::UInt8), number(2, DType::Int64)}), DType::UInt8);
  EXPECT_EQ(rt({dimmed(DType::Bool), number(2, DType::Int64)}), DType::Int64);
  EXPECT_EQ(rt({zero_dim(DType::Bool), number(2, DType::Int64)}), DType::Int64);
  EXPECT_EQ(rt({dimmed(DType::UInt8), number(1, DType::Bool)}), DType::UInt8);
  // tensor op Python float: integers go to the default dtype float32
  EXPECT_EQ(rt({dimmed(DType::Int64), number(2.5, DType::Float64)}), DType::Float32);
  EXPECT_EQ(rt({dimmed(DType::Int64), number(2.5, DType::Float32)}), DType::Float32);
  EXPECT_EQ(rt({dimmed(DType::Bool), number(2.5, DType::Float32)}), DType::Float32);
  EXPECT_EQ(rt({dimmed(DType::Float16), number(2.5, DType::Float32)}), DType::Float16);
  EXPECT_EQ(rt({dimmed(DType::Float16), number(2.5, DType::Float64)}), DType::Float16);
  EXPECT_EQ(rt({zero_dim(DType::Int64), number(2.5, DType::Float32)}), DType::Float32);
  EXPECT_EQ(rt({zero_dim(DType::Int32), number(2.5, DType::Float32)}), DType::Float32);
  EXPECT_EQ(rt({zero_dim(DType::Float64), number(2.5, DType::Float32)}), DType::Float64);
  EXPECT_EQ(rt({number(2.5, DType::Float32), dimmed(DType::Float64)}), DType::Float64);
}

// ---- Half ----
struct Conv {
  float in;
  uint16_t half_bits;
  float half_value;
  uint16_t bf16_bits;
  float bf16_value;
};
// x.to(torch.float16 / torch.bfloat16) in PyTorch 1.13: bits and value back in float32.
const Conv kTorchConversions[] = {
    {0.0f, 0x0000, 0.0f, 0x0000, 0.0f},
    {-0.0f, 0x8000, -0.0f, 0x8000, -0.0f},
    {1.0f, 0x3c00, 1.0f, 0x3f80, 1.0f},
    {-2.5f, 0xc100, -2.5f, 0xc020, -2.5f},
    {0.3333333333333333f, 0x3555, 0.333251953125f, 0x3eab, 0.333984375f},
    {65504.0f, 0x7bff, 65504.0f, 0x4780, 65536.0f},
    {65519.0f, 0x7bff, 65504.0f, 0x4780, 65536.0f},  // just below the rounding boundary to inf
    {65520.0f, 0x7c00, INFINITY, 0x4780, 65536.0f},  // halfway to 2^16: overflows to inf
    {100000.0f, 0x7c00, INFINITY, 0x47c3, 99840.0f},
    {INFINITY, 0x7c00, INFINITY, 0x7f80, INFINITY},
    {-INFINITY, 0xfc00, -INFINITY, 0xff80, -INFINITY},
    {1.00048828125f, 0x3c00, 1.0f, 0x3f80, 1.0f},            // 1 + 2^-11: tie, to even (down)
    {1.00146484375f, 0x3c02, 1.001953125f, 0x3f80, 1.0f},    // 1 + 3*2^-11: tie, to even (up)
    {5.960464477539063e-08f, 0x0001, 5.960464477539063e-08f, 0x3380, 5.960464477539063e-08f},  // 2^-24
    {2.9802322387695312e-08f, 0x0000, 0.0f, 0x3300, 2.9802322387695312e-08f},  // 2^-25: tie to 0
    {2.980530261993408e-08f, 0x0001, 5.960464477539063e-08f, 0x3300, 2.9802322387695312e-08f},
    {3e-08f, 0x0001, 5.960464477539063e-08f, 0x3301, 3.003515303134918e-08f},
    {1e-05f, 0x00a8, 1.0013580322265625e-05f, 0x3728, 1.0013580322265625e-05f},  // half subnormal
    {6e-05f, 0x03ef, 6.002187728881836e-05f, 0x387c, 6.008148193359375e-05f},
    {6.1005353927612305e-05f, 0x0400, 6.103515625e-05f, 0x3880, 6.103515625e-05f},  // subnormal tie -> min normal
    {6.097555160522461e-05f, 0x03ff, 6.097555160522461e-05f, 0x3880, 6.103515625e-05f},
    {1e-08f, 0x0000, 0.0f, 0x322c, 1.0011717677116394e-08f},
    {0.1f, 0x2e66, 0.0999755859375f, 0x3dcd, 0.10009765625f},
    {3.14159265f, 0x4248, 3.140625f, 0x4049, 3.140625f},
};

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Half, MatchesTorch) {
  for (const Conv& c : kTorchConversions) {
    Half h(c.in);
    EXPECT_EQ(h.bits, c.half_bits) << "Half(" << c.in << ")";
    float back = h;
    EXPECT_EQ(float_bits(back), float_bits(c.half_value)) << "Half(" << c.in << ") -> " << back;
  }
}

// The tensor-level float32 <-> bfloat16 conversion (a vectorized, threaded
// path for contiguous tensors) gives BFloat16's bits for every pattern that
// matters: ties to even both ways, the largest finites, infinities, NaNs
// (payload in the high or only the low bits), denormals, signed zeros, and a
// million random bit patterns; and widening back is exact.
TEST(BFloat16, TensorConversionMatchesTheScalarOneBitForBit) {
  std::vector<uint32_t> patterns = {0x00000000u, 0x80000000u, 0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u,
                                    0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u,
                                    0xff800001u, 0x00000001u, 0x007fffffu, 0x80400000u, 0x7f7f8000u};
  std::mt19937 rng(7);
  for (int i = 0; i < 1 << 20; ++i) patterns.push_back(static_cast<uint32_t>(rng()));
  const auto n = static_cast<int64_t>(patterns.size());
  Tensor f = Tensor::empty({n}, DType::Float32);
  std::memcpy(f.data_ptr(), patterns.data(), patterns.size() * 4);
  Tensor b = f.to(DType::BFloat16);
  const auto* got = static_cast<const uint16_t*>(b.data_ptr());
  for (int64_t i = 0; i < n; ++i) {
    BFloat16 want(bits_float(patterns[static_cast<size_t>(i)]));
    ASSERT_EQ(got[i], want.bits) << std::hex << "float bits 0x" << patterns[static_cast<size_t>(i)];
  }
  Tensor back = b.to(DType::Float32);
  const auto* wide = static_cast<const uint32_t*>(back.data_ptr());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(wide[i], static_cast<uint32_t>(got[i]) << 16) << i;
}

TEST(Half, NanStaysNan) {
  Half h(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(h.bits & 0x7c00, 0x7c00);
  EXPECT_NE(h.bits & 0x3ff, 0);
  EXPECT_TRUE(std::isnan(static_cast<float>(h)));
  // a NaN whose payload sits only in the low mantissa bits must not become inf
  Half h2(bits_float(0x7f800001u));
  EXPECT_TRUE(std::isnan(static_cast<float>(h2)));
}

// Every half value converts to float and back to the same bits (NaNs stay NaN),
// and its float value is the IEEE one.
TEST(Half, EveryBitPatternRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    Half h;
    h.bits = static_cast<uint16_t>(b);
    float f = h;
    uint32_t exp = (b >> 10) & 0x1f, mant = b & 0x3ff;
    bool neg = b & 0x8000;
    if (exp == 0x1f && mant != 0) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
      ASSERT_TRUE(std::isnan(static_cast<float>(Half(f)))) << std::hex << b;
      continue;
    }
    double expect = exp == 0x1f   ? INFINITY
                    : exp == 0    ? std::ldexp(static_cast<double>(mant), -24)
                                  : std::ldexp(1.0 + mant / 1024.0, static_cast<int>(exp) - 15);
    if (neg) expect = -expect;
    ASSERT_EQ(static_cast<double>(f), expect) << "bits 0x" << std::hex << b;
    ASSERT_EQ(std::signbit(f), neg) << std::hex << b;
    ASSERT_EQ(Half(f).bits, b) << "bits 0x" << std::hex << b;
  }
}

// Float -> half agrees with the F16C instruction (IEEE round to nearest even)
// on random floats of every magnitude, and on all the halfway points.
TEST(Half, RoundingMatchesHardware) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = rng();
    float f = bits_float(u);
    if (std::isnan(f)) continue;
    uint16_t hw = static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
    ASSERT_EQ(Half(f).bits, hw) << "float " << f << " (0x" << std::hex << u << ")";
  }
  // exact ties between consecutive finite halves, and points just around them
  for (uint32_t b = 0; b < 0x7c00; ++b) {
    Half lo, hi;
    lo.bits = static_cast<uint16_t>(b);
    hi.bits = static_cast<uint16_t>(b + 1);
    float mid = static_cast<float>((static_cast<double>(static_cast<float>(lo)) + static_cast<float>(hi)) / 2);
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY), -mid}) {
      uint16_t hw = static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
      ASSERT_EQ(Half(f).bits, hw) << "float " << f << " between half bits 0x" << std::hex << b << " and 0x" << b + 1;
    }
  }
}

// ---- BFloat16 ----
TEST(BFloat16, MatchesTorch) {
  for (const Conv& c : kTorchConversions) {
    BFloat16 h(c.in);
    EXPECT_EQ(h.bits, c.bf16_bits) << "BFloat16(" << c.in << ")";
    float back = h;
    EXPECT_EQ(float_bits(back), float_bits(c.bf16_value)) << "BFloat16(" << c.in << ") -> " << back;
  }
  struct {
    float in;
    uint16_t bits;
  } more[] = {
      {1.00390625f, 0x3f80},          // 1 + 2^-8: tie, to even (down)
      {1.01171875f, 0x3f82},          // 1 + 3*2^-8: tie, to even (up)
      {1.0039072036743164f, 0x3f81},  // just above a tie: up
      {3.4e38f, 0x7f80},              // rounds past the largest finite: inf
      {3.3895e38f, 0x7f7f},
      {1e-40f, 0x0001},  // float subnormal
      {-1.5e-39f, 0x8010},
  };
  for (const auto& m : more) EXPECT_EQ(BFloat16(m.in).bits, m.bits) << "BFloat16(" << m.in << ")";
}

TEST(BFloat16, NanStaysNan) {
  BFloat16 b(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(static_cast<float>(b)));
  // the payload would round away: must still be NaN, not inf
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(bits_float(0x7f800001u)))));
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(bits_float(0xff800001u)))));
}

TEST(BFloat16, EveryBitPatternRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    BFloat16 h;
    h.bits = static_cast<uint16_t>(b);
    float f = h;
    ASSERT_EQ(float_bits(f), b << 16);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(static_cast<float>(BFloat16(f))));
      continue;
    }
    ASSERT_EQ(BFloat16(f).bits, b) << std::hex << b;
  }
}

TEST(BFloat16, RoundsToNearestEven) {
  std::mt19937 rng(11);
  for (int i = 0; i < 1000000; ++i) {
    uint32_t u = rng();
    float f = bits_float(u);
    if (std::isnan(f)) continue;
    // reference: nearest representable, ties to the even mantissa, in double
    uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
    double dl = bits_float(lo), dh = bits_float(hi), df = f;
    if ((hi & 0x7f800000u) == 0x7f800000u && (lo & 0x7fffffffu) == 0x7f7f0000u) dh = std::ldexp(f < 0 ? -1.0 : 1.0, 128);
    double el = std::abs(df - dl), eh = std::abs(dh - df);
    uint32_t want = el < eh ? lo : eh < el ? hi : (((lo >> 16) & 1) ? hi : lo);
    ASSERT_EQ(BFloat16(f).bits, static_cast<uint16_t>(want >> 16)) << "float " << f << " 0x" << std::hex << u;
  }
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// The same rules seen through real ops (torch 1.13 results).
TEST(DType, OpsFollowPromotion) {
  Tensor i64 = ones({3}, dtype(DType::Int64));
  Tensor i32 = ones({3}, dtype(DType::Int32));
  Tensor u8 = ones({3}, dtype(DType::UInt8));
  Tensor h = ones({3}, dtype(DType::Float16));
  Tensor b = ones({3}, dtype(DType::Bool));
  // A C++ double cannot tell 2 from 2.0: a whole number acts as a Python int
  // (torch: int_tensor * 2 -> int64), a fractional one as a Python float.
  EXPECT_EQ(mul(i64, 2.0).dtype(), DType::Int64);
  EXPECT_EQ(mul(i64, 2.5).dtype(), DType::Float32);
  EXPECT_EQ(add(i32, 2.5).dtype(), DType::Float32);
  EXPECT_EQ(add(h, 2.5).dtype(), DType::Float16);
  EXPECT_EQ(add(u8, Tensor::empty({}, DType::Int64).fill_(1)).dtype(), DType::UInt8);
  EXPECT_EQ(add(i32, i64).dtype(), DType::Int64);
  EXPECT_EQ(add(i32, h).dtype(), DType::Float16);
  EXPECT_EQ(add(b, b).dtype(), DType::Bool);
  EXPECT_EQ(div(i64, i64).dtype(), DType::Float32);  // true division
  EXPECT_EQ(add(ones({3}, dtype(DType::Float16)), ones({3}, dtype(DType::BFloat16))).dtype(), DType::Float32);
  EXPECT_EQ(add(i32, 2.5).to_vector<float>(), (std::vector<float>{3.5f, 3.5f, 3.5f}));
  EXPECT_EQ(gt(i32, 0.5).dtype(), DType::Bool);
}

}  // namespace
}  // namespace kiln
