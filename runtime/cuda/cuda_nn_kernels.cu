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
// Storage and precision (kernels.h "Precision", cuda_kernel_helpers.cuh). Each kernel is
// templated on A, the storage type of all the call's activation operands (hidden states, their
// gradients, logits): it reads them with A::to_fp32, computes in fp32, and stores to_act<A>, the
// value rounded to the table's activation dtype (act_; kF32 rounds nothing) and then narrowed to
// A, exactly, so no pass over an output follows: embedding out, layer-norm and RMSNorm out /
// dinp (mean and rstd stay fp32), the per-head RMSNorm's heads (the rest of each row is neither
// written nor rounded), and softmax_cross_entropy's logits, read in their dtype and overwritten
// by their gradient with LogitsOutput::kGradient (losses stay fp32). The column reductions of the
// norms' weight gradients and the embedding's row sums read dout (and inp) as A. An entry whose
// operands mix fp32 and 16-bit dtypes runs itself on fp32 copies (ActStage): the same bits, a
// pass more per 16-bit operand read and per one written. 16-bit parameters and parameter
// gradients are read and written in their dtype (templated on their own storage type: a
// gradient element is widened, accumulated in fp32 and narrowed once).
//
// Not here: matmul and attention, the cuBLAS GEMMs (cuda_matmul_attention.cu); the element-wise
// ops (cuda_elementwise_kernels.cu); optimizers, flat reductions, the column reductions' stage 2
// and the embedding gradient's sorted row sums (cuda_kernels.cu); the helpers they share
// (cuda_kernel_helpers.cuh).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

#include "runtime/cuda/cuda_kernel_helpers.cuh"
#include "runtime/cuda/cuda_kernels_impl.h"

namespace zt {
namespace {

constexpr float kLayerNormEps = 1e-5f;  // as runtime/cpu/cpu_nn_kernels.cpp
constexpr int kSoftmaxThreads = 256;    // softmax_cross_entropy: threads per row

// ---------------------------------------------------------------------------------------------
// Small kernels

// out (B,T,C) = wte[tokens[b,t]] + wpe[positions[b,t]] (positions null: t), the tables stored
// as W and P (wpe null: the wte row), stored as to_act<A> (as every kernel here that takes act).
template <class A, class W, class P>
__global__ void embedding_forward_kernel(typename A::Elem* out, const int32_t* tokens,
                                         const int32_t* positions, const typename W::Elem* wte,
                                         const typename P::Elem* wpe, int64_t BT, int64_t T,
                                         int64_t C, DType act) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= BT * C) return;
  const int64_t bt = i / C, c = i % C;
  const float e = W::to_fp32(wte[int64_t(tokens[bt]) * C + c]);
  const int64_t position = positions ? positions[bt] : bt % T;
  out[i] = to_act<A>(wpe ? e + P::to_fp32(wpe[position * C + c]) : e, act);
}

// dwpe (T,C) += dout[b,t] for b in order, without positions (t is each row's index): the rows of
// a position sit B apart, so each element sums its own column (coalesced across threads). dwpe
// stored as S: widened, the contributions added in fp32, rounded once; dout as A.
template <class S, class A>
__global__ void embedding_backward_wpe_kernel(typename S::Elem* dwpe, const typename A::Elem* dout,
                                              int64_t B, int64_t T, int64_t C) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * C) return;
  float acc = S::to_fp32(dwpe[i]);
  for (int64_t b = 0; b < B; ++b) acc += A::to_fp32(dout[b * T * C + i]);
  dwpe[i] = S::from_fp32(acc);
}

