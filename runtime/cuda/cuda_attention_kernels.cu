// CudaKernels, the materialised T×T attention: cuBLAS strided-batched fp32 GEMMs (TF32 when
// allowed) around our causal softmax kernels, the reference path of gqa_attention_forward and
// _backward (cuda_matmul_attention.cu, which chooses) and the fallback of a cuDNN call that
// failed (cuda_attention_cudnn.cu); and generation's attention over a key/value cache,
// gqa_attention_decode. Every call is enqueued on stream_ and returns before the work is done.
// Same math as runtime/cpu/cpu_attention_kernels.cpp; tests/runtime/cuda_nn_kernels*_test.cpp
// check parity against it.
//
// fp32 arrays only, 16-bit activations staged: the entries widen them into fp32 scratch and
// narrow the written ones back (CudaKernels::ActStage; the decode so stages its whole caches on
// every call), and each output is rounded to the table's activation dtype by round_act after the
// GEMMs or the kernel that wrote it in fp32: out and att, dqkv, decode's out (docs/cuda.md,
// "16-bit operands"). A 16-bit table's fast path, which takes them in place, is cuDNN's.
//
// Determinism: the softmax kernels reduce a row in one warp in a fixed butterfly; the GEMMs are
// cuBLAS's default algorithms, and key and value gradients accumulate over the group in
// increasing order on one stream. Row-major vs cuBLAS as in cuda_matmul_attention.cu: a
// row-major (R,S) matrix with row stride ld is the column-major (S,R) with leading dimension ld.
//
// Not here: the attention entries' choice of path (cuda_matmul_attention.cu), cuDNN's fused SDPA
// (cuda_attention_cudnn.cu).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "runtime/cuda/cuda_kernel_helpers.cuh"
#include "runtime/cuda/cuda_kernels_impl.h"

namespace zt {
namespace {

// `batch` column-major products C (m,n) = alpha · op(A) · op(B) + beta · C, fp32 in and out,
// operand i at base + i·stride.
void gemm_batched(cublasHandle_t handle, bool allow_tf32, cublasOperation_t op_a,
                  cublasOperation_t op_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, int64_t lda, int64_t stride_a, const float* b, int64_t ldb,
                  int64_t stride_b, float beta, float* c, int64_t ldc, int64_t stride_c,
                  int64_t batch) {
  check_int(m);
  check_int(n);
  check_int(k);
  check_int(lda);
  check_int(ldb);
  check_int(ldc);
  check_int(batch);
  ZT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      handle, op_a, op_b, int(m), int(n), int(k), &alpha, a, CUDA_R_32F, int(lda), stride_a, b,
      CUDA_R_32F, int(ldb), stride_b, &beta, c, CUDA_R_32F, int(ldc), stride_c, int(batch),
      compute_type(allow_tf32), CUBLAS_GEMM_DEFAULT));
}

// ---------------------------------------------------------------------------------------------
// Attention's causal softmax

// The first key of a row of att (row index (b·NH + h)·T + t): t - positions[b,t], the start of
// the query's document (0 without positions), or with a sliding window (window > 0) the first
// of the query's last `window` keys when that is later (kernel_entries.h: key u is read when
// t - window < u <= t).
__device__ __forceinline__ int64_t first_key(const int32_t* positions, int64_t row, int64_t T,
                                             int64_t NH, int64_t window) {
  const int64_t t = row % T;
  const int64_t w = positions ? t - positions[row / (NH * T) * T + t] : 0;
  return window > 0 && t - window + 1 > w ? t - window + 1 : w;
}

// Rows of att (rows × T, row index = (b·NH + h)·T + t) hold scaled scores; each becomes the
// softmax over the query's keys w..t (first_key), zeros elsewhere. One warp per row.
__global__ void causal_softmax_kernel(float* att, const int32_t* positions, int64_t rows, int64_t T,
                                      int64_t NH, int64_t window) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  const int64_t w = first_key(positions, row, T, NH, window), n = row % T + 1;  // keys w..t
  float* p = att + row * T;
  float mx = -INFINITY;
  for (int64_t j = w + lane; j < n; j += kWarp) mx = fmaxf(mx, p[j]);
  mx = warp_max(mx);
  float s = 0.0f;
  for (int64_t j = w + lane; j < n; j += kWarp) {
    const float e = expf(p[j] - mx);
    p[j] = e;
    s += e;
  }
  const float inv_sum = 1.0f / warp_sum(s);
  for (int64_t j = w + lane; j < n; j += kWarp) p[j] *= inv_sum;
  for (int64_t j = lane; j < w; j += kWarp) p[j] = 0.0f;
  for (int64_t j = n + lane; j < T; j += kWarp) p[j] = 0.0f;
}

