// Counter-based initialisation: normal (splitmix64 + Box-Muller) and uniform (splitmix64).
#include "zero/param_init.h"

#include <cmath>
#include <cstring>
#include <numbers>

#include "runtime/fnv1a.h"

namespace zt {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Standard normal for element i of the stream `key` (Box-Muller on two 53-bit uniforms).
double normal_at(uint64_t key, int64_t i) {
  uint64_t a = splitmix64(key ^ splitmix64(static_cast<uint64_t>(i) * 2));
  uint64_t b = splitmix64(key ^ splitmix64(static_cast<uint64_t>(i) * 2 + 1));
  double u1 = (static_cast<double>(a >> 11) + 1.0) * 0x1p-53;  // (0, 1]
  double u2 = static_cast<double>(b >> 11) * 0x1p-53;          // [0, 1)
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// Uniform on [-1, 1) for element i of the stream `key` (53 bits).
double uniform_at(uint64_t key, int64_t i) {
  const uint64_t a = splitmix64(key ^ splitmix64(static_cast<uint64_t>(i)));
  return static_cast<double>(a >> 11) * 0x1p-52 - 1.0;
}

}  // namespace

void init_param_range(const ParamSpec& spec, uint64_t seed, int64_t begin, int64_t end,
                      float* dst) {
  const int64_t row = spec.numel() / spec.shape[0];
  const int64_t used = spec.exported_rows() * row;  // padded rows stay zero
  const uint64_t key = splitmix64(seed) ^ fnv1a64(spec.name, kNameHashOffset);
#pragma omp parallel for schedule(static)
  for (int64_t i = begin; i < end; ++i) {
    float v = 0.0f;
    if (i < used) {
      switch (spec.init.kind) {
        case ParamInit::Kind::kZeros: v = 0.0f; break;
        case ParamInit::Kind::kOnes: v = 1.0f; break;
        case ParamInit::Kind::kNormal:
          v = static_cast<float>(spec.init.std * normal_at(key, i));
          break;
        case ParamInit::Kind::kUniform:
          v = static_cast<float>(spec.init.std * uniform_at(key, i));
          break;
      }
    }
    dst[i - begin] = v;
  }
}

void init_flat_buffer(const FlatLayout& layout, uint64_t seed, float* flat) {
  std::memset(flat, 0, static_cast<size_t>(layout.numel()) * sizeof(float));
  for (const auto& e : layout.entries())
    init_param_range(e.spec, seed, 0, e.numel, flat + e.offset);
}

}  // namespace zt