// One warp per row of C: two-pass mean and biased variance, as the CPU. weight and bias are
// stored as W and B. out is stored as to_act<A>; mean and rstd are fp32. A lane writes only the
// elements it read, so out may be inp.
template <class A, class W, class B>
__global__ void layernorm_forward_kernel(typename A::Elem* out, float* mean_out, float* rstd_out,
                                         const typename A::Elem* inp,
                                         const typename W::Elem* weight,
                                         const typename B::Elem* bias, int64_t N, int64_t C,
                                         DType act) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= N) return;  // whole warps leave together: the shuffles below see full warps
  const int lane = threadIdx.x;
  const typename A::Elem* x = inp + row * C;
  const float inv_c = 1.0f / static_cast<float>(C);
  float s = 0.0f;
  for (int64_t i = lane; i < C; i += kWarp) s += A::to_fp32(x[i]);
  const float mean = warp_sum(s) * inv_c;
  float v = 0.0f;
  for (int64_t i = lane; i < C; i += kWarp) {
    const float d = A::to_fp32(x[i]) - mean;
    v += d * d;
  }
  const float var = warp_sum(v) * inv_c;
  const float rstd = 1.0f / sqrtf(var + kLayerNormEps);
  typename A::Elem* o = out + row * C;
  for (int64_t i = lane; i < C; i += kWarp)
    o[i] = to_act<A>((A::to_fp32(x[i]) - mean) * rstd * W::to_fp32(weight[i]) + B::to_fp32(bias[i]),
                     act);
  if (lane == 0) {
    if (mean_out) mean_out[row] = mean;
    if (rstd_out) rstd_out[row] = rstd;
  }
}

// One warp per row: dinp += (dnorm - mean(dnorm) - norm·mean(dnorm·norm))·rstd, dnorm = w·dout,
// the weight stored as W.
template <class A, class W>
__global__ void layernorm_backward_dinp_kernel(typename A::Elem* dinp, const typename A::Elem* dout,
                                               const typename A::Elem* inp,
                                               const typename W::Elem* weight, const float* mean,
                                               const float* rstd, int64_t N, int64_t C, DType act) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= N) return;
  const int lane = threadIdx.x;
  const typename A::Elem* x = inp + row * C;
  const typename A::Elem* dy = dout + row * C;
  const float mu = mean[row], rs = rstd[row];
  const float inv_c = 1.0f / static_cast<float>(C);
  float s_dnorm = 0.0f, s_dnorm_norm = 0.0f;
  for (int64_t i = lane; i < C; i += kWarp) {
    const float dnorm = W::to_fp32(weight[i]) * A::to_fp32(dy[i]);
    s_dnorm += dnorm;
    s_dnorm_norm += dnorm * ((A::to_fp32(x[i]) - mu) * rs);
  }
  const float dnorm_mean = warp_sum(s_dnorm) * inv_c;
  const float dnorm_norm_mean = warp_sum(s_dnorm_norm) * inv_c;
  typename A::Elem* dx = dinp + row * C;
  for (int64_t i = lane; i < C; i += kWarp) {
    const float norm = (A::to_fp32(x[i]) - mu) * rs;
    const float dnorm = W::to_fp32(weight[i]) * A::to_fp32(dy[i]);
    dx[i] = to_act<A>(A::to_fp32(dx[i]) + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rs, act);
  }
}

// RMSNorm, one warp per row of C: rstd = 1/sqrt(mean(x²) + eps), out = x·rstd·w, as the CPU's
// rmsnorm_forward_row. weight stored as W.
template <class A, class W>
__global__ void rmsnorm_forward_kernel(typename A::Elem* out, float* rstd_out,
                                       const typename A::Elem* inp, const typename W::Elem* weight,
                                       int64_t N, int64_t C, float eps, DType act) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= N) return;  // whole warps leave together
  const int lane = threadIdx.x;
  const typename A::Elem* x = inp + row * C;
  float s = 0.0f;
  for (int64_t i = lane; i < C; i += kWarp) s += A::to_fp32(x[i]) * A::to_fp32(x[i]);
  const float rstd = 1.0f / sqrtf(warp_sum(s) * (1.0f / static_cast<float>(C)) + eps);
  typename A::Elem* o = out + row * C;
  for (int64_t i = lane; i < C; i += kWarp)
    o[i] = to_act<A>(A::to_fp32(x[i]) * rstd * W::to_fp32(weight[i]), act);
  if (lane == 0 && rstd_out) rstd_out[row] = rstd;
}

