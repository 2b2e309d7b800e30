// CudaKernels, the neural-network ops that are our own kernels: embedding, layer norm, RMSNorm,
// softmax cross-entropy. Every call is enqueued on stream_ and returns before the work is done.
// Same math as runtime/cpu/cpu_nn_kernels.cpp; tests/runtime/cuda_nn_kernels*_test.cpp check
// parity against it, cuda_activation_rounding_test.cpp the 16-bit tables' rounding.
//
// Determinism: no float atomics anywhere. Every reduction is a fixed-order loop or a fixed tree
// whose shape depends only on compile-time constants (kColumnRowGroups, kColumnChunkRows, warp
// size, block sizes) and the problem's size, never on the GPU's SM count or launch timing, so
// each op gives the same bits run to run.
//
// Precision (cuda_kernels.h). Activations written here are rounded to the table's activation
// dtype by the kernel that writes them, on the value it stores (round_to_act with act_,
// cuda_kernel_helpers.cuh; kF32 rounds nothing), so no pass over them follows: embedding out,
// layer-norm and RMSNorm out / dinp (mean and rstd stay fp32), the per-head RMSNorm's heads (the
// rest of each row is neither written nor rounded), and softmax_cross_entropy's logits gradient
// with LogitsOutput::kGradient (losses stay fp32). 16-bit parameters and parameter gradients are
// read and written in their dtype by our kernels (templated on the storage type: a gradient
// element is widened, accumulated in fp32 and narrowed once).
//
// Not here: matmul and attention, the cuBLAS GEMMs (cuda_matmul_attention.cu); the element-wise
// ops, optimizers and flat reductions (cuda_kernels.cu); the helpers both share
// (cuda_kernel_helpers.cuh).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <limits>

#include "runtime/cuda/cuda_kernel_helpers.cuh"
#include "runtime/cuda/cuda_kernels_impl.h"

namespace zt {
namespace {

constexpr float kLayerNormEps = 1e-5f;  // as runtime/cpu/cpu_nn_kernels.cpp
constexpr int kSoftmaxThreads = 256;    // softmax_cross_entropy: threads per row

// ---------------------------------------------------------------------------------------------
// Small kernels

// out (B,T,C) = wte[tokens[b,t]] + wpe[positions[b,t]] (positions null: t), the tables stored
// as W and P (wpe null: the wte row), rounded to act (as every kernel here that takes `act`).
template <class W, class P>
__global__ void embedding_forward_kernel(float* out, const int32_t* tokens,
                                         const int32_t* positions, const typename W::Elem* wte,
                                         const typename P::Elem* wpe, int64_t BT, int64_t T,
                                         int64_t C, DType act) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= BT * C) return;
  const int64_t bt = i / C, c = i % C;
  const float e = W::to_fp32(wte[int64_t(tokens[bt]) * C + c]);
  const int64_t position = positions ? positions[bt] : bt % T;
  out[i] = round_to_act(wpe ? e + P::to_fp32(wpe[position * C + c]) : e, act);
}

// Embedding backward as deterministic segmented reductions: the positions bt = 0..BT-1 are
// sorted by their key (the token for dwte, the position for dwpe) with a stable radix sort, so
// each key's positions form one run in ascending bt; then the block at the head of a run (one per
// key and chunk of channels) adds the run's rows of dout into the key's table row in that order:
// dst[key] + g[first] + g[next] + ..., exactly the CPU's order, with no atomics. O(BT·C) work
// over (distinct keys × channel chunks) blocks, where a walk over the batch per element was
// serial. The table row is stored as S: widened, every contribution added in fp32, rounded once
// (kernels.h); rows no key names keep their bits.
__global__ void iota_kernel(int32_t* x, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = int32_t(i);
}

template <class S>
__global__ void add_sorted_runs_kernel(typename S::Elem* table, const float* dout,
                                       const int32_t* keys, const int32_t* rows, int64_t BT,
                                       int64_t C) {
  const int64_t i = blockIdx.x;
  const int32_t key = keys[i];
  if (i > 0 && keys[i - 1] == key) return;  // not the head of its key's run
  const int64_t c = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  typename S::Elem* d = table + int64_t(key) * C + c;
  float acc = S::to_fp32(*d);
  for (int64_t j = i; j < BT && keys[j] == key; ++j) acc += dout[int64_t(rows[j]) * C + c];
  *d = S::from_fp32(acc);
}

