// CudaKernels: the Kernels table on one GPU, every call enqueued on the device's compute stream
// (returning before the work is done, except the two that return a value). GEMMs through
// cuBLASLt (16-bit operands, tensor cores) and cuBLAS (fp32, TF32 only when
// set_allow_tf32(true), zt.allow_tf32); the other ops are our kernels. The Kernels contracts
// hold as on the CPU: backward kernels accumulate, element-wise kernels give an element the same
// bits wherever it sits in a buffer, and reductions (sum_squares, bias and norm weight gradients
// in two stages, embedding gradients) use a fixed order independent of launch geometry and
// timing, so results are deterministic run to run. Never yet run on a GPU: built and
// parity-tested against the CPU back end by tests that skip without one.
//
// Precision (kernels.h). A device has three tables, one per activation dtype, sharing one stream,
// one set of cuBLAS handles, workspaces and cuBLASLt plans, and one TF32 setting; a table rounds
// every activation it writes to its dtype, in the op's own last step (the writing kernel itself,
// at its store; a GEMM's 16-bit store; or round_to's kernel after an fp32 GEMM or the
// materialised attention: lists in cuda_elementwise_kernels.cu, cuda_nn_kernels.cu,
// cuda_matmul_attention.cu and cuda_lora_kernels.cu, entry by entry). 16-bit operands: our own
// kernels read and write them in their dtype with templated loads and stores, fp32 inside:
// parameters and their gradients (embedding, norms, bias rows and sums, optimizers, sum_squares;
// one rounding per stored gradient element), and the activations of the element-wise, norm,
// embedding, cross-entropy and LoRA entries, one storage type for all of a call's activation
// operands (a call mixing fp32 and 16-bit ones stages them through ActStage instead). The GEMMs
// of a 16-bit table whose weight (or weight gradient) has the table's dtype run on tensor cores
// through cuBLASLt: A and B 16-bit, fp32 accumulation (CUBLAS_COMPUTE_32F), an act-typed
// activation operand read in place (an fp32 one narrowed, exactly, into a tracked 16-bit
// scratch); the forward writes its 16-bit D into an act-typed out with the bias added by the
// epilogue before its one rounding, dinp is D in its own dtype (C = D, one rounding), and a
// 16-bit weight gradient accumulates as C = D = dW with beta = 1, rounded once
// (cuda_matmul_attention.cu, "Matmul", has the whole list). cuDNN's attention reads qkv and dout
// in place and writes out and dqkv in their dtype (cuda_attention_cudnn.cu). What no native path
// takes (fp32 GEMMs, the materialised attention, decode) runs on fp32 arrays, its 16-bit
// activations staged (ActStage below): correct, not fast.
//
// The methods are split over cuda_kernels.cu (construction, optimizers, conversions, reductions),
// cuda_elementwise_kernels.cu (GELU, SwiGLU, RoPE, residual, accumulate, fill),
// cuda_nn_kernels.cu (embedding, layer norm, RMSNorm, cross-entropy), cuda_matmul_attention.cu
// (matmul, the attention entries), cuda_attention_kernels.cu (the materialised attention,
// decode), cuda_attention_cudnn.cu (attention through cuDNN's fused SDPA, cudnn_attention.h) and
// cuda_lora_kernels.cu (LoRA adapters' add_columns and dropout); they share CudaKernels::Impl
// from cuda_kernels_impl.h and the launch helpers of cuda_kernel_helpers.cuh; cuda_lt_gemm.h
// holds the cuBLASLt plans.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "runtime/cuda/attention_path.h"
#include "runtime/device.h"
#include "runtime/kernels.h"

namespace zt {

class CudnnAttention;

class CudaKernels final : public Kernels {
 public:
  // The fp32 table: creates the cuBLAS handles and workspaces bound to `stream`. `device`
  // (which owns the table and must outlive it) provides the tracked scratch.
  CudaKernels(Device& device, cudaStream_t stream);
  // A table rounding activations to `activations`, sharing `base`'s device, stream, handles,
  // workspaces and TF32 setting (base may be destroyed first: the shared state is counted).
  CudaKernels(const CudaKernels& base, DType activations);
  ~CudaKernels() override;
  cudaStream_t stream() const { return stream_; }
  // TF32 tensor cores for the fp32 GEMMs, for every table sharing these handles.
  void set_allow_tf32(bool allow);
  // Which attention the 16-bit tables run (attention_path.h), for every table sharing these
  // handles; ZT_CUDA_ATTENTION's value until set.
  void set_attention_path(AttentionPath path);

  // Every entry of runtime/kernel_entries.h.
#define ZT_KERNEL(ret, name, params, args, memory) ret name params override;
#include "runtime/kernel_entries.h"

  struct Impl;  // cuBLAS handles, workspaces, scratch: cuda_kernels_impl.h

