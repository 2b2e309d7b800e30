// Device helpers the CUDA kernel files share (cuda_kernels.cu, cuda_elementwise_kernels.cu,
// cuda_nn_kernels.cu, cuda_matmul_attention.cu, cuda_lora_kernels.cu): the launch check, block
// counts and the grid-stride loop, the activation storage an entry launches its kernel on and the
// rounding a kernel applies to the value it stores, warp reductions, and the two-stage column
// reduction behind the bias, layer-norm and RMSNorm parameter gradients (stage 2's column_finish
// is defined in cuda_kernels.cu). Private to runtime/cuda and to nvcc (device code).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>

#include "runtime/cuda/cuda_kernels_impl.h"

namespace zt {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;  // warps (one row each) per block of the row kernels
constexpr int kElementThreads = 256;
constexpr int64_t kMaxElementBlocks = 8192;  // grid cap; grid-stride loops cover the rest

inline unsigned blocks_for(int64_t n, int64_t per_block) {
  return static_cast<unsigned>((n + per_block - 1) / per_block);
}

// Blocks of kElementThreads for a grid-stride loop over n elements.
inline unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(
      std::min<int64_t>((n + kElementThreads - 1) / kElementThreads, kMaxElementBlocks));
}

inline void check_launch() { ZT_CUDA_CHECK(cudaGetLastError()); }

// cuBLAS takes int sizes and leading dimensions.
inline void check_int(int64_t v) {
  ZT_CUDA_ASSERT(v >= 0 && v <= std::numeric_limits<int>::max(),
                 "a GEMM size or leading dimension does not fit cuBLAS's int");
}

