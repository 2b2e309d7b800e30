// CudaKernels, the entries LoRA adapters add (y = W·x + s·B·(A·dropout(x))): add_columns, a
// scaled copy or add into a column slice of strided rows. Every entry is enqueued on stream_ and
// returns at once.
//
// Bitwise agreement with the CPU back end (cpu_lora_kernels.cpp): one element per iteration of
// a grid-stride loop, the CPU's operations in its order with the uncontracted _rn intrinsics
// (nvcc would fuse a*b + c). Each kernel rounds what it writes to the table's activation dtype
// itself (the storage type S, cuda_kernels_impl.h's conversions; F32Storage leaves it as it is):
// add_columns must not round the columns of dst's rows it does not write, which round_to over the
// rows would. Pinned by tests/runtime/cuda_lora_kernels_test.cpp. Not here: the adapters' matrix
// products (cuda_matmul_attention.cu).
#include <algorithm>
#include <cstdint>

#include "runtime/cuda/cuda_kernel_helpers.cuh"
#include "runtime/cuda/cuda_kernels_impl.h"

namespace zt {
namespace {

constexpr int64_t kMaxBlocks = 8192;  // grid cap, as cuda_kernels.cu's element-wise kernels

unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>(blocks_for(n, kElementThreads), kMaxBlocks));
}

// x as stored in S and read back: the activation rounding of a 16-bit table (fp32: x).
template <class S>
__device__ __forceinline__ float rounded(float x) {
  return S::to_fp32(S::from_fp32(x));
}

// Element (r, j) of the N·width written: dst = scale·src, or dst + scale·src (kAdd).
template <class S, bool kAdd>
__global__ void add_columns_kernel(float* dst, int64_t dst_stride, const float* src,
                                   int64_t src_stride, int64_t n, int64_t width, float scale) {
  ZT_GRID_STRIDE_LOOP(i, n) {
    const int64_t r = i / width, j = i % width;
    float* d = dst + r * dst_stride + j;
    const float v = __fmul_rn(scale, src[r * src_stride + j]);
    *d = rounded<S>(kAdd ? __fadd_rn(*d, v) : v);
  }
}

}  // namespace

void CudaKernels::add_columns(float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                              int64_t N, int64_t width, float scale, GradOutput output) {
  ZT_CUDA_ASSERT(N >= 0 && width >= 0 && width <= dst_stride && width <= src_stride,
                 "add_columns: negative sizes, or width past a row stride");
  const int64_t n = N * width;
  if (n == 0) return;
  visit_storage(act_, [&](auto tag) {
    using S = decltype(tag);
    if (output == GradOutput::kAdd) {
      add_columns_kernel<S, true><<<grid_for(n), kElementThreads, 0, stream_>>>(
          dst, dst_stride, src, src_stride, n, width, scale);
    } else {
      add_columns_kernel<S, false><<<grid_for(n), kElementThreads, 0, stream_>>>(
          dst, dst_stride, src, src_stride, n, width, scale);
    }
  });
  check_launch();
}

}  // namespace zt
