// Rotary position embedding's frequencies: rope_theta and the rope_scaling of a Hugging Face
// config.json that rescale them: "linear" (every frequency divided by factor, as positions
// divided by it) and "llama3" (Llama 3.1/3.2: wavelengths past original_max_position /
// low_freq_factor divided by factor, those below original_max_position / high_freq_factor kept,
// a linear blend between). What the rope kernels rotate by, on the host and on a GPU alike: one
// function computes the inverse frequency for both, so their tables agree.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define ZT_HOST_DEVICE __host__ __device__
#else
#define ZT_HOST_DEVICE
#endif

namespace zt {

enum class RopeScalingType : int32_t { kNone, kLinear, kLlama3 };

// config.json's rope_scaling (its rope_type, or the older key type, and parameters).
struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  float factor = 1.0f;                   // kLinear, kLlama3
  float low_freq_factor = 1.0f;          // kLlama3
  float high_freq_factor = 4.0f;         // kLlama3
  int32_t original_max_position = 8192;  // kLlama3: original_max_position_embeddings
  bool operator==(const RopeScaling&) const = default;
};

struct RopeFrequencies {
  float theta = 10000.0f;
  RopeScaling scaling;

  // Implicit from a bare theta (plain RoPE), as the kernels took it before rope_scaling.
  constexpr RopeFrequencies(float theta = 10000.0f, RopeScaling scaling = {})  // NOLINT
      : theta(theta), scaling(scaling) {}
};

// The inverse frequency of pair i (< hd/2) of a head of hd: theta^(-2i/hd), computed in double
// and, unscaled, rounded to fp32 (kernels.h's precision); scaled, the scaling applied in double
// before the one rounding.
ZT_HOST_DEVICE inline float rope_inv_freq(const RopeFrequencies& r, int64_t i, int64_t hd) {
  const double inv =
      1.0 / pow(static_cast<double>(r.theta), static_cast<double>(2 * i) / double(hd));
  const RopeScaling& s = r.scaling;
  switch (s.type) {
    case RopeScalingType::kNone: break;
    case RopeScalingType::kLinear: return static_cast<float>(inv / s.factor);
    case RopeScalingType::kLlama3: {
      const double wavelen = 2.0 * 3.14159265358979323846 / inv;
      const double low_wavelen = s.original_max_position / double(s.low_freq_factor);
      const double high_wavelen = s.original_max_position / double(s.high_freq_factor);
      if (wavelen > low_wavelen) return static_cast<float>(inv / s.factor);
      if (wavelen < high_wavelen) break;
      const double smooth = (s.original_max_position / wavelen - s.low_freq_factor) /
                            (double(s.high_freq_factor) - s.low_freq_factor);
      return static_cast<float>((1.0 - smooth) * inv / s.factor + smooth * inv);
    }
  }
  return static_cast<float>(inv);
}

}  // namespace zt