// Softmax backward in place: dp (rows × T) holds dP = dY·Vᵀ and becomes
// dS = P·(dP - Σ P·dP)·scale over the query's keys w..t, zeros elsewhere. One warp per row.
__global__ void causal_softmax_backward_kernel(float* dp, const float* att,
                                               const int32_t* positions, int64_t rows, int64_t T,
                                               int64_t NH, int64_t window, float scale) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  const int64_t w = first_key(positions, row, T, NH, window), n = row % T + 1;
  float* d = dp + row * T;
  const float* p = att + row * T;
  float s = 0.0f;
  for (int64_t j = w + lane; j < n; j += kWarp) s += p[j] * d[j];
  const float pdp = warp_sum(s);
  for (int64_t j = w + lane; j < n; j += kWarp) d[j] = p[j] * (d[j] - pdp) * scale;
  for (int64_t j = lane; j < w; j += kWarp) d[j] = 0.0f;
  for (int64_t j = n + lane; j < T; j += kWarp) d[j] = 0.0f;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Attention, grouped-query (multi-head attention is the case NKV == NH). qkv rows are R =
// (NH + 2·NKV)·hd wide: NH query heads, NKV key heads, NKV value heads. For batch b and group
// member g (0 <= g < G = NH/NKV), the NKV query heads h = j·G + g (j = 0..NKV-1) are one
// strided-batched GEMM against key/value head j: their q start at qkv + b·T·R + g·hd, G·hd
// apart; key head j at qkv + b·T·R + NH·hd + j·hd, hd apart; their (T,T) blocks of att G·T·T
// apart. (Different b, and different g, are not a constant stride apart, hence the loops.) A
// row-major Q (T,hd) with row stride R is, to cuBLAS, the column-major Qᵀ (hd,T) with ld R;
// likewise K, V, dY and out (ld NH·hd). Row-major att (T,T) is the column-major attᵀ, ld T.
// Key and value gradients accumulate over g in increasing order (beta = 1 GEMMs on one stream).
// Documents (positions) and a sliding window: the GEMMs run over whole rows; the softmax kernels
// zero att and dS outside each query's keys (its document, its window), so the products add
// exact zeros for the keys it does not read.

void CudaKernels::reference_attention_forward(float* out, float* att, const float* qkv, int64_t B,
                                              int64_t T, int64_t NH, int64_t NKV, int64_t hd,
                                              const int32_t* positions, int64_t window) {
  const int64_t G = NH / NKV, R = (NH + 2 * NKV) * hd, HD = NH * hd, TT = T * T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t g = 0; g < G; ++g) {
      const float* q = qkv + b * T * R + g * hd;
      const float* k = qkv + b * T * R + HD;
      // Scores S (T,T) = scale · Q · Kᵀ. Column-major Sᵀ (T,T) = scale · K (T,hd) · Qᵀ (hd,T),
      // K being the column-major (hd,T) ld R transposed.
      gemm_batched(impl_->cublas, impl_->allow_tf32, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hd, scale, k,
                   R, hd, q, R, G * hd, 0.0f, att + (b * NH + g) * TT, T, G * TT, NKV);
    }
  const int64_t rows = B * NH * T;
  causal_softmax_kernel<<<blocks_for(rows, kRowsPerBlock), dim3(kWarp, kRowsPerBlock), 0,
                          stream_>>>(att, positions, rows, T, NH, window);
  check_launch();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t g = 0; g < G; ++g) {
      const float* v = qkv + b * T * R + HD + NKV * hd;
      // out (T,hd) = P · V. Column-major outᵀ (hd,T) = Vᵀ (hd,T) · Pᵀ (T,T).
      gemm_batched(impl_->cublas, impl_->allow_tf32, CUBLAS_OP_N, CUBLAS_OP_N, hd, T, T, 1.0f, v, R,
                   hd, att + (b * NH + g) * TT, T, G * TT, 0.0f, out + b * T * HD + g * hd, HD,
                   G * hd, NKV);
    }
  // Rounded after both products, as the CPU rounds a head's out and att after computing them.
  round_act(out, B * T * HD);
  round_act(att, B * NH * TT);
}

