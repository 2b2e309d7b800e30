// CpuKernels, the neural-network ops: embedding, layer norm, RMSNorm, GELU, SwiGLU, rotary
// position embeddings and softmax cross-entropy (matmul: cpu_matmul_kernels.cpp). Parameters arrive
// in their stored dtype: the small ones (layer-norm weight and bias, a row of an embedding table)
// are widened to fp32 where they are read, and 16-bit gradients receive one rounded addition per
// element per call. Row kernels handle a row whole on one thread, so their reductions never depend
// on the thread count; column reductions (bias, layer-norm and RMSNorm weights, embedding tables)
// add rows in order. Not here: attention (cpu_attention_kernels.cpp), element-wise ops and flat
// reductions (cpu_elementwise_kernels.cpp), optimizers (cpu_optimizer_kernels.cpp).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cpu_parallel.h"
#include "runtime/cpu/cpu_rmsnorm_rows.h"
#include "runtime/cpu/cpu_simd.h"
#include "runtime/status.h"

namespace zt {
using namespace cpu;
namespace {

constexpr int64_t kLayerNormRowBlock = 32;  // fixed row blocks of layernorm's dweight/dbias
constexpr int64_t kSoftmaxChunk = 2048;     // softmax_cross_entropy's exp/sum chunk (L1)

// ---------------------------------------------------------------------------------------------
// GELU, element-wise, generic in the lane type V.

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

// GPT-2's GELU, 0.5·x·(1 + tanh(u)), u = sqrt(2/pi)·(x + 0.044715·x³), evaluated as
// x·sigmoid(2u) = x / (1 + e^(-2u)): the same function, without tanh's cancellation near -1.
template <class V>
void gelu_forward_range(float* out, const float* inp, int64_t begin, int64_t end) {
  simd_loop<V>(begin, end, [&](auto lanes, int64_t i) {
    using T = typename decltype(lanes)::type;
    const T x = load<T>(inp + i);
    const T u = kGeluScale * (x + kGeluCubic * x * x * x);
    store<T>(out + i, x / (1.0f + exp_bounded<T>(-2.0f * u)));
  });
}

// d/dx [x·s], s = sigmoid(2u) = 1/(1+e), e = e^(-2u): s + 2·x·s·(1-s)·du/dx, and 1-s = e·s.
template <class V>
void gelu_backward_range(float* dinp, const float* inp, const float* dout, int64_t begin,
                         int64_t end) {
  simd_loop<V>(begin, end, [&](auto lanes, int64_t i) {
    using T = typename decltype(lanes)::type;
    const T x = load<T>(inp + i);
    const T u = kGeluScale * (x + kGeluCubic * x * x * x);
    const T e = exp_bounded<T>(-2.0f * u);
    const T s = 1.0f / (1.0f + e);
    const T du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    const T grad = s * (1.0f + 2.0f * x * (e * s) * du);
    store<T>(dinp + i, load<T>(dinp + i) + load<T>(dout + i) * grad);
  });
}

// SwiGLU over rows of gate_up (2F wide: gate, then up): out = silu(g)·u with silu(g) =
// g / (1 + e^-g); the range [begin, end) is of columns f < F of one row.
template <class V>
void swiglu_forward_range(float* out, const float* gate, const float* up, int64_t begin,
                          int64_t end) {
  simd_loop<V>(begin, end, [&](auto lanes, int64_t i) {
    using T = typename decltype(lanes)::type;
    const T g = load<T>(gate + i);
    store<T>(out + i, g / (1.0f + exp_bounded<T>(-g)) * load<T>(up + i));
  });
}

// d up += dout·silu(g); d gate += (dout·u)·s·(1 + g·(e·s)), s = 1/(1+e), e = e^-g, 1-s = e·s.
template <class V>
void swiglu_backward_range(float* dgate, float* dup, const float* gate, const float* up,
                           const float* dout, int64_t begin, int64_t end) {
  simd_loop<V>(begin, end, [&](auto lanes, int64_t i) {
    using T = typename decltype(lanes)::type;
    const T g = load<T>(gate + i), dy = load<T>(dout + i);
    const T e = exp_bounded<T>(-g);
    const T s = 1.0f / (1.0f + e);
    const T silu = g / (1.0f + e);
    const T dsilu = s * (1.0f + g * (e * s));
    store<T>(dgate + i, load<T>(dgate + i) + dy * load<T>(up + i) * dsilu);
    store<T>(dup + i, load<T>(dup + i) + dy * silu);
  });
}

// ---------------------------------------------------------------------------------------------
// Row kernels (a row is handled whole by one thread, so its reductions never depend on threads).

constexpr float kLayerNormEps = 1e-5f;

// One row of C: out = (x - mean)·rstd·w + b.
template <class V>
void layernorm_forward_row(float* out, float* mean_out, float* rstd_out, const float* x,
                           const float* w, const float* b, int64_t C) {
  const float inv_c = 1.0f / static_cast<float>(C);
  const float mean = lane_sum<V>(C,
                                 [&](auto lanes, int64_t i) {
                                   using T = typename decltype(lanes)::type;
                                   return load<T>(x + i);
                                 }) *
                     inv_c;
  const float var = lane_sum<V>(C,
                                [&](auto lanes, int64_t i) {
                                  using T = typename decltype(lanes)::type;
                                  const T d = load<T>(x + i) - mean;
                                  return d * d;
                                }) *
                    inv_c;
  const float rstd = 1.0f / std::sqrt(var + kLayerNormEps);
  simd_loop<V>(0, C, [&](auto lanes, int64_t i) {
    using T = typename decltype(lanes)::type;
    store<T>(out + i, (load<T>(x + i) - mean) * rstd * load<T>(w + i) + load<T>(b + i));
  });
  if (mean_out) *mean_out = mean;
  if (rstd_out) *rstd_out = rstd;
}

// One row: dinp += (dnorm - mean(dnorm) - norm·mean(dnorm·norm))·rstd with dnorm = w·dout, and
// the row's dweight/dbias contributions added into the block partials pdw, pdb (C each).
template <class V>
void layernorm_backward_row(float* dinp, float* pdw, float* pdb, const float* dout, const float* x,
                            const float* w, float mean, float rstd, int64_t C) {
  const float inv_c = 1.0f / static_cast<float>(C);
  const float dnorm_mean = lane_sum<V>(C,
                                       [&](auto lanes, int64_t i) {
                                         using T = typename decltype(lanes)::type;
                                         return load<T>(w + i) * load<T>(dout + i);
                                       }) *
                           inv_c;
  const float dnorm_norm_mean = lane_sum<V>(C,
                                            [&](auto lanes, int64_t i) {
                                              using T = typename decltype(lanes)::type;
                                              const T norm = (load<T>(x + i) - mean) * rstd;
                                              return load<T>(w + i) * load<T>(dout + i) * norm;
                                            }) *
                                inv_c;
  simd_loop<V>(0, C, [&](auto lanes, int64_t i) {
    using T = typename decltype(lanes)::type;
    const T dy = load<T>(dout + i);
    const T norm = (load<T>(x + i) - mean) * rstd;
    const T dnorm = load<T>(w + i) * dy;
    store<T>(dinp + i, load<T>(dinp + i) + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rstd);
    store<T>(pdw + i, load<T>(pdw + i) + dy * norm);
    store<T>(pdb + i, load<T>(pdb + i) + dy);
  });
}

// Rotary embedding of one token's heads (`heads` of hd, consecutive) by the angles of its
// position: cos_t, sin_t (hd/2 each). sign -1 rotates back (rope_backward).
template <class V>
void rope_row(float* x, const float* cos_t, const float* sin_t, int64_t heads, int64_t hd,
              float sign) {
  const int64_t half = hd / 2;
  for (int64_t h = 0; h < heads; ++h) {
    float* x1 = x + h * hd;
    float* x2 = x1 + half;
    simd_loop<V>(0, half, [&](auto lanes, int64_t i) {
      using T = typename decltype(lanes)::type;
      const T a = load<T>(x1 + i), b = load<T>(x2 + i);
      const T c = load<T>(cos_t + i), sn = load<T>(sin_t + i) * sign;
      store<T>(x1 + i, a * c - b * sn);
      store<T>(x2 + i, b * c + a * sn);
    });
  }
}

// One row of logits (Vp wide, the first `vocab` real): loss = logsumexp - logit[target]; with
// kGradient the row becomes dloss·(softmax - onehot) with the padding zeroed. Passes: max (from
// memory), exp and sum (the row is then in L2), scale.
template <class V>
float softmax_cross_entropy_row(float* row, int32_t target, int64_t vocab, int64_t padded,
                                LogitsOutput output, float dloss) {
  const float target_logit = row[target];
  const float mx = row_max<V>(row, vocab);
  const bool write_grad = output == LogitsOutput::kGradient;
  alignas(64) float chunk[kSoftmaxChunk];
  // Lanes by position in the row (chunks are multiples of 16 long), as lane_sum does.
  LaneSums<V> acc;
  const float* tail = nullptr;  // the ragged end of the last chunk
  int64_t tail_count = 0;
  for (int64_t c0 = 0; c0 < vocab; c0 += kSoftmaxChunk) {
    const int64_t len = std::min(kSoftmaxChunk, vocab - c0);
    float* e = write_grad ? row + c0 : chunk;
    simd_loop<V>(0, len, [&](auto lanes, int64_t i) {
      using T = typename decltype(lanes)::type;
      store<T>(e + i, exp_bounded<T>(load<T>(row + c0 + i) - mx));
    });
    const int64_t full = len / 16 * 16;
    for (int64_t i = 0; i < full; i += 16) acc.add16(e + i);
    tail = e + full;
    tail_count = len - full;
  }
  const float sum = acc.total(tail, tail_count);
  if (write_grad) {
    const float target_p = row[target] / sum;
    const float k = dloss / sum;
    simd_loop<V>(0, vocab, [&](auto lanes, int64_t i) {
      using T = typename decltype(lanes)::type;
      store<T>(row + i, load<T>(row + i) * k);
    });
    row[target] = (target_p - 1.0f) * dloss;
    std::fill(row + vocab, row + padded, 0.0f);
  }
  return static_cast<float>(static_cast<double>(mx) + std::log(static_cast<double>(sum)) -
                            static_cast<double>(target_logit));
}

}  // namespace

void CpuKernels::check_positions(const int32_t* positions, int64_t B, int64_t T, const char* kernel,
                                 bool any_start) {
  if (!positions) return;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int32_t p = positions[b * T + t];
      const bool starts = t == 0 && (p == 0 || (any_start && p > 0));
      ZT_ASSERT(p == 0 || starts || (t > 0 && p == positions[b * T + t - 1] + 1),
                "{}: positions[{}] (row {}, token {}) is {}; a document's positions count 0, 1, "
                "2, ... from its first token, and every row starts one{}",
                kernel, b * T + t, b, t, p, any_start ? " (or continues one)" : "");
    }
}

