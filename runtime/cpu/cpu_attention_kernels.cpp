// CpuKernels, causal self-attention, grouped-query (GQA) with multi-head attention as the case
// NKV == NH: forward (scores, causal softmax, att · V) and backward, one (batch, key/value head)
// pair per task, which handles the key/value head's group of query heads in increasing order, so
// a key/value head's gradient sums its group in a fixed order and tasks never share an output.
// Documents packed in a row (Batch::positions) are attended one after another, each as a
// sequence of its own: the kernels below run on the document's keys only. A sliding window
// (window > 0) narrows each query's keys further to its last `window` (kernel_entries.h): a
// block of queries runs from its first query's first key, and the keys a later query of the
// block does not see get probability 0, so they add exact zeros to every sum.
// Not here: the GEMMs of the projections around it (matmul, cpu_matmul_kernels.cpp), rotary
// embeddings (cpu_nn_kernels.cpp) and any other op.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cpu_parallel.h"
#include "runtime/cpu/cpu_simd.h"
#include "runtime/status.h"

namespace zt {
using namespace cpu;
namespace {

// Attention, one (batch, key/value head) pair per task, queries in blocks of kQueryBlock. The
// pair's K and V are first copied to contiguous per-thread scratch (transposed where the inner
// loop runs over keys), once for the whole group, so the inner loops read contiguous memory
// instead of rows R apart. The block kernels
// below are small GEMM tiles: 4 queries × 2 vectors of accumulators in registers. Every output
// element is still one sum in a fixed order (over the head dimension, or over keys/queries in
// increasing index), so the blocking and the lane type never change its bits.

constexpr int kQueryBlock = 4;
// Columns past T in each row of a transposed K or V copy: block_dot's last vector reads them.
constexpr int64_t kTransposedPad = 16;

struct AttentionShape {
  int64_t T, NH, NKV, hs;  // hs: head_dim
  int64_t G;               // NH / NKV: query heads per key/value head
  int64_t R;               // (NH + 2·NKV)·hs: row stride of qkv (q heads, k heads, v heads)
  int64_t HD;              // NH·hs: row stride of out and dout
  int64_t Tt;              // T + kTransposedPad: row stride of a transposed K or V copy
  float scale;             // 1/sqrt(hs)
  int64_t window;          // > 0: a query reads its last `window` keys at most; <= 0: all
};

// The first key query t reads, in the document that starts at token w: w, or with a sliding
// window the first of its last s.window keys when that is later.
inline int64_t first_key_of(int64_t w, int64_t t, const AttentionShape& s) {
  return s.window > 0 ? std::max(w, t - s.window + 1) : w;
}

// Copies T rows of hs floats, src rows `stride` apart, to dst (T, hs).
inline void gather_rows(float* dst, const float* src, int64_t stride, int64_t T, int64_t hs) {
  for (int64_t t = 0; t < T; ++t)
    std::memcpy(dst + t * hs, src + t * stride, static_cast<size_t>(hs) * sizeof(float));
}

// Copies T rows of hs floats, src rows `stride` apart, to dst (hs, ldd) transposed; columns
// T .. ldd-1 of each row are zeroed (the padding block_dot reads past its last column).
inline void gather_transposed(float* dst, int64_t ldd, const float* src, int64_t stride, int64_t T,
                              int64_t hs) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < hs; ++d) dst[d * ldd + t] = src[t * stride + d];
  for (int64_t d = 0; d < hs; ++d) std::fill(dst + d * ldd + T, dst + (d + 1) * ldd, 0.0f);
}

// y[q·ldy + j] = scale · sum_{d < hs} a[q·lda + d]·bt[d·ldb + j], for q < Q, j < n.
// (bt is K or V transposed; a holds Q query rows or Q output-gradient rows.) Columns go in
// vectors of W with the Q sums interleaved, so no chain waits on itself; the last vector reads
// up to W - 1 columns past n (bt's rows must have them: kTransposedPad) and stores n - j lanes.
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
  for (; j < n; j += W) {
    V s0[Q];
    const V b0 = load<V>(bt + j);
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q) s0[q] = a[q * lda] * b0;
    for (int64_t d = 1; d < hs; ++d) {
      const V c0 = load<V>(bt + d * ldb + j);
#pragma GCC unroll 4
      for (int q = 0; q < Q; ++q) s0[q] = s0[q] + a[q * lda + d] * c0;
    }
    const int64_t m = std::min(W, n - j);
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q) store_first<V>(y + q * ldy + j, s0[q] * scale, m);
  }
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

