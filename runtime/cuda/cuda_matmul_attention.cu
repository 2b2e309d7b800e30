// CudaKernels, the ops that are cuBLAS GEMMs: matmul (cuBLASLt tensor-core GEMMs for 16-bit
// operands, cuBLAS fp32 GEMMs otherwise) and attention, multi-head and grouped-query (cuBLAS
// strided-batched GEMMs around our causal softmax kernels; 16-bit tables try cuDNN's fused SDPA
// first, cuda_attention_cudnn.cu). Every call is enqueued on stream_
// (the cuBLAS handle is bound to it, cuBLASLt is called with it) and returns before the work is
// done. Same math as runtime/cpu/cpu_matmul_kernels.cpp and cpu_attention_kernels.cpp;
// tests/runtime/cuda_nn_kernels*_test.cpp check parity against them.
//
// Determinism: no float atomics anywhere. Every reduction is a fixed-order loop or a fixed tree
// whose shape depends only on compile-time constants (kColumnRowGroups, kColumnChunkRows, warp
// size, block sizes) and the problem's size, never on the GPU's SM count or launch timing, so
// each op gives the same bits run to run. The cuBLASLt GEMMs run the algorithm cached for their
// problem (cuda_lt_gemm.h), with no in-place split-K reduction.
//
// Row-major vs cuBLAS: cuBLAS is column-major. A row-major (R,S) matrix with row stride ld is,
// to cuBLAS, a column-major (S,R) matrix with leading dimension ld: its transpose. So a row-major
// product Y (M,N) = A (M,K) · B (K,N) is computed as the column-major Yᵀ = Bᵀ · Aᵀ: cuBLAS is
// called with the operands swapped and m = N, n = M. Each GEMM below states the column-major
// product it computes.
//
// Precision (cuda_kernels.h). Activations written here are rounded to the table's activation
// dtype: by the matmul itself (the 16-bit forward's cuBLASLt epilogue, see "Matmul" below; the
// bias rows of a K = 0 product as they are written) or by round_act after the GEMM or kernel
// that wrote them in fp32: matmul out (add_bias_rows adding a bias outside the epilogue, which
// rounds the sum; round_act for an fp32 GEMM without a bias) and dinp,
// attention out / att / dqkv (docs/cuda.md, "16-bit operands", lists these passes). 16-bit
// parameters and parameter gradients are read and written in their dtype: by our kernels (the
// bias rows and the bias gradient's column reduction, templated on the storage type: a gradient
// element is widened, accumulated in fp32 and narrowed once), and by the 16-bit GEMMs, whose
// operands are 16-bit and whose accumulate-into-gradient is one rounding (C = D, beta = 1).
//
// Not here: embedding, layer norm, RMSNorm and softmax cross-entropy (cuda_nn_kernels.cu); the
// element-wise ops, optimizers and flat reductions (cuda_kernels.cu).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "runtime/cuda/cuda_kernel_helpers.cuh"
#include "runtime/cuda/cuda_kernels_impl.h"

namespace zt {
namespace {

// cuBLAS takes int sizes and leading dimensions.
void check_int(int64_t v) {
  ZT_CUDA_ASSERT(v >= 0 && v <= std::numeric_limits<int>::max(),
                 "a GEMM size or leading dimension does not fit cuBLAS's int");
}

// ---------------------------------------------------------------------------------------------
// GEMM wrappers: fp32 in, fp32 out; compute type fp32, or TF32 tensor cores when allowed.

cublasComputeType_t compute_type(bool allow_tf32) {
  return allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

// Column-major C (m,n) = alpha · op(A) · op(B) + beta · C.
void gemm(cublasHandle_t handle, bool allow_tf32, cublasOperation_t op_a, cublasOperation_t op_b,
          int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
          int64_t ldb, float beta, float* c, int64_t ldc) {
  check_int(m);
  check_int(n);
  check_int(k);
  check_int(lda);
  check_int(ldb);
  check_int(ldc);
  ZT_CUBLAS_CHECK(cublasGemmEx(handle, op_a, op_b, int(m), int(n), int(k), &alpha, a, CUDA_R_32F,
                               int(lda), b, CUDA_R_32F, int(ldb), &beta, c, CUDA_R_32F, int(ldc),
                               compute_type(allow_tf32), CUBLAS_GEMM_DEFAULT));
}

// `batch` column-major products, operand i at base + i·stride.
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
// Small kernels

// out (M,N) row r = bias (in its stored dtype S), or 0 when bias is null, rounded to act: the
// table's activation dtype when the rows are the product (K = 0), kF32 when a GEMM adds into
// them next (the sum is rounded once, after).
template <class S>
__global__ void broadcast_rows_kernel(float* out, const typename S::Elem* bias, int64_t M,
                                      int64_t N, DType act) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= M * N) return;
  out[i] = round_to_act(bias ? S::to_fp32(bias[i % N]) : 0.0f, act);
}

// out (M,N) row r += bias (in its stored dtype S), the fp32 sum rounded to act once: the
// product a GEMM wrote in fp32 (beta = 0) and its bias in one pass.
template <class S>
__global__ void add_bias_rows_kernel(float* out, const typename S::Elem* bias, int64_t M, int64_t N,
                                     DType act) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= M * N) return;
  out[i] = round_to_act(__fadd_rn(out[i], S::to_fp32(bias[i % N])), act);
}