int64_t CpuKernels::position_count(const int32_t* positions, int64_t n, int64_t T) {
  if (!positions) return T;
  int64_t count = T;
  for (int64_t i = 0; i < n; ++i) count = std::max<int64_t>(count, int64_t(positions[i]) + 1);
  return count;
}

void CpuKernels::embedding_forward(Operand out_op, const int32_t* tokens, ConstOperand wte,
                                   ConstOperand wpe, int64_t B, int64_t T, int64_t C,
                                   const int32_t* positions) {
  check_positions(positions, B, T, "embedding_forward", true);
  ActStage stage(*this);
  float* out = stage.out(out_op, B * T * C);
  const bool wide = wte.dtype == DType::kF32 && (!wpe || wpe.dtype == DType::kF32);
  parallel_with_scratch(B * T, wide ? 0 : 2 * C, [&](int64_t bt, float* scratch) {
    const ConstOperand e_row = wte.at(int64_t(tokens[bt]) * C);
    const int64_t position = positions ? positions[bt] : bt % T;
    const ConstOperand p_row = wpe ? wpe.at(position * C) : ConstOperand();
    const float* e = static_cast<const float*>(e_row.data);
    const float* p = static_cast<const float*>(p_row.data);
    if (!wide) {
      e = widened(e_row, C, scratch);
      p = p ? widened(p_row, C, scratch + C) : nullptr;
    }
    float* o = out + bt * C;
    if (p) {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) o[c] = e[c] + p[c];
    } else {
      std::copy(e, e + C, o);  // no position table: the row itself (no -0 + 0 = +0)
    }
    round_act(o, 0, C);
  });
}

