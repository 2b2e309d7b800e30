// CudaKernels, the element-wise activation entries: GELU and SwiGLU forward and backward, RoPE
// forward and backward, residual, accumulate and fill. Every entry is enqueued on stream_ and
// returns at once. No parameters and no reductions here: the optimizers, conversions and
// reductions are in cuda_kernels.cu, LoRA's add_columns and dropout in cuda_lora_kernels.cu.
//
// Storage (kernels.h "Precision", cuda_kernel_helpers.cuh). Each kernel is templated on A, the
// storage type of all the call's activation operands: it reads them with A::to_fp32, computes in
// fp32 and stores to_act<A>, the value rounded to the table's activation dtype (act_; kF32 rounds
// nothing) and then narrowed to A, exactly. A 16-bit operand is read and written in its 2 bytes
// and no pass over an output follows. An entry whose operands mix fp32 and 16-bit dtypes runs
// itself on fp32 copies (ActStage, cuda_act_stage.cpp): the same bits, a pass more per 16-bit
// operand read and per one written.
//
// Bitwise agreement with the CPU back end (cpu_nn_kernels.cpp, cpu_elementwise_kernels.cpp): the
// CPU's operations in its order, one element per iteration of a grid-stride loop, so an element's
// bits depend neither on its position nor on the launch geometry, with every float operation an
// uncontracted _rn intrinsic (nvcc would fuse a*b+c; cuda_kernels.cu's header has the whole
// argument). GELU and SwiGLU use the CPU's exp_bounded (a polynomial of +, -, * and bit
// operations), not expf or tanhf, so they give the CPU's bits rather than a nearby value.
// Pinned by tests/runtime/cuda_kernels_test.cpp and cuda_nn_kernels_llama_test.cpp (against the
// CPU), cuda_activation_rounding_test.cpp (a 16-bit table's outputs are the fp32 table's rounded)
// and cuda_activation_storage_test.cpp (16-bit operands leave the values fp32 arrays do).
#include <cmath>
#include <cstdint>
#include <optional>

#include "runtime/cuda/cuda_kernel_helpers.cuh"
#include "runtime/cuda/cuda_kernels_impl.h"

