// Test inputs every rank can regenerate for every other rank, and the scalar reference of the
// determinism contract (comm/communicator.h): widen to fp32, combine in rank order, round once.
// Written independently of comm/'s tiled reduction so that the tests compare two codes.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "comm/communicator.h"
#include "runtime/dtype.h"

namespace zt::testing_comm {

inline uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Element `index` of rank `rank`'s input in test `seed`: full 24-bit mantissas and magnitudes
// from 2^-4 to 2^4, so that a sum in another order than rank order gives other bits.
inline float input_value(uint64_t seed, int rank, int64_t index) {
  const uint64_t h =
      mix(mix(seed * 1000003ull + static_cast<uint64_t>(rank)) ^ static_cast<uint64_t>(index));
  const float unit = static_cast<float>(h >> 40) * 0x1p-24f;  // [0, 1)
  return std::ldexp(unit - 0.5f, static_cast<int>(h & 7) - 3);
}

// The stored bits of v in dtype (fp32: all 32; fp16/bf16: the low 16).
inline uint32_t encode(DType dtype, float v) {
  switch (dtype) {
    case DType::kF32: return std::bit_cast<uint32_t>(v);
    case DType::kF16: return fp32_to_fp16(v);
    case DType::kBF16: return fp32_to_bf16(v);
  }
  return 0;
}
inline float decode(DType dtype, uint32_t bits) {
  switch (dtype) {
    case DType::kF32: return std::bit_cast<float>(bits);
    case DType::kF16: return fp16_to_fp32(static_cast<uint16_t>(bits));
    case DType::kBF16: return bf16_to_fp32(static_cast<uint16_t>(bits));
  }
  return 0;
}

// A host buffer of elements of one dtype.
class Elements {
 public:
  Elements(DType dtype, int64_t count)
      : dtype_(dtype), bytes_(static_cast<size_t>(count) * dtype_size(dtype)) {}
  DType dtype() const { return dtype_; }
  int64_t count() const { return static_cast<int64_t>(bytes_.size() / dtype_size(dtype_)); }
  char* data() { return bytes_.data(); }
  const char* data() const { return bytes_.data(); }
  char* at(int64_t i) { return bytes_.data() + i * dtype_size(dtype_); }
  uint32_t bits(int64_t i) const {
    uint32_t b = 0;
    if (dtype_ == DType::kF32) {
      std::memcpy(&b, bytes_.data() + i * 4, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, bytes_.data() + i * 2, 2);
      b = h;
    }
    return b;
  }
  void set_bits(int64_t i, uint32_t b) {
    if (dtype_ == DType::kF32) {
      std::memcpy(bytes_.data() + i * 4, &b, 4);
    } else {
      uint16_t h = static_cast<uint16_t>(b);
      std::memcpy(bytes_.data() + i * 2, &h, 2);
    }
  }
  // Elements [offset, offset+n) = rank's input values at indices [first, first+n).
  void fill_input(uint64_t seed, int rank, int64_t offset, int64_t first, int64_t n) {
    for (int64_t j = 0; j < n; ++j)
      set_bits(offset + j, encode(dtype_, input_value(seed, rank, first + j)));
  }
  void fill_bits(uint32_t b) {
    for (int64_t i = 0; i < count(); ++i) set_bits(i, b);
  }

 private:
  DType dtype_;
  std::vector<char> bytes_;
};

// One step of the rank-order reduction contract in fp32: acc op x (max: NaN wins).
inline float reference_combine(float acc, float x, ReduceOp op) {
  if (op == ReduceOp::kSum) return acc + x;
  if (std::isnan(acc) || std::isnan(x)) return std::isnan(acc) ? acc : x;
  return x > acc ? x : acc;
}

// op over ranks 0..world-1 (in that order) of the inputs at `index`, in fp32, rounded once.
inline uint32_t reference_bits(uint64_t seed, int world, int64_t index, DType dtype, ReduceOp op) {
  float acc = decode(dtype, encode(dtype, input_value(seed, 0, index)));
  for (int q = 1; q < world; ++q)
    acc = reference_combine(acc, decode(dtype, encode(dtype, input_value(seed, q, index))), op);
  return encode(dtype, acc);
}

// The same in reverse rank order: the tests check that it differs somewhere, i.e. that they
// would notice a reduction in another order.
inline uint32_t reverse_order_bits(uint64_t seed, int world, int64_t index, DType dtype) {
  float acc = decode(dtype, encode(dtype, input_value(seed, world - 1, index)));
  for (int q = world - 2; q >= 0; --q)
    acc = acc + decode(dtype, encode(dtype, input_value(seed, q, index)));
  return encode(dtype, acc);
}

inline constexpr DType kAllDTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

}  // namespace zt::testing_comm
