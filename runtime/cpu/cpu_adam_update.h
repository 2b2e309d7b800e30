// The Adam update of one lane value of elements (a native vector or a single float), written
// once for every CPU Adam: CpuKernels::adamw (cpu_optimizer_kernels.cpp) and offload's fused
// CpuAdam (offload/cpu_adam.cpp) both call it, so they agree bit for bit by construction; the
// CUDA kernel (cuda_kernels.cu, adamw_kernel) spells the same operations in the same order.
// Pure arithmetic on registers: no loads, stores, threads or instruction-set choice.
#pragma once

#include "runtime/cpu/cpu_simd.h"
#include "runtime/kernels.h"

namespace zt::cpu {

// p, m, v: one lane value of the parameter and the moments, updated in place; grad: the gradient
// as fp32, before grad_scale. kDecoupled: AdamW (decay applied to the parameter beside the step);
// otherwise classic Adam, the decay added to the gradient as L2 (DeepSpeed's adam_w_mode=False).
// Divisions stay divisions (a reciprocal times m would not give the same bits), and nothing is
// contracted into FMA (-ffp-contract=off), so every lane type computes the same bits.
template <bool kDecoupled, class T>
inline void adam_update(T& p, const T& grad, T& m, T& v, const AdamScalars& a) {
  T g = grad * a.grad_scale;
  if constexpr (!kDecoupled) g = g + a.weight_decay * p;
  m = a.beta1 * m + a.one_minus_beta1 * g;
  v = a.beta2 * v + a.one_minus_beta2 * g * g;
  const T mhat = m / a.bias_correction1;
  const T vhat = v / a.bias_correction2;
  const T step = mhat / (vsqrt(vhat) + a.eps);
  if constexpr (kDecoupled) {
    p = p - a.lr * (step + a.weight_decay * p);
  } else {
    p = p - a.lr * step;
  }
}

}  // namespace zt::cpu