namespace zt {
namespace {

// ---------------------------------------------------------------------------------------------
// GELU: the CPU's formulas and operation order exactly (cpu_nn_kernels.cpp's gelu_*_range and
// cpu_simd.h's exp_bounded), with every float operation an uncontracted _rn intrinsic.

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

// e^x for x clamped to [-86, 80]: cpu_simd.h's exp_bounded, operation for operation.
__device__ __forceinline__ float exp_bounded(float x) {
  x = x < -86.0f ? -86.0f : x;
  x = x > 80.0f ? 80.0f : x;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
  const float t = __fadd_rn(__fmul_rn(x, 1.44269504088896341f), kRound);
  const float n = __fsub_rn(t, kRound);
  const uint32_t ni = __float_as_uint(t) - 0x4B400000u;  // n as an integer (two's complement)
  float r = __fsub_rn(x, __fmul_rn(n, 0.693359375f));
  r = __fsub_rn(r, __fmul_rn(n, -2.12194440e-4f));
  float p = __fadd_rn(__fmul_rn(r, 1.9875691500e-4f), 1.3981999507e-3f);
  p = __fadd_rn(__fmul_rn(p, r), 8.3334519073e-3f);
  p = __fadd_rn(__fmul_rn(p, r), 4.1665795894e-2f);
  p = __fadd_rn(__fmul_rn(p, r), 1.6666665459e-1f);
  p = __fadd_rn(__fmul_rn(p, r), 5.0000001201e-1f);
  p = __fadd_rn(__fadd_rn(__fmul_rn(__fmul_rn(p, r), r), r), 1.0f);  // p*r*r + r + 1
  return __fmul_rn(p, __uint_as_float((ni + 127u) << 23));
}

// u = sqrt(2/pi) * (x + 0.044715 x^3), with x^3 evaluated as ((0.044715 * x) * x) * x.
__device__ __forceinline__ float gelu_u(float x) {
  const float cubic = __fmul_rn(__fmul_rn(__fmul_rn(kGeluCubic, x), x), x);
  return __fmul_rn(kGeluScale, __fadd_rn(x, cubic));
}

// out = x / (1 + e^(-2u)) = 0.5 x (1 + tanh u), stored as to_act<A> (as every kernel here: the
// activations stored as A, what is written rounded to act).
template <class A>
__global__ void gelu_forward_kernel(typename A::Elem* out, const typename A::Elem* inp, int64_t n,
                                    DType act) {
  ZT_GRID_STRIDE_LOOP(i, n) {
    const float x = A::to_fp32(inp[i]);
    const float e = exp_bounded(__fmul_rn(-2.0f, gelu_u(x)));
    out[i] = to_act<A>(__fdiv_rn(x, __fadd_rn(1.0f, e)), act);
  }
}

// dinp += dout * (s + 2 x s (1-s) du/dx), s = 1/(1+e), 1-s = e s.
template <class A>
__global__ void gelu_backward_kernel(typename A::Elem* dinp, const typename A::Elem* inp,
                                     const typename A::Elem* dout, int64_t n, DType act) {
  ZT_GRID_STRIDE_LOOP(i, n) {
    const float x = A::to_fp32(inp[i]);
    const float e = exp_bounded(__fmul_rn(-2.0f, gelu_u(x)));
    const float s = __fdiv_rn(1.0f, __fadd_rn(1.0f, e));
    // 3.0f * kGeluCubic * x * x: the product of the two constants is folded in float, as GCC
    // folds it on the CPU.
    const float du =
        __fmul_rn(kGeluScale, __fadd_rn(1.0f, __fmul_rn(__fmul_rn(3.0f * kGeluCubic, x), x)));
    // s * (1 + ((2 x) (e s)) du)
    const float inner = __fmul_rn(__fmul_rn(__fmul_rn(2.0f, x), __fmul_rn(e, s)), du);
    const float grad = __fmul_rn(s, __fadd_rn(1.0f, inner));
    const float sum = __fadd_rn(A::to_fp32(dinp[i]), __fmul_rn(A::to_fp32(dout[i]), grad));
    dinp[i] = to_act<A>(sum, act);
  }
}

// ---------------------------------------------------------------------------------------------
// SwiGLU: the CPU's formulas and operation order (cpu_nn_kernels.cpp's swiglu_*_range),
// uncontracted. gate_up rows are 2F wide: gate in [0, F), up in [F, 2F).

// out = (g / (1 + e^-g)) · u.
template <class A>
__global__ void swiglu_forward_kernel(typename A::Elem* out, const typename A::Elem* gate_up,
                                      int64_t n, int64_t F, DType act) {
  ZT_GRID_STRIDE_LOOP(i, n) {
    const int64_t row = i / F, f = i % F;
    const float g = A::to_fp32(gate_up[row * 2 * F + f]);
    const float u = A::to_fp32(gate_up[row * 2 * F + F + f]);
    const float e = exp_bounded(-g);
    out[i] = to_act<A>(__fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, e)), u), act);
  }
}

// d up += dout · silu(g); d gate += (dout · u) · s·(1 + g·(e·s)), s = 1/(1+e), 1-s = e·s.
template <class A>
__global__ void swiglu_backward_kernel(typename A::Elem* dgate_up, const typename A::Elem* gate_up,
                                       const typename A::Elem* dout, int64_t n, int64_t F,
                                       DType act) {
  ZT_GRID_STRIDE_LOOP(i, n) {
    const int64_t row = i / F, f = i % F;
    const int64_t ig = row * 2 * F + f, iu = ig + F;
    const float g = A::to_fp32(gate_up[ig]), u = A::to_fp32(gate_up[iu]);
    const float dy = A::to_fp32(dout[i]);
    const float e = exp_bounded(-g);
    const float s = __fdiv_rn(1.0f, __fadd_rn(1.0f, e));
    const float silu = __fdiv_rn(g, __fadd_rn(1.0f, e));
    const float dsilu = __fmul_rn(s, __fadd_rn(1.0f, __fmul_rn(g, __fmul_rn(e, s))));
    const float dgate = __fadd_rn(A::to_fp32(dgate_up[ig]), __fmul_rn(__fmul_rn(dy, u), dsilu));
    const float dup = __fadd_rn(A::to_fp32(dgate_up[iu]), __fmul_rn(dy, silu));
    dgate_up[ig] = to_act<A>(dgate, act);
    dgate_up[iu] = to_act<A>(dup, act);
  }
}

