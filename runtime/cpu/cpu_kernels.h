// CpuKernels: the Kernels table on the host. Matrix products go to OpenBLAS (cblas_sgemm);
// everything else is written in runtime/cpu as loops split across OpenMP threads. Pure compute:
// no communication, no logging, and no allocation once warm (scratch such as layernorm's
// per-block partial sums and attention's per-head copies of K and V is kept per thread across
// calls, cpu_parallel.h).
//
// Determinism. Element-wise kernels give an element the same bits wherever it sits and whichever
// instruction set ran. Reductions use fixed lane structures (16 float lanes, or 8 double lanes,
// indexed by the element's position) and fixed row/element blocks summed in order, so their
// results depend neither on the thread count nor on the instruction set.
//
// The methods are split by op family, as the CUDA back end's are:
//   cpu_kernels.cpp              construction, the instruction-set choice, make_cpu_kernels
//   cpu_nn_kernels.cpp           matmul, embedding, layer norm, GELU, softmax cross-entropy
//   cpu_attention_kernels.cpp    causal multi-head attention
//   cpu_elementwise_kernels.cpp  residual, accumulate, cast, round_to, round_rows, add, fill,
//                                sum_squares
//   cpu_optimizer_kernels.cpp    AdamW, SGD
// sharing the vector helpers of cpu_simd.h and the threading of cpu_parallel.h. Private to
// runtime/cpu: the rest of the tree gets the table from make_cpu_kernels (cpu_device.h).
#pragma once

#include "runtime/cpu/cpu_simd.h"
#include "runtime/kernels.h"

namespace zt {

class CpuKernels final : public Kernels {
 public:
  explicit CpuKernels(cpu::Isa isa);

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
  // x[i0, i1) rounded to dtype (not kF32): round_to's arithmetic, for round_to and round_rows.
  void round_range(float* x, DType dtype, int64_t i0, int64_t i1);

  cpu::Isa isa_;
  bool f16c_;  // fp16 conversions by the F16C instructions in cast (fp32 -> fp16), round_to and
               // add (AVX2 paths only, so ZT_CPU_SIMD=sse2 tests the portable conversions)
};

}  // namespace zt