// The terms of the bias gradient's column reduction (cuda_kernel_helpers.cuh): dout[r, c].
struct BiasTerms {
  static constexpr int kValues = 1;
  const float* dout;
  int64_t N;
  __device__ void operator()(int64_t r, int64_t c, float* v) const { v[0] = dout[r * N + c]; }
};

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
// Matmul
//
// Which GEMM runs (the table's activation dtype `act`, the operands' stored dtypes):
//   - 16-bit tensor cores (cuBLASLt, A and B in act's 16-bit type, fp32 accumulation) where the
//     16-bit operands are act-typed: forward and dinp when the weight is act-typed, dweight when
//     the table is 16-bit and dweight is act-typed or fp32. The activation operand (inp, dout)
//     is narrowed into a tracked scratch first: exact, it holds act's values (kernels.h).
//       forward  D = act(inp·W + bias): fp16, or bf16 without a bias: cuBLASLt writes a 16-bit
//                D, an fp16 bias added by its BIAS epilogue in fp32 before the one rounding;
//                then widened into out (exact). A bf16 bias, or one of another dtype: the
//                product as fp32 D (beta = 0), then add_bias_rows adds the bias and rounds the
//                sum once, a pass of its own (8 bytes per element of out, and the bias).
//                (cuBLASLt 13.0's bf16 BIAS epilogue on an H200 gave results off by up to 15% where
//                the bias cancels the product, as if the product were rounded to bf16 before the
//                bias was added: CudaNnKernelsTest.TensorCoreMatmulForwardMatchesCpuForEveryDtype
//                caught it.)
//       dinp     dinp = act(dinp + dout·Wᵀ): fp32 C = D = dinp (beta = 1; beta = 0 when
//                dinp is written, GradOutput::kWrite, so it is neither zeroed nor read), then
//                rounded by round_act (dinp holds act values; the sum is fp32, one rounding), a
//                pass of its own (8 bytes per element of dinp): no kernel of ours passes over
//                dinp after the GEMM in this entry.
//       dweight  dW = type(dW + inpᵀ·dout): C = D = dW in its own dtype, beta = 1, fp32
//                compute, one rounding on the store (split-K reductions are kept in fp32:
//                cuda_lt_gemm.h). The bits contract of kernels.h.
//   - otherwise cublasGemmEx in fp32 (TF32 when allowed), a weight of another 16-bit dtype
//     widened into an fp32 scratch, a 16-bit dweight of another dtype computed into an fp32
//     scratch and added with one rounding (add's bits). A bias is added by add_bias_rows after
//     the GEMM (beta = 0), which rounds the sum; without one a 16-bit table rounds out by
//     round_act, and dinp likewise, as above; out of a K = 0 product (the bias rows) is rounded
//     by the kernel that writes it.

namespace {

// The plan key of column-major D (m,n) = op(A) (m,k) · op(B) (k,n) over these pointers.
LtGemmKey lt_key(DType ab, DType cd, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 const void* a, int64_t lda, const void* b, int64_t ldb, const void* d, int64_t ldd,
                 const void* bias) {
  LtGemmKey key;
  key.ab = ab;
  key.cd = cd;
  key.trans_a = trans_a;
  key.trans_b = trans_b;
  key.m = m;
  key.n = n;
  key.k = k;
  key.lda = lda;
  key.ldb = ldb;
  key.ldd = ldd;
  key.bias = bias != nullptr;
  key.align_a = lt_alignment(a);
  key.align_b = lt_alignment(b);
  key.align_d = lt_alignment(d);
  key.align_bias = lt_alignment(bias);
  return key;
}

}  // namespace