// dwte: one task per block of channels, walking the tokens in order, so repeated tokens add in
// the same order whatever the thread count (no atomics). A 16-bit dwte row is summed in fp32
// (its old value, then the batch's contributions in token order: the additions of the fp32
// path) and rounded once: each distinct token of the batch owns one fp32 row of the task's
// scratch. dwpe: one task per position, adding the tokens at that position in token order.
void CpuKernels::embedding_backward(Operand dwte, Operand dwpe, ConstOperand dout_op,
                                    const int32_t* tokens, int64_t B, int64_t T, int64_t C,
                                    const int32_t* positions) {
  ZT_ASSERT(!dwte.fresh && !dwpe.fresh, "embedding_backward: a fresh gradient (kernels.h)");
  const int64_t BT = B * T;
  ActStage stage(*this);
  const float* dout = stage.in(dout_op, BT * C);
  if (dwte && dwte.dtype == DType::kF32) {
    float* table = static_cast<float*>(dwte.data);
    parallel_ranges(C, kColumnBlock, [&](int64_t c0, int64_t c1) {
      for (int64_t bt = 0; bt < BT; ++bt) {
        float* d = table + int64_t(tokens[bt]) * C;
        const float* g = dout + bt * C;
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) d[c] += g[c];
      }
    });
  } else if (dwte) {
    // slot[bt]: the index of the first position holding the same token.
    std::vector<int64_t> slot(static_cast<size_t>(BT));
    {
      std::unordered_map<int32_t, int64_t> first;
      first.reserve(static_cast<size_t>(BT));
      for (int64_t bt = 0; bt < BT; ++bt)
        slot[bt] = first.try_emplace(tokens[bt], bt).first->second;
    }
    const int64_t blocks = (C + kColumnBlock - 1) / kColumnBlock;
    parallel_with_scratch(blocks, BT * kColumnBlock, [&](int64_t blk, float* acc) {
      const int64_t c0 = blk * kColumnBlock, w = std::min(C, c0 + kColumnBlock) - c0;
      for (int64_t bt = 0; bt < BT; ++bt) {
        float* a = acc + slot[bt] * kColumnBlock;
        if (slot[bt] == bt) widen_range(a, dwte.at(int64_t(tokens[bt]) * C + c0), w);
        const float* g = dout + bt * C + c0;
#pragma omp simd
        for (int64_t c = 0; c < w; ++c) a[c] += g[c];
      }
      for (int64_t bt = 0; bt < BT; ++bt)
        if (slot[bt] == bt)
          narrow_range(dwte.at(int64_t(tokens[bt]) * C + c0), acc + bt * kColumnBlock, w);
    });
  }
  if (!dwpe) return;
  check_positions(positions, B, T, "embedding_backward");
  // at[first[t] .. first[t+1]): the tokens at position t, in token order (a stable counting
  // sort by position); without positions, b·T + t for each b.
  std::vector<int64_t> at, first;
  if (positions) {
    first.assign(static_cast<size_t>(T + 1), 0);
    for (int64_t bt = 0; bt < BT; ++bt) ++first[positions[bt] + 1];
    for (int64_t t = 0; t < T; ++t) first[t + 1] += first[t];
    at.resize(static_cast<size_t>(BT));
    std::vector<int64_t> next(first.begin(), first.end() - 1);
    for (int64_t bt = 0; bt < BT; ++bt) at[next[positions[bt]]++] = bt;
  }
  parallel_with_scratch(T, dwpe.dtype == DType::kF32 ? 0 : C, [&](int64_t t, float* scratch) {
    float* d = dwpe.dtype == DType::kF32 ? static_cast<float*>(dwpe.data) + t * C : scratch;
    if (d == scratch) widen_range(d, dwpe.at(t * C), C);
    const int64_t count = positions ? first[t + 1] - first[t] : B;
    for (int64_t i = 0; i < count; ++i) {
      const float* g = dout + (positions ? at[first[t] + i] : i * T + t) * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) d[c] += g[c];
    }
    if (d == scratch) narrow_range(dwpe.at(t * C), scratch, C);
  });
}

