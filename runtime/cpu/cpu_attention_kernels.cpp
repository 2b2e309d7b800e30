// CpuKernels, causal multi-head self-attention: forward (scores, causal softmax, att · V) and
// backward, one (batch, head) pair per task. Not here: the GEMMs of the projections around it
// (matmul, cpu_nn_kernels.cpp) and any other op.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cpu_parallel.h"
#include "runtime/cpu/cpu_simd.h"
#include "runtime/status.h"

namespace zt {
using namespace cpu;
namespace {

// Attention, one (batch, head) pair per call, queries in blocks of kQueryBlock. Each head's K and
// V are first copied to contiguous per-thread scratch (transposed where the inner loop runs over
// keys), so the inner loops read contiguous memory instead of rows 3C apart. The block kernels
// below are small GEMM tiles: 4 queries × 2 vectors of accumulators in registers. Every output
// element is still one sum in a fixed order (over the head dimension, or over keys/queries in
// increasing index), so the blocking and the lane type never change its bits.

constexpr int kQueryBlock = 4;

struct AttentionShape {
  int64_t T, C, NH, hs;  // hs = C / NH
  float scale;           // 1/sqrt(hs)
};

// Copies T rows of hs floats, src rows `stride` apart: dst (T, hs), or dst (hs, T) transposed.
inline void gather_head(float* dst, const float* src, int64_t stride, int64_t T, int64_t hs,
                        bool transpose) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < hs; ++d) {
      if (transpose)
        dst[d * T + t] = src[t * stride + d];
      else
        dst[t * hs + d] = src[t * stride + d];
    }
}

// y[q·ldy + j] = scale · sum_{d < hs} a[q·lda + d]·bt[d·ldb + j], for q < Q, j < n.
// (bt is K or V transposed; a holds Q query rows or Q output-gradient rows.)
template <class V, int Q>
inline void block_dot(float* y, int64_t ldy, const float* a, int64_t lda, const float* bt,
                      int64_t ldb, int64_t hs, int64_t n, float scale) {
  constexpr int64_t W = kWidth<V>;
  int64_t j = 0;
  for (; j + 2 * W <= n; j += 2 * W) {
    V s0[Q], s1[Q];
    const V b0 = load<V>(bt + j), b1 = load<V>(bt + j + W);
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q) {
      s0[q] = a[q * lda] * b0;
      s1[q] = a[q * lda] * b1;
    }
    for (int64_t d = 1; d < hs; ++d) {
      const V c0 = load<V>(bt + d * ldb + j), c1 = load<V>(bt + d * ldb + j + W);
#pragma GCC unroll 4
      for (int q = 0; q < Q; ++q) {
        const float aq = a[q * lda + d];
        s0[q] = s0[q] + aq * c0;
        s1[q] = s1[q] + aq * c1;
      }
    }
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q) {
      store<V>(y + q * ldy + j, s0[q] * scale);
      store<V>(y + q * ldy + j + W, s1[q] * scale);
    }
  }
  simd_loop<V>(j, n, [&](auto lanes, int64_t jj) {
    using T = typename decltype(lanes)::type;
    for (int q = 0; q < Q; ++q) {
      T sq = a[q * lda] * load<T>(bt + jj);
      for (int64_t d = 1; d < hs; ++d) sq = sq + a[q * lda + d] * load<T>(bt + d * ldb + jj);
      store<T>(y + q * ldy + jj, sq * scale);
    }
  });
}