void CudaKernels::matmul_forward(Operand out_op, ConstOperand inp_op, ConstOperand weight_op,
                                 ConstOperand bias, int64_t M, int64_t K, int64_t N,
                                 WeightLayout layout) {
  ActStage stage(*this);
  float* out = stage.out(out_op, M * N);
  const float* inp = stage.in(inp_op, M * K);
  ZT_CUDA_ASSERT(M >= 0 && K >= 0 && N >= 0, "matmul_forward: negative dimension");
  if (M == 0 || N == 0) return;
  ZT_CUDA_ASSERT(out && (K == 0 || (inp && weight_op)), "matmul_forward: null operand");
  const bool in_out = layout == WeightLayout::kInOut;
  // Column-major outᵀ (N,M) = op(W) (N,K) · inpᵀ (K,M). inp row-major (M,K) is inpᵀ with
  // ld K. kInOut: W row-major (K,N) is Wᵀ (N,K) ld N, used as is. kOutIn: W row-major (N,K)
  // is the column-major (K,N) ld K, transposed.
  if (K > 0 && act_ != DType::kF32 && weight_op.dtype == act_) {
    Buffer inp16;
    const void* a = narrowed_to_act(inp, M * K, inp16);
    if (!bias || (bias.dtype == act_ && act_ == DType::kF16)) {
      // out = act(inp·W + bias): one rounding in the epilogue, then widened (exact). cuBLASLt
      // has no alignment preference for the bias vector: one less than 16-byte aligned is
      // copied to an aligned scratch (N elements) rather than trusted to every kernel.
      Buffer bias_copy;
      const void* bias_ptr = bias.data;
      if (bias && lt_alignment(bias_ptr) < 16) {
        bias_copy = scratch(N, act_);
        cast(bias_copy.data(), act_, bias_ptr, act_, N);
        bias_ptr = bias_copy.data();
      }
      Buffer out16 = scratch(M * N, act_);
      const LtGemmKey key = lt_key(act_, act_, !in_out, false, N, M, K, weight_op.data,
                                   in_out ? N : K, a, K, out16.data(), N, bias_ptr);
      impl_->lt_gemm->run(key, weight_op.data, a, out16.data(), bias_ptr, 1.0f, 0.0f, stream_);
      cast(out, DType::kF32, out16.data(), act_, M * N);
      return;
    }
    // A bf16 bias (see above) or one of another dtype: the product in fp32 (beta = 0), then the
    // bias added and the sum rounded in one pass.
    const LtGemmKey key = lt_key(act_, DType::kF32, !in_out, false, N, M, K, weight_op.data,
                                 in_out ? N : K, a, K, out, N, nullptr);
    impl_->lt_gemm->run(key, weight_op.data, a, out, nullptr, 1.0f, 0.0f, stream_);
    add_bias_rows(out, bias, M, N);
    return;
  }
  // K = 0: the product is empty and out is the bias (or 0), rounded as the rows are written.
  if (K == 0) {
    visit_storage(bias.dtype, [&](auto tag) {
      using S = decltype(tag);
      broadcast_rows_kernel<S><<<blocks_for(M * N, kElementThreads), kElementThreads, 0, stream_>>>(
          out, elems<S>(bias), M, N, act_);
    });
    check_launch();
    return;
  }
  // fp32 GEMM (beta = 0), then the bias added and the sum rounded in one pass, or without a
  // bias the product rounded by a pass of its own (docs/cuda.md).
  Buffer weight_fp32;  // a weight of another 16-bit dtype than the table's, widened (K·N)
  const float* weight = widened(weight_op, K * N, weight_fp32);
  gemm(impl_->cublas, impl_->allow_tf32, in_out ? CUBLAS_OP_N : CUBLAS_OP_T, CUBLAS_OP_N, N, M, K,
       1.0f, weight, in_out ? N : K, inp, K, 0.0f, out, N);
  if (bias)
    add_bias_rows(out, bias, M, N);
  else
    round_act(out, M * N);
}

void CudaKernels::add_bias_rows(float* out, ConstOperand bias, int64_t M, int64_t N) {
  visit_storage(bias.dtype, [&](auto tag) {
    using S = decltype(tag);
    add_bias_rows_kernel<S><<<blocks_for(M * N, kElementThreads), kElementThreads, 0, stream_>>>(
        out, elems<S>(bias), M, N, act_);
  });
  check_launch();
}