void CpuKernels::layernorm_forward(Operand out_op, float* mean, float* rstd, ConstOperand inp_op,
                                   ConstOperand weight_op, ConstOperand bias_op, int64_t N,
                                   int64_t C) {
  ActStage stage(*this);
  float* out = stage.out(out_op, N * C);
  const float* inp = stage.in(inp_op, N * C);
  float* wb = thread_scratch<ScratchSlot::kOperand>(2 * C);
  const float* weight = widened(weight_op, C, wb);
  const float* bias = widened(bias_op, C, wb + C);
  parallel_ranges(N, kLayerNormRowBlock, [&](int64_t r0, int64_t r1) {
    run_isa(isa_, [&](auto lanes) {
      using V = typename decltype(lanes)::type;
      for (int64_t r = r0; r < r1; ++r) {
        layernorm_forward_row<V>(out + r * C, mean ? mean + r : nullptr, rstd ? rstd + r : nullptr,
                                 inp + r * C, weight, bias, C);
        round_act(out + r * C, 0, C);  // mean and rstd stay fp32
      }
    });
  });
}

void CpuKernels::layernorm_backward(Operand dinp_op, Operand dweight, Operand dbias,
                                    ConstOperand dout_op, ConstOperand inp_op,
                                    ConstOperand weight_op, const float* mean, const float* rstd,
                                    int64_t N, int64_t C) {
  ZT_ASSERT(!dweight.fresh && !dbias.fresh, "layernorm_backward: a fresh gradient (kernels.h)");
  if (N <= 0 || C <= 0) return;
  ActStage stage(*this);
  float* dinp = stage.inout(dinp_op, N * C);
  const float* dout = stage.in(dout_op, N * C);
  const float* inp = stage.in(inp_op, N * C);
  const float* weight = widened(weight_op, C, thread_scratch<ScratchSlot::kOperand>(C));
  // Pass 1, per block of kLayerNormRowBlock rows: dinp, and the block's dweight/dbias
  // partials. Pass 2, per block of channels: partials added in block order.
  const int64_t blocks = (N + kLayerNormRowBlock - 1) / kLayerNormRowBlock;
  float* partials = thread_scratch<ScratchSlot::kCall>(blocks * 2 * C);  // (blocks, 2, C)
  parallel_for(blocks, [&](int64_t blk) {
    float* pdw = partials + blk * 2 * C;
    float* pdb = pdw + C;
    std::fill(pdw, pdw + 2 * C, 0.0f);
    const int64_t r1 = std::min(N, (blk + 1) * kLayerNormRowBlock);
    run_isa(isa_, [&](auto lanes) {
      using V = typename decltype(lanes)::type;
      for (int64_t r = blk * kLayerNormRowBlock; r < r1; ++r) {
        layernorm_backward_row<V>(dinp + r * C, pdw, pdb, dout + r * C, inp + r * C, weight,
                                  mean[r], rstd[r], C);
        round_act(dinp + r * C, 0, C);
      }
    });
  });
  if (!dweight && !dbias) return;  // frozen weight and bias: no gradients to add into
  parallel_ranges(C, kColumnBlock, [&](int64_t c0, int64_t c1) {
    float sw[kColumnBlock] = {}, sb[kColumnBlock] = {};
    const int64_t w = c1 - c0;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const float* pdw = partials + blk * 2 * C + c0;
      const float* pdb = pdw + C;
#pragma omp simd
      for (int64_t c = 0; c < w; ++c) {
        sw[c] += pdw[c];
        sb[c] += pdb[c];
      }
    }
    if (dweight) add_range(dweight.at(c0), sw, w);  // fp32: +=; 16-bit: one rounding
    if (dbias) add_range(dbias.at(c0), sb, w);
  });
}