void CudaKernels::reference_attention_backward(float* dqkv, const float* dout, const float* qkv,
                                               const float* att, int64_t B, int64_t T, int64_t NH,
                                               int64_t NKV, int64_t hd, const int32_t* positions,
                                               int64_t window) {
  const int64_t G = NH / NKV, R = (NH + 2 * NKV) * hd, HD = NH * hd, TT = T * T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // dP, then dS in place: (B,NH,T,T), from the device's caching allocator (tracked as
  // kWorkspace, counted in the peak, kept cached between steps); returned when this entry does,
  // its next user enqueued on this stream after the GEMMs below read it.
  Buffer ds_scratch = scratch(B * NH * TT);
  float* ds = ds_scratch.as<float>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t g = 0; g < G; ++g) {
      const float* v = qkv + b * T * R + HD + NKV * hd;
      const float* dy = dout + b * T * HD + g * hd;
      const float* att_g = att + (b * NH + g) * TT;
      float* dv = dqkv + b * T * R + HD + NKV * hd;
      // dP (T,T) = dY · Vᵀ. Column-major dPᵀ (T,T) = V (T,hd) · dYᵀ (hd,T), V transposed.
      gemm_batched(impl_->cublas, impl_->allow_tf32, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hd, 1.0f, v, R,
                   hd, dy, HD, G * hd, 0.0f, ds + (b * NH + g) * TT, T, G * TT, NKV);
      // dV (T,hd) += Pᵀ · dY. Column-major dVᵀ (hd,T) += dYᵀ (hd,T) · P (T,T), P being the
      // column-major attᵀ transposed.
      gemm_batched(impl_->cublas, impl_->allow_tf32, CUBLAS_OP_N, CUBLAS_OP_T, hd, T, T, 1.0f, dy,
                   HD, G * hd, att_g, T, G * TT, 1.0f, dv, R, hd, NKV);
    }
  const int64_t rows = B * NH * T;
  causal_softmax_backward_kernel<<<blocks_for(rows, kRowsPerBlock), dim3(kWarp, kRowsPerBlock), 0,
                                   stream_>>>(ds, att, positions, rows, T, NH, window, scale);
  check_launch();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t g = 0; g < G; ++g) {
      const float* q = qkv + b * T * R + g * hd;
      const float* k = qkv + b * T * R + HD;
      const float* ds_g = ds + (b * NH + g) * TT;
      float* dq = dqkv + b * T * R + g * hd;
      float* dk = dqkv + b * T * R + HD;
      // dQ (T,hd) += dS · K. Column-major dQᵀ (hd,T) += Kᵀ (hd,T) · dSᵀ (T,T).
      gemm_batched(impl_->cublas, impl_->allow_tf32, CUBLAS_OP_N, CUBLAS_OP_N, hd, T, T, 1.0f, k, R,
                   hd, ds_g, T, G * TT, 1.0f, dq, R, G * hd, NKV);
      // dK (T,hd) += dSᵀ · Q. Column-major dKᵀ (hd,T) += Qᵀ (hd,T) · dS (T,T), dS being the
      // column-major dSᵀ transposed.
      gemm_batched(impl_->cublas, impl_->allow_tf32, CUBLAS_OP_N, CUBLAS_OP_T, hd, T, T, 1.0f, q, R,
                   G * hd, ds_g, T, G * TT, 1.0f, dk, R, hd, NKV);
    }
  round_act(dqkv, B * T * R);
}