// dwpe (T,C) += dout[b,t] for b in order, without positions (t is each row's index): the rows of
// a position sit B apart, so each element sums its own column (coalesced across threads).
template <class S>
__global__ void embedding_backward_wpe_kernel(typename S::Elem* dwpe, const float* dout, int64_t B,
                                              int64_t T, int64_t C) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * C) return;
  float acc = S::to_fp32(dwpe[i]);
  for (int64_t b = 0; b < B; ++b) acc += dout[b * T * C + i];
  dwpe[i] = S::from_fp32(acc);
}

// One warp per row of C: two-pass mean and biased variance, as the CPU. weight and bias are
// stored as W and B. out is rounded to act; mean and rstd are not. A lane writes only the
// elements it read, so out may be inp.
template <class W, class B>
__global__ void layernorm_forward_kernel(float* out, float* mean_out, float* rstd_out,
                                         const float* inp, const typename W::Elem* weight,
                                         const typename B::Elem* bias, int64_t N, int64_t C,
                                         DType act) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= N) return;  // whole warps leave together: the shuffles below see full warps
  const int lane = threadIdx.x;
  const float* x = inp + row * C;
  const float inv_c = 1.0f / static_cast<float>(C);
  float s = 0.0f;
  for (int64_t i = lane; i < C; i += kWarp) s += x[i];
  const float mean = warp_sum(s) * inv_c;
  float v = 0.0f;
  for (int64_t i = lane; i < C; i += kWarp) {
    const float d = x[i] - mean;
    v += d * d;
  }
  const float var = warp_sum(v) * inv_c;
  const float rstd = 1.0f / sqrtf(var + kLayerNormEps);
  float* o = out + row * C;
  for (int64_t i = lane; i < C; i += kWarp)
    o[i] = round_to_act((x[i] - mean) * rstd * W::to_fp32(weight[i]) + B::to_fp32(bias[i]), act);
  if (lane == 0) {
    if (mean_out) mean_out[row] = mean;
    if (rstd_out) rstd_out[row] = rstd;
  }
}

// One warp per row: dinp += (dnorm - mean(dnorm) - norm·mean(dnorm·norm))·rstd, dnorm = w·dout,
// the weight stored as W.
template <class W>
__global__ void layernorm_backward_dinp_kernel(float* dinp, const float* dout, const float* inp,
                                               const typename W::Elem* weight, const float* mean,
                                               const float* rstd, int64_t N, int64_t C, DType act) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= N) return;
  const int lane = threadIdx.x;
  const float* x = inp + row * C;
  const float* dy = dout + row * C;
  const float mu = mean[row], rs = rstd[row];
  const float inv_c = 1.0f / static_cast<float>(C);
  float s_dnorm = 0.0f, s_dnorm_norm = 0.0f;
  for (int64_t i = lane; i < C; i += kWarp) {
    const float dnorm = W::to_fp32(weight[i]) * dy[i];
    s_dnorm += dnorm;
    s_dnorm_norm += dnorm * ((x[i] - mu) * rs);
  }
  const float dnorm_mean = warp_sum(s_dnorm) * inv_c;
  const float dnorm_norm_mean = warp_sum(s_dnorm_norm) * inv_c;
  float* dx = dinp + row * C;
  for (int64_t i = lane; i < C; i += kWarp) {
    const float norm = (x[i] - mu) * rs;
    const float dnorm = W::to_fp32(weight[i]) * dy[i];
    dx[i] = round_to_act(dx[i] + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rs, act);
  }
}

// RMSNorm, one warp per row of C: rstd = 1/sqrt(mean(x²) + eps), out = x·rstd·w, as the CPU's
// rmsnorm_forward_row. weight stored as W.
template <class W>
__global__ void rmsnorm_forward_kernel(float* out, float* rstd_out, const float* inp,
                                       const typename W::Elem* weight, int64_t N, int64_t C,
                                       float eps, DType act) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= N) return;  // whole warps leave together
  const int lane = threadIdx.x;
  const float* x = inp + row * C;
  float s = 0.0f;
  for (int64_t i = lane; i < C; i += kWarp) s += x[i] * x[i];
  const float rstd = 1.0f / sqrtf(warp_sum(s) * (1.0f / static_cast<float>(C)) + eps);
  float* o = out + row * C;
  for (int64_t i = lane; i < C; i += kWarp)
    o[i] = round_to_act(x[i] * rstd * W::to_fp32(weight[i]), act);
  if (lane == 0 && rstd_out) rstd_out[row] = rstd;
}