void CpuKernels::gelu_forward(Operand out_op, ConstOperand inp_op, int64_t n) {
  ActStage stage(*this);
  float* out = stage.out(out_op, n);
  const float* inp = stage.in(inp_op, n);
  parallel_ranges(n, kElementGrain, [&](int64_t i0, int64_t i1) {
    run_isa(isa_, [&](auto lanes) {
      gelu_forward_range<typename decltype(lanes)::type>(out, inp, i0, i1);
    });
    round_act(out, i0, i1);
  });
}

void CpuKernels::gelu_backward(Operand dinp_op, ConstOperand inp_op, ConstOperand dout_op,
                               int64_t n) {
  ActStage stage(*this);
  float* dinp = stage.inout(dinp_op, n);
  const float* inp = stage.in(inp_op, n);
  const float* dout = stage.in(dout_op, n);
  parallel_ranges(n, kElementGrain, [&](int64_t i0, int64_t i1) {
    run_isa(isa_, [&](auto lanes) {
      gelu_backward_range<typename decltype(lanes)::type>(dinp, inp, dout, i0, i1);
    });
    round_act(dinp, i0, i1);
  });
}

void CpuKernels::rmsnorm_forward(Operand out_op, float* rstd, ConstOperand inp_op,
                                 ConstOperand weight_op, int64_t N, int64_t C, float eps) {
  ActStage stage(*this);
  float* out = stage.out(out_op, N * C);
  const float* inp = stage.in(inp_op, N * C);
  const float* weight = widened(weight_op, C, thread_scratch<ScratchSlot::kOperand>(C));
  parallel_ranges(N, kLayerNormRowBlock, [&](int64_t r0, int64_t r1) {
    run_isa(isa_, [&](auto lanes) {
      using V = typename decltype(lanes)::type;
      for (int64_t r = r0; r < r1; ++r) {
        rmsnorm_forward_row<V>(out + r * C, rstd ? rstd + r : nullptr, inp + r * C, weight, C, eps);
        round_act(out + r * C, 0, C);  // rstd stays fp32
      }
    });
  });
}

