// CpuAdam: runtime/cpu/cpu_adam_fused.h's one pass per chunk, the chunks split over the calling
// rank's threads.
#include "offload/cpu_adam.h"

#include "runtime/cpu/cpu_adam_fused.h"
#include "runtime/cpu/cpu_parallel.h"
#include "runtime/status.h"

namespace zt {
using namespace cpu;

CpuAdam::CpuAdam() : CpuAdam(choose_isa()) {}

CpuAdam::CpuAdam(Isa isa) : isa_(fused_adam_isa(isa)) {}

const char* CpuAdam::isa_name() const {
  switch (isa_) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    case Isa::kSse2: return "sse2";
  }
  return "unknown";
}

void CpuAdam::step(float* master, ConstOperand grad, float* m, float* v, Operand working, int64_t n,
                   const AdamWArgs& args) const {
  ZT_ASSERT(args.step >= 1, "cpu adam step must be >= 1; got {}", args.step);
  if (n <= 0) return;
  ZT_ASSERT(master && grad && m && v, "cpu adam needs master, grad, m and v (n = {})", n);
  const AdamScalars a = adam_scalars(args);
  parallel_ranges(n, kElementGrain, [&](int64_t i0, int64_t i1) {
    fused_adam(isa_, master + i0, grad.at(i0), m + i0, v + i0, working ? working.at(i0) : Operand(),
               a, args.decoupled, i1 - i0);
  });
}

}  // namespace zt
