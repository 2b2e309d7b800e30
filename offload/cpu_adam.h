// CpuAdam: the Adam / AdamW step over an fp32 master shard in host memory, fused with writing the
// updated working params (bf16, fp16 or fp32) in the same pass, for ZeRO-Offload's optimizer on
// the CPU. One read of master, m, v and the gradient and one write of master, m, v and the
// working copy per element: what `Kernels::adamw` then `Kernels::cast` do in two passes, with the
// same bits. Vectorised with AVX-512 where the CPU has it, else AVX2 + F16C, else SSE2 (chosen
// at construction, capped by ZT_CPU_SIMD as the CPU back end's kernels are), split over the
// calling rank's OpenMP threads. Pure compute: no allocation, no communication, no I/O; where
// the shard lives and how it moves (pinned pool, NVMe) is the shard stores' business.
#pragma once

#include <cstdint>

#include "runtime/kernels.h"

namespace zt {

namespace cpu {
enum class Isa;  // runtime/cpu/cpu_simd.h
}

class CpuAdam {
 public:
  // The widest instruction set of this CPU, capped by ZT_CPU_SIMD=sse2|avx2|avx512.
  CpuAdam();
  explicit CpuAdam(cpu::Isa isa);

  // One step over elements [0, n):
  //   master, m, v  n fp32 values each, updated in place: the bits Kernels::adamw(master, grad,
  //                 m, v, n, args) leaves (any back end's table: they agree bit for bit);
  //   grad          n values in their stored dtype (fp32, bf16 or fp16), widened in registers;
  //   working       null, or n values written with the updated master in working.dtype,
  //                 rounded to nearest even: the bits of Kernels::cast from the updated master.
  // args.decoupled = false is classic Adam (decay added to the gradient, DeepSpeed's
  // adam_w_mode=False); biases and norms pass weight_decay = 0, as the engine's decay runs do.
  // Element-wise, so a shard updated in pieces (one call per decay run) equals it updated whole.
  // The buffers must not overlap, except that working may be master itself when it is fp32.
  // Threads: omp_get_max_threads() of the caller, each a contiguous run of 128 KiB chunks.
  // Tests: tests/offload/cpu_adam_test.cpp.
  void step(float* master, ConstOperand grad, float* m, float* v, Operand working, int64_t n,
            const AdamWArgs& args) const;

  // "avx512", "avx2" or "sse2": the path step runs.
  const char* isa_name() const;

 private:
  cpu::Isa isa_;
};

}  // namespace zt