// layernorm_backward's two passes: per row block dinp and the block's dweight partials, then
// per channel block the partials added in block order (independent of the thread count).
void CpuKernels::rmsnorm_backward(Operand dinp_op, Operand dweight, ConstOperand dout_op,
                                  ConstOperand inp_op, ConstOperand weight_op, const float* rstd,
                                  int64_t N, int64_t C) {
  ZT_ASSERT(!dweight.fresh, "rmsnorm_backward: a fresh gradient (kernels.h)");
  if (N <= 0 || C <= 0) return;
  ActStage stage(*this);
  float* dinp = stage.inout(dinp_op, N * C);
  const float* dout = stage.in(dout_op, N * C);
  const float* inp = stage.in(inp_op, N * C);
  const float* weight = widened(weight_op, C, thread_scratch<ScratchSlot::kOperand>(C));
  const int64_t blocks = (N + kLayerNormRowBlock - 1) / kLayerNormRowBlock;
  float* partials = thread_scratch<ScratchSlot::kCall>(blocks * C);  // (blocks, C)
  parallel_for(blocks, [&](int64_t blk) {
    float* pdw = partials + blk * C;
    std::fill(pdw, pdw + C, 0.0f);
    const int64_t r1 = std::min(N, (blk + 1) * kLayerNormRowBlock);
    run_isa(isa_, [&](auto lanes) {
      using V = typename decltype(lanes)::type;
      for (int64_t r = blk * kLayerNormRowBlock; r < r1; ++r) {
        rmsnorm_backward_row<V>(dinp + r * C, pdw, dout + r * C, inp + r * C, weight, rstd[r], C);
        round_act(dinp + r * C, 0, C);
      }
    });
  });
  if (!dweight) return;
  parallel_ranges(C, kColumnBlock, [&](int64_t c0, int64_t c1) {
    float sw[kColumnBlock] = {};
    const int64_t w = c1 - c0;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const float* pdw = partials + blk * C + c0;
#pragma omp simd
      for (int64_t c = 0; c < w; ++c) sw[c] += pdw[c];
    }
    add_range(dweight.at(c0), sw, w);  // fp32: +=; 16-bit: one rounding
  });
}

void CpuKernels::swiglu_forward(Operand out_op, ConstOperand gate_up_op, int64_t N, int64_t F) {
  ActStage stage(*this);
  float* out = stage.out(out_op, N * F);
  const float* gate_up = stage.in(gate_up_op, N * 2 * F);
  parallel_for(N, [&](int64_t r) {
    const float* gate = gate_up + r * 2 * F;
    float* o = out + r * F;
    run_isa(isa_, [&](auto lanes) {
      swiglu_forward_range<typename decltype(lanes)::type>(o, gate, gate + F, 0, F);
    });
    round_act(o, 0, F);
  });
}

