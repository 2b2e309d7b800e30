// RMSNorm's row kernels, generic in the lane type V: shared by rmsnorm_forward/backward
// (cpu_nn_kernels.cpp) and the per-head RMSNorm (cpu_head_norm_kernels.cpp), so a head row
// normalized by either gives the same bits. Private to runtime/cpu.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/cpu/cpu_simd.h"

namespace zt::cpu {

// One row of C: rstd = 1/sqrt(mean(x²) + eps), out = x·rstd·w.
template <class V>
void rmsnorm_forward_row(float* out, float* rstd_out, const float* x, const float* w, int64_t C,
                         float eps) {
  const float mean_sq = lane_sum<V>(C,
                                    [&](auto lanes, int64_t i) {
                                      using T = typename decltype(lanes)::type;
                                      const T v = load<T>(x + i);
                                      return v * v;
                                    }) *
                        (1.0f / static_cast<float>(C));
  const float rstd = 1.0f / std::sqrt(mean_sq + eps);
  simd_loop<V>(0, C, [&](auto lanes, int64_t i) {
    using T = typename decltype(lanes)::type;
    store<T>(out + i, load<T>(x + i) * rstd * load<T>(w + i));
  });
  if (rstd_out) *rstd_out = rstd;
}

// One row: dinp += (dnorm - norm·mean(dnorm·norm))·rstd with norm = x·rstd, dnorm = w·dout (the
// mean term is rstd's dependence on x), and the row's dweight contribution dout·norm added into
// the block partial pdw (C).
template <class V>
void rmsnorm_backward_row(float* dinp, float* pdw, const float* dout, const float* x,
                          const float* w, float rstd, int64_t C) {
  const float dnorm_norm_mean = lane_sum<V>(C,
                                            [&](auto lanes, int64_t i) {
                                              using T = typename decltype(lanes)::type;
                                              const T norm = load<T>(x + i) * rstd;
                                              return load<T>(w + i) * load<T>(dout + i) * norm;
                                            }) *
                                (1.0f / static_cast<float>(C));
  simd_loop<V>(0, C, [&](auto lanes, int64_t i) {
    using T = typename decltype(lanes)::type;
    const T dy = load<T>(dout + i);
    const T norm = load<T>(x + i) * rstd;
    store<T>(dinp + i, load<T>(dinp + i) + (load<T>(w + i) * dy - norm * dnorm_norm_mean) * rstd);
    store<T>(pdw + i, load<T>(pdw + i) + dy * norm);
  });
}

// rmsnorm_backward_row IN PLACE: dx holds dout and becomes (dnorm - norm·mean(dnorm·norm))·rstd
// (written, not added), the row's dweight contribution dout·norm added into pdw (C). Each
// element's dout is read before it is overwritten; the sums read every dout first.
template <class V>
void rmsnorm_backward_row_in_place(float* dx, float* pdw, const float* x, const float* w,
                                   float rstd, int64_t C) {
  const float dnorm_norm_mean = lane_sum<V>(C,
                                            [&](auto lanes, int64_t i) {
                                              using T = typename decltype(lanes)::type;
                                              const T norm = load<T>(x + i) * rstd;
                                              return load<T>(w + i) * load<T>(dx + i) * norm;
                                            }) *
                                (1.0f / static_cast<float>(C));
  simd_loop<V>(0, C, [&](auto lanes, int64_t i) {
    using T = typename decltype(lanes)::type;
    const T dy = load<T>(dx + i);
    const T norm = load<T>(x + i) * rstd;
    store<T>(dx + i, (load<T>(w + i) * dy - norm * dnorm_norm_mean) * rstd);
    store<T>(pdw + i, load<T>(pdw + i) + dy * norm);
  });
}

}  // namespace zt::cpu
