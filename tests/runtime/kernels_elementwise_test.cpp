// The CPU back end's element-wise kernels (runtime/cpu/cpu_elementwise_kernels.cpp): residual,
// accumulate and fill against float loops, then the dtype conversions: all fp16 patterns,
// fp32->fp16 against the F16C instruction, fp32->bf16 against a round-to-nearest-even reference,
// and cast / round_to / add against dtype.h's scalar conversions on every path. Not here:
// sum_squares and position invariance (kernels_determinism_test.cpp).
#include <gtest/gtest.h>
#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/kernels.h"

#include "kernels_test_util.h"

namespace zt {
namespace {

using namespace test;

// ---------------------------------------------------------------------------------------------
// Residual, accumulate, fill: single IEEE operations, so equal to float loops bit for bit.

TEST_F(KernelsTest, ElementwiseUtilitiesMatchFloatLoops) {
  const int64_t n = 100003;  // several parallel chunks and a ragged tail
  const auto a = random_floats(n, 50), b = random_floats(n, 51);
  std::vector<float> want(n);

  std::vector<float> out(n);
  k_.residual_forward(out.data(), a.data(), b.data(), n);
  for (int64_t i = 0; i < n; ++i) want[i] = a[i] + b[i];
  EXPECT_TRUE(same_bits(out, want));

  auto aliased = a;  // out may alias an input
  k_.residual_forward(aliased.data(), aliased.data(), b.data(), n);
  EXPECT_TRUE(same_bits(aliased, want));

  auto y = a;
  k_.accumulate(y.data(), b.data(), n);
  EXPECT_TRUE(same_bits(y, want));

  auto s = a;
  k_.fill(s.data(), -2.5f, n);
  EXPECT_TRUE(same_bits(s, std::vector<float>(n, -2.5f)));
  k_.fill(s.data(), 0.0f, 0);  // n = 0 is a no-op
}

// ---------------------------------------------------------------------------------------------
// Dtype conversions through the cast kernel

bool is_fp16_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

TEST_F(KernelsTest, Fp16RoundTripOfAllBitPatterns) {
  std::vector<uint16_t> all(65536), back(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = uint16_t(i);
  std::vector<float> f(65536);
  k_.cast(f.data(), DType::kF32, all.data(), DType::kF16, 65536);
  k_.cast(back.data(), DType::kF16, f.data(), DType::kF32, 65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    if (is_fp16_nan(all[i])) {
      ASSERT_TRUE(std::isnan(f[i])) << std::hex << i;
      ASSERT_TRUE(is_fp16_nan(back[i])) << std::hex << i;
    } else {
      ASSERT_EQ(back[i], all[i]) << std::hex << i;
    }
  }
}

__attribute__((target("f16c"))) uint16_t f16c_from_float(float x) {
  return uint16_t(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float f16c_to_float(uint16_t h) { return _cvtsh_ss(h); }

// Random bit patterns (every exponent), plus the edges of fp16's range and its rounding ties.
std::vector<float> conversion_inputs() {
  std::mt19937 gen(150);
  std::vector<float> v;
  for (int i = 0; i < 400000; ++i) v.push_back(std::bit_cast<float>(uint32_t(gen())));
  // Concentrate on fp16's exponent range [2^-26, 2^17).
  std::uniform_int_distribution<uint32_t> mant(0, 0x7fffff), exp(127 - 26, 127 + 16);
  for (int i = 0; i < 400000; ++i)
    v.push_back(
        std::bit_cast<float>(uint32_t(((gen() & 1u) << 31) | (exp(gen) << 23) | mant(gen))));
  for (float e : {0.0f,
                  -0.0f,
                  1.0f,
                  65504.0f,
                  65519.0f,
                  65519.99f,
                  65520.0f,
                  65536.0f,
                  1e10f,
                  0x1p-14f,
                  0x1p-24f,
                  0x1p-25f,
                  0x1.000002p-25f,
                  0x1.8p-24f,
                  0x1.4p-24f,
                  0x1.ffcp-15f,
                  0x1.ffep-15f,
                  1.0009765625f,
                  1.00048828125f,
                  1.00146484375f,
                  std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::min(),
                  std::numeric_limits<float>::denorm_min(),
                  INFINITY,
                  -INFINITY}) {
    v.push_back(e);
    v.push_back(-e);
  }
  return v;
}

TEST_F(KernelsTest, Fp32ToFp16MatchesF16C) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C on this CPU";
  const auto in = conversion_inputs();
  std::vector<uint16_t> out(in.size());
  k_.cast(out.data(), DType::kF16, in.data(), DType::kF32, int64_t(in.size()));
  for (size_t i = 0; i < in.size(); ++i) {
    if (std::isnan(in[i])) {
      ASSERT_TRUE(is_fp16_nan(out[i]));  // F16C keeps payload bits; we only promise NaN
      continue;
    }
    ASSERT_EQ(out[i], f16c_from_float(in[i])) << std::hexfloat << in[i];
  }
  for (uint32_t h = 0; h < 65536; ++h) {
    if (is_fp16_nan(uint16_t(h))) continue;
    const float f = fp16_to_fp32(uint16_t(h));
    ASSERT_EQ(std::bit_cast<uint32_t>(f), std::bit_cast<uint32_t>(f16c_to_float(uint16_t(h))))
        << std::hex << h;
  }
}

// bf16 by exact arithmetic: the two neighbouring bf16 values as doubles, the nearer one wins,
// ties go to the even pattern; past the largest finite value, the "next" value is 2^128 (inf).
uint16_t bf16_reference(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7fc0u);
  if (abs == 0x7f800000u) return uint16_t(sign | 0x7f80u);
  const uint16_t below = uint16_t(abs >> 16), above = uint16_t(below + 1);
  auto value = [](uint16_t b) {
    const int e = (b >> 7) & 0xff, m = b & 0x7f;
    return e == 0 ? std::ldexp(double(m), -133) : std::ldexp(double(128 + m), e - 134);
  };
  const double v = std::bit_cast<float>(abs);
  const double lo = value(below), hi = value(above);
  uint16_t pick = below;
  if (v - lo > hi - v || (v - lo == hi - v && (below & 1u))) pick = above;
  return uint16_t(sign | pick);
}

TEST_F(KernelsTest, Fp32ToBf16MatchesRoundToNearestEven) {
  const auto in = conversion_inputs();
  std::vector<uint16_t> out(in.size());
  std::vector<float> back(in.size());
  k_.cast(out.data(), DType::kBF16, in.data(), DType::kF32, int64_t(in.size()));
  k_.cast(back.data(), DType::kF32, out.data(), DType::kBF16, int64_t(in.size()));
  for (size_t i = 0; i < in.size(); ++i) {
    if (std::isnan(in[i])) {
      ASSERT_TRUE(std::isnan(back[i]));
      continue;
    }
    ASSERT_EQ(out[i], bf16_reference(in[i])) << std::hexfloat << in[i];
    ASSERT_EQ(std::bit_cast<uint32_t>(back[i]), uint32_t(out[i]) << 16);
  }
}

// The cast kernel (vectorised where it can be) gives dtype.h's bits on every path, NaNs included.
TEST_F(KernelsTest, CastMatchesDtypeConversionsOnEveryPath) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = uint16_t(i);
  auto in = conversion_inputs();
  for (uint32_t nan : {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7fa00000u, 0xff812345u})
    in.push_back(std::bit_cast<float>(nan));
  for (const char* level : simd_levels()) {
    auto k = kernels_capped_at(level);
    std::vector<float> f(65536);
    k->cast(f.data(), DType::kF32, all.data(), DType::kF16, 65536);
    for (uint32_t i = 0; i < 65536; ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(f[i]), std::bit_cast<uint32_t>(fp16_to_fp32(uint16_t(i))))
          << level << " fp16 " << std::hex << i;
    k->cast(f.data(), DType::kF32, all.data(), DType::kBF16, 65536);
    for (uint32_t i = 0; i < 65536; ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(f[i]), std::bit_cast<uint32_t>(bf16_to_fp32(uint16_t(i))))
          << level << " bf16 " << std::hex << i;
    std::vector<uint16_t> h(in.size()), b(in.size());
    k->cast(h.data(), DType::kF16, in.data(), DType::kF32, int64_t(in.size()));
    k->cast(b.data(), DType::kBF16, in.data(), DType::kF32, int64_t(in.size()));
    for (size_t i = 0; i < in.size(); ++i) {
      ASSERT_EQ(h[i], fp32_to_fp16(in[i])) << level << " " << std::hexfloat << in[i];
      ASSERT_EQ(b[i], fp32_to_bf16(in[i])) << level << " " << std::hexfloat << in[i];
    }
    std::vector<uint16_t> hb(65536), bh(65536);
    k->cast(hb.data(), DType::kBF16, all.data(), DType::kF16, 65536);
    k->cast(bh.data(), DType::kF16, all.data(), DType::kBF16, 65536);
    for (uint32_t i = 0; i < 65536; ++i) {
      ASSERT_EQ(hb[i], fp32_to_bf16(fp16_to_fp32(uint16_t(i)))) << level << std::hex << i;
      ASSERT_EQ(bh[i], fp32_to_fp16(bf16_to_fp32(uint16_t(i)))) << level << std::hex << i;
    }
  }
}

TEST_F(KernelsTest, CastBetweenSixteenBitTypesGoesThroughFp32) {
  const auto f = random_floats(1001, 160, -100.0f, 100.0f);
  std::vector<uint16_t> h(f.size()), b(f.size()), hb(f.size()), bh(f.size()), copy(f.size());
  k_.cast(h.data(), DType::kF16, f.data(), DType::kF32, int64_t(f.size()));
  k_.cast(b.data(), DType::kBF16, f.data(), DType::kF32, int64_t(f.size()));
  k_.cast(hb.data(), DType::kBF16, h.data(), DType::kF16, int64_t(f.size()));
  k_.cast(bh.data(), DType::kF16, b.data(), DType::kBF16, int64_t(f.size()));
  k_.cast(copy.data(), DType::kF16, h.data(), DType::kF16, int64_t(f.size()));
  for (size_t i = 0; i < f.size(); ++i) {
    ASSERT_EQ(hb[i], fp32_to_bf16(fp16_to_fp32(h[i])));
    ASSERT_EQ(bh[i], fp32_to_fp16(bf16_to_fp32(b[i])));
  }
  EXPECT_EQ(copy, h);
}

// ---------------------------------------------------------------------------------------------
// round_to and add: dtype.h's scalar conversions, element by element, on every path.

// float(t(x)) by dtype.h.
float round_ref(float x, DType t) {
  switch (t) {
    case DType::kF16: return fp16_to_fp32(fp32_to_fp16(x));
    case DType::kBF16: return bf16_to_fp32(fp32_to_bf16(x));
    case DType::kF32: return x;
  }
  return x;
}

bool same_float_bits(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

// conversion_inputs() (random patterns with fp32 subnormals, fp16's range edges and ties, values
// past 65504, ±inf), plus bf16 ties (even and odd below, and the one that rounds to inf) and NaNs
// with payloads.
std::vector<float> rounding_inputs() {
  auto v = conversion_inputs();
  for (uint32_t bits :
       {0x3f808000u, 0x3f818000u, 0xbf818000u, 0x7f7f8000u, 0x7f7f7fffu, 0x7f7fffffu, 0x00000001u,
        0x00400000u, 0x807fffffu, 0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7fa00000u, 0xff812345u})
    v.push_back(std::bit_cast<float>(bits));
  return v;
}

TEST_F(KernelsTest, RoundToMatchesDtypeConversionsOnEveryPath) {
  const auto in = rounding_inputs();
  const int64_t n = int64_t(in.size());
  for (const char* level : simd_levels()) {
    auto k = kernels_capped_at(level);
    std::vector<float> x = in;
    k->round_to(x.data(), DType::kF32, n);
    ASSERT_TRUE(same_bits(x, in)) << level << " fp32 is a no-op";
    for (DType t : {DType::kF16, DType::kBF16}) {
      x = in;
      k->round_to(x.data(), t, n);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_TRUE(same_float_bits(x[i], round_ref(in[i], t)))
            << level << " " << dtype_name(t) << " " << std::hexfloat << in[i] << " gave " << x[i];
      // Odd lengths at unaligned starts: the same bits, and nothing outside the range touched.
      for (int64_t off : {1, 3, 7}) {
        for (int64_t len : {1, 5, 13, 1001}) {
          x = in;
          k->round_to(x.data() + off, t, len);
          for (int64_t i = 0; i < off + len + 8; ++i) {
            const float want = i >= off && i < off + len ? round_ref(in[i], t) : in[i];
            ASSERT_TRUE(same_float_bits(x[i], want))
                << level << " " << dtype_name(t) << " off " << off << " len " << len << " i " << i;
          }
        }
      }
    }
  }
}

// n values of one dtype, made from fp32 by dtype.h.
struct TypedValues {
  DType type;
  std::vector<float> f32;
  std::vector<uint16_t> h16;
  TypedValues(DType t, const std::vector<float>& x) : type(t) {
    if (t == DType::kF32) {
      f32 = x;
      return;
    }
    for (float v : x) h16.push_back(t == DType::kF16 ? fp32_to_fp16(v) : fp32_to_bf16(v));
  }
  TypedValues(DType t, int64_t n) : type(t) {
    if (t == DType::kF32)
      f32.assign(n, 0.0f);
    else
      h16.assign(n, 0);
  }
  void* data() { return type == DType::kF32 ? static_cast<void*>(f32.data()) : h16.data(); }
  void* at(int64_t i) { return static_cast<char*>(data()) + i * int64_t(dtype_size(type)); }
  float get(int64_t i) const {
    switch (type) {
      case DType::kF16: return fp16_to_fp32(h16[i]);
      case DType::kBF16: return bf16_to_fp32(h16[i]);
      case DType::kF32: return f32[i];
    }
    return 0.0f;
  }
};

// Element i of dst equals t(sum) by dtype.h's rounding, bit for bit (any NaN for a NaN sum: the
// payload of NaN + NaN depends on operand order, which the compiler may swap).
::testing::AssertionResult stored_as(const TypedValues& dst, int64_t i, float sum) {
  const float want = round_ref(sum, dst.type), got = dst.get(i);
  if (std::isnan(want) ? std::isnan(got) : same_float_bits(got, want))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "i " << i << ": got " << std::hexfloat << got << ", want " << want;
}

// Random values of several magnitudes, with specials: ±0, ±inf, NaN, fp16 overflow and ties,
// fp16 and fp32 subnormals.
std::vector<float> add_inputs(int64_t n, uint32_t seed) {
  auto v = random_floats(size_t(n), seed, -4.0f, 4.0f);
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> scale(-30, 20);
  for (float& x : v) x = std::ldexp(x, scale(gen));
  const float specials[] = {0.0f,      -0.0f,          INFINITY,       -INFINITY, NAN,
                            65504.0f,  65520.0f,       -70000.0f,      0x1p-24f,  0x1p-25f,
                            0x1p-130f, 1.00048828125f, 1.00146484375f, 3.0e38f};
  for (size_t j = 0; j < std::size(specials); ++j) v[(j * 997 + seed) % size_t(n)] = specials[j];
  return v;
}

// Signalling NaNs (which F16C's fp16 load returns quiet) at elements 100 and 20001 of a, 101 and
// 20001 of b: the sums are NaN either way.
void add_signalling_nans(TypedValues& v, int64_t first) {
  for (int64_t i : {first, int64_t(20001)}) {
    if (v.type == DType::kF32)
      v.f32[i] = std::bit_cast<float>(i == first ? 0x7f800001u : 0xffa00000u);
    else if (v.type == DType::kF16)
      v.h16[i] = i == first ? 0x7c01 : 0xfd55;
    else
      v.h16[i] = i == first ? 0x7f81 : 0xffa0;
  }
}

TEST_F(KernelsTest, AddMatchesScalarReferenceForEveryDtypeCombination) {
  const int64_t n = 40003;  // more than one kElementGrain chunk, odd tail
  const auto xa = add_inputs(n, 170), xb = add_inputs(n, 171);
  const DType types[] = {DType::kF32, DType::kF16, DType::kBF16};
  std::vector<std::pair<const char*, std::unique_ptr<Kernels>>> paths;
  for (const char* level : simd_levels()) paths.emplace_back(level, kernels_capped_at(level));
  for (DType dt : types)
    for (DType at : types)
      for (DType bt : types) {
        TypedValues a(at, xa), b(bt, xb), first(dt, n);
        add_signalling_nans(a, 100);
        add_signalling_nans(b, 101);
        for (auto& [level, k] : paths) {
          TypedValues dst(dt, n), part(dt, n);
          const std::string what = std::string(level) + " " + std::string(dtype_name(dt)) + " = " +
                                   std::string(dtype_name(at)) + " + " +
                                   std::string(dtype_name(bt));
          k->add(dst.data(), dt, a.data(), at, b.data(), bt, n);
          for (int64_t i = 0; i < n; ++i)
            ASSERT_TRUE(stored_as(dst, i, a.get(i) + b.get(i))) << what;
          // Every path gives the same bits, NaNs included (but NaN + NaN, whose payload depends
          // on operand order).
          if (k == paths.front().second) first = dst;
          for (int64_t i = 0; i < n; ++i)
            ASSERT_TRUE(same_float_bits(dst.get(i), first.get(i)) ||
                        (std::isnan(a.get(i)) && std::isnan(b.get(i))))
                << what << " differs from " << paths.front().first << " at " << i;
          // An unaligned start and odd length give the same bits.
          k->add(part.at(3), dt, a.at(3), at, b.at(3), bt, 1001);
          for (int64_t i = 3; i < 1004; ++i)
            ASSERT_TRUE(same_float_bits(part.get(i), dst.get(i)))
                << what << " at offset 3, i " << i;
        }
      }
  for (auto& [level, k] : paths) {
    for (DType dt : types)
      for (DType bt : types) {  // a null: a rounding cast of b (-0 stays -0)
        TypedValues b(bt, xb), dst(dt, n);
        k->add(dst.data(), dt, nullptr, DType::kF32, b.data(), bt, n);
        const std::string what = std::string(level) + " null + " + std::string(dtype_name(bt));
        for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(stored_as(dst, i, b.get(i))) << what;
      }
    for (DType t : types)
      for (DType other : types) {  // dst is a, then dst is b
        TypedValues a(t, xa), b(other, xb);
        const std::string what = std::string(level) + " in place " + std::string(dtype_name(t));
        k->add(a.data(), t, a.data(), t, b.data(), other, n);
        const TypedValues a0(t, xa);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_TRUE(stored_as(a, i, a0.get(i) + b.get(i))) << what << " dst=a";
        TypedValues c(other, xa), d(t, xb);
        k->add(d.data(), t, c.data(), other, d.data(), t, n);
        const TypedValues d0(t, xb);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_TRUE(stored_as(d, i, c.get(i) + d0.get(i))) << what << " dst=b";
      }
  }
}

}  // namespace
}  // namespace zt