void CudaKernels::matmul_backward(Operand dinp_op, Operand dweight, Operand dbias,
                                  ConstOperand dout_op, ConstOperand inp_op, ConstOperand weight_op,
                                  int64_t M, int64_t K, int64_t N, WeightLayout layout,
                                  GradOutput dinp_output) {
  ActStage stage(*this);
  float* dinp =
      dinp_output == GradOutput::kAdd ? stage.inout(dinp_op, M * K) : stage.out(dinp_op, M * K);
  const float* dout = stage.in(dout_op, M * N);
  const float* inp = stage.in(inp_op, M * K);
  ZT_CUDA_ASSERT(M >= 0 && K >= 0 && N >= 0, "matmul_backward: negative dimension");
  // dinp written as if it held zeros: the product's GEMM writes it (beta = 0), or with no
  // product (N = 0) it is zeroed.
  const bool write_dinp = dinp && dinp_output == GradOutput::kWrite;
  if (write_dinp && N == 0 && M > 0 && K > 0)
    ZT_CUDA_CHECK(cudaMemsetAsync(dinp, 0, static_cast<size_t>(M * K) * sizeof(float), stream_));
  ZT_CUDA_ASSERT(!dbias.fresh, "matmul_backward: a fresh bias gradient (only dweight may be)");
  if (dweight.fresh) {  // holds no values yet (kernels.h): zeroed, then added into
    ZT_CUDA_CHECK(cudaMemsetAsync(dweight.data, 0,
                                  static_cast<size_t>(K * N) * dtype_size(dweight.dtype), stream_));
    dweight.fresh = false;
  }
  if (M == 0 || N == 0) return;
  ZT_CUDA_ASSERT(dout, "matmul_backward: null dout");
  const bool in_out = layout == WeightLayout::kInOut;
  const bool act16 = act_ != DType::kF32;
  const bool lt_dinp = K > 0 && dinp && act16 && weight_op.dtype == act_;
  const bool lt_dweight =
      K > 0 && dweight && act16 && (dweight.dtype == act_ || dweight.dtype == DType::kF32);
  Buffer dout16;  // dout (M,N) narrowed to act, shared by both tensor-core products
  const void* d16 = (lt_dinp || lt_dweight) ? narrowed_to_act(dout, M * N, dout16) : nullptr;
  if (K > 0 && dinp) {
    ZT_CUDA_ASSERT(weight_op, "matmul_backward: dinp without a weight");
    // dinp (M,K) += dout · Wᵀ. Column-major dinpᵀ (K,M) += op(W) (K,N) · doutᵀ (N,M).
    // kInOut: W stored as the column-major (N,K) ld N, transposed. kOutIn: stored as the
    // column-major (K,N) ld K, as is.
    if (lt_dinp) {
      const LtGemmKey key = lt_key(act_, DType::kF32, in_out, false, K, M, N, weight_op.data,
                                   in_out ? N : K, d16, N, dinp, K, nullptr);
      impl_->lt_gemm->run(key, weight_op.data, d16, dinp, nullptr, 1.0f, write_dinp ? 0.0f : 1.0f,
                          stream_);
    } else {
      Buffer weight_fp32;  // a weight of another dtype than a 16-bit table's, widened (K·N)
      const float* weight = widened(weight_op, K * N, weight_fp32);
      gemm(impl_->cublas, impl_->allow_tf32, in_out ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, K, M,
           N, 1.0f, weight, in_out ? N : K, dout, N, write_dinp ? 0.0f : 1.0f, dinp, K);
    }
    round_act(dinp, M * K);  // cuBLAS(Lt) wrote fp32: a pass of its own (docs/cuda.md)
  }
  if (K > 0 && dweight) {
    ZT_CUDA_ASSERT(inp, "matmul_backward: dweight without an input");
    // kInOut: dW (K,N) += inpᵀ · dout. Column-major dWᵀ (N,K) += doutᵀ (N,M) · inp (M,K), inp
    // being the column-major (K,M) ld K transposed.
    // kOutIn: dW (N,K) += doutᵀ · inp. Column-major dWᵀ (K,N) += inpᵀ (K,M) · dout (M,N), dout
    // being the column-major (N,M) ld N transposed.
    if (lt_dweight) {
      Buffer inp16;
      const void* i16 = narrowed_to_act(inp, M * K, inp16);
      const void* a = in_out ? d16 : i16;
      const void* b = in_out ? i16 : d16;
      const LtGemmKey key = in_out ? lt_key(act_, dweight.dtype, false, true, N, K, M, a, N, b, K,
                                            dweight.data, N, nullptr)
                                   : lt_key(act_, dweight.dtype, false, true, K, N, M, a, K, b, N,
                                            dweight.data, K, nullptr);
      impl_->lt_gemm->run(key, a, b, dweight.data, nullptr, 1.0f, 1.0f, stream_);
    } else {
      // fp32: the GEMM accumulates into dweight (beta = 1). 16 bits: the product goes to an
      // fp32 scratch (beta = 0: cuBLAS does not read C, so the scratch needs no zeroing), then
      // dweight = dtype(float(dweight) + product), one rounding (add's bits).
      const bool fp32 = dweight.dtype == DType::kF32;
      Buffer product;
      if (!fp32) product = scratch(K * N);
      float* dw = fp32 ? static_cast<float*>(dweight.data) : product.as<float>();
      const float beta = fp32 ? 1.0f : 0.0f;
      if (in_out) {
        gemm(impl_->cublas, impl_->allow_tf32, CUBLAS_OP_N, CUBLAS_OP_T, N, K, M, 1.0f, dout, N,
             inp, K, beta, dw, N);
      } else {
        gemm(impl_->cublas, impl_->allow_tf32, CUBLAS_OP_N, CUBLAS_OP_T, K, N, M, 1.0f, inp, K,
             dout, N, beta, dw, K);
      }
      if (!fp32)
        add(dweight.data, dweight.dtype, dweight.data, dweight.dtype, dw, DType::kF32, K * N);
    }
  }
  if (dbias) {  // dbias (N) += column sums of dout, two stages
    Buffer partials = scratch(BiasTerms::kValues * column_chunks(M) * N);
    column_partials(partials.as<float>(), BiasTerms{dout, N}, M, N, stream_);
    column_finish(dbias, partials.as<float>(), M, N, stream_);
  }
}

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

