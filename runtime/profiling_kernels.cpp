// ProfilingKernels: every entry forwards to the base inside timed() (profiling_kernels.h).
#include "runtime/profiling_kernels.h"

#include "runtime/status.h"

namespace zt {

void OpProfile::add(const std::string& name, double seconds) {
  OpTime& t = ops_[name];
  t.seconds += seconds;
  ++t.calls;
}

double OpProfile::total_seconds() const {
  double total = 0.0;
  for (const auto& [name, t] : ops_) total += t.seconds;
  return total;
}

void ProfilingKernels::flush() {
  if (!timer_) return;
  const std::vector<double> seconds = timer_->collect();
  ZT_ASSERT(seconds.size() == span_names_.size(),
            "ProfilingKernels::flush: {} spans timed, {} calls made", seconds.size(),
            span_names_.size());
  for (size_t i = 0; i < seconds.size(); ++i)
    if (span_names_[i]) profile_.add(span_names_[i], seconds[i]);
  span_names_.clear();
}

// The entry `op` of the base with these arguments, timed under the entry's name.
#define ZT_TIMED(op, ...) return timed(#op, [&] { return base_.op(__VA_ARGS__); })

void ProfilingKernels::matmul_forward(float* out, const float* inp, ConstOperand weight,
                                      ConstOperand bias, int64_t M, int64_t K, int64_t N,
                                      WeightLayout layout) {
  ZT_TIMED(matmul_forward, out, inp, weight, bias, M, K, N, layout);
}
void ProfilingKernels::matmul_backward(float* dinp, Operand dweight, Operand dbias,
                                       const float* dout, const float* inp, ConstOperand weight,
                                       int64_t M, int64_t K, int64_t N, WeightLayout layout,
                                       GradOutput dinp_output) {
  ZT_TIMED(matmul_backward, dinp, dweight, dbias, dout, inp, weight, M, K, N, layout,
           dinp_output);
}
void ProfilingKernels::embedding_forward(float* out, const int32_t* tokens, ConstOperand wte,
                                         ConstOperand wpe, int64_t B, int64_t T, int64_t C,
                                         const int32_t* positions) {
  ZT_TIMED(embedding_forward, out, tokens, wte, wpe, B, T, C, positions);
}
void ProfilingKernels::embedding_backward(Operand dwte, Operand dwpe, const float* dout,
                                          const int32_t* tokens, int64_t B, int64_t T, int64_t C,
                                          const int32_t* positions) {
  ZT_TIMED(embedding_backward, dwte, dwpe, dout, tokens, B, T, C, positions);
}
void ProfilingKernels::layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                         ConstOperand weight, ConstOperand bias, int64_t N,
                                         int64_t C) {
  ZT_TIMED(layernorm_forward, out, mean, rstd, inp, weight, bias, N, C);
}
void ProfilingKernels::layernorm_backward(float* dinp, Operand dweight, Operand dbias,
                                          const float* dout, const float* inp,
                                          ConstOperand weight, const float* mean,
                                          const float* rstd, int64_t N, int64_t C) {
  ZT_TIMED(layernorm_backward, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
void ProfilingKernels::gelu_forward(float* out, const float* inp, int64_t n) {
  ZT_TIMED(gelu_forward, out, inp, n);
}
void ProfilingKernels::gelu_backward(float* dinp, const float* inp, const float* dout,
                                     int64_t n) {
  ZT_TIMED(gelu_backward, dinp, inp, dout, n);
}
void ProfilingKernels::attention_forward(float* out, float* att, const float* qkv, int64_t B,
                                         int64_t T, int64_t C, int64_t NH,
                                         const int32_t* positions) {
  ZT_TIMED(attention_forward, out, att, qkv, B, T, C, NH, positions);
}
void ProfilingKernels::attention_backward(float* dqkv, const float* dout, const float* qkv,
                                          const float* att, int64_t B, int64_t T, int64_t C,
                                          int64_t NH, const int32_t* positions) {
  ZT_TIMED(attention_backward, dqkv, dout, qkv, att, B, T, C, NH, positions);
}
void ProfilingKernels::gqa_attention_forward(float* out, float* att, const float* qkv, int64_t B,
                                             int64_t T, int64_t NH, int64_t NKV, int64_t hd,
                                             const int32_t* positions) {
  ZT_TIMED(gqa_attention_forward, out, att, qkv, B, T, NH, NKV, hd, positions);
}
void ProfilingKernels::gqa_attention_backward(float* dqkv, const float* dout, const float* qkv,
                                              const float* att, int64_t B, int64_t T, int64_t NH,
                                              int64_t NKV, int64_t hd, const int32_t* positions) {
  ZT_TIMED(gqa_attention_backward, dqkv, dout, qkv, att, B, T, NH, NKV, hd, positions);
}
void ProfilingKernels::rmsnorm_forward(float* out, float* rstd, const float* inp,
                                       ConstOperand weight, int64_t N, int64_t C, float eps) {
  ZT_TIMED(rmsnorm_forward, out, rstd, inp, weight, N, C, eps);
}
void ProfilingKernels::rmsnorm_backward(float* dinp, Operand dweight, const float* dout,
                                        const float* inp, ConstOperand weight, const float* rstd,
                                        int64_t N, int64_t C) {
  ZT_TIMED(rmsnorm_backward, dinp, dweight, dout, inp, weight, rstd, N, C);
}
void ProfilingKernels::rope_forward(float* qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                                    int64_t hd, const RopeFrequencies& rope, const int32_t* positions) {
  ZT_TIMED(rope_forward, qkv, B, T, NH, NKV, hd, rope, positions);
}
void ProfilingKernels::rope_backward(float* dqkv, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                                     int64_t hd, const RopeFrequencies& rope, const int32_t* positions) {
  ZT_TIMED(rope_backward, dqkv, B, T, NH, NKV, hd, rope, positions);
}
void ProfilingKernels::swiglu_forward(float* out, const float* gate_up, int64_t N, int64_t F) {
  ZT_TIMED(swiglu_forward, out, gate_up, N, F);
}
void ProfilingKernels::swiglu_backward(float* dgate_up, const float* gate_up, const float* dout,
                                       int64_t N, int64_t F) {
  ZT_TIMED(swiglu_backward, dgate_up, gate_up, dout, N, F);
}
void ProfilingKernels::residual_forward(float* out, const float* a, const float* b, int64_t n) {
  ZT_TIMED(residual_forward, out, a, b, n);
}
void ProfilingKernels::accumulate(float* y, const float* x, int64_t n) {
  ZT_TIMED(accumulate, y, x, n);
}
void ProfilingKernels::softmax_cross_entropy(float* losses, float* logits,
                                             const int32_t* targets, int64_t N, int64_t V,
                                             int64_t Vp, float dloss) {
  ZT_TIMED(softmax_cross_entropy, losses, logits, targets, N, V, Vp, dloss);
}
void ProfilingKernels::adamw(float* param, ConstOperand grad, float* m, float* v, int64_t n,
                             const AdamWArgs& args, Operand working) {
  ZT_TIMED(adamw, param, grad, m, v, n, args, working);
}
void ProfilingKernels::sgd(float* param, ConstOperand grad, float* momentum_buf, int64_t n,
                           const SgdArgs& args) {
  ZT_TIMED(sgd, param, grad, momentum_buf, n, args);
}
void ProfilingKernels::cast(void* dst, DType dst_type, const void* src, DType src_type,
                            int64_t n) {
  ZT_TIMED(cast, dst, dst_type, src, src_type, n);
}
void ProfilingKernels::round_to(float* x, DType dtype, int64_t n) {
  ZT_TIMED(round_to, x, dtype, n);
}
void ProfilingKernels::round_rows(float* x, const int32_t* rows, int64_t n_rows,
                                  int64_t row_len, DType dtype) {
  ZT_TIMED(round_rows, x, rows, n_rows, row_len, dtype);
}
void ProfilingKernels::add(void* dst, DType dst_type, const void* a, DType a_type,
                           const void* b, DType b_type, int64_t n) {
  ZT_TIMED(add, dst, dst_type, a, a_type, b, b_type, n);
}
void ProfilingKernels::fill(float* x, float value, int64_t n) { ZT_TIMED(fill, x, value, n); }
double ProfilingKernels::sum_squares(ConstOperand x, int64_t n) {
  ZT_TIMED(sum_squares, x, n);
}

#undef ZT_TIMED

}  // namespace zt