// p[0, n) = softmax(p[0, n)); p[n, T) = 0. Rows are short (n <= T), so the exponentials and
// the scaling run in whole vectors, the last one partial, rather than leave a scalar tail.
template <class V>
inline void softmax_causal_row(float* p, int64_t n, int64_t T) {
  constexpr int64_t W = kWidth<V>;
  const float mx = row_max<V>(p, n);
  for (int64_t j = 0; j < n; j += W) {
    const int64_t m = std::min(W, n - j);
    store_first<V>(p + j, exp_bounded<V>(load_first<V>(p + j, m) - mx), m);
  }
  const float inv_sum = 1.0f / lane_sum<V>(n, [&](auto lanes, int64_t j) {
                          using T_ = typename decltype(lanes)::type;
                          return load<T_>(p + j);
                        });
  for (int64_t j = 0; j < n; j += W) {
    const int64_t m = std::min(W, n - j);
    store_first<V>(p + j, load_first<V>(p + j, m) * inv_sum, m);
  }
  std::fill(p + n, p + T, 0.0f);
}

// Inputs of query head h of batch b and its key/value head h / G. Rows of q, k, v (and of dq)
// are R apart; rows of out, dout HD.
struct HeadView {
  const float* q;
  const float* k;
  const float* v;
  HeadView(const float* qkv, int64_t b, int64_t h, const AttentionShape& s)
      : q(qkv + b * s.T * s.R + h * s.hs), k(qkv + b * s.T * s.R + s.HD + (h / s.G) * s.hs),
        v(k + s.NKV * s.hs) {}
};
// The (T, T) block of att of pair (b, h).
inline int64_t att_offset(int64_t b, int64_t h, const AttentionShape& s) {
  return (b * s.NH + h) * s.T * s.T;
}

constexpr int64_t attention_forward_scratch(int64_t T, int64_t hs) {
  return hs * (T + kTransposedPad) + hs * T;
}
constexpr int64_t attention_backward_scratch(int64_t T, int64_t hs) {
  return hs * (T + kTransposedPad) + 3 * hs * T + 2 * kQueryBlock * T;
}

// The end of the document that starts at token `start` of a row: the next token at position 0,
// or T (positions: the row's, checked by check_positions; null: the row is one document).
inline int64_t document_end(const int32_t* positions, int64_t start, int64_t T) {
  if (!positions) return T;
  int64_t end = start + 1;
  while (end < T && positions[end] != 0) ++end;
  return end;
}

// Queries t0 .. t0+Q-1 of the document starting at token w (their keys lo .. t0+Q-1, lo the
// first query's first key): scores into their att rows, softmax over each query's own keys,
// out rows = att · V. att's columns before a query's first key stay 0.
template <class V, int Q>
void attention_forward_queries(float* out, float* att, const HeadView& hv, const float* kt,
                               const float* vc, int64_t w, int64_t t0, const AttentionShape& s) {
  const int64_t T = s.T, lo = first_key_of(w, t0, s), n0 = t0 - lo + 1;
  float* p = att + t0 * T;
  block_dot<V, Q>(p + lo, T, hv.q + t0 * s.R, s.R, kt + lo, s.Tt, s.hs, n0 + Q - 1, s.scale);
  for (int q = 0; q < Q; ++q) {
    const int64_t first = first_key_of(w, t0 + q, s);
    std::fill(p + q * T, p + q * T + first, 0.0f);
    softmax_causal_row<V>(p + q * T + first, t0 + q - first + 1, T - first);
  }
  block_combine<V, Q, false>(out + t0 * s.HD, s.HD, p + lo, T, vc + lo * s.hs, s.hs, n0, s.hs);
}

// The pair's K and V, gathered once for its group: kt (hs, Tt) transposed, vc (T, hs).
inline void gather_kv(float* kt, float* vc, const HeadView& hv, const AttentionShape& s) {
  gather_transposed(kt, s.Tt, hv.k, s.R, s.T, s.hs);
  gather_rows(vc, hv.v, s.R, s.T, s.hs);
}