// One warp per row: dinp += (dnorm - norm·mean(dnorm·norm))·rstd, dnorm = w·dout, norm = x·rstd.
template <class A, class W>
__global__ void rmsnorm_backward_dinp_kernel(typename A::Elem* dinp, const typename A::Elem* dout,
                                             const typename A::Elem* inp,
                                             const typename W::Elem* weight, const float* rstd,
                                             int64_t N, int64_t C, DType act) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= N) return;
  const int lane = threadIdx.x;
  const typename A::Elem* x = inp + row * C;
  const typename A::Elem* dy = dout + row * C;
  const float rs = rstd[row];
  float s = 0.0f;
  for (int64_t i = lane; i < C; i += kWarp)
    s += W::to_fp32(weight[i]) * A::to_fp32(dy[i]) * (A::to_fp32(x[i]) * rs);
  const float dnorm_norm_mean = warp_sum(s) * (1.0f / static_cast<float>(C));
  typename A::Elem* dx = dinp + row * C;
  for (int64_t i = lane; i < C; i += kWarp) {
    const float norm = A::to_fp32(x[i]) * rs;
    const float dnorm = W::to_fp32(weight[i]) * A::to_fp32(dy[i]);
    dx[i] = to_act<A>(A::to_fp32(dx[i]) + (dnorm - norm * dnorm_norm_mean) * rs, act);
  }
}

// Per-head RMSNorm, one warp per head row r of N·H (head r % H of row r / H, rows `stride`
// apart, heads hd apart), in place: rmsnorm_forward_kernel's arithmetic on the row. A lane
// writes only the elements it read; only the heads are written (and rounded).
__device__ __forceinline__ int64_t head_row_offset(int64_t r, int64_t H, int64_t hd,
                                                   int64_t stride) {
  return (r / H) * stride + (r % H) * hd;
}

template <class A, class W>
__global__ void head_rmsnorm_forward_kernel(typename A::Elem* x, float* rstd_out,
                                            const typename W::Elem* weight, int64_t rows, int64_t H,
                                            int64_t hd, int64_t stride, float eps, DType act) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  typename A::Elem* xr = x + head_row_offset(row, H, hd, stride);
  float s = 0.0f;
  for (int64_t i = lane; i < hd; i += kWarp) s += A::to_fp32(xr[i]) * A::to_fp32(xr[i]);
  const float rstd = 1.0f / sqrtf(warp_sum(s) * (1.0f / static_cast<float>(hd)) + eps);
  for (int64_t i = lane; i < hd; i += kWarp)
    xr[i] = to_act<A>(A::to_fp32(xr[i]) * rstd * W::to_fp32(weight[i]), act);
  if (lane == 0 && rstd_out) rstd_out[row] = rstd;
}

// In place: dx = (w·dx - norm·mean(w·dx·norm))·rstd, norm = x·rstd, per head row (the sum is
// complete, across the warp, before any lane writes).
template <class A, class W>
__global__ void head_rmsnorm_backward_kernel(typename A::Elem* dx, const typename A::Elem* inp,
                                             const typename W::Elem* weight, const float* rstd,
                                             int64_t rows, int64_t H, int64_t hd, int64_t stride,
                                             DType act) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  const int64_t at = head_row_offset(row, H, hd, stride);
  const typename A::Elem* x = inp + at;
  typename A::Elem* d = dx + at;
  const float rs = rstd[row];
  float s = 0.0f;
  for (int64_t i = lane; i < hd; i += kWarp)
    s += W::to_fp32(weight[i]) * A::to_fp32(d[i]) * (A::to_fp32(x[i]) * rs);
  const float dnorm_norm_mean = warp_sum(s) * (1.0f / static_cast<float>(hd));
  for (int64_t i = lane; i < hd; i += kWarp) {
    const float g = W::to_fp32(weight[i]) * A::to_fp32(d[i]);
    d[i] = to_act<A>((g - A::to_fp32(x[i]) * rs * dnorm_norm_mean) * rs, act);
  }
}

