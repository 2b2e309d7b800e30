// Kernels: the leaf compute a back end supplies (runtime/cpu on oneDNN + OpenMP, runtime/cuda
// on cuBLAS and our CUDA kernels).
// Everything above runtime/ calls these and nothing else for math, so a new back end touches
// runtime/ and comm/ only. Contracts, for every entry:
//   - pointers are device memory of the back end that implements the table; sizes in elements;
//   - backward kernels ACCUMULATE (+=) into every gradient they write, activation gradients
//     included (llm.c's convention): callers zero activation-gradient buffers, parameter
//     gradients accumulate across micro-batches by design. The exceptions, each written as if
//     it held zeros so that it needs no zeroing pass: a weight gradient handed to
//     matmul_backward `fresh` (Operand::fresh), and matmul_backward's dinp when asked
//     (GradOutput::kWrite, the buffer's one writer in a layer's backward);
//   - element-wise kernels give an element the same bits wherever it sits in a buffer (no
//     fast-math, the same operations in vector body and tail): shards of a buffer updated
//     separately equal the buffer updated whole (the ZeRO stages' bitwise equality rests on it);
//   - reductions use a fixed blocking independent of the thread count, so results do not
//     depend on how many threads ran them.
// Precision. Parameters, their gradients and the optimizer's gradient input are Operands: a
// pointer with its dtype (fp32, bf16 or fp16), read and written in the dtype they are stored in,
// with fp32 arithmetic inside (a GEMM accumulates in fp32; a 16-bit gradient accumulated into is
// rounded once, as a beta = 1 GEMM into a 16-bit output is). So a 16-bit working copy goes to the
// kernels as it is and no fp32 copy of a unit exists. Activations (hidden states, their
// gradients, logits) are fp32 arrays on this interface; a table made for an activation dtype
// (Device::kernels_for) rounds every activation it writes to that dtype in the loop that writes
// it, so each holds exactly what a 16-bit device would store (fp16 overflow gives ±inf where it
// happens). Layer-norm statistics and losses stay fp32. Rounding is round to nearest even,
// the bits of round_to.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/rope.h"

namespace zt {

// How a weight matrix of a (M,K)x(K,N) product is stored.
// A read-only operand in device memory and its element type. fp32 pointers convert implicitly.
struct ConstOperand {
  const void* data = nullptr;
  DType dtype = DType::kF32;

  ConstOperand() = default;
  ConstOperand(std::nullptr_t) {}
  ConstOperand(const float* p) : data(p) {}
  ConstOperand(const void* p, DType t) : data(p), dtype(t) {}
  explicit operator bool() const { return data != nullptr; }
  // The operand `elements` further on (a view into a flat buffer).
  ConstOperand at(int64_t elements) const {
    return {static_cast<const char*>(data) + elements * int64_t(dtype_size(dtype)), dtype};
  }
};

// A writable operand in device memory and its element type. fp32 pointers convert implicitly.
// `fresh`: the memory holds no values yet (a parameter gradient's first hand-out of a step,
// model.h); it reads as zeros, so a kernel that would add into it writes it instead. Only
// matmul_backward's dweight takes a fresh operand.
struct Operand {
  void* data = nullptr;
  DType dtype = DType::kF32;
  bool fresh = false;