// kt, vc: the pair's K and V as gather_kv leaves them. out points at (b, 0, h·hs), att at the
// (b, h) block (T, T); positions at row b's (null: one document). Each document's queries in
// blocks of kQueryBlock from its first token.
template <class V>
void attention_forward_head(float* out, float* att, const HeadView& hv, const AttentionShape& s,
                            const float* kt, const float* vc, const int32_t* positions) {
  for (int64_t w = 0, end; w < s.T; w = end) {
    end = document_end(positions, w, s.T);
    int64_t t0 = w;
    for (; t0 + kQueryBlock <= end; t0 += kQueryBlock)
      attention_forward_queries<V, kQueryBlock>(out, att, hv, kt, vc, w, t0, s);
    for (; t0 < end; ++t0) attention_forward_queries<V, 1>(out, att, hv, kt, vc, w, t0, s);
  }
}

struct HeadGrads {
  float* dq;        // rows R apart, like q
  float* dk;        // (T, hs) scratch of the key/value head, summed over its group
  float* dv;        // (T, hs) likewise
  const float* dy;  // dout rows of this query head, HD apart
};

// Queries t0 .. t0+Q-1 of the document starting at token w (their keys lo .. t0+Q-1, as in
// attention_forward_queries; p is 0 on the keys a query does not read):
// dp = dy·Vᵀ, ds = p·(dp - sum p·dp)·scale, dq += ds·K, dk += dsᵀ·q, dv += pᵀ·dy.
template <class V, int Q>
void attention_backward_queries(const HeadGrads& g, const HeadView& hv, const float* att,
                                const float* vt, const float* kc, float* dp, float* ds, int64_t w,
                                int64_t t0, const AttentionShape& s) {
  const int64_t T = s.T, lo = first_key_of(w, t0, s), n0 = t0 - lo + 1;
  const float* p = att + t0 * T + lo;
  const float* dy = g.dy + t0 * s.HD;
  block_dot<V, Q>(dp, T, dy, s.HD, vt + lo, s.Tt, s.hs, n0 + Q - 1, 1.0f);
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
  const float* k = kc + lo * s.hs;
  block_combine<V, Q, true>(g.dq + t0 * s.R, s.R, ds, T, k, s.hs, n0, s.hs);
  block_rank_update<V, Q>(g.dk + lo * s.hs, s.hs, ds, T, hv.q + t0 * s.R, s.R, n0, s.hs);
  block_rank_update<V, Q>(g.dv + lo * s.hs, s.hs, p, T, dy, s.HD, n0, s.hs);
}

// Query head h's queries, against its key/value head's vt, kc (gathered once for the group);
// dk, dv (T, hs each) accumulate the group's contributions. dp, ds: (kQueryBlock, T) scratch,
// used from column 0 for each block (a document's keys). Documents (positions: row b's, null:
// one) as in attention_forward_head.
template <class V>
void attention_backward_head(const HeadGrads& g, const HeadView& hv, const float* att,
                             const float* vt, const float* kc, float* dp, float* ds,
                             const AttentionShape& s, const int32_t* positions) {
  for (int64_t w = 0, end; w < s.T; w = end) {
    end = document_end(positions, w, s.T);
    int64_t t0 = w;
    for (; t0 + kQueryBlock <= end; t0 += kQueryBlock)
      attention_backward_queries<V, kQueryBlock>(g, hv, att, vt, kc, dp, ds, w, t0, s);
    for (; t0 < end; ++t0) attention_backward_queries<V, 1>(g, hv, att, vt, kc, dp, ds, w, t0, s);
  }
}

AttentionShape attention_shape(int64_t T, int64_t NH, int64_t NKV, int64_t hs, int64_t window) {
  ZT_ASSERT(NH > 0 && NKV > 0 && NH % NKV == 0 && hs > 0,
            "attention: NH={} is not a positive multiple of NKV={} (head_dim {})", NH, NKV, hs);
  return AttentionShape{T,
                        NH,
                        NKV,
                        hs,
                        NH / NKV,
                        (NH + 2 * NKV) * hs,
                        NH * hs,
                        T + kTransposedPad,
                        1.0f / std::sqrt(static_cast<float>(hs)),
                        window < T ? window : 0};  // a window of T or more reads every key
}

}  // namespace

void CpuKernels::attention_forward(Operand out, Operand att, ConstOperand qkv, int64_t B, int64_t T,
                                   int64_t C, int64_t NH, const int32_t* positions) {
  ZT_ASSERT(NH > 0 && C % NH == 0, "attention: C={} is not a multiple of NH={}", C, NH);
  gqa_attention_forward(out, att, qkv, B, T, NH, NH, C / NH, positions);
}