// y[q·ldy + d] (+)= sum_{j < n0 + q} c[q·ldc + j]·rows[j·ldr + d], for q < Q, d < hs (n0 >= 1:
// query q of the block sees keys 0 .. n0-1+q).
template <class V, int Q, bool kAccumulate>
inline void block_combine(float* y, int64_t ldy, const float* c, int64_t ldc, const float* rows,
                          int64_t ldr, int64_t n0, int64_t hs) {
  constexpr int64_t W = kWidth<V>;
  auto finish = [&](auto lanes, float* at, auto sum) {
    using T = typename decltype(lanes)::type;
    if constexpr (kAccumulate) sum = load<T>(at) + sum;
    store<T>(at, sum);
  };
  int64_t d = 0;
  for (; d + 2 * W <= hs; d += 2 * W) {
    V s0[Q], s1[Q];
    {
      const V r0 = load<V>(rows + d), r1 = load<V>(rows + d + W);
#pragma GCC unroll 4
      for (int q = 0; q < Q; ++q) {
        s0[q] = c[q * ldc] * r0;
        s1[q] = c[q * ldc] * r1;
      }
    }
    for (int64_t j = 1; j < n0; ++j) {
      const V r0 = load<V>(rows + j * ldr + d), r1 = load<V>(rows + j * ldr + d + W);
#pragma GCC unroll 4
      for (int q = 0; q < Q; ++q) {
        const float cq = c[q * ldc + j];
        s0[q] = s0[q] + cq * r0;
        s1[q] = s1[q] + cq * r1;
      }
    }
    // The causal triangle: key n0-1+e is seen by queries e .. Q-1 only.
#pragma GCC unroll 4
    for (int e = 1; e < Q; ++e) {
      const int64_t j = n0 - 1 + e;
      const V r0 = load<V>(rows + j * ldr + d), r1 = load<V>(rows + j * ldr + d + W);
#pragma GCC unroll 4
      for (int q = e; q < Q; ++q) {
        const float cq = c[q * ldc + j];
        s0[q] = s0[q] + cq * r0;
        s1[q] = s1[q] + cq * r1;
      }
    }
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q) {
      finish(Lanes<V>{}, y + q * ldy + d, s0[q]);
      finish(Lanes<V>{}, y + q * ldy + d + W, s1[q]);
    }
  }
  simd_loop<V>(d, hs, [&](auto lanes, int64_t dd) {
    using T = typename decltype(lanes)::type;
    for (int q = 0; q < Q; ++q) {
      T sq = c[q * ldc] * load<T>(rows + dd);
      for (int64_t j = 1; j < n0 + q; ++j) sq = sq + c[q * ldc + j] * load<T>(rows + j * ldr + dd);
      finish(lanes, y + q * ldy + dd, sq);
    }
  });
}

// z[j·ldz + d] += c[q·ldc + j]·b[q·ldb + d] for each query q < Q that sees key j (j < n0 + q),
// in increasing q, for j < n0 + Q - 1, d < hs.
template <class V, int Q>
inline void block_rank_update(float* z, int64_t ldz, const float* c, int64_t ldc, const float* b,
                              int64_t ldb, int64_t n0, int64_t hs) {
  constexpr int64_t W = kWidth<V>;
  int64_t d = 0;
  for (; d + 2 * W <= hs; d += 2 * W) {
    V b0[Q], b1[Q];
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q) {
      b0[q] = load<V>(b + q * ldb + d);
      b1[q] = load<V>(b + q * ldb + d + W);
    }
    for (int64_t j = 0; j < n0; ++j) {
      float* zj = z + j * ldz + d;
      V z0 = load<V>(zj), z1 = load<V>(zj + W);
#pragma GCC unroll 4
      for (int q = 0; q < Q; ++q) {
        const float cq = c[q * ldc + j];
        z0 = z0 + cq * b0[q];
        z1 = z1 + cq * b1[q];
      }
      store<V>(zj, z0);
      store<V>(zj + W, z1);
    }
#pragma GCC unroll 4
    for (int e = 1; e < Q; ++e) {
      const int64_t j = n0 - 1 + e;
      float* zj = z + j * ldz + d;
      V z0 = load<V>(zj), z1 = load<V>(zj + W);
#pragma GCC unroll 4
      for (int q = e; q < Q; ++q) {
        const float cq = c[q * ldc + j];
        z0 = z0 + cq * b0[q];
        z1 = z1 + cq * b1[q];
      }
      store<V>(zj, z0);
      store<V>(zj + W, z1);
    }
  }
  simd_loop<V>(d, hs, [&](auto lanes, int64_t dd) {
    using T = typename decltype(lanes)::type;
    for (int64_t j = 0; j < n0 + Q - 1; ++j) {
      T zz = load<T>(z + j * ldz + dd);
      for (int64_t q = std::max<int64_t>(0, j - n0 + 1); q < Q; ++q)
        zz = zz + c[q * ldc + j] * load<T>(b + q * ldb + dd);
      store<T>(z + j * ldz + dd, zz);
    }
  });
}

// p[0, n) = softmax(p[0, n)); p[n, T) = 0.
template <class V>
inline void softmax_causal_row(float* p, int64_t n, int64_t T) {
  const float mx = row_max<V>(p, n);
  simd_loop<V>(0, n, [&](auto lanes, int64_t j) {
    using T_ = typename decltype(lanes)::type;
    store<T_>(p + j, exp_bounded<T_>(load<T_>(p + j) - mx));
  });
  const float inv_sum = 1.0f / lane_sum<V>(n, [&](auto lanes, int64_t j) {
                          using T_ = typename decltype(lanes)::type;
                          return load<T_>(p + j);
                        });
  simd_loop<V>(0, n, [&](auto lanes, int64_t j) {
    using T_ = typename decltype(lanes)::type;
    store<T_>(p + j, load<T_>(p + j) * inv_sum);
  });
  std::fill(p + n, p + T, 0.0f);
}

