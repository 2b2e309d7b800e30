// CudaKernels, the entries LoRA adapters add (y = W·x + s·B·(A·dropout(x))): add_columns, a
// scaled copy or add into a column slice of strided rows, and dropout forward and backward on
// runtime/dropout_mask.h's counter-based mask (the CPU's function, compiled for the device).
// Every entry is enqueued on stream_ and returns at once.
//
// Bitwise agreement with the CPU back end (cpu_lora_kernels.cpp): one element per iteration of
// a grid-stride loop, the CPU's operations in its order with the uncontracted _rn intrinsics
// (nvcc would fuse a*b + c), the keep factor 1/(1 - p) computed on the host as the CPU computes
// it. Each kernel is templated on A, the storage type of all the call's activation operands
// (cuda_kernel_helpers.cuh): it reads them in their dtype and stores to_act<A>, the value rounded
// to the table's activation dtype (act_; kF32 rounds nothing) and then narrowed to A, exactly, so
// no pass over the output follows: add_columns must not round the columns of dst's rows it does
// not write, which round_to over the rows would; dropout at p = 0 is a copy that rounds (a 16-bit
// table) or a plain copy (fp32). A call mixing fp32 and 16-bit operands runs the entry on fp32
// copies (ActStage): the same bits, a pass more per 16-bit operand read and per one written.
// Pinned by tests/runtime/cuda_lora_kernels_test.cpp and cuda_activation_storage_test.cpp. Not
// here: the adapters' matrix products (cuda_matmul_attention.cu).
#include <cstdint>
#include <optional>

#include "runtime/cuda/cuda_kernel_helpers.cuh"
#include "runtime/cuda/cuda_kernels_impl.h"
#include "runtime/dropout_mask.h"