// ---------------------------------------------------------------------------------------------
// Generation's attention (gqa_attention_decode): one warp per (row, query head, new token).
// Lanes take the keys in turn for the scores (each a dot product over hd in increasing d) into
// p, the row's slice of a scratch; the max and the sum of exponentials are warp reductions in a
// fixed butterfly; then each lane owns head dimensions d and adds p[u]·v[u][d] in increasing u.
__global__ void attention_decode_kernel(float* out, const float* k_cache, const float* v_cache,
                                        const float* qkv, float* scores, int64_t B, int64_t T,
                                        int64_t past, int64_t S, int64_t NH, int64_t NKV,
                                        int64_t hd, int64_t window, float scale) {
  const int64_t i = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (i >= B * NH * T) return;
  const int64_t b = i / (NH * T), h = (i / T) % NH, t = i % T, pos = past + t;
  const int64_t G = NH / NKV, HD = NH * hd, KV = NKV * hd, R = HD + 2 * KV;
  const int64_t lo = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0, n = pos - lo + 1;
  const float* q = qkv + (b * T + t) * R + h * hd;
  const float* kc = k_cache + (b * S + lo) * KV + (h / G) * hd;
  const float* vc = v_cache + (b * S + lo) * KV + (h / G) * hd;
  float* p = scores + i * (past + T);
  const int lane = threadIdx.x;
  float mx = -INFINITY;
  for (int64_t u = lane; u < n; u += kWarp) {
    float dot = 0.0f;
    for (int64_t d = 0; d < hd; ++d) dot += q[d] * kc[u * KV + d];
    p[u] = dot * scale;
    mx = fmaxf(mx, p[u]);
  }
  mx = warp_max(mx);
  float sum = 0.0f;
  for (int64_t u = lane; u < n; u += kWarp) sum += (p[u] = expf(p[u] - mx));
  const float inv_sum = 1.0f / warp_sum(sum);
  __syncwarp();
  float* o = out + (b * T + t) * HD + h * hd;
  for (int64_t d = lane; d < hd; d += kWarp) {
    float acc = 0.0f;
    for (int64_t u = 0; u < n; ++u) acc += p[u] * inv_sum * vc[u * KV + d];
    o[d] = acc;
  }
}

// The new tokens' key and value heads into the caches: element e of (B, T, 2, KV).
__global__ void kv_cache_write_kernel(float* k_cache, float* v_cache, const float* qkv, int64_t B,
                                      int64_t T, int64_t past, int64_t S, int64_t HD, int64_t KV) {
  ZT_GRID_STRIDE_LOOP(e, B * T * 2 * KV) {
    const int64_t bt = e / (2 * KV), which = (e / KV) % 2, c = e % KV;
    const int64_t b = bt / T, t = bt % T;
    float* cache = which == 0 ? k_cache : v_cache;
    cache[(b * S + past + t) * KV + c] = qkv[bt * (HD + 2 * KV) + HD + which * KV + c];
  }
}

void CudaKernels::gqa_attention_decode(Operand out_op, Operand k_cache_op, Operand v_cache_op,
                                       ConstOperand qkv_op, int64_t B, int64_t T, int64_t past,
                                       int64_t S, int64_t NH, int64_t NKV, int64_t hd,
                                       int64_t window) {
  ActStage stage(*this);
  float* out = stage.out(out_op, B * T * NH * hd);
  float* k_cache = stage.inout(k_cache_op, B * S * NKV * hd);
  float* v_cache = stage.inout(v_cache_op, B * S * NKV * hd);
  const float* qkv = stage.in(qkv_op, B * T * (NH + 2 * NKV) * hd);
  ZT_CUDA_ASSERT(NH > 0 && NKV > 0 && NH % NKV == 0 && hd > 0,
                 "gqa_attention_decode: NH must be a positive multiple of NKV");
  ZT_CUDA_ASSERT(past >= 0 && past + T <= S, "gqa_attention_decode: tokens past the cache");
  if (B <= 0 || T <= 0) return;
  const int64_t KV = NKV * hd, rows = B * NH * T;
  kv_cache_write_kernel<<<blocks_for(B * T * 2 * KV, kElementThreads), kElementThreads, 0,
                          stream_>>>(k_cache, v_cache, qkv, B, T, past, S, NH * hd, KV);
  check_launch();
  Buffer p = scratch(rows * (past + T));  // each row's scores, then probabilities
  attention_decode_kernel<<<blocks_for(rows, kRowsPerBlock), dim3(kWarp, kRowsPerBlock), 0,
                            stream_>>>(out, k_cache, v_cache, qkv, p.as<float>(), B, T, past, S, NH,
                                       NKV, hd, window, 1.0f / std::sqrt(static_cast<float>(hd)));
  check_launch();
  round_act(out, B * T * NH * hd);
}

}  // namespace zt