// The fp32 GEMMs' compute type: fp32, or TF32 tensor cores when allowed (zt.allow_tf32).
inline cublasComputeType_t compute_type(bool allow_tf32) {
  return allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

// Element indices of this thread in a grid-stride loop over [0, n).
#define ZT_GRID_STRIDE_LOOP(i, n)                                                        \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// ---------------------------------------------------------------------------------------------
// Activation storage and rounding (kernels.h, "Precision"). An entry's kernel reads and writes
// the call's activation operands in their stored dtype, one template parameter A (a storage type
// of cuda_kernels_impl.h) for all of them: the entry launches it on one_dtype of its operands,
// and stages them as fp32 arrays (CudaKernels::ActStage) only when fp32 and 16-bit ones meet in
// one call. A table made for a 16-bit activation dtype rounds every activation it writes: our
// kernels do it in registers, on the value they store, so no pass over the output follows; the
// bits are those of a round_to pass afterwards.

// The one dtype of a call's activation operands (null ones aside; kF32 when all are null), or
// nothing when they mix dtypes.
inline std::optional<DType> one_dtype(std::initializer_list<ConstOperand> operands) {
  std::optional<DType> dtype;
  for (const ConstOperand& op : operands) {
    if (!op) continue;
    if (dtype && *dtype != op.dtype) return std::nullopt;
    dtype = op.dtype;
  }
  return dtype ? dtype : DType::kF32;
}

// x stored as S and read back: round_to's element (cuda_kernels_impl.h's conversions: round to
// nearest even, fp16 overflow to ±inf, NaN as runtime/dtype.h maps it). F32Storage: x.
template <class S>
__device__ __forceinline__ float rounded(float x) {
  return S::to_fp32(S::from_fp32(x));
}

// x rounded to `act`, a table's activation dtype passed to the kernel (CudaKernels::act_).
// kF32 (the fp32 table) returns x untouched. act is one value for the whole launch, so the
// branch is uniform: no divergence, and no measurable cost beside the store.
__device__ __forceinline__ float round_to_act(float x, DType act) {
  switch (act) {
    case DType::kBF16: return rounded<BF16Storage>(x);
    case DType::kF16: return rounded<F16Storage>(x);
    case DType::kF32: break;
  }
  return x;
}

// x as an activation stored as A: rounded to act first, so an fp32 A holds the value a 16-bit A
// of act's dtype holds (the narrowing is then exact), and every A stores what staging through
// fp32 would (ActStage narrows the fp32 kernel's rounded value with the same from_fp32).
template <class A>
__device__ __forceinline__ typename A::Elem to_act(float x, DType act) {
  return A::from_fp32(round_to_act(x, act));
}

// Sum over the 32 lanes of a warp in a fixed butterfly: every lane gets the same bits.
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// ---------------------------------------------------------------------------------------------
// Column reductions (bias, layer-norm and RMSNorm parameter gradients): dst (N) += Σ over the M
// rows of per-element terms, in two stages, so the GPU fills with blocks whatever N is:
//   stage 1: block (x, y) owns kColumnsPerBlock columns of the row chunk y = [y·256, y·256 +
//            256); its kColumnRowGroups row groups sum rows g, g+8, ... of the chunk in order,
//            then the group sums are added in group order, into partials[value][y][column]
//            (a tracked scratch);
//   stage 2: one thread per column adds the chunks' partials in chunk order, then adds that to
//            the stored value with one rounding (S's: widened, fp32 sum, narrowed once).
// Every order depends on the constants and M only, never on the GPU or launch timing; no float
// atomics. Not the CPU's order (it sums rows in order): the tests compare within a tolerance.

constexpr int kColumnsPerBlock = 32;  // columns per block ...
constexpr int kColumnRowGroups = 8;   // ... and row groups (rows r ≡ g mod 8) per column
constexpr int64_t kColumnChunkRows = 256;

inline int64_t column_chunks(int64_t M) { return (M + kColumnChunkRows - 1) / kColumnChunkRows; }

// Stage 1. partials: (Terms::kValues, chunks, N) fp32.
template <class Terms>
__global__ void column_partials_kernel(float* partials, Terms terms, int64_t M, int64_t N) {
  constexpr int V = Terms::kValues;
  __shared__ float shared[V][kColumnRowGroups][kColumnsPerBlock];
  const int64_t col = int64_t(blockIdx.x) * kColumnsPerBlock + threadIdx.x;
  const int64_t chunk = blockIdx.y, chunks = gridDim.y;
  const int64_t r0 = chunk * kColumnChunkRows;
  const int64_t r1 = r0 + kColumnChunkRows < M ? r0 + kColumnChunkRows : M;
  const int g = threadIdx.y;
  float acc[V];
  for (int j = 0; j < V; ++j) acc[j] = 0.0f;
  if (col < N)
    for (int64_t r = r0 + g; r < r1; r += kColumnRowGroups) {
      float v[V];
      terms(r, col, v);
      for (int j = 0; j < V; ++j) acc[j] += v[j];
    }
  for (int j = 0; j < V; ++j) shared[j][g][threadIdx.x] = acc[j];
  __syncthreads();
  if (g == 0 && col < N)
    for (int j = 0; j < V; ++j) {
      float sum = 0.0f;
      for (int i = 0; i < kColumnRowGroups; ++i) sum += shared[j][i][threadIdx.x];
      partials[(j * chunks + chunk) * N + col] = sum;
    }
}

// Stage 1 on `stream` into partials (Terms::kValues · column_chunks(M) · N floats).
template <class Terms>
void column_partials(float* partials, const Terms& terms, int64_t M, int64_t N,
                     cudaStream_t stream) {
  const int64_t chunks = column_chunks(M);
  ZT_CUDA_ASSERT(chunks <= 65535, "column reduction: too many rows for the grid's y extent");
  column_partials_kernel<Terms>
      <<<dim3(blocks_for(N, kColumnsPerBlock), unsigned(chunks)),
         dim3(kColumnsPerBlock, kColumnRowGroups), 0, stream>>>(partials, terms, M, N);
  check_launch();
}

// Stage 2 into dst (skipped when null) from one value's partials (column_chunks(M) · N floats).
// Defined in cuda_kernels.cu.
void column_finish(Operand dst, const float* partials, int64_t M, int64_t N, cudaStream_t stream);

}  // namespace zt
