// CpuKernels, the per-head RMSNorm (Qwen3's q_norm and k_norm): rmsnorm's row kernels
// (cpu_rmsnorm_rows.h) over the N·H head rows of hd that sit `stride` apart, in place. The
// weight gradient is rmsnorm_backward's two passes: per block of head rows their partials, then
// per channel block the partials added in block order (independent of the thread count).
#include <algorithm>
#include <cstdint>

#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cpu_parallel.h"
#include "runtime/cpu/cpu_rmsnorm_rows.h"
#include "runtime/status.h"

namespace zt {
using namespace cpu;
namespace {

constexpr int64_t kHeadRowBlock = 32;  // head rows per task, and per dweight partial

// Head row r (of N·H): head r % H of row r / H.
inline int64_t head_offset(int64_t r, int64_t H, int64_t hd, int64_t stride) {
  return (r / H) * stride + (r % H) * hd;
}

}  // namespace

void CpuKernels::head_rmsnorm_forward(Operand x_op, float* rstd, ConstOperand weight_op, int64_t N,
                                      int64_t H, int64_t hd, int64_t stride, float eps) {
  ZT_ASSERT(H > 0 && hd > 0 && stride >= H * hd, "head_rmsnorm_forward: {} heads of {} in {}", H,
            hd, stride);
  if (N <= 0) return;
  ActStage stage(*this);
  float* x = stage.inout(x_op, (N - 1) * stride + H * hd);  // the rest of each row kept
  const float* weight = widened(weight_op, hd, thread_scratch<ScratchSlot::kOperand>(hd));
  parallel_ranges(N * H, kHeadRowBlock, [&](int64_t r0, int64_t r1) {
    run_isa(isa_, [&](auto lanes) {
      using V = typename decltype(lanes)::type;
      for (int64_t r = r0; r < r1; ++r) {
        float* row = x + head_offset(r, H, hd, stride);
        rmsnorm_forward_row<V>(row, rstd ? rstd + r : nullptr, row, weight, hd, eps);
        round_act(row, 0, hd);  // rstd stays fp32
      }
    });
  });
}

void CpuKernels::head_rmsnorm_backward(Operand dx_op, Operand dweight, ConstOperand inp_op,
                                       ConstOperand weight_op, const float* rstd, int64_t N,
                                       int64_t H, int64_t hd, int64_t stride) {
  ZT_ASSERT(!dweight.fresh, "head_rmsnorm_backward: a fresh gradient (kernels.h)");
  ZT_ASSERT(H > 0 && hd > 0 && stride >= H * hd, "head_rmsnorm_backward: {} heads of {} in {}", H,
            hd, stride);
  if (N <= 0) return;
  ActStage stage(*this);
  const int64_t extent = (N - 1) * stride + H * hd;
  float* dx = stage.inout(dx_op, extent);  // the rest of each row kept
  const float* inp = stage.in(inp_op, extent);
  const float* weight = widened(weight_op, hd, thread_scratch<ScratchSlot::kOperand>(hd));
  const int64_t rows = N * H, blocks = (rows + kHeadRowBlock - 1) / kHeadRowBlock;
  float* partials = thread_scratch<ScratchSlot::kCall>(blocks * hd);  // (blocks, hd)
  parallel_for(blocks, [&](int64_t blk) {
    float* pdw = partials + blk * hd;
    std::fill(pdw, pdw + hd, 0.0f);
    const int64_t r1 = std::min(rows, (blk + 1) * kHeadRowBlock);
    run_isa(isa_, [&](auto lanes) {
      using V = typename decltype(lanes)::type;
      for (int64_t r = blk * kHeadRowBlock; r < r1; ++r) {
        const int64_t at = head_offset(r, H, hd, stride);
        rmsnorm_backward_row_in_place<V>(dx + at, pdw, inp + at, weight, rstd[r], hd);
        round_act(dx + at, 0, hd);
      }
    });
  });
  if (!dweight) return;
  parallel_ranges(hd, kColumnBlock, [&](int64_t c0, int64_t c1) {
    float sw[kColumnBlock] = {};
    const int64_t w = c1 - c0;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const float* pdw = partials + blk * hd + c0;
#pragma omp simd
      for (int64_t c = 0; c < w; ++c) sw[c] += pdw[c];
    }
    add_range(dweight.at(c0), sw, w);  // fp32: +=; 16-bit: one rounding
  });
}

}  // namespace zt