 private:
  // One call's activation operands as fp32 arrays (cuda_act_stage.cpp), for bodies that take no
  // 16-bit activation: a 16-bit operand widened into a tracked fp32 scratch (kWorkspace), and the
  // written ones narrowed back when the entry returns (exact: the kernels round what they write
  // to the activation dtype). The entries of our own element-wise, norm and LoRA kernels use it
  // only when a call mixes fp32 and 16-bit activation operands (one_dtype,
  // cuda_kernel_helpers.cuh).
  class ActStage;
  // x[0, n) rounded to the activation dtype (fp32 table: nothing): the pass after what cuBLAS
  // or attention wrote in fp32. Our element and row kernels round the value they store instead
  // (round_to_act, cuda_kernel_helpers.cuh).
  void round_act(float* x, int64_t n) {
    if (act_ != DType::kF32) round_to(x, act_, n);
  }
  // dst[0, n) (activations in dst's dtype) += b (n elements of b_type), the fp32 sum rounded to
  // the activation dtype once and stored in dst's dtype, in one pass (cuda_attention_cudnn.cu).
  void add_act(Operand dst, const void* b, DType b_type, int64_t n);
  // out (M,N) row r = product row r + bias, the fp32 sum rounded to the activation dtype once and
  // stored in out's dtype: a product a GEMM wrote in fp32 (out itself when fp32) and its bias, in
  // one pass (cuda_matmul_attention.cu).
  void add_bias_rows(Operand out, const float* product, ConstOperand bias, int64_t M, int64_t N);
  // x (n activations) as the 16-bit table's dtype, for cuBLASLt or cuDNN: x itself when
  // act-typed and `align`-byte aligned, else cast into a new scratch held by `holder` (exact for
  // an fp32 x holding act values) (cuda_matmul_attention.cu).
  const void* act_input(ConstOperand x, int64_t n, Buffer& holder, size_t align = 1);
  // A scratch of n elements of `dtype` from the device's allocator (kWorkspace), contents
  // unspecified. Freed by the caller when the entry returns: the block's next user enqueues on
  // this same stream, after the kernels that read it (cuda_device.cpp's stream-ordered reuse).
  Buffer scratch(int64_t n, DType dtype = DType::kF32);
  // `op` (n elements) as fp32: its own pointer when fp32 (or null), else widened into a new
  // scratch held by `holder`.
  const float* widened(ConstOperand op, int64_t n, Buffer& holder);
  // table[keys[bt]] (rows of C) += dout[bt] for bt in [0, BT), each row's in ascending bt, dout
  // read in its dtype (embedding_backward's deterministic segmented reduction, cuda_kernels.cu).
  void add_rows_by_key(Operand table, ConstOperand dout, const int32_t* keys, int64_t BT,
                       int64_t C);
  // The device's cuDNN attention (its plans), made on first use (cuda_attention_cudnn.cu).
  CudnnAttention& cudnn_attention();
  // Attention through cuDNN's fused SDPA when the path and the call allow it (true: the entry's
  // outputs are written, by cuDNN, or by the reference on a scratch when a planned key failed),
  // else false and nothing written: the reference runs on att (cuda_attention_cudnn.cu).
  bool cudnn_attention_forward(Operand out, Operand att, ConstOperand qkv, int64_t B, int64_t T,
                               int64_t NH, int64_t NKV, int64_t hd, const int32_t* positions,
                               int64_t window);
  bool cudnn_attention_backward(Operand dqkv, ConstOperand dout, ConstOperand qkv, ConstOperand att,
                                int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hd,
                                const int32_t* positions, int64_t window);
  // The materialised T×T attention on fp32 arrays (cuda_attention_kernels.cu): the reference and
  // the fallback.
  void reference_attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T,
                                   int64_t NH, int64_t NKV, int64_t hd, const int32_t* positions,
                                   int64_t window);
  void reference_attention_backward(float* dqkv, const float* dout, const float* qkv,
                                    const float* att, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                                    int64_t hd, const int32_t* positions, int64_t window);

  Device& device_;
  cudaStream_t stream_;
  DType act_;
  std::shared_ptr<Impl> impl_;
};

class CudaKernels::ActStage {
 public:
  explicit ActStage(CudaKernels& k);
  ~ActStage() noexcept(
      false);  // narrows what was written back, unless an exception is leaving the entry
  ActStage(const ActStage&) = delete;
  ActStage& operator=(const ActStage&) = delete;
  // n elements read; written whole, none read; read and written (accumulated into, updated in
  // place, or written in part). Null operands stay null; n <= 0 hands the pointer on.
  const float* in(ConstOperand a, int64_t n);
  float* out(Operand a, int64_t n) { return stage(a, n, false); }
  float* inout(Operand a, int64_t n) { return stage(a, n, true); }

 private:
  float* stage(Operand a, int64_t n, bool read);
  struct Written {
    Operand dst;
    Buffer fp32;
    int64_t n = 0;
  };
  CudaKernels& k_;
  int exceptions_;
  std::vector<Buffer> read_;
  std::vector<Written> written_;
};

}  // namespace zt