// One warp per row: dinp += (dnorm - norm·mean(dnorm·norm))·rstd, dnorm = w·dout, norm = x·rstd.
template <class W>
__global__ void rmsnorm_backward_dinp_kernel(float* dinp, const float* dout, const float* inp,
                                             const typename W::Elem* weight, const float* rstd,
                                             int64_t N, int64_t C, DType act) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= N) return;
  const int lane = threadIdx.x;
  const float* x = inp + row * C;
  const float* dy = dout + row * C;
  const float rs = rstd[row];
  float s = 0.0f;
  for (int64_t i = lane; i < C; i += kWarp) s += W::to_fp32(weight[i]) * dy[i] * (x[i] * rs);
  const float dnorm_norm_mean = warp_sum(s) * (1.0f / static_cast<float>(C));
  float* dx = dinp + row * C;
  for (int64_t i = lane; i < C; i += kWarp) {
    const float norm = x[i] * rs;
    dx[i] =
        round_to_act(dx[i] + (W::to_fp32(weight[i]) * dy[i] - norm * dnorm_norm_mean) * rs, act);
  }
}

// Per-head RMSNorm, one warp per head row r of N·H (head r % H of row r / H, rows `stride`
// apart, heads hd apart), in place: rmsnorm_forward_kernel's arithmetic on the row. A lane
// writes only the elements it read; only the heads are written (and rounded).
__device__ __forceinline__ int64_t head_row_offset(int64_t r, int64_t H, int64_t hd,
                                                   int64_t stride) {
  return (r / H) * stride + (r % H) * hd;
}

template <class W>
__global__ void head_rmsnorm_forward_kernel(float* x, float* rstd_out,
                                            const typename W::Elem* weight, int64_t rows, int64_t H,
                                            int64_t hd, int64_t stride, float eps, DType act) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  float* xr = x + head_row_offset(row, H, hd, stride);
  float s = 0.0f;
  for (int64_t i = lane; i < hd; i += kWarp) s += xr[i] * xr[i];
  const float rstd = 1.0f / sqrtf(warp_sum(s) * (1.0f / static_cast<float>(hd)) + eps);
  for (int64_t i = lane; i < hd; i += kWarp)
    xr[i] = round_to_act(xr[i] * rstd * W::to_fp32(weight[i]), act);
  if (lane == 0 && rstd_out) rstd_out[row] = rstd;
}

// In place: dx = (w·dx - norm·mean(w·dx·norm))·rstd, norm = x·rstd, per head row (the sum is
// complete, across the warp, before any lane writes).
template <class W>
__global__ void head_rmsnorm_backward_kernel(float* dx, const float* inp,
                                             const typename W::Elem* weight, const float* rstd,
                                             int64_t rows, int64_t H, int64_t hd, int64_t stride,
                                             DType act) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  const int64_t at = head_row_offset(row, H, hd, stride);
  const float* x = inp + at;
  float* d = dx + at;
  const float rs = rstd[row];
  float s = 0.0f;
  for (int64_t i = lane; i < hd; i += kWarp) s += W::to_fp32(weight[i]) * d[i] * (x[i] * rs);
  const float dnorm_norm_mean = warp_sum(s) * (1.0f / static_cast<float>(hd));
  for (int64_t i = lane; i < hd; i += kWarp)
    d[i] = round_to_act((W::to_fp32(weight[i]) * d[i] - x[i] * rs * dnorm_norm_mean) * rs, act);
}

// ---------------------------------------------------------------------------------------------
// The terms of the layer-norm and RMSNorm parameter gradients' column reductions
// (cuda_kernel_helpers.cuh), and the reduction's stage 2.

// Layer norm's parameter gradients: dweight += dout·norm, dbias += dout, norm = (x - mean)·rstd.
struct LayerNormTerms {
  static constexpr int kValues = 2;
  const float *dout, *inp, *mean, *rstd;
  int64_t C;
  __device__ void operator()(int64_t r, int64_t c, float* v) const {
    const float dy = dout[r * C + c];
    v[0] = dy * ((inp[r * C + c] - mean[r]) * rstd[r]);
    v[1] = dy;
  }
};

