// CpuKernels, the entries LoRA adapters add (y = W·x + s·B·(A·dropout(x))): add_columns, a
// scaled copy or add into a column slice of strided rows. Element-wise loops split across
// threads (cpu_parallel.h); each element's bits depend on its operands only. The products s·x are
// rounded to fp32 before any sum: the build's -ffp-contract=off keeps GCC from fusing them, as the
// CUDA back end's __fmul_rn and __fadd_rn do. Not here: the adapters' matrix products
// (matmul_forward / matmul_backward, cpu_matmul_kernels.cpp).
#include <algorithm>
#include <cstdint>

#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cpu_parallel.h"
#include "runtime/status.h"

namespace zt {
using namespace cpu;

// Rows split across threads, about kElementGrain elements a task; a row's written elements
// rounded to the activation dtype by the task that wrote them.
void CpuKernels::add_columns(float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                             int64_t N, int64_t width, float scale, GradOutput output) {
  ZT_ASSERT(N >= 0 && width >= 0 && width <= dst_stride && width <= src_stride,
            "add_columns: {} rows of {} columns in rows of {} (dst) and {} (src)", N, width,
            dst_stride, src_stride);
  if (N == 0 || width == 0) return;
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

}  // namespace zt
