// Element types, their sizes and names, and PyTorch's type promotion.
#pragma once
#include <cstdint>
#include <cstring>
#include <ostream>

namespace kiln {

enum class DType : uint8_t { Bool, UInt8, Int32, Int64, Float16, BFloat16, Float32, Float64 };
constexpr int kNumDTypes = 8;

// 16-bit floats are stored as bits and computed in float32.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f);  // NOLINT(google-explicit-constructor): behaves like a number
  operator float() const;  // NOLINT
};
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) {  // NOLINT: round to nearest even, NaN stays NaN
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      bits = 0x7fc0;
    } else {
      u += 0x7fffu + ((u >> 16) & 1u);
      bits = static_cast<uint16_t>(u >> 16);
    }
  }
  operator float() const {  // NOLINT
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

size_t itemsize(DType t);
const char* dtype_name(DType t);  // "float32", "int64", ... as PyTorch prints them
bool is_floating(DType t);
bool is_integral(DType t);  // bool counts as integral
// PyTorch's promote_types: the smallest type both convert to without losing
// category (bool < integer < floating). float16 with bfloat16 gives float32.
DType promote_types(DType a, DType b);

std::ostream& operator<<(std::ostream& os, DType t);

template <typename T> struct dtype_of;
template <> struct dtype_of<bool> { static constexpr DType value = DType::Bool; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::UInt8; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::Int32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct dtype_of<Half> { static constexpr DType value = DType::Float16; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::BFloat16; };
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };
template <typename T> constexpr DType dtype_v = dtype_of<T>::value;

// Calls f.template operator()<T>() with the C++ type T of `t`:
//   visit_dtype(t, [&]<typename T>() { ... });
template <typename F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::Bool: return f.template operator()<bool>();
    case DType::UInt8: return f.template operator()<uint8_t>();
    case DType::Int32: return f.template operator()<int32_t>();
    case DType::Int64: return f.template operator()<int64_t>();
    case DType::Float16: return f.template operator()<Half>();
    case DType::BFloat16: return f.template operator()<BFloat16>();
    case DType::Float32: return f.template operator()<float>();
    case DType::Float64: return f.template operator()<double>();
  }
  __builtin_unreachable();
}

}  // namespace kiln