// RMSNorm's weight gradient: dweight += dout·x·rstd.
struct RmsNormTerms {
  static constexpr int kValues = 1;
  const float *dout, *inp, *rstd;
  int64_t C;
  __device__ void operator()(int64_t r, int64_t c, float* v) const {
    v[0] = dout[r * C + c] * (inp[r * C + c] * rstd[r]);
  }
};

// The per-head RMSNorm's weight gradient: dweight += dout·x·rstd over the head rows (r of N·H).
struct HeadRmsNormTerms {
  static constexpr int kValues = 1;
  const float *dout, *inp, *rstd;
  int64_t H, hd, stride;
  __device__ void operator()(int64_t r, int64_t c, float* v) const {
    const int64_t at = head_row_offset(r, H, hd, stride) + c;
    v[0] = dout[at] * (inp[at] * rstd[r]);
  }
};

// Stage 2: dst[c] = S(float(dst[c]) + Σ_chunk partials[chunk, c]), the chunks in order.
template <class S>
__global__ void column_finish_kernel(typename S::Elem* dst, const float* partials, int64_t chunks,
                                     int64_t N) {
  const int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= N) return;
  float sum = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) sum += partials[c * N + col];
  dst[col] = S::from_fp32(S::to_fp32(dst[col]) + sum);
}

// ---------------------------------------------------------------------------------------------
// Softmax cross-entropy

// Block reductions of softmax_cross_entropy: shared-memory tree over kSoftmaxThreads, a fixed
// shape. Every thread gets the result.
template <bool kMax>
__device__ float block_reduce(float v, float* shared) {
  const int tid = threadIdx.x;
  shared[tid] = v;
  __syncthreads();
  for (int stride = kSoftmaxThreads / 2; stride > 0; stride /= 2) {
    if (tid < stride)
      shared[tid] =
          kMax ? fmaxf(shared[tid], shared[tid + stride]) : shared[tid] + shared[tid + stride];
    __syncthreads();
  }
  const float result = shared[0];
  __syncthreads();  // shared is reused by the next reduction
  return result;
}

// One block per row of logits (Vp wide, the first V real). loss = max + log Σ exp(x - max) -
// x[target], in double at the end as the CPU. With write_grad (LogitsOutput::kGradient) the row
// becomes dloss·(softmax - onehot) and the padding 0. A negative target (kIgnoreTarget): loss 0
// and, with write_grad, a zero row. A target >= V gives a NaN loss and leaves the row alone (the
// CPU throws; a device kernel cannot). The gradient is rounded to act, the loss is not; each
// thread reads a gradient's logit before it writes it, and the row's reductions end first.
__global__ void softmax_cross_entropy_kernel(float* losses, float* logits, const int32_t* targets,
                                             int64_t V, int64_t Vp, bool write_grad, float dloss,
                                             DType act) {
  __shared__ float shared[kSoftmaxThreads];
  const int64_t r = blockIdx.x;
  const int tid = threadIdx.x;
  float* row = logits + r * Vp;
  const int32_t target = targets[r];
  if (target < 0) {
    if (tid == 0) losses[r] = 0.0f;
    if (write_grad)
      for (int64_t i = tid; i < Vp; i += kSoftmaxThreads) row[i] = 0.0f;
    return;
  }
  if (target >= V) {
    if (tid == 0) losses[r] = NAN;
    return;
  }
  const float target_logit = row[target];
  float mx = -INFINITY;
  for (int64_t i = tid; i < V; i += kSoftmaxThreads) mx = fmaxf(mx, row[i]);
  mx = block_reduce<true>(mx, shared);
  float s = 0.0f;
  for (int64_t i = tid; i < V; i += kSoftmaxThreads) s += expf(row[i] - mx);
  const float sum = block_reduce<false>(s, shared);  // ends with a barrier: all reads are done
  if (tid == 0)
    losses[r] = static_cast<float>(static_cast<double>(mx) + log(static_cast<double>(sum)) -
                                   static_cast<double>(target_logit));
  if (!write_grad) return;
  const float k = dloss / sum;
  for (int64_t i = tid; i < V; i += kSoftmaxThreads) {
    const float e = expf(row[i] - mx);
    row[i] = round_to_act(i == target ? (e / sum - 1.0f) * dloss : e * k, act);
  }
  for (int64_t i = V + tid; i < Vp; i += kSoftmaxThreads) row[i] = 0.0f;
}

}  // namespace