  Operand() = default;
  Operand(std::nullptr_t) {}
  Operand(float* p) : data(p) {}
  Operand(void* p, DType t, bool fresh_ = false) : data(p), dtype(t), fresh(fresh_) {}
  explicit operator bool() const { return data != nullptr; }
  operator ConstOperand() const { return {data, dtype}; }
  Operand at(int64_t elements) const {
    return {static_cast<char*>(data) + elements * int64_t(dtype_size(dtype)), dtype, fresh};
  }
};

// How matmul_backward treats dinp: adds into it (the contract), or writes it as if it held
// zeros (it holds no values yet; the layer's backward has no other writer of it).
enum class GradOutput { kAdd, kWrite };

enum class WeightLayout {
  kInOut,  // (K, N): Hugging Face GPT-2's Conv1D layout, out = inp · W
  kOutIn,  // (N, K): nn.Linear / the tied LM head over wte, out = inp · Wᵀ
};

struct AdamWArgs {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled (AdamW); 0 for biases and norms
  int64_t step = 1;           // 1-based, for bias correction
  float grad_scale = 1.0f;    // gradients are multiplied by this first (unscale, clip)
  bool decoupled = true;      // false: classic Adam, decay added to the gradient (L2)
};

// The per-call scalars of an Adam step, derived once from AdamWArgs, so every back end's
// element loop uses the same values (bias corrections 1 - beta^step computed in double).
struct AdamScalars {
  float lr, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, weight_decay, grad_scale;
  float bias_correction1, bias_correction2;  // 1 - beta^step
};
inline AdamScalars adam_scalars(const AdamWArgs& args) {
  const double t = static_cast<double>(args.step);
  return AdamScalars{args.lr,
                     args.beta1,
                     args.beta2,
                     1.0f - args.beta1,
                     1.0f - args.beta2,
                     args.eps,
                     args.weight_decay,
                     args.grad_scale,
                     static_cast<float>(1.0 - std::pow(static_cast<double>(args.beta1), t)),
                     static_cast<float>(1.0 - std::pow(static_cast<double>(args.beta2), t))};
}

struct SgdArgs {
  float lr = 1e-2f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
  float grad_scale = 1.0f;
};

class Kernels {
 public:
  virtual ~Kernels() = default;

  // out (M,N) = inp (M,K) · W + bias (N; may be null). W is (K,N) or (N,K) by layout.
  virtual void matmul_forward(float* out, const float* inp, ConstOperand weight,
                              ConstOperand bias, int64_t M, int64_t K, int64_t N,
                              WeightLayout layout) = 0;
  // dinp (M,K) += dout · Wᵀ, or = with kWrite (zeros when N == 0; skipped when null);
  // dweight (W's shape) += inpᵀ·dout (or its transpose for kOutIn), or = when dweight is fresh
  // (zeros when M == 0); each "=" gives the bits of adding into zeros. dbias (N) += column
  // sums of dout (skipped when null).
  virtual void matmul_backward(float* dinp, Operand dweight, Operand dbias, const float* dout,
                               const float* inp, ConstOperand weight, int64_t M, int64_t K,
                               int64_t N, WeightLayout layout,
                               GradOutput dinp_output = GradOutput::kAdd) = 0;

  // out (B,T,C) = wte[tokens[b,t]] + wpe[positions[b,t]] (wpe null: no position embedding,
  // Llama's). tokens are already validated (< V). positions (B,T), model.h's Batch::positions,
  // null: 0..T-1 in every row.
  virtual void embedding_forward(float* out, const int32_t* tokens, ConstOperand wte,
                                 ConstOperand wpe, int64_t B, int64_t T, int64_t C,
                                 const int32_t* positions) = 0;
  // dwte (V,C) += scatter of dout by token; dwpe (T,C) += scatter of dout by position, a row's
  // contributions in token order (skipped when null; either may be null). Deterministic order.
  // A 16-bit dwte or dwpe row named by the batch is rounded once, after all its contributions.
  virtual void embedding_backward(Operand dwte, Operand dwpe, const float* dout,
                                  const int32_t* tokens, int64_t B, int64_t T, int64_t C,
                                  const int32_t* positions) = 0;

  // Per row of C: out = (inp - mean) * rstd * weight + bias, eps 1e-5. mean, rstd: (N).
  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                 ConstOperand weight, ConstOperand bias, int64_t N,
                                 int64_t C) = 0;
  virtual void layernorm_backward(float* dinp, Operand dweight, Operand dbias, const float* dout,
                                  const float* inp, ConstOperand weight, const float* mean,
                                  const float* rstd, int64_t N, int64_t C) = 0;