// ---------------------------------------------------------------------------------------------
// The terms of the layer-norm and RMSNorm parameter gradients' column reductions
// (cuda_kernel_helpers.cuh; stage 2, column_finish, is in cuda_kernels.cu), dout and inp read
// as A.

// Layer norm's parameter gradients: dweight += dout·norm, dbias += dout, norm = (x - mean)·rstd.
template <class A>
struct LayerNormTerms {
  static constexpr int kValues = 2;
  const typename A::Elem *dout, *inp;
  const float *mean, *rstd;
  int64_t C;
  __device__ void operator()(int64_t r, int64_t c, float* v) const {
    const float dy = A::to_fp32(dout[r * C + c]);
    v[0] = dy * ((A::to_fp32(inp[r * C + c]) - mean[r]) * rstd[r]);
    v[1] = dy;
  }
};

// RMSNorm's weight gradient: dweight += dout·x·rstd.
template <class A>
struct RmsNormTerms {
  static constexpr int kValues = 1;
  const typename A::Elem *dout, *inp;
  const float* rstd;
  int64_t C;
  __device__ void operator()(int64_t r, int64_t c, float* v) const {
    v[0] = A::to_fp32(dout[r * C + c]) * (A::to_fp32(inp[r * C + c]) * rstd[r]);
  }
};