void CpuKernels::attention_backward(Operand dqkv, ConstOperand dout, ConstOperand qkv,
                                    ConstOperand att, int64_t B, int64_t T, int64_t C, int64_t NH,
                                    const int32_t* positions) {
  ZT_ASSERT(NH > 0 && C % NH == 0, "attention: C={} is not a multiple of NH={}", C, NH);
  gqa_attention_backward(dqkv, dout, qkv, att, B, T, NH, NH, C / NH, positions);
}

// The probabilities, packable: the CPU has no other attention.
AttentionRecord CpuKernels::attention_record(int64_t B, int64_t T, int64_t NH, int64_t, int64_t,
                                             bool, int64_t) {
  return {B * NH * T * T, true};
}

void CpuKernels::gqa_attention_forward(Operand out_op, Operand att_op, ConstOperand qkv_op,
                                       int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hd,
                                       const int32_t* positions, int64_t window) {
  const AttentionShape s = attention_shape(T, NH, NKV, hd, window);
  const int64_t pairs = B * NKV;
  if (pairs <= 0 || T <= 0) return;
  check_positions(positions, B, T, "attention");
  ActStage stage(*this);
  float* out = stage.out(out_op, B * T * s.HD);
  float* att = stage.out(att_op, B * NH * T * T);
  const float* qkv = stage.in(qkv_op, B * T * s.R);
  parallel_with_scratch(pairs, attention_forward_scratch(T, s.hs), [&](int64_t bj, float* scratch) {
    const int64_t b = bj / NKV, j = bj % NKV;
    float* kt = scratch;           // (hs, Tt): K transposed
    float* vc = kt + s.hs * s.Tt;  // (T, hs)
    gather_kv(kt, vc, HeadView(qkv, b, j * s.G, s), s);
    for (int64_t h = j * s.G; h < (j + 1) * s.G; ++h) {
      const HeadView hv(qkv, b, h, s);
      float* o = out + b * T * s.HD + h * s.hs;
      float* a = att + att_offset(b, h, s);
      run_isa(isa_, [&](auto lanes) {
        attention_forward_head<typename decltype(lanes)::type>(
            o, a, hv, s, kt, vc, positions ? positions + b * T : nullptr);
      });
      if (act_ != DType::kF32) {  // this head's outputs, while in cache
        for (int64_t t = 0; t < T; ++t) round_act(o + t * s.HD, 0, s.hs);
        if (att) round_act(a, 0, T * T);
      }
    }
  });
}

void CpuKernels::gqa_attention_backward(Operand dqkv_op, ConstOperand dout_op, ConstOperand qkv_op,
                                        ConstOperand att_op, int64_t B, int64_t T, int64_t NH,
                                        int64_t NKV, int64_t hd, const int32_t* positions,
                                        int64_t window) {
  const AttentionShape s = attention_shape(T, NH, NKV, hd, window);
  const int64_t pairs = B * NKV;
  if (pairs <= 0 || T <= 0) return;
  check_positions(positions, B, T, "attention");
  ActStage stage(*this);
  float* dqkv = stage.inout(dqkv_op, B * T * s.R);
  const float* dout = stage.in(dout_op, B * T * s.HD);
  const float* qkv = stage.in(qkv_op, B * T * s.R);
  const float* att = stage.in(att_op, B * NH * T * T);
  // Each (b, key/value head) pair owns its slices of dqkv: its group's q parts and its k and v.
  const int64_t hs = s.hs;
  parallel_with_scratch(pairs, attention_backward_scratch(T, hs), [&](int64_t bj, float* scratch) {
    const int64_t b = bj / NKV, j = bj % NKV;
    float* vt = scratch;         // (hs, Tt): V transposed
    float* kc = vt + hs * s.Tt;  // (T, hs)
    float* dk = kc + hs * T;     // (T, hs), summed over the group here, added to dqkv at the end
    float* dv = dk + hs * T;     // (T, hs)
    float* dp = dv + hs * T;     // (kQueryBlock, T)
    float* ds = dp + kQueryBlock * T;
    const HeadView first(qkv, b, j * s.G, s);
    gather_transposed(vt, s.Tt, first.v, s.R, T, hs);
    gather_rows(kc, first.k, s.R, T, hs);
    std::fill(dk, dk + 2 * hs * T, 0.0f);
    float* dqkv_b = dqkv + b * T * s.R;
    const int32_t* positions_b = positions ? positions + b * T : nullptr;
    for (int64_t h = j * s.G; h < (j + 1) * s.G; ++h) {
      const HeadGrads g{dqkv_b + h * hs, dk, dv, dout + b * T * s.HD + h * hs};
      run_isa(isa_, [&](auto lanes) {
        attention_backward_head<typename decltype(lanes)::type>(
            g, HeadView(qkv, b, h, s), att + att_offset(b, h, s), vt, kc, dp, ds, s, positions_b);
      });
    }
    run_isa(isa_, [&](auto lanes) {
      using V = typename decltype(lanes)::type;
      for (int64_t t = 0; t < T; ++t) {
        float* dk_row = dqkv_b + t * s.R + s.HD + j * hs;
        float* dv_row = dk_row + s.NKV * hs;
        simd_loop<V>(0, hs, [&](auto l, int64_t d) {
          using T_ = typename decltype(l)::type;
          store<T_>(dk_row + d, load<T_>(dk_row + d) + load<T_>(dk + t * hs + d));
          store<T_>(dv_row + d, load<T_>(dv_row + d) + load<T_>(dv + t * hs + d));
        });
      }
    });
    if (act_ != DType::kF32)  // this pair's slices of dq, dk and dv
      for (int64_t t = 0; t < T; ++t) {
        float* row = dqkv_b + t * s.R;
        for (int64_t h = j * s.G; h < (j + 1) * s.G; ++h) round_act(row + h * hs, 0, hs);
        round_act(row + s.HD + j * hs, 0, hs);
        round_act(row + s.HD + (s.NKV + j) * hs, 0, hs);
      }
  });
}

}  // namespace zt