// Inputs of one (b, h) pair. Rows of q, k, v (and of dq) are 3C apart; rows of out, dout C.
struct HeadView {
  const float* q;
  const float* k;
  const float* v;
  HeadView(const float* qkv, int64_t b, int64_t h, const AttentionShape& s)
      : q(qkv + b * s.T * 3 * s.C + h * s.hs), k(q + s.C), v(q + 2 * s.C) {}
};
// The (T, T) block of att of pair (b, h).
inline int64_t att_offset(int64_t b, int64_t h, const AttentionShape& s) {
  return (b * s.NH + h) * s.T * s.T;
}

constexpr int64_t attention_forward_scratch(int64_t T, int64_t hs) { return 2 * hs * T; }
constexpr int64_t attention_backward_scratch(int64_t T, int64_t hs) {
  return 4 * hs * T + 2 * kQueryBlock * T;
}

// Queries t0 .. t0+Q-1: scores into their att rows, softmax, out rows = att · V.
template <class V, int Q>
void attention_forward_queries(float* out, float* att, const HeadView& hv, const float* kt,
                               const float* vc, int64_t t0, const AttentionShape& s) {
  const int64_t T = s.T, n0 = t0 + 1;
  float* p = att + t0 * T;
  block_dot<V, Q>(p, T, hv.q + t0 * 3 * s.C, 3 * s.C, kt, T, s.hs, n0 + Q - 1, s.scale);
  for (int q = 0; q < Q; ++q) softmax_causal_row<V>(p + q * T, n0 + q, T);
  block_combine<V, Q, false>(out + t0 * s.C, s.C, p, T, vc, s.hs, n0, s.hs);
}

// scratch: attention_forward_scratch floats. out points at (b, 0, h·hs), att at the pair's
// (T, T) block.
template <class V>
void attention_forward_head(float* out, float* att, const HeadView& hv, const AttentionShape& s,
                            float* scratch) {
  float* kt = scratch;          // (hs, T): K transposed
  float* vc = kt + s.hs * s.T;  // (T, hs)
  gather_head(kt, hv.k, 3 * s.C, s.T, s.hs, true);
  gather_head(vc, hv.v, 3 * s.C, s.T, s.hs, false);
  int64_t t0 = 0;
  for (; t0 + kQueryBlock <= s.T; t0 += kQueryBlock)
    attention_forward_queries<V, kQueryBlock>(out, att, hv, kt, vc, t0, s);
  for (; t0 < s.T; ++t0) attention_forward_queries<V, 1>(out, att, hv, kt, vc, t0, s);
}

struct HeadGrads {
  float* dq;        // rows 3C apart, like q
  float* dk;        // (T, hs) scratch, zeroed
  float* dv;        // (T, hs) scratch, zeroed
  const float* dy;  // dout rows of this pair, C apart
};

// Queries t0 .. t0+Q-1: dp = dy·Vᵀ, ds = p·(dp - sum p·dp)·scale, dq += ds·K, dk += dsᵀ·q,
// dv += pᵀ·dy.
template <class V, int Q>
void attention_backward_queries(const HeadGrads& g, const HeadView& hv, const float* att,
                                const float* vt, const float* kc, float* dp, float* ds, int64_t t0,
                                const AttentionShape& s) {
  const int64_t T = s.T, C = s.C, n0 = t0 + 1;
  const float* p = att + t0 * T;
  const float* dy = g.dy + t0 * C;
  block_dot<V, Q>(dp, T, dy, C, vt, T, s.hs, n0 + Q - 1, 1.0f);
  for (int q = 0; q < Q; ++q) {
    const int64_t n = n0 + q;
    const float* pq = p + q * T;
    const float* dpq = dp + q * T;
    float* dsq = ds + q * T;
    const float pdp = lane_sum<V>(n, [&](auto lanes, int64_t j) {
      using T_ = typename decltype(lanes)::type;
      return load<T_>(pq + j) * load<T_>(dpq + j);
    });
    simd_loop<V>(0, n, [&](auto lanes, int64_t j) {
      using T_ = typename decltype(lanes)::type;
      store<T_>(dsq + j, load<T_>(pq + j) * (load<T_>(dpq + j) - pdp) * s.scale);
    });
  }
  block_combine<V, Q, true>(g.dq + t0 * 3 * C, 3 * C, ds, T, kc, s.hs, n0, s.hs);
  block_rank_update<V, Q>(g.dk, s.hs, ds, T, hv.q + t0 * 3 * C, 3 * C, n0, s.hs);
  block_rank_update<V, Q>(g.dv, s.hs, p, T, dy, C, n0, s.hs);
}

