// CpuKernels, the entries LoRA adapters add (y = W·x + s·B·(A·dropout(x))): add_columns, a
// scaled copy or add into a column slice of strided rows, and dropout forward and backward on
// runtime/dropout_mask.h's counter-based mask. Element-wise loops split across threads
// (cpu_parallel.h); each element's bits depend on its operands (and, for dropout, its index)
// only. The products s·x are rounded to fp32 before any sum: the build's -ffp-contract=off keeps
// GCC from fusing them, as the CUDA back end's __fmul_rn and __fadd_rn do. Not here: the
// adapters' matrix products (matmul_forward / matmul_backward, cpu_matmul_kernels.cpp).
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cpu_parallel.h"
#include "runtime/dropout_mask.h"
#include "runtime/status.h"

namespace zt {
using namespace cpu;

// Rows split across threads, about kElementGrain elements a task; a row's written elements
// rounded to the activation dtype by the task that wrote them.
void CpuKernels::add_columns(Operand dst_op, int64_t dst_stride, ConstOperand src_op,
                             int64_t src_stride, int64_t N, int64_t width, float scale,
                             GradOutput output) {
  ZT_ASSERT(N >= 0 && width >= 0 && width <= dst_stride && width <= src_stride,
            "add_columns: {} rows of {} columns in rows of {} (dst) and {} (src)", N, width,
            dst_stride, src_stride);
  if (N == 0 || width == 0) return;
  ActStage stage(*this);
  const float* src = stage.in(src_op, (N - 1) * src_stride + width);
  float* dst = stage.inout(dst_op, (N - 1) * dst_stride + width);  // the other columns kept
  const bool add = output == GradOutput::kAdd;
  parallel_ranges(N, std::max<int64_t>(1, kElementGrain / width), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* d = dst + r * dst_stride;
      const float* s = src + r * src_stride;
      if (add) {
#pragma omp simd
        for (int64_t j = 0; j < width; ++j) d[j] = d[j] + scale * s[j];
      } else {
#pragma omp simd
        for (int64_t j = 0; j < width; ++j) d[j] = scale * s[j];
      }
      round_act(d, 0, width);
    }
  });
}

namespace {

// The keep factor 1/(1 - p), rounded to fp32 once (the CUDA back end computes it on the host
// the same way).
float dropout_factor(float p, const char* kernel) {
  ZT_ASSERT(p >= 0.0f && p < 1.0f, "{}: drop probability {} outside [0, 1)", kernel, p);
  return 1.0f / (1.0f - p);
}

}  // namespace

void CpuKernels::dropout_forward(Operand out_op, ConstOperand inp_op, int64_t n, float p,
                                 uint64_t seed) {
  const float k = dropout_factor(p, "dropout_forward");
  ActStage stage(*this);
  const float* inp = stage.in(inp_op, n);
  float* out = stage.out(out_op, n);
  parallel_ranges(n, kElementGrain, [&](int64_t i0, int64_t i1) {
    if (p == 0.0f) {
      if (out != inp) std::memcpy(out + i0, inp + i0, static_cast<size_t>(i1 - i0) * sizeof(float));
    } else {
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i)
        out[i] = dropout_keep(seed, static_cast<uint64_t>(i), p) ? inp[i] * k : 0.0f;
    }
    round_act(out, i0, i1);
  });
}

void CpuKernels::dropout_backward(Operand dinp_op, ConstOperand dout_op, int64_t n, float p,
                                  uint64_t seed) {
  const float k = dropout_factor(p, "dropout_backward");
  ActStage stage(*this);
  float* dinp = stage.inout(dinp_op, n);
  const float* dout = stage.in(dout_op, n);
  if (p == 0.0f) {
    accumulate(dinp, dout, n);
    return;
  }
  parallel_ranges(n, kElementGrain, [&](int64_t i0, int64_t i1) {
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i)
      dinp[i] = dinp[i] + (dropout_keep(seed, static_cast<uint64_t>(i), p) ? dout[i] * k : 0.0f);
    round_act(dinp, i0, i1);
  });
}

}  // namespace zt