// Stage 2 into dst (skipped when null) from one value's partials (column_chunks(M) · N floats).
void column_finish(Operand dst, const float* partials, int64_t M, int64_t N, cudaStream_t stream) {
  if (!dst) return;
  visit_storage(dst.dtype, [&](auto tag) {
    using S = decltype(tag);
    column_finish_kernel<S><<<blocks_for(N, kElementThreads), kElementThreads, 0, stream>>>(
        elems<S>(dst), partials, column_chunks(M), N);
  });
  check_launch();
}

// ---------------------------------------------------------------------------------------------
// Embedding

void CudaKernels::embedding_forward(Operand out_op, const int32_t* tokens, ConstOperand wte,
                                    ConstOperand wpe, int64_t B, int64_t T, int64_t C,
                                    const int32_t* positions) {
  ActStage stage(*this);
  float* out = stage.out(out_op, B * T * C);
  const int64_t n = B * T * C;
  if (n <= 0) return;
  visit_storage(wte.dtype, [&](auto wte_tag) {
    visit_storage(wpe.dtype, [&](auto wpe_tag) {
      using W = decltype(wte_tag);
      using P = decltype(wpe_tag);
      embedding_forward_kernel<W, P>
          <<<blocks_for(n, kElementThreads), kElementThreads, 0, stream_>>>(
              out, tokens, positions, elems<W>(wte), elems<P>(wpe), B * T, T, C, act_);
    });
  });
  check_launch();
}

// table[keys[bt]] += dout[bt] for bt in 0..BT-1, each row's contributions in ascending bt: the
// (key, bt) pairs sorted by key (stable, so bt stays ascending within a key), then one block per
// run head and channel chunk (add_sorted_runs_kernel).
void CudaKernels::add_rows_by_key(Operand table, const float* dout, const int32_t* keys, int64_t BT,
                                  int64_t C) {
  const int n = int(BT);
  Buffer rows = scratch(BT), sorted_keys = scratch(BT), sorted_rows = scratch(BT);
  int32_t* rows_in = static_cast<int32_t*>(rows.data());
  iota_kernel<<<blocks_for(BT, kElementThreads), kElementThreads, 0, stream_>>>(rows_in, BT);
  check_launch();
  int32_t* keys_out = static_cast<int32_t*>(sorted_keys.data());
  int32_t* rows_out = static_cast<int32_t*>(sorted_rows.data());
  size_t temp_bytes = 0;
  ZT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys, keys_out, rows_in,
                                                rows_out, n, 0, 32, stream_));
  Buffer temp = scratch(int64_t((temp_bytes + sizeof(float) - 1) / sizeof(float)));
  ZT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data(), temp_bytes, keys, keys_out, rows_in,
                                                rows_out, n, 0, 32, stream_));
  const unsigned channel_chunks = blocks_for(C, kElementThreads);
  visit_storage(table.dtype, [&](auto tag) {
    using S = decltype(tag);
    add_sorted_runs_kernel<S><<<dim3(unsigned(BT), channel_chunks), kElementThreads, 0, stream_>>>(
        elems<S>(table), dout, keys_out, rows_out, BT, C);
  });
  check_launch();
}

// Parameter gradients only: nothing to round to the activation dtype (a 16-bit dwte / dwpe is
// rounded in the kernel, once per element written).
void CudaKernels::embedding_backward(Operand dwte, Operand dwpe, ConstOperand dout_op,
                                     const int32_t* tokens, int64_t B, int64_t T, int64_t C,
                                     const int32_t* positions) {
  ActStage stage(*this);
  const float* dout = stage.in(dout_op, B * T * C);
  ZT_CUDA_ASSERT(!dwte.fresh && !dwpe.fresh, "embedding_backward: a fresh gradient (kernels.h)");
  const int64_t BT = B * T;
  if (BT <= 0 || C <= 0) return;
  ZT_CUDA_ASSERT(BT <= std::numeric_limits<int>::max(), "embedding_backward: B*T too large");
  ZT_CUDA_ASSERT(blocks_for(C, kElementThreads) <= 65535, "embedding_backward: C too large");
  if (dwte) add_rows_by_key(dwte, dout, tokens, BT, C);
  if (!dwpe) return;
  if (positions) {
    add_rows_by_key(dwpe, dout, positions, BT, C);
    return;
  }
  visit_storage(dwpe.dtype, [&](auto tag) {
    using S = decltype(tag);
    embedding_backward_wpe_kernel<S>
        <<<blocks_for(T * C, kElementThreads), kElementThreads, 0, stream_>>>(elems<S>(dwpe), dout,
                                                                              B, T, C);
  });
  check_launch();
}

