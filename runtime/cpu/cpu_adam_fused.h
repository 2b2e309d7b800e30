// The fused Adam loop both CPU Adams run: CpuKernels::adamw (cpu_optimizer_kernels.cpp) and
// offload's CpuAdam (offload/cpu_adam.cpp). Each element's master, m, v and gradient are loaded
// once, the gradient widened in registers, the update is cpu_adam_update.h's, and the results
// are stored together with the working copy, rounded in registers: 28 bytes per element (fp32
// gradient) plus the working copy's 2, where a gradient widened through a scratch buffer and a
// working copy narrowed from the stored master each cost another pass over the chunk.
//
// Stores are ordinary stores. master, m and v are read then written, so their lines are in
// cache when written and a non-temporal store would only evict them early. The working copy is
// written without being read, so its lines are filled first (2 bytes per element beside the 30
// a step must move); streaming it instead measured 4% faster by the best of 11 steps of 124M
// parameters here, inside this shared machine's noise (the medians 229 and 220 ms), and would
// need 32-byte-aligned working pointers, which a decay run's offset does not give: not taken.
#pragma once

#include <cstdint>
#include <type_traits>

#include "runtime/cpu/cpu_adam_update.h"
#include "runtime/cpu/cpu_lane_codecs.h"
#include "runtime/cpu/cpu_simd.h"
#include "runtime/dtype.h"
#include "runtime/kernels.h"

namespace zt::cpu {

// No working copy to write.
struct NoWorking {
  using Storage = void;
};

// Elements [0, n) of one chunk: load, update, store, in one pass.
template <class V, bool kDecoupled, class G, class W>
void fused_range(float* master, const typename G::Storage* grad, float* m, float* v,
                 typename W::Storage* working, const AdamScalars& scalars, int64_t n) {
  // A local copy: the stores below could alias a referenced struct, which would make the
  // compiler reload every scalar each iteration; a local one stays in registers.
  const AdamScalars a = scalars;
  simd_loop<V>(0, n, [&](auto lanes, int64_t i) {
    using T = typename decltype(lanes)::type;
    T p = load<T>(master + i), mi = load<T>(m + i), vi = load<T>(v + i);
    adam_update<kDecoupled>(p, load_widened<T, G>(grad + i), mi, vi, a);
    store<T>(m + i, mi);
    store<T>(v + i, vi);
    store<T>(master + i, p);
    if constexpr (!std::is_same_v<W, NoWorking>) store_narrowed<T, W>(working + i, p);
  });
}

// The instruction set the fused loop runs for `isa`: the AVX2 path needs F16C beside it (every
// AVX2 CPU so far has it); without it, SSE2.
inline Isa fused_adam_isa(Isa isa) {
  __builtin_cpu_init();
  if (isa == Isa::kAvx2 && !__builtin_cpu_supports("f16c")) return Isa::kSse2;
  return isa;
}

// One Adam step over elements [0, n) of one chunk on the calling thread: master, m and v fp32;
// grad in its stored dtype; working null or written with the updated master in its dtype. isa:
// from fused_adam_isa.
inline void fused_adam(Isa isa, float* master, ConstOperand grad, float* m, float* v,
                       Operand working, const AdamScalars& a, bool decoupled, int64_t n) {
  visit_codec(grad.dtype, [&](auto grad_tag) {
    using G = decltype(grad_tag);
    const auto* g = static_cast<const typename G::Storage*>(grad.data);
    const auto run = [&](auto working_tag) {
      using W = decltype(working_tag);
      typename W::Storage* w = nullptr;
      if constexpr (!std::is_same_v<W, NoWorking>)
        w = static_cast<typename W::Storage*>(working.data);
      run_isa_f16c(isa, [&](auto lanes) {
        using V = typename decltype(lanes)::type;
        if (decoupled)
          fused_range<V, true, G, W>(master, g, m, v, w, a, n);
        else
          fused_range<V, false, G, W>(master, g, m, v, w, a, n);
      });
    };
    if (!working)
      run(NoWorking{});
    else
      visit_codec(working.dtype, run);
  });
}

}  // namespace zt::cpu