namespace zt {
namespace {

// Element (r, j) of the N·width written: dst = scale·src, or dst + scale·src (kAdd).
template <class A, bool kAdd>
__global__ void add_columns_kernel(typename A::Elem* dst, int64_t dst_stride,
                                   const typename A::Elem* src, int64_t src_stride, int64_t n,
                                   int64_t width, float scale, DType act) {
  ZT_GRID_STRIDE_LOOP(i, n) {
    const int64_t r = i / width, j = i % width;
    typename A::Elem* d = dst + r * dst_stride + j;
    const float v = __fmul_rn(scale, A::to_fp32(src[r * src_stride + j]));
    *d = to_act<A>(kAdd ? __fadd_rn(A::to_fp32(*d), v) : v, act);
  }
}

// out = inp, rounded: dropout at p = 0 on a 16-bit table (out may be inp).
template <class A>
__global__ void copy_rounded_kernel(typename A::Elem* out, const typename A::Elem* inp, int64_t n,
                                    DType act) {
  ZT_GRID_STRIDE_LOOP(i, n) out[i] = to_act<A>(A::to_fp32(inp[i]), act);
}

template <class A>
__global__ void dropout_forward_kernel(typename A::Elem* out, const typename A::Elem* inp,
                                       int64_t n, float p, float k, uint64_t seed, DType act) {
  ZT_GRID_STRIDE_LOOP(i, n) {
    const bool keep = dropout_keep(seed, static_cast<uint64_t>(i), p);
    out[i] = to_act<A>(keep ? __fmul_rn(A::to_fp32(inp[i]), k) : 0.0f, act);
  }
}

template <class A>
__global__ void dropout_backward_kernel(typename A::Elem* dinp, const typename A::Elem* dout,
                                        int64_t n, float p, float k, uint64_t seed, DType act) {
  ZT_GRID_STRIDE_LOOP(i, n) {
    const bool keep = dropout_keep(seed, static_cast<uint64_t>(i), p);
    const float g = keep ? __fmul_rn(A::to_fp32(dout[i]), k) : 0.0f;
    dinp[i] = to_act<A>(__fadd_rn(A::to_fp32(dinp[i]), g), act);
  }
}

// The keep factor 1/(1 - p) in fp32, as cpu_lora_kernels.cpp's dropout_factor.
float dropout_factor(float p) {
  ZT_CUDA_ASSERT(p >= 0.0f && p < 1.0f, "dropout: drop probability outside [0, 1)");
  return 1.0f / (1.0f - p);
}

}  // namespace

void CudaKernels::add_columns(Operand dst, int64_t dst_stride, ConstOperand src, int64_t src_stride,
                              int64_t N, int64_t width, float scale, GradOutput output) {
  ZT_CUDA_ASSERT(N >= 0 && width >= 0 && width <= dst_stride && width <= src_stride,
                 "add_columns: negative sizes, or width past a row stride");
  const int64_t n = N * width;
  if (n == 0) return;
  const std::optional<DType> stored = one_dtype({dst, src});
  if (!stored) {
    ActStage stage(*this);
    add_columns(stage.inout(dst, (N - 1) * dst_stride + width), dst_stride,
                stage.in(src, (N - 1) * src_stride + width), src_stride, N, width, scale, output);
    return;
  }
  visit_storage(*stored, [&](auto tag) {
    using A = decltype(tag);
    if (output == GradOutput::kAdd) {
      add_columns_kernel<A, true><<<grid_for(n), kElementThreads, 0, stream_>>>(
          elems<A>(dst), dst_stride, elems<A>(src), src_stride, n, width, scale, act_);
    } else {
      add_columns_kernel<A, false><<<grid_for(n), kElementThreads, 0, stream_>>>(
          elems<A>(dst), dst_stride, elems<A>(src), src_stride, n, width, scale, act_);
    }
  });
  check_launch();
}

void CudaKernels::dropout_forward(Operand out, ConstOperand inp, int64_t n, float p,
                                  uint64_t seed) {
  const float k = dropout_factor(p);
  if (n <= 0) return;
  const std::optional<DType> stored = one_dtype({out, inp});
  if (!stored) {
    ActStage stage(*this);
    dropout_forward(stage.out(out, n), stage.in(inp, n), n, p, seed);
    return;
  }
  if (p == 0.0f && act_ == DType::kF32) {  // a copy
    if (out.data != inp.data)
      ZT_CUDA_CHECK(cudaMemcpyAsync(out.data, inp.data,
                                    static_cast<size_t>(n) * dtype_size(*stored),
                                    cudaMemcpyDeviceToDevice, stream_));
    return;
  }
  visit_storage(*stored, [&](auto tag) {
    using A = decltype(tag);
    if (p == 0.0f) {  // a copy, rounded in the same pass
      copy_rounded_kernel<A>
          <<<grid_for(n), kElementThreads, 0, stream_>>>(elems<A>(out), elems<A>(inp), n, act_);
    } else {
      dropout_forward_kernel<A><<<grid_for(n), kElementThreads, 0, stream_>>>(
          elems<A>(out), elems<A>(inp), n, p, k, seed, act_);
    }
  });
  check_launch();
}

void CudaKernels::dropout_backward(Operand dinp, ConstOperand dout, int64_t n, float p,
                                   uint64_t seed) {
  const float k = dropout_factor(p);
  if (p == 0.0f) {
    accumulate(dinp, dout, n);
    return;
  }
  if (n <= 0) return;
  const std::optional<DType> stored = one_dtype({dinp, dout});
  if (!stored) {
    ActStage stage(*this);
    dropout_backward(stage.inout(dinp, n), stage.in(dout, n), n, p, seed);
    return;
  }
  visit_storage(*stored, [&](auto tag) {
    using A = decltype(tag);
    dropout_backward_kernel<A><<<grid_for(n), kElementThreads, 0, stream_>>>(
        elems<A>(dinp), elems<A>(dout), n, p, k, seed, act_);
  });
  check_launch();
}

}  // namespace zt