namespace zt {

// One (row, query head, new token) per task: the token's key and value heads into the caches
// first (a pass of its own, so every task reads complete caches), then scores over its keys
// (each a dot product over hd in increasing d), the softmax (max, exponentials, their sum in
// increasing key order), and the weighted sum of the cached values in increasing key order.
void CpuKernels::gqa_attention_decode(Operand out_op, Operand k_cache_op, Operand v_cache_op,
                                      ConstOperand qkv_op, int64_t B, int64_t T, int64_t past,
                                      int64_t S, int64_t NH, int64_t NKV, int64_t hd,
                                      int64_t window) {
  ZT_ASSERT(NH > 0 && NKV > 0 && NH % NKV == 0 && hd > 0,
            "attention: NH={} is not a positive multiple of NKV={} (head_dim {})", NH, NKV, hd);
  ZT_ASSERT(past >= 0 && past + T <= S, "attention decode: {} + {} tokens past the cache's {}",
            past, T, S);
  if (B <= 0 || T <= 0) return;
  const int64_t G = NH / NKV, HD = NH * hd, KV = NKV * hd, R = HD + 2 * KV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  ActStage stage(*this);
  float* out = stage.out(out_op, B * T * HD);
  float* k_cache = stage.inout(k_cache_op, B * S * KV);
  float* v_cache = stage.inout(v_cache_op, B * S * KV);
  const float* qkv = stage.in(qkv_op, B * T * R);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const float* row = qkv + (b * T + t) * R;
      const size_t bytes = static_cast<size_t>(KV) * sizeof(float);
      std::memcpy(k_cache + (b * S + past + t) * KV, row + HD, bytes);
      std::memcpy(v_cache + (b * S + past + t) * KV, row + HD + KV, bytes);
    }
  const int64_t keys_max = past + T;
  parallel_with_scratch(B * NH * T, keys_max, [&](int64_t i, float* p) {
    const int64_t b = i / (NH * T), h = (i / T) % NH, t = i % T, pos = past + t;
    const int64_t lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0, n = pos - lo + 1;
    const float* q = qkv + (b * T + t) * R + h * hd;
    const float* kc = k_cache + (b * S + lo) * KV + (h / G) * hd;
    const float* vc = v_cache + (b * S + lo) * KV + (h / G) * hd;
    float mx = -INFINITY;
    for (int64_t u = 0; u < n; ++u) {
      float dot = 0.0f;
      for (int64_t d = 0; d < hd; ++d) dot += q[d] * kc[u * KV + d];
      p[u] = dot * scale;
      mx = std::max(mx, p[u]);
    }
    float sum = 0.0f;
    for (int64_t u = 0; u < n; ++u) sum += (p[u] = std::exp(p[u] - mx));
    const float inv_sum = 1.0f / sum;
    float* o = out + (b * T + t) * HD + h * hd;
    std::fill(o, o + hd, 0.0f);
    for (int64_t u = 0; u < n; ++u)
      for (int64_t d = 0; d < hd; ++d) o[d] += p[u] * inv_sum * vc[u * KV + d];
    if (act_ != DType::kF32) round_act(o, 0, hd);
  });
}

}  // namespace zt
