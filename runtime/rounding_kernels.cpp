// RoundingKernels: each call forwards to the base table, then rounds the outputs the header lists
// with the base's round_to. Sizes come from the arguments; null outputs are skipped.
#include "runtime/rounding_kernels.h"

#include "runtime/status.h"

namespace zt {

RoundingKernels::RoundingKernels(Kernels& base, DType dtype) : base_(base), dtype_(dtype) {
  ZT_ASSERT(dtype == DType::kF16 || dtype == DType::kBF16,
            "RoundingKernels rounds to fp16 or bf16; got {}", dtype_name(dtype));
}

void RoundingKernels::matmul_forward(float* out, const float* inp, const float* weight,
                                     const float* bias, int64_t M, int64_t K, int64_t N,
                                     WeightLayout layout) {
  base_.matmul_forward(out, inp, weight, bias, M, K, N, layout);
  round(out, M * N);
}

void RoundingKernels::matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                      const float* inp, const float* weight, int64_t M, int64_t K,
                                      int64_t N, WeightLayout layout) {
  base_.matmul_backward(dinp, dweight, dbias, dout, inp, weight, M, K, N, layout);
  if (dinp) round(dinp, M * K);
  if (dweight) round(dweight, K * N);  // (K,N) or (N,K): K·N either way
  if (dbias) round(dbias, N);
}

void RoundingKernels::embedding_forward(float* out, const int32_t* tokens, const float* wte,
                                        const float* wpe, int64_t B, int64_t T, int64_t C) {
  base_.embedding_forward(out, tokens, wte, wpe, B, T, C);
  round(out, B * T * C);
}

// The base writes only the rows of dwte named by tokens, and V is not an argument: those rows
// are rounded by round_rows on the device (tokens are device memory; a repeated token's row is
// rounded twice, which changes nothing). Rows of tokens absent from the batch keep their bits.
void RoundingKernels::embedding_backward(float* dwte, float* dwpe, const float* dout,
                                         const int32_t* tokens, int64_t B, int64_t T, int64_t C) {
  base_.embedding_backward(dwte, dwpe, dout, tokens, B, T, C);
  if (dwte) base_.round_rows(dwte, tokens, B * T, C, dtype_);
  if (dwpe) round(dwpe, T * C);
}

void RoundingKernels::layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                        const float* weight, const float* bias, int64_t N,
                                        int64_t C) {
  base_.layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
  round(out, N * C);  // mean and rstd stay fp32
}

void RoundingKernels::layernorm_backward(float* dinp, float* dweight, float* dbias,
                                         const float* dout, const float* inp, const float* weight,
                                         const float* mean, const float* rstd, int64_t N,
                                         int64_t C) {
  base_.layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  if (dinp) round(dinp, N * C);
  if (dweight) round(dweight, C);
  if (dbias) round(dbias, C);
}

void RoundingKernels::gelu_forward(float* out, const float* inp, int64_t n) {
  base_.gelu_forward(out, inp, n);
  round(out, n);
}

void RoundingKernels::gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  base_.gelu_backward(dinp, inp, dout, n);
  round(dinp, n);
}

void RoundingKernels::attention_forward(float* out, float* att, const float* qkv, int64_t B,
                                        int64_t T, int64_t C, int64_t NH) {
  base_.attention_forward(out, att, qkv, B, T, C, NH);
  round(out, B * T * C);
  if (att) round(att, B * NH * T * T);
}

void RoundingKernels::attention_backward(float* dqkv, const float* dout, const float* qkv,
                                         const float* att, int64_t B, int64_t T, int64_t C,
                                         int64_t NH) {
  base_.attention_backward(dqkv, dout, qkv, att, B, T, C, NH);
  round(dqkv, B * T * 3 * C);
}

void RoundingKernels::residual_forward(float* out, const float* a, const float* b, int64_t n) {
  base_.residual_forward(out, a, b, n);
  round(out, n);
}

void RoundingKernels::accumulate(float* y, const float* x, int64_t n) {
  base_.accumulate(y, x, n);
  round(y, n);
}

void RoundingKernels::softmax_cross_entropy(float* losses, float* logits, const int32_t* targets,
                                            int64_t N, int64_t V, int64_t Vp, float dloss) {
  base_.softmax_cross_entropy(losses, logits, targets, N, V, Vp, dloss);
  if (dloss != 0.0f) round(logits, N * Vp);  // the gradient written in place; losses stay fp32
}

// Pass-through: the optimizers update fp32 master state; the element-wise utilities below
// either convert explicitly (cast, round_to, add) or only read (sum_squares).
void RoundingKernels::adamw(float* param, const float* grad, float* m, float* v, int64_t n,
                            const AdamWArgs& args) {
  base_.adamw(param, grad, m, v, n, args);
}

void RoundingKernels::sgd(float* param, const float* grad, float* momentum_buf, int64_t n,
                          const SgdArgs& args) {
  base_.sgd(param, grad, momentum_buf, n, args);
}

void RoundingKernels::cast(void* dst, DType dst_type, const void* src, DType src_type, int64_t n) {
  base_.cast(dst, dst_type, src, src_type, n);
}

void RoundingKernels::round_to(float* x, DType dtype, int64_t n) { base_.round_to(x, dtype, n); }

void RoundingKernels::round_rows(float* x, const int32_t* rows, int64_t n_rows, int64_t row_len,
                                 DType dtype) {
  base_.round_rows(x, rows, n_rows, row_len, dtype);
}

void RoundingKernels::add(void* dst, DType dst_type, const void* a, DType a_type, const void* b,
                          DType b_type, int64_t n) {
  base_.add(dst, dst_type, a, a_type, b, b_type, n);
}

void RoundingKernels::fill(float* x, float value, int64_t n) {
  base_.fill(x, value, n);
  round(x, n);
}

double RoundingKernels::sum_squares(const float* x, int64_t n) { return base_.sum_squares(x, n); }

}  // namespace zt
