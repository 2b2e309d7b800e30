// CpuKernels, the optimizers: AdamW (decoupled or classic L2) and SGD (PyTorch's, with optional
// momentum and weight decay) over a contiguous range, a parameter view or a shard of one.
// Element-wise: an element's update is the same bits wherever it sits in the buffer and whichever
// instruction set ran, so shards updated separately equal the buffer updated whole. Not here: the
// loss scaling, clipping and norms around a step (zero/), or any other op.
#include <algorithm>
#include <cstdint>

#include "runtime/cpu/cpu_adam_fused.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cpu_parallel.h"
#include "runtime/cpu/cpu_simd.h"
#include "runtime/status.h"

namespace zt {
using namespace cpu;
namespace {

// PyTorch's SGD: g += wd·p; with momentum buf = momentum·buf + g and the step uses buf.
template <class V, bool kDecay, bool kMomentum>
void sgd_range(float* param, const float* grad, float* buf, const SgdArgs& a, int64_t begin,
               int64_t end) {
  simd_loop<V>(begin, end, [&](auto lanes, int64_t i) {
    using T = typename decltype(lanes)::type;
    const T p = load<T>(param + i);
    T g = load<T>(grad + i) * a.grad_scale;
    if constexpr (kDecay) g = g + a.weight_decay * p;
    if constexpr (kMomentum) {
      g = a.momentum * load<T>(buf + i) + g;
      store<T>(buf + i, g);
    }
    store<T>(param + i, p - a.lr * g);
  });
}

}  // namespace

// The gradient of [i0, i1) as fp32, element i0 first: the stored buffer itself, or the range
// widened into `scratch` (kElementGrain floats).
const float* CpuKernels::grad_range(ConstOperand grad, int64_t i0, int64_t i1, float* scratch) {
  if (grad.dtype == DType::kF32) return static_cast<const float*>(grad.data) + i0;
  widen_range(scratch, grad.at(i0), i1 - i0);
  return scratch;
}

void CpuKernels::adamw(float* param, ConstOperand grad, float* m, float* v, int64_t n,
                       const AdamWArgs& args, Operand working) {
  ZT_ASSERT(args.step >= 1, "adamw step must be >= 1; got {}", args.step);
  const AdamScalars a = adam_scalars(args);
  const Isa isa = fused_adam_isa(isa_);
  // One pass per chunk: a 16-bit gradient widened and the working copy rounded in registers
  // (cpu_adam_fused.h, the loop offload's CpuAdam runs).
  parallel_ranges(n, kElementGrain, [&](int64_t i0, int64_t i1) {
    fused_adam(isa, param + i0, grad.at(i0), m + i0, v + i0, working ? working.at(i0) : Operand(),
               a, args.decoupled, i1 - i0);
  });
}

void CpuKernels::sgd(float* param, ConstOperand grad_op, float* momentum_buf, int64_t n,
                     const SgdArgs& args) {
  const bool momentum = args.momentum != 0.0f;
  ZT_ASSERT(!momentum || momentum_buf, "sgd with momentum {} needs a momentum buffer",
            args.momentum);
  const bool decay = args.weight_decay != 0.0f;
  const int64_t chunks = (n + kElementGrain - 1) / kElementGrain;
  parallel_with_scratch(chunks, kElementGrain, [&](int64_t c, float* scratch) {
    const int64_t i0 = c * kElementGrain, i1 = std::min(n, i0 + kElementGrain);
    const float* grad = grad_range(grad_op, i0, i1, scratch);
    float* p = param + i0;
    float* buf = momentum_buf ? momentum_buf + i0 : nullptr;
    const int64_t len = i1 - i0;
    run_isa(isa_, [&](auto lanes) {
      using V = typename decltype(lanes)::type;
      if (decay && momentum)
        sgd_range<V, true, true>(p, grad, buf, args, 0, len);
      else if (decay)
        sgd_range<V, true, false>(p, grad, buf, args, 0, len);
      else if (momentum)
        sgd_range<V, false, true>(p, grad, buf, args, 0, len);
      else
        sgd_range<V, false, false>(p, grad, buf, args, 0, len);
    });
  });
}

}  // namespace zt
