// Dropout's keep mask (kernel_entries.h's dropout_forward and dropout_backward): whether element
// i of a call seeded `seed` is kept, a pure function of (seed, i) from a counter-based hash, so
// the CPU and CUDA back ends draw the same mask whatever their thread counts or launch geometry,
// and backward redraws forward's mask from the seed instead of storing it. One definition for
// the host and a GPU (as rope.h's rope_inv_freq). Integer arithmetic and one exact conversion to
// float only; no state, no allocation.
#pragma once

#include <cstdint>

#ifndef ZT_HOST_DEVICE  // rope.h defines it too, identically
#if defined(__CUDACC__)
#define ZT_HOST_DEVICE __host__ __device__
#else
#define ZT_HOST_DEVICE
#endif
#endif

namespace zt {

// SplitMix64's output function (Steele, Lea and Flood 2014; Vigna's splitmix64.c): a bijection
// of 64-bit integers whose every output bit depends on every input bit.
ZT_HOST_DEVICE constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A uniform draw in [0, 1) for element i of a call seeded `seed`: the top 24 bits of
// splitmix64(seed ^ splitmix64(i)) times 2^-24, exact in fp32 (a multiple of 2^-24 below 1).
ZT_HOST_DEVICE constexpr float dropout_uniform(uint64_t seed, uint64_t i) {
  return static_cast<float>(static_cast<uint32_t>(splitmix64(seed ^ splitmix64(i)) >> 40)) *
         0x1p-24f;
}

// Whether element i is kept at drop probability p (0 <= p < 1): dropout_uniform >= p, so with
// probability 1 - p (up to the 2^-24 grid), and always at p = 0.
ZT_HOST_DEVICE constexpr bool dropout_keep(uint64_t seed, uint64_t i, float p) {
  return dropout_uniform(seed, i) >= p;
}

}  // namespace zt
