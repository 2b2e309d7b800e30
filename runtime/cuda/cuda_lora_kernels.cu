// CudaKernels, the entries LoRA adapters add (y = W·x + s·B·(A·dropout(x))): add_columns, a
// scaled copy or add into a column slice of strided rows, and dropout forward and backward on
// runtime/dropout_mask.h's counter-based mask (the CPU's function, compiled for the device).
// Every entry is enqueued on stream_ and returns at once.
//
// Bitwise agreement with the CPU back end (cpu_lora_kernels.cpp): one element per iteration of
// a grid-stride loop, the CPU's operations in its order with the uncontracted _rn intrinsics
// (nvcc would fuse a*b + c), the keep factor 1/(1 - p) computed on the host as the CPU computes
// it. Each kernel rounds what it writes to the table's activation dtype itself (rounded<S> of
// cuda_kernel_helpers.cuh, S the storage type of act_; F32Storage leaves it as it is), so no
// pass over the output follows: add_columns must not round the columns of dst's rows it does not
// write, which round_to over the rows would; dropout at p = 0 is a copy that rounds (a 16-bit
// table) or a plain copy (fp32).
// Pinned by tests/runtime/cuda_lora_kernels_test.cpp. Not here: the adapters' matrix products
// (cuda_matmul_attention.cu).
#include <algorithm>
#include <cstdint>

#include "runtime/cuda/cuda_kernel_helpers.cuh"
#include "runtime/cuda/cuda_kernels_impl.h"
#include "runtime/dropout_mask.h"

namespace zt {
namespace {

constexpr int64_t kMaxBlocks = 8192;  // grid cap, as cuda_kernels.cu's element-wise kernels

unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>(blocks_for(n, kElementThreads), kMaxBlocks));
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

// out = S(inp): dropout at p = 0 on a 16-bit table (out may be inp).
template <class S>
__global__ void copy_rounded_kernel(float* out, const float* inp, int64_t n) {
  ZT_GRID_STRIDE_LOOP(i, n) out[i] = rounded<S>(inp[i]);
}

template <class S>
__global__ void dropout_forward_kernel(float* out, const float* inp, int64_t n, float p, float k,
                                       uint64_t seed) {
  ZT_GRID_STRIDE_LOOP(i, n) {
    out[i] =
        rounded<S>(dropout_keep(seed, static_cast<uint64_t>(i), p) ? __fmul_rn(inp[i], k) : 0.0f);
  }
}

template <class S>
__global__ void dropout_backward_kernel(float* dinp, const float* dout, int64_t n, float p, float k,
                                        uint64_t seed) {
  ZT_GRID_STRIDE_LOOP(i, n) {
    const float g = dropout_keep(seed, static_cast<uint64_t>(i), p) ? __fmul_rn(dout[i], k) : 0.0f;
    dinp[i] = rounded<S>(__fadd_rn(dinp[i], g));
  }
}

// The keep factor 1/(1 - p) in fp32, as cpu_lora_kernels.cpp's dropout_factor.
float dropout_factor(float p) {
  ZT_CUDA_ASSERT(p >= 0.0f && p < 1.0f, "dropout: drop probability outside [0, 1)");
  return 1.0f / (1.0f - p);
}

}  // namespace

void CudaKernels::add_columns(Operand dst_op, int64_t dst_stride, ConstOperand src_op,
                              int64_t src_stride, int64_t N, int64_t width, float scale,
                              GradOutput output) {
  ActStage stage(*this);
  float* dst = stage.inout(dst_op, (N - 1) * dst_stride + width);
  const float* src = stage.in(src_op, (N - 1) * src_stride + width);
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

void CudaKernels::dropout_forward(Operand out_op, ConstOperand inp_op, int64_t n, float p,
                                  uint64_t seed) {
  ActStage stage(*this);
  float* out = stage.out(out_op, n);
  const float* inp = stage.in(inp_op, n);
  const float k = dropout_factor(p);
  if (n <= 0) return;
  if (p == 0.0f && act_ == DType::kF32) {  // a copy
    if (out != inp)
      ZT_CUDA_CHECK(cudaMemcpyAsync(out, inp, static_cast<size_t>(n) * sizeof(float),
                                    cudaMemcpyDeviceToDevice, stream_));
    return;
  }
  visit_storage(act_, [&](auto tag) {
    using S = decltype(tag);
    if (p == 0.0f) {  // a copy, rounded in the same pass
      copy_rounded_kernel<S><<<grid_for(n), kElementThreads, 0, stream_>>>(out, inp, n);
    } else {
      dropout_forward_kernel<S>
          <<<grid_for(n), kElementThreads, 0, stream_>>>(out, inp, n, p, k, seed);
    }
  });
  check_launch();
}

void CudaKernels::dropout_backward(Operand dinp_op, ConstOperand dout_op, int64_t n, float p,
                                   uint64_t seed) {
  ActStage stage(*this);
  float* dinp = stage.inout(dinp_op, n);
  const float* dout = stage.in(dout_op, n);
  const float k = dropout_factor(p);
  if (p == 0.0f) {
    accumulate(dinp, dout, n);
    return;
  }
  if (n <= 0) return;
  visit_storage(act_, [&](auto tag) {
    dropout_backward_kernel<decltype(tag)>
        <<<grid_for(n), kElementThreads, 0, stream_>>>(dinp, dout, n, p, k, seed);
  });
  check_launch();
}

}  // namespace zt
