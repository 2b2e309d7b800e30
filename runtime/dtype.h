// Data types and exact conversions. fp16 and bf16 are stored as 16 bits and converted with
// round-to-nearest-even; NaN stays NaN, overflow becomes inf (fp16) as IEEE 754 says.
// Pure arithmetic: no allocation.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace zt {

enum class DType : uint8_t { kF32, kF16, kBF16 };

constexpr size_t dtype_size(DType t) { return t == DType::kF32 ? 4 : 2; }
std::string_view dtype_name(DType t);      // "fp32", "fp16", "bf16"
DType parse_dtype(std::string_view name);  // throws kInput on an unknown name

inline uint16_t fp32_to_bf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  uint32_t rounding_bias = 0x7fffu + ((x >> 16) & 1u);  // ties to even
  return static_cast<uint16_t>((x + rounding_bias) >> 16);
}
inline float bf16_to_fp32(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

inline uint16_t fp32_to_fp16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {  // below the smallest normal fp16 (2^-14): subnormal or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25 rounds to zero
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    int shift = 126 - static_cast<int>(abs >> 23);  // 14 + (113 - exp) ... total right shift
    // value = mant * 2^(exp-150); fp16 subnormal unit = 2^-24 -> shift = 150-24-exp = 126-exp
    uint32_t q = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  // normal: rebias exponent 127 -> 15, round 23-bit mantissa to 10 bits, ties to even
  uint32_t rebased = abs - (112u << 23);
  uint32_t q = rebased >> 13;
  uint32_t rem = rebased & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;  // carry may step into inf: correct
  return static_cast<uint16_t>(sign | q);
}

inline float fp16_to_fp32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return std::bit_cast<float>(sign);
    // subnormal: mant * 2^-24, exact in fp32
    float v = static_cast<float>(mant) * 0x1p-24f;
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

// fp16 bits -> fp32 with exactly the bits of fp16_to_fp32 (kernels_elementwise_test compares
// all 65536 patterns), but without branches, so it vectorises: dtype.h's subnormal branch holds a
// float multiply, which -ftrapping-math forbids the vectoriser to if-convert. For the same
// reason the subnormal case is selected with a bit mask: a ?: would let GCC sink the multiply
// back into a branch.
inline float fp16_to_fp32_branchless(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;                     // exponent and mantissa
  const uint32_t normal = (em << 13) + (112u << 23);   // rebias 15 -> 127
  const uint32_t inf_nan = (em << 13) + (224u << 23);  // exponent 31 -> 255, payload kept
  const float subnormal = static_cast<float>(static_cast<int32_t>(em)) * 0x1p-24f;  // exact
  const uint32_t is_subnormal = 0u - uint32_t(em < 0x0400u);  // all ones or zero
  const uint32_t wide = em >= 0x7c00u ? inf_nan : normal;
  const uint32_t bits =
      (std::bit_cast<uint32_t>(subnormal) & is_subnormal) | (wide & ~is_subnormal);
  return std::bit_cast<float>(bits | sign);
}

// Each dtype as a type: how it is stored and how it is widened to fp32 (exactly) and rounded
// from it (to nearest even), for loops templated over the element type.
struct F32Codec {
  using Storage = float;
  static float widen(float v) { return v; }
  static float narrow(float v) { return v; }
};
struct F16Codec {
  using Storage = uint16_t;
  static float widen(uint16_t v) { return fp16_to_fp32_branchless(v); }
  static uint16_t narrow(float v) { return fp32_to_fp16(v); }
};
struct BF16Codec {
  using Storage = uint16_t;
  static float widen(uint16_t v) { return bf16_to_fp32(v); }
  static uint16_t narrow(float v) { return fp32_to_bf16(v); }
};

// f(C{}) with C the codec of `t` (kF32, kF16 or kBF16), for loops templated over it.
template <class F>
inline void visit_codec(DType t, const F& f) {
  switch (t) {
    case DType::kF32: f(F32Codec{}); return;
    case DType::kF16: f(F16Codec{}); return;
    case DType::kBF16: f(BF16Codec{}); return;
  }
}

}  // namespace zt
