// RoundingKernels: mixed precision on a back end that computes in fp32. Every call runs the base
// back end's fp32 kernel, then rounds what it wrote to the 16-bit working dtype, so each value a
// 16-bit back end would store (activations, activation gradients, parameter gradients, logits
// and their gradient) holds exactly a 16-bit value, while the arithmetic inside a kernel stays
// fp32 as a tensor-core GEMM's accumulation does. fp16 overflow becomes ±inf where it happens,
// which is what dynamic loss scaling detects.
//
// Rounded after the call: matmul out / dinp / dweight / dbias; embedding out / dwte / dwpe;
// layernorm out / dinp / dweight / dbias (mean and rstd stay fp32); gelu out / dinp; attention
// out / att / dqkv; residual out; accumulate y; softmax_cross_entropy's logits gradient when
// dloss != 0 (losses stay fp32); fill x.
// Passed through unrounded (they work on fp32 master state or are exact already): adamw, sgd,
// cast, round_to, round_rows, add, sum_squares.
// A gradient the kernel accumulates into is rounded as a whole after the call: the sum of the
// old value and the new contribution is rounded once, as a beta = 1 GEMM into a 16-bit output.
#pragma once

#include "runtime/kernels.h"

namespace zt {

class RoundingKernels final : public Kernels {
 public:
  // dtype: kF16 or kBF16. `base` must outlive this object.
  RoundingKernels(Kernels& base, DType dtype);
  DType dtype() const { return dtype_; }

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

 private:
  void round(float* x, int64_t n) { base_.round_to(x, dtype_, n); }
  Kernels& base_;
  DType dtype_;
};

}  // namespace zt