void CudaKernels::attention_forward(Operand out, Operand att, ConstOperand qkv, int64_t B,
                                    int64_t T, int64_t C, int64_t NH, const int32_t* positions) {
  ZT_CUDA_ASSERT(NH > 0 && C % NH == 0, "attention_forward: C is not a multiple of NH");
  gqa_attention_forward(out, att, qkv, B, T, NH, NH, C / NH, positions);
}

void CudaKernels::attention_backward(Operand dqkv, ConstOperand dout, ConstOperand qkv,
                                     ConstOperand att, int64_t B, int64_t T, int64_t C, int64_t NH,
                                     const int32_t* positions) {
  ZT_CUDA_ASSERT(NH > 0 && C % NH == 0, "attention_backward: C is not a multiple of NH");
  gqa_attention_backward(dqkv, dout, qkv, att, B, T, NH, NH, C / NH, positions);
}

// A 16-bit table tries cuDNN's fused SDPA first (cuda_attention_cudnn.cu: the path setting,
// eligibility, fallback); att then holds the softmax statistics, not the probabilities.
void CudaKernels::gqa_attention_forward(Operand out_op, Operand att_op, ConstOperand qkv_op,
                                        int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hd,
                                        const int32_t* positions, int64_t window) {
  ActStage stage(*this);
  float* out = stage.out(out_op, B * T * NH * hd);
  float* att = stage.out(att_op, B * NH * T * T);
  const float* qkv = stage.in(qkv_op, B * T * (NH + 2 * NKV) * hd);
  ZT_CUDA_ASSERT(NH > 0 && NKV > 0 && NH % NKV == 0 && hd > 0,
                 "gqa_attention_forward: NH must be a positive multiple of NKV");
  if (window >= T) window = 0;  // reads every key: plain causal attention
  if (B <= 0 || T <= 0) return;
  if (cudnn_attention_forward(out, att, qkv, B, T, NH, NKV, hd, positions, window)) return;
  reference_attention_forward(out, att, qkv, B, T, NH, NKV, hd, positions, window);
}

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

void CudaKernels::gqa_attention_backward(Operand dqkv_op, ConstOperand dout_op, ConstOperand qkv_op,
                                         ConstOperand att_op, int64_t B, int64_t T, int64_t NH,
                                         int64_t NKV, int64_t hd, const int32_t* positions,
                                         int64_t window) {
  ActStage stage(*this);
  float* dqkv = stage.inout(dqkv_op, B * T * (NH + 2 * NKV) * hd);
  const float* dout = stage.in(dout_op, B * T * NH * hd);
  const float* qkv = stage.in(qkv_op, B * T * (NH + 2 * NKV) * hd);
  const float* att = stage.in(att_op, B * NH * T * T);
  ZT_CUDA_ASSERT(NH > 0 && NKV > 0 && NH % NKV == 0 && hd > 0,
                 "gqa_attention_backward: NH must be a positive multiple of NKV");
  if (window >= T) window = 0;
  if (B <= 0 || T <= 0) return;
  if (cudnn_attention_backward(dqkv, dout, qkv, att, B, T, NH, NKV, hd, positions, window)) return;
  reference_attention_backward(dqkv, dout, qkv, att, B, T, NH, NKV, hd, positions, window);
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

}  // namespace zt