// ---------------------------------------------------------------------------------------------
// Layer norm

void CudaKernels::layernorm_forward(Operand out_op, float* mean, float* rstd, ConstOperand inp_op,
                                    ConstOperand weight, ConstOperand bias, int64_t N, int64_t C) {
  ActStage stage(*this);
  float* out = stage.out(out_op, N * C);
  const float* inp = stage.in(inp_op, N * C);
  if (N <= 0 || C <= 0) return;
  visit_storage(weight.dtype, [&](auto weight_tag) {
    visit_storage(bias.dtype, [&](auto bias_tag) {
      using W = decltype(weight_tag);
      using B = decltype(bias_tag);
      layernorm_forward_kernel<W, B>
          <<<blocks_for(N, kRowsPerBlock), dim3(kWarp, kRowsPerBlock), 0, stream_>>>(
              out, mean, rstd, inp, elems<W>(weight), elems<B>(bias), N, C, act_);
    });
  });
  check_launch();
}

void CudaKernels::layernorm_backward(Operand dinp_op, Operand dweight, Operand dbias,
                                     ConstOperand dout_op, ConstOperand inp_op, ConstOperand weight,
                                     const float* mean, const float* rstd, int64_t N, int64_t C) {
  ActStage stage(*this);
  float* dinp = stage.inout(dinp_op, N * C);
  const float* dout = stage.in(dout_op, N * C);
  const float* inp = stage.in(inp_op, N * C);
  ZT_CUDA_ASSERT(!dweight.fresh && !dbias.fresh,
                 "layernorm_backward: a fresh gradient (kernels.h)");
  if (N <= 0 || C <= 0) return;
  visit_storage(weight.dtype, [&](auto tag) {
    using W = decltype(tag);
    layernorm_backward_dinp_kernel<W>
        <<<blocks_for(N, kRowsPerBlock), dim3(kWarp, kRowsPerBlock), 0, stream_>>>(
            dinp, dout, inp, elems<W>(weight), mean, rstd, N, C, act_);
  });
  check_launch();
  if (!dweight && !dbias) return;
  // dweight += Σ dout·norm, dbias += Σ dout: two-stage column reductions (values 0 and 1).
  const int64_t chunks = column_chunks(N);
  Buffer partials = scratch(LayerNormTerms::kValues * chunks * C);
  column_partials(partials.as<float>(), LayerNormTerms{dout, inp, mean, rstd, C}, N, C, stream_);
  column_finish(dweight, partials.as<float>(), N, C, stream_);
  column_finish(dbias, partials.as<float>() + chunks * C, N, C, stream_);
}

// ---------------------------------------------------------------------------------------------
// RMSNorm

void CudaKernels::rmsnorm_forward(Operand out_op, float* rstd, ConstOperand inp_op,
                                  ConstOperand weight, int64_t N, int64_t C, float eps) {
  ActStage stage(*this);
  float* out = stage.out(out_op, N * C);
  const float* inp = stage.in(inp_op, N * C);
  if (N <= 0 || C <= 0) return;
  visit_storage(weight.dtype, [&](auto tag) {
    using W = decltype(tag);
    rmsnorm_forward_kernel<W>
        <<<blocks_for(N, kRowsPerBlock), dim3(kWarp, kRowsPerBlock), 0, stream_>>>(
            out, rstd, inp, elems<W>(weight), N, C, eps, act_);
  });
  check_launch();
}

void CudaKernels::rmsnorm_backward(Operand dinp_op, Operand dweight, ConstOperand dout_op,
                                   ConstOperand inp_op, ConstOperand weight, const float* rstd,
                                   int64_t N, int64_t C) {
  ActStage stage(*this);
  float* dinp = stage.inout(dinp_op, N * C);
  const float* dout = stage.in(dout_op, N * C);
  const float* inp = stage.in(inp_op, N * C);
  ZT_CUDA_ASSERT(!dweight.fresh, "rmsnorm_backward: a fresh gradient (kernels.h)");
  if (N <= 0 || C <= 0) return;
  visit_storage(weight.dtype, [&](auto tag) {
    using W = decltype(tag);
    rmsnorm_backward_dinp_kernel<W>
        <<<blocks_for(N, kRowsPerBlock), dim3(kWarp, kRowsPerBlock), 0, stream_>>>(
            dinp, dout, inp, elems<W>(weight), rstd, N, C, act_);
  });
  check_launch();
  if (!dweight) return;
  // dweight += Σ dout·x·rstd: a two-stage column reduction.
  Buffer partials = scratch(RmsNormTerms::kValues * column_chunks(N) * C);
  column_partials(partials.as<float>(), RmsNormTerms{dout, inp, rstd, C}, N, C, stream_);
  column_finish(dweight, partials.as<float>(), N, C, stream_);
}