void CpuKernels::swiglu_backward(Operand dgate_up_op, ConstOperand gate_up_op, ConstOperand dout_op,
                                 int64_t N, int64_t F) {
  ActStage stage(*this);
  float* dgate_up = stage.inout(dgate_up_op, N * 2 * F);
  const float* gate_up = stage.in(gate_up_op, N * 2 * F);
  const float* dout = stage.in(dout_op, N * F);
  parallel_for(N, [&](int64_t r) {
    const float* gate = gate_up + r * 2 * F;
    float* d = dgate_up + r * 2 * F;
    run_isa(isa_, [&](auto lanes) {
      swiglu_backward_range<typename decltype(lanes)::type>(d, d + F, gate, gate + F, dout + r * F,
                                                            0, F);
    });
    round_act(d, 0, 2 * F);
  });
}

namespace {

// The rotation angles of positions 0..T-1 (kernels.h's precision): cos into table[t·hd + i],
// sin into table[t·hd + hd/2 + i], i < hd/2.
void rope_table(float* table, int64_t T, int64_t hd, const RopeFrequencies& rope) {
  const int64_t half = hd / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float inv_freq = rope_inv_freq(rope, i, hd);
    for (int64_t t = 0; t < T; ++t) {
      const float angle = static_cast<float>(t) * inv_freq;
      table[t * hd + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      table[t * hd + half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
}

}  // namespace

void CpuKernels::rope_forward(Operand qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                              int64_t hd, const RopeFrequencies& rope, const int32_t* positions) {
  rope_apply(qkv, B, T, NH, NKV, hd, rope, positions, 1.0f);
}

void CpuKernels::rope_backward(Operand dqkv, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                               int64_t hd, const RopeFrequencies& rope, const int32_t* positions) {
  rope_apply(dqkv, B, T, NH, NKV, hd, rope, positions, -1.0f);
}

// One token per task: its NH + NKV query and key heads are adjacent in the row. The table holds
// the angles of positions 0 .. the largest one (below T in training's rows, packed or not;
// generation's rows continue a sequence).
void CpuKernels::rope_apply(Operand qkv_op, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                            int64_t hd, const RopeFrequencies& rope, const int32_t* positions,
                            float sign) {
  ZT_ASSERT(hd > 0 && hd % 2 == 0, "rope: head_dim {} must be even", hd);
  if (B <= 0 || T <= 0) return;
  check_positions(positions, B, T, "rope", true);
  const int64_t R = (NH + 2 * NKV) * hd, heads = NH + NKV;
  ActStage stage(*this);
  float* qkv = stage.inout(qkv_op, B * T * R);
  const int64_t P = position_count(positions, B * T, T);
  float* table = thread_scratch<ScratchSlot::kCall>(P * hd);  // (P, hd): cos, sin halves
  rope_table(table, P, hd, rope);
  parallel_for(B * T, [&](int64_t bt) {
    const float* angles = table + (positions ? positions[bt] : bt % T) * hd;
    float* row = qkv + bt * R;
    run_isa(isa_, [&](auto lanes) {
      rope_row<typename decltype(lanes)::type>(row, angles, angles + hd / 2, heads, hd, sign);
    });
    round_act(row, 0, heads * hd);  // the value heads are not touched
  });
}

void CpuKernels::softmax_cross_entropy(float* losses, Operand logits_op, const int32_t* targets,
                                       int64_t N, int64_t V, int64_t Vp, LogitsOutput logits_output,
                                       float dloss) {
  const bool write_grad = logits_output == LogitsOutput::kGradient;
  ZT_ASSERT(V > 0 && V <= Vp, "softmax_cross_entropy: V={} Vp={}", V, Vp);
  for (int64_t i = 0; i < N; ++i)
    ZT_ASSERT(targets[i] < V, "target {} of row {} is not below V = {}", targets[i], i, V);
  ActStage stage(*this);
  float* logits =
      write_grad ? stage.inout(logits_op, N * Vp) : const_cast<float*>(stage.in(logits_op, N * Vp));
  parallel_for(N, [&](int64_t i) {
    if (targets[i] < 0) {  // not trained on (kIgnoreTarget): no loss, no gradient
      losses[i] = 0.0f;
      if (write_grad) std::fill(logits + i * Vp, logits + (i + 1) * Vp, 0.0f);
      return;
    }
    run_isa(isa_, [&](auto lanes) {
      losses[i] = softmax_cross_entropy_row<typename decltype(lanes)::type>(
          logits + i * Vp, targets[i], V, Vp, logits_output, dloss);
    });
    if (write_grad) round_act(logits + i * Vp, 0, Vp);  // the gradient; losses stay fp32
  });
}

}  // namespace zt