// ---------------------------------------------------------------------------------------------
// Rotary position embedding, in place on the NH + NKV query and key heads of qkv rows R wide, at
// positions[bt] (null: bt % T). One thread per (token, head, i < hd/2) pair. The angle's
// precision as the CPU's (kernels.h): inverse frequency in double rounded to fp32, angle an fp32
// product, cos/sin in double rounded to fp32 (the CPU's libm and CUDA's double cos/sin agree
// after rounding to fp32 but for rare ties: cuda_nn_kernels_llama_test has a tolerance).
// sign -1: the inverse rotation. Each thread reads its pair before it writes it (in place);
// only the q and k elements are written and rounded, the value heads keep their bits.
template <class A>
__global__ void rope_kernel(typename A::Elem* qkv, const int32_t* positions, int64_t n, int64_t T,
                            int64_t heads, int64_t R, int64_t hd, RopeFrequencies rope, float sign,
                            DType act) {
  ZT_GRID_STRIDE_LOOP(idx, n) {
    const int64_t half = hd / 2;
    const int64_t i = idx % half, head = (idx / half) % heads, bt = idx / (half * heads);
    const float inv_freq = rope_inv_freq(rope, i, hd);
    const int64_t position = positions ? positions[bt] : bt % T;
    const float angle = __fmul_rn(static_cast<float>(position), inv_freq);
    const float c = static_cast<float>(cos(double(angle)));
    const float sn = __fmul_rn(sign, static_cast<float>(sin(double(angle))));
    typename A::Elem* x = qkv + bt * R + head * hd;
    const float x1 = A::to_fp32(x[i]), x2 = A::to_fp32(x[i + half]);
    x[i] = to_act<A>(__fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, sn)), act);
    x[i + half] = to_act<A>(__fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, sn)), act);
  }
}

// ---------------------------------------------------------------------------------------------
// Simple element-wise kernels (out may be a or b: an element is read before it is written).

template <class A>
__global__ void residual_kernel(typename A::Elem* out, const typename A::Elem* a,
                                const typename A::Elem* b, int64_t n, DType act) {
  ZT_GRID_STRIDE_LOOP(i, n) out[i] = to_act<A>(__fadd_rn(A::to_fp32(a[i]), A::to_fp32(b[i])), act);
}

template <class A>
__global__ void accumulate_kernel(typename A::Elem* y, const typename A::Elem* x, int64_t n,
                                  DType act) {
  ZT_GRID_STRIDE_LOOP(i, n) y[i] = to_act<A>(__fadd_rn(A::to_fp32(y[i]), A::to_fp32(x[i])), act);
}