// Per-head RMSNorm (Qwen3's q_norm, k_norm), in place: the kernels round the heads they write;
// the parts of the rows between the heads (v, or q for the k heads) keep their bits.

void CudaKernels::head_rmsnorm_forward(Operand x_op, float* rstd, ConstOperand weight, int64_t N,
                                       int64_t H, int64_t hd, int64_t stride, float eps) {
  ActStage stage(*this);
  float* x = stage.inout(x_op, (N - 1) * stride + H * hd);
  ZT_CUDA_ASSERT(H > 0 && hd > 0 && stride >= H * hd, "head_rmsnorm_forward: bad head layout");
  if (N <= 0) return;
  visit_storage(weight.dtype, [&](auto tag) {
    using W = decltype(tag);
    head_rmsnorm_forward_kernel<W>
        <<<blocks_for(N * H, kRowsPerBlock), dim3(kWarp, kRowsPerBlock), 0, stream_>>>(
            x, rstd, elems<W>(weight), N * H, H, hd, stride, eps, act_);
  });
  check_launch();
}

void CudaKernels::head_rmsnorm_backward(Operand dx_op, Operand dweight, ConstOperand inp_op,
                                        ConstOperand weight, const float* rstd, int64_t N,
                                        int64_t H, int64_t hd, int64_t stride) {
  ActStage stage(*this);
  float* dx = stage.inout(dx_op, (N - 1) * stride + H * hd);
  const float* inp = stage.in(inp_op, (N - 1) * stride + H * hd);
  ZT_CUDA_ASSERT(!dweight.fresh, "head_rmsnorm_backward: a fresh gradient (kernels.h)");
  ZT_CUDA_ASSERT(H > 0 && hd > 0 && stride >= H * hd, "head_rmsnorm_backward: bad head layout");
  if (N <= 0) return;
  const int64_t rows = N * H;
  // dweight's partials first: they read dx as the gradient w.r.t. the output, which the
  // in-place kernel below then overwrites (both on stream_, in this order).
  Buffer partials;
  if (dweight) {
    partials = scratch(HeadRmsNormTerms::kValues * column_chunks(rows) * hd);
    column_partials(partials.as<float>(), HeadRmsNormTerms{dx, inp, rstd, H, hd, stride}, rows, hd,
                    stream_);
  }
  visit_storage(weight.dtype, [&](auto tag) {
    using W = decltype(tag);
    head_rmsnorm_backward_kernel<W>
        <<<blocks_for(rows, kRowsPerBlock), dim3(kWarp, kRowsPerBlock), 0, stream_>>>(
            dx, inp, elems<W>(weight), rstd, rows, H, hd, stride, act_);
  });
  check_launch();
  if (dweight) column_finish(dweight, partials.as<float>(), rows, hd, stream_);
}

// ---------------------------------------------------------------------------------------------
// Softmax cross-entropy

void CudaKernels::softmax_cross_entropy(float* losses, Operand logits_op, const int32_t* targets,
                                        int64_t N, int64_t V, int64_t Vp,
                                        LogitsOutput logits_output, float dloss) {
  ActStage stage(*this);
  float* logits = stage.inout(logits_op, N * Vp);
  ZT_CUDA_ASSERT(V > 0 && V <= Vp, "softmax_cross_entropy: need 0 < V <= Vp");
  if (N <= 0) return;
  ZT_CUDA_ASSERT(N <= std::numeric_limits<int>::max(), "softmax_cross_entropy: N too large");
  const bool write_grad = logits_output == LogitsOutput::kGradient;
  softmax_cross_entropy_kernel<<<unsigned(N), kSoftmaxThreads, 0, stream_>>>(
      losses, logits, targets, V, Vp, write_grad, dloss, act_);
  check_launch();
}

}  // namespace zt
