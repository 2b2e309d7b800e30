// CudaKernels, matmul (cuBLASLt tensor-core GEMMs for 16-bit operands, cuBLAS fp32 GEMMs
// otherwise) and the attention entries, multi-head and grouped-query, which choose between
// cuDNN's fused SDPA (16-bit tables, cuda_attention_cudnn.cu) and the materialised T×T kernels
// (cuda_attention_kernels.cu). Every call is enqueued on stream_ (the cuBLAS handle is bound to
// it, cuBLASLt is called with it) and returns before the work is done. Same math as
// runtime/cpu/cpu_matmul_kernels.cpp and cpu_attention_kernels.cpp;
// tests/runtime/cuda_nn_kernels*_test.cpp check parity against them.
//
// Determinism: no float atomics anywhere. Every reduction is a fixed-order loop or a fixed tree
// whose shape depends only on compile-time constants (kColumnRowGroups, kColumnChunkRows, warp
// size, block sizes) and the problem's size, never on the GPU's SM count or launch timing, so
// each op gives the same bits run to run. The cuBLASLt GEMMs run the algorithm cached for their
// problem (cuda_lt_gemm.h; its key holds every pointer's alignment, which for an activation
// read or written in place is that of its offset into its allocation, each a cudaMalloc of its
// own: the same in every run and every ZeRO stage), with no in-place split-K reduction.
//
// Row-major vs cuBLAS: cuBLAS is column-major. A row-major (R,S) matrix with row stride ld is,
// to cuBLAS, a column-major (S,R) matrix with leading dimension ld: its transpose. So a row-major
// product Y (M,N) = A (M,K) · B (K,N) is computed as the column-major Yᵀ = Bᵀ · Aᵀ: cuBLAS is
// called with the operands swapped and m = N, n = M. Each GEMM below states the column-major
// product it computes.
//
// Precision (cuda_kernels.h). Activations are read and written in their stored dtype where the
// table's 16-bit GEMMs take them (cuBLASLt reads act-typed operands in place and writes its
// 16-bit D into an act-typed out or dinp, one rounding; see "Matmul" below) and by our kernels
// here (the bias rows, the bias added to a product, the bias gradient's column sums of dout),
// which round what they store to the activation dtype. An fp32 GEMM's output is rounded by
// round_act after it (matmul out without a bias, dinp of the fp32 paths). 16-bit parameters and
// parameter gradients are read and written in their dtype: by our kernels (templated on the
// storage type: a gradient element is widened, accumulated in fp32 and narrowed once), and by
// the 16-bit GEMMs, whose accumulate-into-gradient is one rounding (C = D, beta = 1). What no
// native path takes is staged (ActStage, cuda_kernels.h): the fp32 cuBLAS GEMMs' 16-bit
// activations, and the materialised attention's.
//
// Not here: the materialised attention and generation's decode (cuda_attention_kernels.cu);
// embedding, layer norm, RMSNorm and softmax cross-entropy (cuda_nn_kernels.cu); the
// element-wise ops, optimizers and flat reductions (cuda_kernels.cu).
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "runtime/cuda/cuda_kernel_helpers.cuh"
#include "runtime/cuda/cuda_kernels_impl.h"

namespace zt {
namespace {

// ---------------------------------------------------------------------------------------------
// GEMM wrappers: fp32 in, fp32 out; compute type fp32, or TF32 tensor cores when allowed.

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

// ---------------------------------------------------------------------------------------------
// Small kernels, templated on out's storage O and the bias's S

// out (M,N) row r = bias, or 0 when bias is null: the rows of a K = 0 product, rounded to act
// (the table's activation dtype) and stored as O.
template <class O, class S>
__global__ void broadcast_rows_kernel(typename O::Elem* out, const typename S::Elem* bias,
                                      int64_t M, int64_t N, DType act) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= M * N) return;
  out[i] = O::from_fp32(round_to_act(bias ? S::to_fp32(bias[i % N]) : 0.0f, act));
}

// out (M,N) row r = product row r + bias, the fp32 sum rounded to act once and stored as O: the
// product a GEMM wrote in fp32 (beta = 0; out itself when O is fp32) and its bias in one pass.
template <class O, class S>
__global__ void add_bias_rows_kernel(typename O::Elem* out, const float* product,
                                     const typename S::Elem* bias, int64_t M, int64_t N,
                                     DType act) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= M * N) return;
  out[i] = O::from_fp32(round_to_act(__fadd_rn(product[i], S::to_fp32(bias[i % N])), act));
}