// scratch: attention_backward_scratch floats. dq points at (b, 0, h·hs) of dqkv's q part,
// dout_head at (b, 0, h·hs) of dout, att at the pair's (T, T) block.
template <class V>
void attention_backward_head(float* dq, const float* dout_head, const float* att,
                             const HeadView& hv, const AttentionShape& s, float* scratch) {
  const int64_t T = s.T, hs = s.hs, C3 = 3 * s.C;
  float* vt = scratch;      // (hs, T): V transposed
  float* kc = vt + hs * T;  // (T, hs)
  float* dk = kc + hs * T;  // (T, hs), summed here, added to dqkv at the end
  float* dv = dk + hs * T;  // (T, hs)
  float* dp = dv + hs * T;  // (kQueryBlock, T)
  float* ds = dp + kQueryBlock * T;
  gather_head(vt, hv.v, C3, T, hs, true);
  gather_head(kc, hv.k, C3, T, hs, false);
  std::fill(dk, dk + 2 * hs * T, 0.0f);
  const HeadGrads g{dq, dk, dv, dout_head};
  int64_t t0 = 0;
  for (; t0 + kQueryBlock <= T; t0 += kQueryBlock)
    attention_backward_queries<V, kQueryBlock>(g, hv, att, vt, kc, dp, ds, t0, s);
  for (; t0 < T; ++t0) attention_backward_queries<V, 1>(g, hv, att, vt, kc, dp, ds, t0, s);
  for (int64_t j = 0; j < T; ++j) {
    float* dk_row = dq + j * C3 + s.C;
    float* dv_row = dq + j * C3 + 2 * s.C;
    simd_loop<V>(0, hs, [&](auto lanes, int64_t d) {
      using T_ = typename decltype(lanes)::type;
      store<T_>(dk_row + d, load<T_>(dk_row + d) + load<T_>(dk + j * hs + d));
      store<T_>(dv_row + d, load<T_>(dv_row + d) + load<T_>(dv + j * hs + d));
    });
  }
}

AttentionShape attention_shape(int64_t T, int64_t C, int64_t NH) {
  ZT_ASSERT(NH > 0 && C % NH == 0, "attention: C={} is not a multiple of NH={}", C, NH);
  const int64_t hs = C / NH;
  return AttentionShape{T, C, NH, hs, 1.0f / std::sqrt(static_cast<float>(hs))};
}

}  // namespace

void CpuKernels::attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T,
                                   int64_t C, int64_t NH) {
  const AttentionShape s = attention_shape(T, C, NH);
  const int64_t pairs = B * NH;
  if (pairs <= 0 || T <= 0) return;
  const int64_t scratch_floats = attention_forward_scratch(T, s.hs);
  parallel_with_scratch(pairs, scratch_floats, [&](int64_t bh, float* scratch) {
    const int64_t b = bh / NH, h = bh % NH;
    const HeadView hv(qkv, b, h, s);
    float* o = out + b * T * C + h * s.hs;
    float* a = att + att_offset(b, h, s);
    run_isa(isa_, [&](auto lanes) {
      attention_forward_head<typename decltype(lanes)::type>(o, a, hv, s, scratch);
    });
    if (act_ != DType::kF32) {  // this head's outputs, while in cache
      for (int64_t t = 0; t < T; ++t) round_act(o + t * C, 0, s.hs);
      if (att) round_act(a, 0, T * T);
    }
  });
}

void CpuKernels::attention_backward(float* dqkv, const float* dout, const float* qkv,
                                    const float* att, int64_t B, int64_t T, int64_t C, int64_t NH) {
  const AttentionShape s = attention_shape(T, C, NH);
  const int64_t pairs = B * NH;
  if (pairs <= 0 || T <= 0) return;
  // Each (b, h) pair owns its slices of dqkv, so pairs run in parallel without conflicts.
  const int64_t scratch_floats = attention_backward_scratch(T, s.hs);
  parallel_with_scratch(pairs, scratch_floats, [&](int64_t bh, float* scratch) {
    const int64_t b = bh / NH, h = bh % NH;
    const HeadView hv(qkv, b, h, s);
    float* d = dqkv + b * T * 3 * C + h * s.hs;
    run_isa(isa_, [&](auto lanes) {
      attention_backward_head<typename decltype(lanes)::type>(
          d, dout + b * T * C + h * s.hs, att + att_offset(b, h, s), hv, s, scratch);
    });
    if (act_ != DType::kF32)  // this head's slices of dq, dk and dv
      for (int64_t t = 0; t < T; ++t)
        for (int64_t part = 0; part < 3; ++part) round_act(d + t * 3 * C + part * C, 0, s.hs);
  });
}

}  // namespace zt
