// Kernels: the leaf compute a back end supplies (runtime/cpu on oneDNN + OpenMP, runtime/cuda
// on cuBLAS and our CUDA kernels).
// Everything above runtime/ calls these and nothing else for math, so a new back end touches
// runtime/ and comm/ only. The entries, each with its shapes and contract, are the rows of
// runtime/kernel_entries.h; this file holds the types they take and the class. Contracts, for
// every entry:
//   - pointers are device memory of the back end that implements the table; sizes in elements;
//   - backward kernels ACCUMULATE (+=) into every gradient they write, activation gradients
//     included (llm.c's convention): callers zero activation-gradient buffers, parameter
//     gradients accumulate across micro-batches by design. The exceptions, each written as if
//     it held zeros so that it needs no zeroing pass: a weight gradient handed to
//     matmul_backward `fresh` (Operand::fresh), and matmul_backward's dinp when asked
//     (GradOutput::kWrite, the buffer's one writer in a layer's backward);
//   - element-wise kernels give an element the same bits wherever it sits in a buffer (no
//     fast-math, the same operations in vector body and tail): shards of a buffer updated
//     separately equal the buffer updated whole (the ZeRO stages' bitwise equality rests on it).
//     The one exception: dropout, whose mask is drawn by the element's index (kernel_entries.h);
//   - reductions use a fixed blocking independent of the thread count, so results do not
//     depend on how many threads ran them.
// Precision. Parameters, their gradients, the optimizer's gradient input and activations
// (hidden states, their gradients, logits, attention probabilities) are Operands: a pointer with
// its dtype (fp32, bf16 or fp16), read and written in the dtype they are stored in, with fp32
// arithmetic inside (a GEMM accumulates in fp32; a 16-bit gradient accumulated into is rounded
// once, as a beta = 1 GEMM into a 16-bit output is). So a 16-bit working copy goes to the
// kernels as it is and no fp32 copy of a unit exists, and a 16-bit run keeps its activations in
// 16 bits (runtime/activation_store.h). A table made for an activation dtype
// (Device::kernels_for) rounds every activation it writes to that dtype in the step that writes
// it, whether the operand is stored in that dtype or in fp32 (an fp32 array then holds exactly
// what the 16-bit one would: fp16 overflow gives ±inf where it happens), so an entry given fp32
// arrays and one given the same values in 16 bits leave the same values. Layer-norm statistics,
// a back end's attention record and losses stay fp32. Rounding is round to nearest even, the
// bits of round_to.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/rope.h"

namespace zt {

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

// What an attention forward keeps in `att` for its backward (kernel_entries.h's
// attention_record): `floats` elements, and whether they are activations (the softmax
// probabilities, stored in the run's activation dtype with the others) or the back end's own
// record (cuDNN's statistics and 16-bit output), an fp32 buffer kept as written.
struct AttentionRecord {
  int64_t floats = 0;
  bool packable = true;
};

// What softmax_cross_entropy leaves in the logits: them as they were (evaluation), or in
// their place the gradient of the loss w.r.t. them (training; the LM head turns it into its
// weight's and its input's gradients at once, so logits are never kept).
enum class LogitsOutput { kKeep, kGradient };

// How a weight matrix of a (M,K)x(K,N) product is stored.
enum class WeightLayout {
  kInOut,  // (K, N): Hugging Face GPT-2's Conv1D layout, out = inp · W
  kOutIn,  // (N, K): nn.Linear / the tied LM head over wte, out = inp · Wᵀ
};

struct AdamWArgs {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;    // decoupled (AdamW); 0 for biases and norms
  int64_t step = 1;             // 1-based, for bias correction
  float grad_scale = 1.0f;      // gradients are multiplied by this first (unscale, clip)
  bool decoupled = true;        // false: classic Adam, decay added to the gradient (L2)
  bool bias_correction = true;  // false: m and v used as they are (DeepSpeed's bias_correction)
};

// The per-call scalars of an Adam step, derived once from AdamWArgs, so every back end's
// element loop uses the same values (bias corrections 1 - beta^step computed in double).
struct AdamScalars {
  float lr, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, weight_decay, grad_scale;
  float bias_correction1, bias_correction2;  // 1 - beta^step; 1 without bias correction
};
inline AdamScalars adam_scalars(const AdamWArgs& args) {
  // Without bias correction the step count is ignored: m / 1 and v / 1 are m and v, bit for bit.
  const double t = args.bias_correction ? static_cast<double>(args.step) : 0.0;
  const auto correction = [&](float beta) {
    return args.bias_correction ? static_cast<float>(1.0 - std::pow(static_cast<double>(beta), t))
                                : 1.0f;
  };
  return AdamScalars{
      args.lr,  args.beta1,        args.beta2,      1.0f - args.beta1,      1.0f - args.beta2,
      args.eps, args.weight_decay, args.grad_scale, correction(args.beta1), correction(args.beta2)};
}

struct SgdArgs {
  float lr = 1e-2f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
  float grad_scale = 1.0f;
};

// The table a back end implements: one pure virtual per row of runtime/kernel_entries.h,
// where each entry's shapes and contract are written beside it.
class Kernels {
 public:
  virtual ~Kernels() = default;

#define ZT_KERNEL(ret, name, params, args, memory) virtual ret name params = 0;
#include "runtime/kernel_entries.h"
};

// dst[0, n) = src[0, n) in dst's dtype (round to nearest even; a copy when the dtypes match):
// Kernels::cast between two operands.
inline void cast(Kernels& k, Operand dst, ConstOperand src, int64_t n) {
  k.cast(dst.data, dst.dtype, src.data, src.dtype, n);
}

}  // namespace zt