// The terms of the bias gradient's column reduction (cuda_kernel_helpers.cuh): dout[r, c], read
// in its stored dtype S.
template <class S>
struct BiasTerms {
  static constexpr int kValues = 1;
  const typename S::Elem* dout;
  int64_t N;
  __device__ void operator()(int64_t r, int64_t c, float* v) const {
    v[0] = S::to_fp32(dout[r * N + c]);
  }
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Matmul
//
// Which GEMM runs (the table's activation dtype `act`, the operands' stored dtypes):
//   - 16-bit tensor cores (cuBLASLt, A and B in act's 16-bit type, fp32 accumulation) where the
//     16-bit operands are act-typed: forward and dinp when the weight is act-typed, dweight when
//     the table is 16-bit and dweight is act-typed or fp32. An act-typed activation operand (inp,
//     dout) is read in place; one of another dtype (an fp32 array holding act's values,
//     kernels.h) is first cast into a tracked act-typed scratch (act_input; exact).
//       forward  out = act(inp·W + bias): fp16, or bf16 without a bias: cuBLASLt writes a 16-bit
//                D, an fp16 bias added by its BIAS epilogue in fp32 before the one rounding: D
//                is out itself when out is act-typed, else a scratch cast into out (an fp32 out:
//                widened, exact). A bf16 bias, or one of another dtype: the product as fp32 D
//                (beta = 0; out itself when out is fp32, else a scratch), then add_bias_rows adds
//                the bias, rounds the sum once and stores it in out's dtype, a pass of its own
//                (per element 4 bytes read and 2 written for a 16-bit out, 8 for an fp32 one).
//                (cuBLASLt 13.0's bf16 BIAS epilogue on an H200 gave results off by up to 15% where
//                the bias cancels the product, as if the product were rounded to bf16 before the
//                bias was added: CudaNnKernelsTest.TensorCoreMatmulForwardMatchesCpuForEveryDtype
//                caught it.)
//       dinp     dinp = act(dinp + dout·Wᵀ): C = D = dinp in its own dtype (beta = 1; beta = 0
//                when dinp is written, GradOutput::kWrite, so it is neither zeroed nor read). An
//                act-typed dinp is rounded once, by the GEMM's store. An fp32 dinp (holding act
//                values) gets the fp32 sum, rounded by round_act after, a pass of its own (8 bytes
//                per element): no kernel of ours passes over dinp after the GEMM in this entry.
//                A dinp of another 16-bit dtype is staged as fp32.
//       dweight  dW = type(dW + inpᵀ·dout): C = D = dW in its own dtype, beta = 1, fp32
//                compute, one rounding on the store (split-K reductions are kept in fp32:
//                cuda_lt_gemm.h). The bits contract of kernels.h.
//   - otherwise cublasGemmEx in fp32 (TF32 when allowed) on fp32 activations: 16-bit ones staged
//     (ActStage: widened into fp32 scratch, out and dinp narrowed back after), a weight of another
//     16-bit dtype than the table's widened into an fp32 scratch, a 16-bit dweight of another
//     dtype computed into an fp32 scratch and added with one rounding (add's bits). A bias is
//     added by add_bias_rows after the GEMM (beta = 0), which rounds the sum; without one a
//     16-bit table rounds out by round_act, and dinp likewise.
//   - K = 0: out is the bias rows (or zeros), stored in out's dtype and rounded by the kernel that
//     writes them. dbias, on every path: the column sums of dout read in its stored dtype.

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

const void* CudaKernels::act_input(ConstOperand x, int64_t n, Buffer& holder, size_t align) {
  ZT_CUDA_ASSERT(act_ != DType::kF32, "act_input on the fp32 table");
  if (x.dtype == act_ && reinterpret_cast<uintptr_t>(x.data) % align == 0) return x.data;
  holder = scratch(n, act_);
  cast(holder.data(), act_, x.data, x.dtype, n);
  return holder.data();
}

void CudaKernels::matmul_forward(Operand out, ConstOperand inp, ConstOperand weight_op,
                                 ConstOperand bias, int64_t M, int64_t K, int64_t N,
                                 WeightLayout layout) {
  ZT_CUDA_ASSERT(M >= 0 && K >= 0 && N >= 0, "matmul_forward: negative dimension");
  if (M == 0 || N == 0) return;
  ZT_CUDA_ASSERT(out && (K == 0 || (inp && weight_op)), "matmul_forward: null operand");
  // K = 0: the product is empty and out is the bias (or 0), rounded and stored in out's dtype as
  // the rows are written.
  if (K == 0) {
    visit_storage(out.dtype, [&](auto out_tag) {
      visit_storage(bias.dtype, [&](auto bias_tag) {
        using O = decltype(out_tag);
        using S = decltype(bias_tag);
        broadcast_rows_kernel<O, S>
            <<<blocks_for(M * N, kElementThreads), kElementThreads, 0, stream_>>>(
                elems<O>(out), elems<S>(bias), M, N, act_);
      });
    });
    check_launch();
    return;
  }
  const bool in_out = layout == WeightLayout::kInOut;
  // Column-major outᵀ (N,M) = op(W) (N,K) · inpᵀ (K,M). inp row-major (M,K) is inpᵀ with
  // ld K. kInOut: W row-major (K,N) is Wᵀ (N,K) ld N, used as is. kOutIn: W row-major (N,K)
  // is the column-major (K,N) ld K, transposed.
  if (act_ != DType::kF32 && weight_op.dtype == act_) {
    Buffer inp16;
    const void* a = act_input(inp, M * K, inp16);
    if (!bias || (bias.dtype == act_ && act_ == DType::kF16)) {
      // out = act(inp·W + bias): one rounding in the epilogue. cuBLASLt has no alignment
      // preference for the bias vector: one less than 16-byte aligned is copied to an aligned
      // scratch (N elements) rather than trusted to every kernel.
      Buffer bias_copy;
      const void* bias_ptr = bias.data;
      if (bias && lt_alignment(bias_ptr) < 16) {
        bias_copy = scratch(N, act_);
        cast(bias_copy.data(), act_, bias_ptr, act_, N);
        bias_ptr = bias_copy.data();
      }
      Buffer out16;  // D when out is not act-typed
      if (out.dtype != act_) out16 = scratch(M * N, act_);
      void* d = out.dtype == act_ ? out.data : out16.data();
      const LtGemmKey key = lt_key(act_, act_, !in_out, false, N, M, K, weight_op.data,
                                   in_out ? N : K, a, K, d, N, bias_ptr);
      impl_->lt_gemm->run(key, weight_op.data, a, d, bias_ptr, 1.0f, 0.0f, stream_);
      if (d != out.data) cast(out.data, out.dtype, d, act_, M * N);
      return;
    }
    // A bf16 bias (see above) or one of another dtype: the product in fp32 (beta = 0), then the
    // bias added and the sum rounded in one pass, stored in out's dtype.
    Buffer product_fp32;  // the product when out is not fp32
    if (out.dtype != DType::kF32) product_fp32 = scratch(M * N);
    float* product =
        out.dtype == DType::kF32 ? static_cast<float*>(out.data) : product_fp32.as<float>();
    const LtGemmKey key = lt_key(act_, DType::kF32, !in_out, false, N, M, K, weight_op.data,
                                 in_out ? N : K, a, K, product, N, nullptr);
    impl_->lt_gemm->run(key, weight_op.data, a, product, nullptr, 1.0f, 0.0f, stream_);
    add_bias_rows(out, product, bias, M, N);
    return;
  }
  // fp32 GEMM (beta = 0) on staged activations, then the bias added and the sum rounded in one
  // pass, or without a bias the product rounded by a pass of its own (docs/cuda.md).
  ActStage stage(*this);
  float* out32 = stage.out(out, M * N);
  const float* inp32 = stage.in(inp, M * K);
  Buffer weight_fp32;  // a weight of another 16-bit dtype than the table's, widened (K·N)
  const float* weight = widened(weight_op, K * N, weight_fp32);
  gemm(impl_->cublas, impl_->allow_tf32, in_out ? CUBLAS_OP_N : CUBLAS_OP_T, CUBLAS_OP_N, N, M, K,
       1.0f, weight, in_out ? N : K, inp32, K, 0.0f, out32, N);
  if (bias)
    add_bias_rows(out32, out32, bias, M, N);
  else
    round_act(out32, M * N);
}

void CudaKernels::add_bias_rows(Operand out, const float* product, ConstOperand bias, int64_t M,
                                int64_t N) {
  visit_storage(out.dtype, [&](auto out_tag) {
    visit_storage(bias.dtype, [&](auto bias_tag) {
      using O = decltype(out_tag);
      using S = decltype(bias_tag);
      add_bias_rows_kernel<O, S>
          <<<blocks_for(M * N, kElementThreads), kElementThreads, 0, stream_>>>(
              elems<O>(out), product, elems<S>(bias), M, N, act_);
    });
  });
  check_launch();
}

void CudaKernels::matmul_backward(Operand dinp_op, Operand dweight, Operand dbias,
                                  ConstOperand dout, ConstOperand inp, ConstOperand weight_op,
                                  int64_t M, int64_t K, int64_t N, WeightLayout layout,
                                  GradOutput dinp_output) {
  ZT_CUDA_ASSERT(M >= 0 && K >= 0 && N >= 0, "matmul_backward: negative dimension");
  const bool in_out = layout == WeightLayout::kInOut;
  const bool act16 = act_ != DType::kF32;
  const bool lt_dinp = K > 0 && dinp_op && act16 && weight_op.dtype == act_;
  const bool lt_dweight =
      K > 0 && dweight && act16 && (dweight.dtype == act_ || dweight.dtype == DType::kF32);
  const bool write_dinp = dinp_op && dinp_output == GradOutput::kWrite;
  // dinp as the GEMM's D: in place when fp32, or act-typed on the tensor-core path; else staged.
  ActStage stage(*this);
  Operand dinp = dinp_op;
  if (dinp && dinp.dtype != DType::kF32 && !(lt_dinp && dinp.dtype == act_))
    dinp = write_dinp ? stage.out(dinp_op, M * K) : stage.inout(dinp_op, M * K);
  // dinp written as if it held zeros: the product's GEMM writes it (beta = 0), or with no
  // product (N = 0) it is zeroed (all-zero bits in every dtype).
  if (write_dinp && N == 0 && M > 0 && K > 0)
    ZT_CUDA_CHECK(cudaMemsetAsync(dinp.data, 0, static_cast<size_t>(M * K) * dtype_size(dinp.dtype),
                                  stream_));
  ZT_CUDA_ASSERT(!dbias.fresh, "matmul_backward: a fresh bias gradient (only dweight may be)");
  if (dweight.fresh) {  // holds no values yet (kernels.h): zeroed, then added into
    ZT_CUDA_CHECK(cudaMemsetAsync(dweight.data, 0,
                                  static_cast<size_t>(K * N) * dtype_size(dweight.dtype), stream_));
    dweight.fresh = false;
  }
  if (M == 0 || N == 0) return;
  ZT_CUDA_ASSERT(dout, "matmul_backward: null dout");
  // dout (M,N) as the tensor-core products' act-typed operand (in place when act-typed), and as
  // the fp32 GEMMs' (widened when 16-bit); each made at most once, shared by both products.
  const bool fp32_dinp = K > 0 && dinp && !lt_dinp;
  const bool fp32_dweight = K > 0 && dweight && !lt_dweight;
  Buffer dout16_copy, dout_fp32;
  const void* d16 = lt_dinp || lt_dweight ? act_input(dout, M * N, dout16_copy) : nullptr;
  const float* d32 = fp32_dinp || fp32_dweight ? widened(dout, M * N, dout_fp32) : nullptr;
  if (K > 0 && dinp) {
    ZT_CUDA_ASSERT(weight_op, "matmul_backward: dinp without a weight");
    // dinp (M,K) += dout · Wᵀ. Column-major dinpᵀ (K,M) += op(W) (K,N) · doutᵀ (N,M).
    // kInOut: W stored as the column-major (N,K) ld N, transposed. kOutIn: stored as the
    // column-major (K,N) ld K, as is.
    const float beta = write_dinp ? 0.0f : 1.0f;
    if (lt_dinp) {  // D = dinp in its dtype: act's (rounded by the GEMM) or fp32
      const LtGemmKey key = lt_key(act_, dinp.dtype, in_out, false, K, M, N, weight_op.data,
                                   in_out ? N : K, d16, N, dinp.data, K, nullptr);
      impl_->lt_gemm->run(key, weight_op.data, d16, dinp.data, nullptr, 1.0f, beta, stream_);
    } else {
      Buffer weight_fp32;  // a weight of another dtype than a 16-bit table's, widened (K·N)
      const float* weight = widened(weight_op, K * N, weight_fp32);
      gemm(impl_->cublas, impl_->allow_tf32, in_out ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, K, M,
           N, 1.0f, weight, in_out ? N : K, d32, N, beta, static_cast<float*>(dinp.data), K);
    }
    // An fp32 D: a rounding pass of its own (docs/cuda.md).
    if (dinp.dtype == DType::kF32) round_act(static_cast<float*>(dinp.data), M * K);
  }
  if (K > 0 && dweight) {
    ZT_CUDA_ASSERT(inp, "matmul_backward: dweight without an input");
    // kInOut: dW (K,N) += inpᵀ · dout. Column-major dWᵀ (N,K) += doutᵀ (N,M) · inp (M,K), inp
    // being the column-major (K,M) ld K transposed.
    // kOutIn: dW (N,K) += doutᵀ · inp. Column-major dWᵀ (K,N) += inpᵀ (K,M) · dout (M,N), dout
    // being the column-major (N,M) ld N transposed.
    if (lt_dweight) {
      Buffer inp16_copy;
      const void* i16 = act_input(inp, M * K, inp16_copy);
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
      Buffer inp_fp32;
      const float* i32 = widened(inp, M * K, inp_fp32);
      const bool fp32 = dweight.dtype == DType::kF32;
      Buffer product;
      if (!fp32) product = scratch(K * N);
      float* dw = fp32 ? static_cast<float*>(dweight.data) : product.as<float>();
      const float beta = fp32 ? 1.0f : 0.0f;
      if (in_out) {
        gemm(impl_->cublas, impl_->allow_tf32, CUBLAS_OP_N, CUBLAS_OP_T, N, K, M, 1.0f, d32, N, i32,
             K, beta, dw, N);
      } else {
        gemm(impl_->cublas, impl_->allow_tf32, CUBLAS_OP_N, CUBLAS_OP_T, K, N, M, 1.0f, i32, K, d32,
             N, beta, dw, K);
      }
      if (!fp32)
        add(dweight.data, dweight.dtype, dweight.data, dweight.dtype, dw, DType::kF32, K * N);
    }
  }
  if (dbias) {  // dbias (N) += column sums of dout, two stages, dout read in its dtype
    visit_storage(dout.dtype, [&](auto tag) {
      using S = decltype(tag);
      Buffer partials = scratch(BiasTerms<S>::kValues * column_chunks(M) * N);
      column_partials(partials.as<float>(), BiasTerms<S>{elems<S>(dout), N}, M, N, stream_);
      column_finish(dbias, partials.as<float>(), M, N, stream_);
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Attention entries (the layout of qkv and of the products: cuda_attention_kernels.cu). A 16-bit
// table tries cuDNN's fused SDPA first (cuda_attention_cudnn.cu: the path setting, eligibility,
// fallback), which reads act-typed qkv and dout in place and writes out and dqkv in their dtype;
// att then holds cuDNN's record, not the probabilities. The materialised kernels take fp32
// arrays: 16-bit operands staged.

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

void CudaKernels::gqa_attention_forward(Operand out, Operand att, ConstOperand qkv, int64_t B,
                                        int64_t T, int64_t NH, int64_t NKV, int64_t hd,
                                        const int32_t* positions, int64_t window) {
  ZT_CUDA_ASSERT(NH > 0 && NKV > 0 && NH % NKV == 0 && hd > 0,
                 "gqa_attention_forward: NH must be a positive multiple of NKV");
  if (window >= T) window = 0;  // reads every key: plain causal attention
  if (B <= 0 || T <= 0) return;
  if (cudnn_attention_forward(out, att, qkv, B, T, NH, NKV, hd, positions, window)) return;
  ActStage stage(*this);
  float* out32 = stage.out(out, B * T * NH * hd);
  float* att32 = stage.out(att, B * NH * T * T);
  const float* qkv32 = stage.in(qkv, B * T * (NH + 2 * NKV) * hd);
  reference_attention_forward(out32, att32, qkv32, B, T, NH, NKV, hd, positions, window);
}

void CudaKernels::gqa_attention_backward(Operand dqkv, ConstOperand dout, ConstOperand qkv,
                                         ConstOperand att, int64_t B, int64_t T, int64_t NH,
                                         int64_t NKV, int64_t hd, const int32_t* positions,
                                         int64_t window) {
  ZT_CUDA_ASSERT(NH > 0 && NKV > 0 && NH % NKV == 0 && hd > 0,
                 "gqa_attention_backward: NH must be a positive multiple of NKV");
  if (window >= T) window = 0;
  if (B <= 0 || T <= 0) return;
  if (cudnn_attention_backward(dqkv, dout, qkv, att, B, T, NH, NKV, hd, positions, window)) return;
  ActStage stage(*this);
  float* dqkv32 = stage.inout(dqkv, B * T * (NH + 2 * NKV) * hd);
  const float* dout32 = stage.in(dout, B * T * NH * hd);
  const float* qkv32 = stage.in(qkv, B * T * (NH + 2 * NKV) * hd);
  const float* att32 = stage.in(att, B * NH * T * T);
  reference_attention_backward(dqkv32, dout32, qkv32, att32, B, T, NH, NKV, hd, positions, window);
}

}  // namespace zt
