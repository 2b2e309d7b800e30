// CudaKernels: the Kernels table on one GPU, every call enqueued on the device's compute stream
// (returning before the work is done, except the two that return a value). GEMMs through cuBLAS
// (cuBLASLt where it helps), TF32 only when set_allow_tf32(true) (zt.allow_tf32); the other ops
// are our kernels. The Kernels contracts hold as on the CPU: backward kernels accumulate,
// element-wise kernels give an element the same bits wherever it sits in a buffer, and
// reductions (sum_squares, bias and layer-norm weight gradients, embedding gradients) use a fixed
// order independent of launch geometry, so results are deterministic run to run.
// The methods are split over cuda_kernels.cu (construction, element-wise, optimizers,
// reductions) and cuda_nn_kernels.cu (matmul, embedding, layer norm, attention, cross-entropy);
// both share CudaKernels::Impl from cuda_kernels_impl.h.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "runtime/kernels.h"

namespace zt {

class CudaKernels final : public Kernels {
 public:
  explicit CudaKernels(cudaStream_t stream);
  ~CudaKernels() override;
  cudaStream_t stream() const { return stream_; }
  void set_allow_tf32(bool allow);

  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                      int64_t M, int64_t K, int64_t N, WeightLayout layout) override;
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, int64_t M, int64_t K, int64_t N,
                       WeightLayout layout) override;
  void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                         int64_t B, int64_t T, int64_t C) override;
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                          int64_t B, int64_t T, int64_t C) override;
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, int64_t N, int64_t C) override;
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, int64_t N, int64_t C) override;
  void gelu_forward(float* out, const float* inp, int64_t n) override;
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) override;
  void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T,
                         int64_t C, int64_t NH) override;
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                          int64_t B, int64_t T, int64_t C, int64_t NH) override;
  void residual_forward(float* out, const float* a, const float* b, int64_t n) override;
  void accumulate(float* y, const float* x, int64_t n) override;
  void softmax_cross_entropy(float* losses, float* logits, const int32_t* targets, int64_t N,
                             int64_t V, int64_t Vp, float dloss) override;
  void adamw(float* param, const float* grad, float* m, float* v, int64_t n,
             const AdamWArgs& args) override;
  void sgd(float* param, const float* grad, float* momentum_buf, int64_t n,
           const SgdArgs& args) override;
  void cast(void* dst, DType dst_type, const void* src, DType src_type, int64_t n) override;
  void round_to(float* x, DType dtype, int64_t n) override;
  void round_rows(float* x, const int32_t* rows, int64_t n_rows, int64_t row_len,
                  DType dtype) override;
  void add(void* dst, DType dst_type, const void* a, DType a_type, const void* b, DType b_type,
           int64_t n) override;
  void fill(float* x, float value, int64_t n) override;
  double sum_squares(const float* x, int64_t n) override;

  struct Impl;  // cuBLAS handles, workspaces, scratch: cuda_kernels_impl.h

 private:
  cudaStream_t stream_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zt