template <class A>
__global__ void fill_kernel(typename A::Elem* x, float value, int64_t n, DType act) {
  const typename A::Elem stored = to_act<A>(value, act);
  ZT_GRID_STRIDE_LOOP(i, n) x[i] = stored;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Entries. Each launches its kernel on the storage of one_dtype of its activation operands; a
// call that mixes fp32 and 16-bit operands runs the entry again on fp32 copies (ActStage), whose
// destructor narrows what it wrote back after the kernel (all on stream_, in order).

void CudaKernels::gelu_forward(Operand out, ConstOperand inp, int64_t n) {
  if (n <= 0) return;
  const std::optional<DType> stored = one_dtype({out, inp});
  if (!stored) {
    ActStage stage(*this);
    gelu_forward(stage.out(out, n), stage.in(inp, n), n);
    return;
  }
  visit_storage(*stored, [&](auto tag) {
    using A = decltype(tag);
    gelu_forward_kernel<A>
        <<<grid_for(n), kElementThreads, 0, stream_>>>(elems<A>(out), elems<A>(inp), n, act_);
  });
  check_launch();
}

void CudaKernels::gelu_backward(Operand dinp, ConstOperand inp, ConstOperand dout, int64_t n) {
  if (n <= 0) return;
  const std::optional<DType> stored = one_dtype({dinp, inp, dout});
  if (!stored) {
    ActStage stage(*this);
    gelu_backward(stage.inout(dinp, n), stage.in(inp, n), stage.in(dout, n), n);
    return;
  }
  visit_storage(*stored, [&](auto tag) {
    using A = decltype(tag);
    gelu_backward_kernel<A><<<grid_for(n), kElementThreads, 0, stream_>>>(
        elems<A>(dinp), elems<A>(inp), elems<A>(dout), n, act_);
  });
  check_launch();
}

void CudaKernels::swiglu_forward(Operand out, ConstOperand gate_up, int64_t N, int64_t F) {
  const int64_t n = N * F;
  if (n <= 0) return;
  const std::optional<DType> stored = one_dtype({out, gate_up});
  if (!stored) {
    ActStage stage(*this);
    swiglu_forward(stage.out(out, n), stage.in(gate_up, 2 * n), N, F);
    return;
  }
  visit_storage(*stored, [&](auto tag) {
    using A = decltype(tag);
    swiglu_forward_kernel<A><<<grid_for(n), kElementThreads, 0, stream_>>>(
        elems<A>(out), elems<A>(gate_up), n, F, act_);
  });
  check_launch();
}

void CudaKernels::swiglu_backward(Operand dgate_up, ConstOperand gate_up, ConstOperand dout,
                                  int64_t N, int64_t F) {
  const int64_t n = N * F;
  if (n <= 0) return;
  const std::optional<DType> stored = one_dtype({dgate_up, gate_up, dout});
  if (!stored) {
    ActStage stage(*this);
    swiglu_backward(stage.inout(dgate_up, 2 * n), stage.in(gate_up, 2 * n), stage.in(dout, n), N,
                    F);
    return;
  }
  visit_storage(*stored, [&](auto tag) {
    using A = decltype(tag);
    swiglu_backward_kernel<A><<<grid_for(n), kElementThreads, 0, stream_>>>(
        elems<A>(dgate_up), elems<A>(gate_up), elems<A>(dout), n, F, act_);
  });
  check_launch();
}

// rope_forward and rope_backward: the rotation and its inverse, in place on the one operand.

void CudaKernels::rope_forward(Operand qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                               int64_t hd, const RopeFrequencies& rope, const int32_t* positions) {
  ZT_CUDA_ASSERT(hd > 0 && hd % 2 == 0, "rope_forward: head_dim must be even");
  const int64_t n = B * T * (NH + NKV) * (hd / 2), R = (NH + 2 * NKV) * hd;
  if (n <= 0) return;
  visit_storage(qkv.dtype, [&](auto tag) {
    using A = decltype(tag);
    rope_kernel<A><<<grid_for(n), kElementThreads, 0, stream_>>>(elems<A>(qkv), positions, n, T,
                                                                 NH + NKV, R, hd, rope, 1.0f, act_);
  });
  check_launch();
}

void CudaKernels::rope_backward(Operand dqkv, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                                int64_t hd, const RopeFrequencies& rope, const int32_t* positions) {
  ZT_CUDA_ASSERT(hd > 0 && hd % 2 == 0, "rope_backward: head_dim must be even");
  const int64_t n = B * T * (NH + NKV) * (hd / 2), R = (NH + 2 * NKV) * hd;
  if (n <= 0) return;
  visit_storage(dqkv.dtype, [&](auto tag) {
    using A = decltype(tag);
    rope_kernel<A><<<grid_for(n), kElementThreads, 0, stream_>>>(
        elems<A>(dqkv), positions, n, T, NH + NKV, R, hd, rope, -1.0f, act_);
  });
  check_launch();
}

void CudaKernels::residual_forward(Operand out, ConstOperand a, ConstOperand b, int64_t n) {
  if (n <= 0) return;
  const std::optional<DType> stored = one_dtype({out, a, b});
  if (!stored) {
    ActStage stage(*this);
    residual_forward(stage.out(out, n), stage.in(a, n), stage.in(b, n), n);
    return;
  }
  visit_storage(*stored, [&](auto tag) {
    using A = decltype(tag);
    residual_kernel<A><<<grid_for(n), kElementThreads, 0, stream_>>>(elems<A>(out), elems<A>(a),
                                                                     elems<A>(b), n, act_);
  });
  check_launch();
}

void CudaKernels::accumulate(Operand y, ConstOperand x, int64_t n) {
  if (n <= 0) return;
  const std::optional<DType> stored = one_dtype({y, x});
  if (!stored) {
    ActStage stage(*this);
    accumulate(stage.inout(y, n), stage.in(x, n), n);
    return;
  }
  visit_storage(*stored, [&](auto tag) {
    using A = decltype(tag);
    accumulate_kernel<A>
        <<<grid_for(n), kElementThreads, 0, stream_>>>(elems<A>(y), elems<A>(x), n, act_);
  });
  check_launch();
}

void CudaKernels::fill(Operand x, float value, int64_t n) {
  if (n <= 0) return;
  visit_storage(x.dtype, [&](auto tag) {
    using A = decltype(tag);
    fill_kernel<A><<<grid_for(n), kElementThreads, 0, stream_>>>(elems<A>(x), value, n, act_);
  });
  check_launch();
}

}  // namespace zt