// The per-head RMSNorm's weight gradient: dweight += dout·x·rstd over the head rows (r of N·H).
template <class A>
struct HeadRmsNormTerms {
  static constexpr int kValues = 1;
  const typename A::Elem *dout, *inp;
  const float* rstd;
  int64_t H, hd, stride;
  __device__ void operator()(int64_t r, int64_t c, float* v) const {
    const int64_t at = head_row_offset(r, H, hd, stride) + c;
    v[0] = A::to_fp32(dout[at]) * (A::to_fp32(inp[at]) * rstd[r]);
  }
};

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
// CPU throws; a device kernel cannot). The logits are stored as A; the gradient is stored as
// to_act<A>, the loss is fp32; each thread reads a gradient's logit before it writes it, and the
// row's reductions end first.
template <class A>
__global__ void softmax_cross_entropy_kernel(float* losses, typename A::Elem* logits,
                                             const int32_t* targets, int64_t V, int64_t Vp,
                                             bool write_grad, float dloss, DType act) {
  __shared__ float shared[kSoftmaxThreads];
  const int64_t r = blockIdx.x;
  const int tid = threadIdx.x;
  typename A::Elem* row = logits + r * Vp;
  const typename A::Elem zero = A::from_fp32(0.0f);
  const int32_t target = targets[r];
  if (target < 0) {
    if (tid == 0) losses[r] = 0.0f;
    if (write_grad)
      for (int64_t i = tid; i < Vp; i += kSoftmaxThreads) row[i] = zero;
    return;
  }
  if (target >= V) {
    if (tid == 0) losses[r] = NAN;
    return;
  }
  const float target_logit = A::to_fp32(row[target]);
  float mx = -INFINITY;
  for (int64_t i = tid; i < V; i += kSoftmaxThreads) mx = fmaxf(mx, A::to_fp32(row[i]));
  mx = block_reduce<true>(mx, shared);
  float s = 0.0f;
  for (int64_t i = tid; i < V; i += kSoftmaxThreads) s += expf(A::to_fp32(row[i]) - mx);
  const float sum = block_reduce<false>(s, shared);  // ends with a barrier: all reads are done
  if (tid == 0)
    losses[r] = static_cast<float>(static_cast<double>(mx) + log(static_cast<double>(sum)) -
                                   static_cast<double>(target_logit));
  if (!write_grad) return;
  const float k = dloss / sum;
  for (int64_t i = tid; i < V; i += kSoftmaxThreads) {
    const float e = expf(A::to_fp32(row[i]) - mx);
    row[i] = to_act<A>(i == target ? (e / sum - 1.0f) * dloss : e * k, act);
  }
  for (int64_t i = V + tid; i < Vp; i += kSoftmaxThreads) row[i] = zero;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Embedding. out and dout are the entries' one activation operand each: never staged.

void CudaKernels::embedding_forward(Operand out, const int32_t* tokens, ConstOperand wte,
                                    ConstOperand wpe, int64_t B, int64_t T, int64_t C,
                                    const int32_t* positions) {
  const int64_t n = B * T * C;
  if (n <= 0) return;
  visit_storage(out.dtype, [&](auto out_tag) {
    visit_storage(wte.dtype, [&](auto wte_tag) {
      visit_storage(wpe.dtype, [&](auto wpe_tag) {
        using A = decltype(out_tag);
        using W = decltype(wte_tag);
        using P = decltype(wpe_tag);
        embedding_forward_kernel<A, W, P>
            <<<blocks_for(n, kElementThreads), kElementThreads, 0, stream_>>>(
                elems<A>(out), tokens, positions, elems<W>(wte), elems<P>(wpe), B * T, T, C, act_);
      });
    });
  });
  check_launch();
}

// Parameter gradients only: nothing to round to the activation dtype (a 16-bit dwte / dwpe is
// rounded in the kernel, once per element written).
void CudaKernels::embedding_backward(Operand dwte, Operand dwpe, ConstOperand dout,
                                     const int32_t* tokens, int64_t B, int64_t T, int64_t C,
                                     const int32_t* positions) {
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
  visit_storage(dwpe.dtype, [&](auto dwpe_tag) {
    visit_storage(dout.dtype, [&](auto dout_tag) {
      using S = decltype(dwpe_tag);
      using A = decltype(dout_tag);
      embedding_backward_wpe_kernel<S, A>
          <<<blocks_for(T * C, kElementThreads), kElementThreads, 0, stream_>>>(
              elems<S>(dwpe), elems<A>(dout), B, T, C);
    });
  });
  check_launch();
}

// ---------------------------------------------------------------------------------------------
// Layer norm. Entries with several activation operands launch on one_dtype of them, or run
// themselves on fp32 copies when fp32 and 16-bit ones meet (ActStage; its destructor narrows
// what was written back, after the kernels, on stream_).

void CudaKernels::layernorm_forward(Operand out, float* mean, float* rstd, ConstOperand inp,
                                    ConstOperand weight, ConstOperand bias, int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return;
  const std::optional<DType> stored = one_dtype({out, inp});
  if (!stored) {
    ActStage stage(*this);
    layernorm_forward(stage.out(out, N * C), mean, rstd, stage.in(inp, N * C), weight, bias, N, C);
    return;
  }
  visit_storage(*stored, [&](auto act_tag) {
    visit_storage(weight.dtype, [&](auto weight_tag) {
      visit_storage(bias.dtype, [&](auto bias_tag) {
        using A = decltype(act_tag);
        using W = decltype(weight_tag);
        using B = decltype(bias_tag);
        layernorm_forward_kernel<A, W, B>
            <<<blocks_for(N, kRowsPerBlock), dim3(kWarp, kRowsPerBlock), 0, stream_>>>(
                elems<A>(out), mean, rstd, elems<A>(inp), elems<W>(weight), elems<B>(bias), N, C,
                act_);
      });
    });
  });
  check_launch();
}

void CudaKernels::layernorm_backward(Operand dinp, Operand dweight, Operand dbias,
                                     ConstOperand dout, ConstOperand inp, ConstOperand weight,
                                     const float* mean, const float* rstd, int64_t N, int64_t C) {
  ZT_CUDA_ASSERT(!dweight.fresh && !dbias.fresh,
                 "layernorm_backward: a fresh gradient (kernels.h)");
  if (N <= 0 || C <= 0) return;
  const std::optional<DType> stored = one_dtype({dinp, dout, inp});
  if (!stored) {
    ActStage stage(*this);
    layernorm_backward(stage.inout(dinp, N * C), dweight, dbias, stage.in(dout, N * C),
                       stage.in(inp, N * C), weight, mean, rstd, N, C);
    return;
  }
  // dweight += Σ dout·norm, dbias += Σ dout: two-stage column reductions (values 0 and 1).
  const int64_t chunks = column_chunks(N);
  Buffer partials;
  visit_storage(*stored, [&](auto act_tag) {
    using A = decltype(act_tag);
    visit_storage(weight.dtype, [&](auto weight_tag) {
      using W = decltype(weight_tag);
      layernorm_backward_dinp_kernel<A, W>
          <<<blocks_for(N, kRowsPerBlock), dim3(kWarp, kRowsPerBlock), 0, stream_>>>(
              elems<A>(dinp), elems<A>(dout), elems<A>(inp), elems<W>(weight), mean, rstd, N, C,
              act_);
    });
    check_launch();
    if (!dweight && !dbias) return;
    const LayerNormTerms<A> terms{elems<A>(dout), elems<A>(inp), mean, rstd, C};
    partials = scratch(terms.kValues * chunks * C);
    column_partials(partials.as<float>(), terms, N, C, stream_);
  });
  if (!dweight && !dbias) return;
  column_finish(dweight, partials.as<float>(), N, C, stream_);
  column_finish(dbias, partials.as<float>() + chunks * C, N, C, stream_);
}

// ---------------------------------------------------------------------------------------------
// RMSNorm

void CudaKernels::rmsnorm_forward(Operand out, float* rstd, ConstOperand inp, ConstOperand weight,
                                  int64_t N, int64_t C, float eps) {
  if (N <= 0 || C <= 0) return;
  const std::optional<DType> stored = one_dtype({out, inp});
  if (!stored) {
    ActStage stage(*this);
    rmsnorm_forward(stage.out(out, N * C), rstd, stage.in(inp, N * C), weight, N, C, eps);
    return;
  }
  visit_storage(*stored, [&](auto act_tag) {
    visit_storage(weight.dtype, [&](auto weight_tag) {
      using A = decltype(act_tag);
      using W = decltype(weight_tag);
      rmsnorm_forward_kernel<A, W>
          <<<blocks_for(N, kRowsPerBlock), dim3(kWarp, kRowsPerBlock), 0, stream_>>>(
              elems<A>(out), rstd, elems<A>(inp), elems<W>(weight), N, C, eps, act_);
    });
  });
  check_launch();
}

void CudaKernels::rmsnorm_backward(Operand dinp, Operand dweight, ConstOperand dout,
                                   ConstOperand inp, ConstOperand weight, const float* rstd,
                                   int64_t N, int64_t C) {
  ZT_CUDA_ASSERT(!dweight.fresh, "rmsnorm_backward: a fresh gradient (kernels.h)");
  if (N <= 0 || C <= 0) return;
  const std::optional<DType> stored = one_dtype({dinp, dout, inp});
  if (!stored) {
    ActStage stage(*this);
    rmsnorm_backward(stage.inout(dinp, N * C), dweight, stage.in(dout, N * C), stage.in(inp, N * C),
                     weight, rstd, N, C);
    return;
  }
  // dweight += Σ dout·x·rstd: a two-stage column reduction.
  Buffer partials;
  visit_storage(*stored, [&](auto act_tag) {
    using A = decltype(act_tag);
    visit_storage(weight.dtype, [&](auto weight_tag) {
      using W = decltype(weight_tag);
      rmsnorm_backward_dinp_kernel<A, W>
          <<<blocks_for(N, kRowsPerBlock), dim3(kWarp, kRowsPerBlock), 0, stream_>>>(
              elems<A>(dinp), elems<A>(dout), elems<A>(inp), elems<W>(weight), rstd, N, C, act_);
    });
    check_launch();
    if (!dweight) return;
    const RmsNormTerms<A> terms{elems<A>(dout), elems<A>(inp), rstd, C};
    partials = scratch(terms.kValues * column_chunks(N) * C);
    column_partials(partials.as<float>(), terms, N, C, stream_);
  });
  if (dweight) column_finish(dweight, partials.as<float>(), N, C, stream_);
}

// Per-head RMSNorm (Qwen3's q_norm, k_norm), in place: the kernels round the heads they write;
// the parts of the rows between the heads (v, or q for the k heads) keep their bits.

void CudaKernels::head_rmsnorm_forward(Operand x, float* rstd, ConstOperand weight, int64_t N,
                                       int64_t H, int64_t hd, int64_t stride, float eps) {
  ZT_CUDA_ASSERT(H > 0 && hd > 0 && stride >= H * hd, "head_rmsnorm_forward: bad head layout");
  if (N <= 0) return;
  visit_storage(x.dtype, [&](auto act_tag) {
    visit_storage(weight.dtype, [&](auto weight_tag) {
      using A = decltype(act_tag);
      using W = decltype(weight_tag);
      head_rmsnorm_forward_kernel<A, W>
          <<<blocks_for(N * H, kRowsPerBlock), dim3(kWarp, kRowsPerBlock), 0, stream_>>>(
              elems<A>(x), rstd, elems<W>(weight), N * H, H, hd, stride, eps, act_);
    });
  });
  check_launch();
}

void CudaKernels::head_rmsnorm_backward(Operand dx, Operand dweight, ConstOperand inp,
                                        ConstOperand weight, const float* rstd, int64_t N,
                                        int64_t H, int64_t hd, int64_t stride) {
  ZT_CUDA_ASSERT(!dweight.fresh, "head_rmsnorm_backward: a fresh gradient (kernels.h)");
  ZT_CUDA_ASSERT(H > 0 && hd > 0 && stride >= H * hd, "head_rmsnorm_backward: bad head layout");
  if (N <= 0) return;
  const std::optional<DType> stored = one_dtype({dx, inp});
  if (!stored) {
    const int64_t span = (N - 1) * stride + H * hd;  // the elements from the first head to the last
    ActStage stage(*this);
    head_rmsnorm_backward(stage.inout(dx, span), dweight, stage.in(inp, span), weight, rstd, N, H,
                          hd, stride);
    return;
  }
  const int64_t rows = N * H;
  Buffer partials;
  visit_storage(*stored, [&](auto act_tag) {
    using A = decltype(act_tag);
    // dweight's partials first: they read dx as the gradient w.r.t. the output, which the
    // in-place kernel below then overwrites (both on stream_, in this order).
    if (dweight) {
      const HeadRmsNormTerms<A> terms{elems<A>(dx), elems<A>(inp), rstd, H, hd, stride};
      partials = scratch(terms.kValues * column_chunks(rows) * hd);
      column_partials(partials.as<float>(), terms, rows, hd, stream_);
    }
    visit_storage(weight.dtype, [&](auto weight_tag) {
      using W = decltype(weight_tag);
      head_rmsnorm_backward_kernel<A, W>
          <<<blocks_for(rows, kRowsPerBlock), dim3(kWarp, kRowsPerBlock), 0, stream_>>>(
              elems<A>(dx), elems<A>(inp), elems<W>(weight), rstd, rows, H, hd, stride, act_);
    });
  });
  check_launch();
  if (dweight) column_finish(dweight, partials.as<float>(), rows, hd, stream_);
}

// ---------------------------------------------------------------------------------------------
// Softmax cross-entropy: the logits are the one activation operand, read and overwritten in
// their dtype (never staged).

void CudaKernels::softmax_cross_entropy(float* losses, Operand logits, const int32_t* targets,
                                        int64_t N, int64_t V, int64_t Vp,
                                        LogitsOutput logits_output, float dloss) {
  ZT_CUDA_ASSERT(V > 0 && V <= Vp, "softmax_cross_entropy: need 0 < V <= Vp");
  if (N <= 0) return;
  ZT_CUDA_ASSERT(N <= std::numeric_limits<int>::max(), "softmax_cross_entropy: N too large");
  const bool write_grad = logits_output == LogitsOutput::kGradient;
  visit_storage(logits.dtype, [&](auto tag) {
    using A = decltype(tag);
    softmax_cross_entropy_kernel<A><<<unsigned(N), kSoftmaxThreads, 0, stream_>>>(
        losses, elems<A>(logits), targets, V, Vp, write_grad, dloss, act_);
  });
  check_launch();
}

}  // namespace zt