  // GELU, tanh approximation (GPT-2's).
  virtual void gelu_forward(float* out, const float* inp, int64_t n) = 0;
  virtual void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) = 0;

  // Causal multi-head self-attention within documents: query t of row b reads the keys
  // t - positions[b,t] .. t (model.h's Batch::positions, (B,T); null: 0..T-1, keys 0 .. t).
  // qkv (B,T,3C) holds q, k, v side by side per token; out (B,T,C); att (B,NH,T,T) receives
  // the softmax probabilities (kept for backward; entries outside a query's keys are zero).
  // Scale 1/sqrt(C/NH).
  virtual void attention_forward(float* out, float* att, const float* qkv, int64_t B,
                                 int64_t T, int64_t C, int64_t NH,
                                 const int32_t* positions) = 0;
  // dqkv (B,T,3C) += gradient through attention, from dout (B,T,C); positions as forward's.
  virtual void attention_backward(float* dqkv, const float* dout, const float* qkv,
                                  const float* att, int64_t B, int64_t T, int64_t C, int64_t NH,
                                  const int32_t* positions) = 0;

  // Causal grouped-query self-attention (Llama's; attention_forward is the case NKV == NH,
  // hd == C/NH). qkv (B,T,R) with R = (NH + 2·NKV)·hd holds per token the NH query heads, then
  // the NKV key heads, then the NKV value heads, each hd wide; query head h reads key/value head
  // h / (NH/NKV) (NH a multiple of NKV). out (B,T,NH·hd); att (B,NH,T,T) and positions (null:
  // 0..T-1) as attention_forward's. Scale 1/sqrt(hd).
  virtual void gqa_attention_forward(float* out, float* att, const float* qkv, int64_t B,
                                     int64_t T, int64_t NH, int64_t NKV, int64_t hd,
                                     const int32_t* positions) = 0;
  // dqkv (B,T,R) += gradient through attention, from dout (B,T,NH·hd). A key/value head's
  // gradient sums its group's query heads in increasing h.
  virtual void gqa_attention_backward(float* dqkv, const float* dout, const float* qkv,
                                      const float* att, int64_t B, int64_t T, int64_t NH,
                                      int64_t NKV, int64_t hd, const int32_t* positions) = 0;

  // RMSNorm per row of C: out = inp·rstd·weight, rstd = 1/sqrt(mean(inp²) + eps). rstd (N) is
  // kept for backward (fp32, as layer norm's statistics).
  virtual void rmsnorm_forward(float* out, float* rstd, const float* inp, ConstOperand weight,
                               int64_t N, int64_t C, float eps) = 0;
  virtual void rmsnorm_backward(float* dinp, Operand dweight, const float* dout,
                                const float* inp, ConstOperand weight, const float* rstd,
                                int64_t N, int64_t C) = 0;

  // Rotary position embedding (Hugging Face's rotate-half convention), IN PLACE on the NH query
  // and NKV key heads of qkv (B,T,R), laid out as gqa_attention_forward's; value heads untouched.
  // Token (b, t) at position p = positions[b,t] (model.h's Batch::positions; null: p = t) of
  // each head: for i < hd/2, with x1 = x[i], x2 = x[i + hd/2] and a = p·f_i, f_i =
  // rope_inv_freq(rope, i, hd) (runtime/rope.h: theta^(-2i/hd), rescaled by rope_scaling):
  // x[i] = x1·cos a - x2·sin a, x[i + hd/2] = x2·cos a + x1·sin a.
  // Precision: f_i is computed in double and rounded to fp32, a = float(p) times it in fp32
  // (Hugging Face's fp32 inv_freq and angle), cos a and sin a in double rounded to fp32; the
  // rotation itself in fp32. hd even.
  virtual void rope_forward(float* qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                            int64_t hd, const RopeFrequencies& rope,
                            const int32_t* positions) = 0;
  // The gradient through rope_forward at the same positions, IN PLACE: the q and k parts of
  // dqkv (the gradient w.r.t. rope's output) become the gradient w.r.t. its input (the inverse
  // rotation). The one backward entry that transforms instead of accumulating: the rotation is
  // orthogonal, so the caller keeps one buffer.
  virtual void rope_backward(float* dqkv, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                             int64_t hd, const RopeFrequencies& rope,
                             const int32_t* positions) = 0;

  // SwiGLU: out (N,F) = silu(gate)·up, silu(x) = x·sigmoid(x); gate_up (N,2F) holds per row the
  // F gate values, then the F up values (one GEMM over the adjacent gate_proj and up_proj).
  virtual void swiglu_forward(float* out, const float* gate_up, int64_t N, int64_t F) = 0;
  // dgate_up (N,2F) += gradient from dout (N,F).
  virtual void swiglu_backward(float* dgate_up, const float* gate_up, const float* dout,
                               int64_t N, int64_t F) = 0;

  // out = a + b, element-wise (out may alias a or b).
  virtual void residual_forward(float* out, const float* a, const float* b, int64_t n) = 0;
  // y += x.
  virtual void accumulate(float* y, const float* x, int64_t n) = 0;

  // Softmax cross-entropy over the first V of Vp columns of each of N rows of logits (N,Vp).
  // losses (N) = -log softmax(row)[target]. When dloss != 0 the row is overwritten in place by
  // its gradient dloss * (softmax - onehot(target)), padded columns set to 0. A row whose target
  // is negative (kIgnoreTarget, model.h) is not trained on: its loss is 0 and, when dloss != 0,
  // its gradient is all zeros (padded columns too).
  virtual void softmax_cross_entropy(float* losses, float* logits, const int32_t* targets,
                                     int64_t N, int64_t V, int64_t Vp, float dloss) = 0;

  // Optimizers over a contiguous range (a parameter view or a shard of one): fp32 parameters
  // and state, the gradient in its stored dtype (widened as it is read). `working` (may be
  // null): after the update, working[i] = working.dtype(param[i]) in the same pass, the bits of
  // cast (a mixed-precision working copy refreshed without reading the fp32 master again).
  virtual void adamw(float* param, ConstOperand grad, float* m, float* v, int64_t n,
                     const AdamWArgs& args, Operand working = nullptr) = 0;
  virtual void sgd(float* param, ConstOperand grad, float* momentum_buf, int64_t n,
                   const SgdArgs& args) = 0;  // momentum_buf may be null when momentum == 0

  // Element-wise utilities.
  virtual void cast(void* dst, DType dst_type, const void* src, DType src_type, int64_t n) = 0;
  // x = float(dtype(x)) in place: every element rounded to the nearest value of `dtype`
  // (round to nearest even, as cast does; fp16 overflow gives ±inf; NaN stays NaN). kF32: no-op.
  virtual void round_to(float* x, DType dtype, int64_t n) = 0;
  // round_to over the rows of x (rows of row_len elements) named by rows[0, n_rows), which is
  // device memory like every pointer here (a GPU must not read it on the host); a row may be
  // named more than once (rounding is idempotent), rows not named keep their bits. The bits of
  // round_to. kF32: no-op. (Mixed precision rounds the embedding gradient rows of a batch's
  // tokens with it.)
  virtual void round_rows(float* x, const int32_t* rows, int64_t n_rows, int64_t row_len,
                          DType dtype) = 0;
  // dst = dst_type(float(a) + float(b)) element-wise with one rounding, the sum in fp32. `a` may
  // be null (read as 0: a plain rounding cast of b). dst may alias a or b when the types match.
  virtual void add(void* dst, DType dst_type, const void* a, DType a_type, const void* b,
                   DType b_type, int64_t n) = 0;
  virtual void fill(float* x, float value, int64_t n) = 0;
  // Sum of x², x in its stored dtype, accumulated in double over fixed blocks added in order.
  virtual double sum_squares(ConstOperand x, int64_t n) = 0;
};

}  // namespace zt
