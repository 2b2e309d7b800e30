// CudaKernels: construction, optimizers, conversions and reductions. The element-wise activation
// entries are in cuda_elementwise_kernels.cu, the neural-network ops in cuda_nn_kernels.cu
// (embedding, layer norm, RMSNorm, cross-entropy) and cuda_matmul_attention.cu (matmul,
// attention); the launch helpers (check_launch, grid_for, the grid-stride loop) in
// cuda_kernel_helpers.cuh. Every entry is enqueued on stream_ and returns at once, except
// sum_squares, which waits for its result. Nothing here writes an activation, so nothing rounds
// to the table's activation dtype: the optimizers work on fp32 master state, cast, round_to,
// round_rows and add are exact or are the rounding itself, and the parameter gradients' reductions
// (column_finish, add_rows_by_key) add fp32 sums into a gradient rounded once per element. A
// 16-bit gradient of adamw / sgd, a 16-bit x of sum_squares and add_rows_by_key's 16-bit dout
// (an activation) are widened as they are read (kernels templated on the storage type).
//
// Bitwise agreement with the CPU back end (runtime/cpu/). Element-wise kernels (here and in
// cuda_elementwise_kernels.cu, cuda_lora_kernels.cu) run the same IEEE operations in the same
// order as the CPU's, one element per loop iteration of a grid-stride loop, so an element's bits
// depend neither on its position nor on the launch geometry. nvcc contracts a*b+c into one FMA by
// default (-fmad=true) and the build does not turn that off, so the float arithmetic is written
// with the _rn intrinsics (__fmul_rn, __fadd_rn, ...), which are never contracted; the CPU build
// uses -ffp-contract=off. Conversions to fp16 / bf16 use the hardware's round-to-nearest-even
// (__float2half_rn, __float2bfloat16_rn), with NaN mapped as runtime/dtype.h maps it (the
// hardware would give one canonical NaN); fp16 -> fp32 is dtype.h's bit construction. The one
// thing that differs from the CPU is the payload of a NaN made by arithmetic on a NaN (the GPU
// gives the canonical NaN, x86 propagates the operand's).
// sum_squares sums fixed blocks of kSumSquaresBlock elements, each by one thread block in a
// fixed tree, then adds the block sums in order: deterministic, but not the CPU's bits (its
// blocks use 8 lanes), which agree to ~1e-15 relative.
// Pinned by tests/runtime/cuda_kernels_test.cpp (every entry here against the CPU's, bitwise
// where the operations are the same; ElementWiseResultsDoNotDependOnSplitting for position).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>

#include "runtime/cuda/cuda_kernel_helpers.cuh"
#include "runtime/cuda/cuda_kernels_impl.h"

namespace zt {
namespace {

constexpr int kThreads = kElementThreads;  // threads per block of every kernel here
constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;
constexpr int64_t kSumSquaresBlock = 16384;  // the CPU's block (cpu_elementwise_kernels.cpp)
constexpr int kSumSquaresPerThread = kSumSquaresBlock / kThreads;  // 64
static_assert(kSumSquaresBlock % kThreads == 0);
static_assert((kThreads & (kThreads - 1)) == 0, "the tree reductions need a power of two");

// ---------------------------------------------------------------------------------------------
// Optimizers: the CPU's adam_update (cpu/cpu_adam_update.h) and sgd_range
// (cpu_optimizer_kernels.cpp), operation for operation.

// Scalars of one AdamW call, computed once on the host exactly as the CPU computes them. The
// gradient is read in its stored dtype G (widened exactly).
// W: the working copy's dtype, written from the updated parameter when `working` is not null.
template <bool kDecoupled, class G, class W>
__global__ void adamw_kernel(float* param, const typename G::Elem* grad, float* m, float* v,
                             int64_t n, AdamScalars a, typename W::Elem* working) {
  ZT_GRID_STRIDE_LOOP(i, n) {
    float p = param[i];
    float g = __fmul_rn(G::to_fp32(grad[i]), a.grad_scale);
    if constexpr (!kDecoupled) g = __fadd_rn(g, __fmul_rn(a.weight_decay, p));  // L2
    const float mi = __fadd_rn(__fmul_rn(a.beta1, m[i]), __fmul_rn(a.one_minus_beta1, g));
    const float vi =
        __fadd_rn(__fmul_rn(a.beta2, v[i]), __fmul_rn(__fmul_rn(a.one_minus_beta2, g), g));
    m[i] = mi;
    v[i] = vi;
    const float mhat = __fdiv_rn(mi, a.bias_correction1);
    const float vhat = __fdiv_rn(vi, a.bias_correction2);
    const float step = __fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), a.eps));
    if constexpr (kDecoupled) {
      p = __fsub_rn(p, __fmul_rn(a.lr, __fadd_rn(step, __fmul_rn(a.weight_decay, p))));
    } else {
      p = __fsub_rn(p, __fmul_rn(a.lr, step));
    }
    param[i] = p;
    if (working) working[i] = W::from_fp32(p);
  }
}

// PyTorch's SGD: g += wd p; with momentum buf = momentum buf + g, and the step uses buf.
template <bool kDecay, bool kMomentum, class G>
__global__ void sgd_kernel(float* param, const typename G::Elem* grad, float* buf, int64_t n,
                           SgdArgs a) {
  ZT_GRID_STRIDE_LOOP(i, n) {
    const float p = param[i];
    float g = __fmul_rn(G::to_fp32(grad[i]), a.grad_scale);
    if constexpr (kDecay) g = __fadd_rn(g, __fmul_rn(a.weight_decay, p));
    if constexpr (kMomentum) {
      g = __fadd_rn(__fmul_rn(a.momentum, buf[i]), g);
      buf[i] = g;
    }
    param[i] = __fsub_rn(p, __fmul_rn(a.lr, g));
  }
}

// ---------------------------------------------------------------------------------------------
// Conversions (the storage types are in cuda_kernels_impl.h).

// dst = D(S(src)) through fp32 (fp16 <-> bf16 included: fp32 holds both exactly).
template <class D, class S>
__global__ void cast_kernel(typename D::Elem* dst, const typename S::Elem* src, int64_t n) {
  ZT_GRID_STRIDE_LOOP(i, n) dst[i] = D::from_fp32(S::to_fp32(src[i]));
}

// x = float(S(x)).
template <class S>
__global__ void round_kernel(float* x, int64_t n) {
  ZT_GRID_STRIDE_LOOP(i, n) x[i] = rounded<S>(x[i]);
}

// x[rows[i] * row_len + j] = float(S(...)) for i < n_rows, j < row_len. A row named twice is
// rounded by two threads; both read either the old or the rounded value and write the same
// rounded bits (rounding is idempotent), so the result does not depend on their order.
template <class S>
__global__ void round_rows_kernel(float* x, const int32_t* rows, int64_t n_rows, int64_t row_len) {
  ZT_GRID_STRIDE_LOOP(i, n_rows * row_len) {
    float* e = x + static_cast<int64_t>(rows[i / row_len]) * row_len + i % row_len;
    *e = rounded<S>(*e);
  }
}

// dst = D(float(a) + float(b)), one rounding. dst may be a or b itself: each element is read
// before it is written, by the same thread.
template <class D, class A, class B>
__global__ void add_kernel(typename D::Elem* dst, const typename A::Elem* a,
                           const typename B::Elem* b, int64_t n) {
  ZT_GRID_STRIDE_LOOP(i, n) dst[i] = D::from_fp32(__fadd_rn(A::to_fp32(a[i]), B::to_fp32(b[i])));
}

// ---------------------------------------------------------------------------------------------
// Reductions.

// partials[blk] = sum of x[i]^2 over block blk = [blk * 16384, min(n, (blk + 1) * 16384)), in
// double. Thread t adds elements t, t + 256, t + 512, ... of the block in order; the 256 thread
// sums are then added in a fixed tree (s[t] += s[t + w] for w = 128, 64, ..., 1). The shape
// depends only on the element's position, so any grid size gives the same bits. x is read in its
// stored dtype S (widened exactly, so a 16-bit x sums to the bits of its fp32 widening).
template <class S>
__global__ void sum_squares_blocks_kernel(double* partials, const typename S::Elem* x, int64_t n,
                                          int64_t blocks) {
  __shared__ double sums[kThreads];
  const int t = threadIdx.x;
  for (int64_t blk = blockIdx.x; blk < blocks; blk += gridDim.x) {
    const int64_t begin = blk * kSumSquaresBlock;
    double acc = 0.0;
    for (int k = 0; k < kSumSquaresPerThread; ++k) {
      const int64_t i = begin + static_cast<int64_t>(k) * kThreads + t;
      if (i < n) {
        const double d = static_cast<double>(S::to_fp32(x[i]));
        acc = __dadd_rn(acc, __dmul_rn(d, d));
      }
    }
    sums[t] = acc;
    __syncthreads();
    for (int w = kThreads / 2; w >= 1; w /= 2) {
      if (t < w) sums[t] = __dadd_rn(sums[t], sums[t + w]);
      __syncthreads();
    }
    if (t == 0) partials[blk] = sums[0];
    __syncthreads();  // sums[0] is read before the next block overwrites sums
  }
}

// partials[blocks] = partials[0] + partials[1] + ... in order, by one thread.
__global__ void sum_in_order_kernel(double* partials, int64_t blocks) {
  double total = 0.0;
  for (int64_t blk = 0; blk < blocks; ++blk) total = __dadd_rn(total, partials[blk]);
  partials[blocks] = total;
}

// Stage 2 of the column reductions (cuda_kernel_helpers.cuh): dst[c] = S(float(dst[c]) +
// Σ_chunk partials[chunk, c]), the chunks in order.
template <class S>
__global__ void column_finish_kernel(typename S::Elem* dst, const float* partials, int64_t chunks,
                                     int64_t N) {
  const int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= N) return;
  float sum = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) sum += partials[c * N + col];
  dst[col] = S::from_fp32(S::to_fp32(dst[col]) + sum);
}

// Embedding backward as deterministic segmented reductions (add_rows_by_key): the positions
// bt = 0..BT-1 are sorted by their key (the token for dwte, the position for dwpe) with a stable
// radix sort, so each key's positions form one run in ascending bt; then the block at the head of
// a run (one per key and chunk of channels) adds the run's rows of dout into the key's table row
// in that order: dst[key] + g[first] + g[next] + ..., exactly the CPU's order, with no atomics.
// O(BT·C) work over (distinct keys × channel chunks) blocks, where a walk over the batch per
// element was serial. The table row is stored as S: widened, every contribution added in fp32,
// rounded once (kernels.h); rows no key names keep their bits. dout (an activation) is stored as
// A and read in its dtype.
__global__ void iota_kernel(int32_t* x, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = int32_t(i);
}

template <class S, class A>
__global__ void add_sorted_runs_kernel(typename S::Elem* table, const typename A::Elem* dout,
                                       const int32_t* keys, const int32_t* rows, int64_t BT,
                                       int64_t C) {
  const int64_t i = blockIdx.x;
  const int32_t key = keys[i];
  if (i > 0 && keys[i - 1] == key) return;  // not the head of its key's run
  const int64_t c = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  typename S::Elem* d = table + int64_t(key) * C + c;
  float acc = S::to_fp32(*d);
  for (int64_t j = i; j < BT && keys[j] == key; ++j)
    acc += A::to_fp32(dout[int64_t(rows[j]) * C + c]);
  *d = S::from_fp32(acc);
}

// Frees whatever of impl is held, ignoring errors (the last table's destructor and the failed
// constructor path).
void release(CudaKernels::Impl& impl) noexcept {
  impl.lt_gemm.reset();  // its plans before the handle they were made with
  if (impl.cublas) cublasDestroy(impl.cublas);
  if (impl.lt) cublasLtDestroy(impl.lt);
  if (impl.lt_workspace) cudaFree(impl.lt_workspace);
  if (impl.partials) cudaFree(impl.partials);
  if (impl.host_result) cudaFreeHost(impl.host_result);
  impl = CudaKernels::Impl{};
}

// The shared state's deleter: release, then delete.
struct ImplDeleter {
  void operator()(CudaKernels::Impl* impl) const noexcept {
    release(*impl);
    delete impl;
  }
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Construction.

CudaKernels::CudaKernels(Device& device, cudaStream_t stream)
    : device_(device), stream_(stream), act_(DType::kF32),
      impl_(std::shared_ptr<Impl>(new Impl{}, ImplDeleter{})) {
  Impl& impl = *impl_;
  try {
    ZT_CUBLAS_CHECK(cublasCreate(&impl.cublas));
    ZT_CUBLAS_CHECK(cublasSetStream(impl.cublas, stream_));
    ZT_CUBLAS_CHECK(cublasSetMathMode(impl.cublas, CUBLAS_DEFAULT_MATH));
    ZT_CUBLAS_CHECK(cublasLtCreate(&impl.lt));
    ZT_CUDA_CHECK(cudaMalloc(&impl.lt_workspace, kLtWorkspaceBytes));
    impl.lt_workspace_bytes = kLtWorkspaceBytes;
    impl.lt_gemm = std::make_unique<LtGemm>(impl.lt, impl.lt_workspace, impl.lt_workspace_bytes);
    ZT_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&impl.host_result), sizeof(double)));
  } catch (...) {
    release(impl);  // the deleter then finds nothing held
    throw;
  }
}

CudaKernels::CudaKernels(const CudaKernels& base, DType activations)
    : device_(base.device_), stream_(base.stream_), act_(activations), impl_(base.impl_) {}

CudaKernels::~CudaKernels() {
  cudaStreamSynchronize(stream_);  // no kernel of ours may still use the shared scratch
}

Buffer CudaKernels::scratch(int64_t n, DType dtype) {
  ZT_CUDA_ASSERT(n >= 0, "negative scratch size");
  return device_.alloc(static_cast<size_t>(n) * dtype_size(dtype), MemCategory::kWorkspace);
}

const float* CudaKernels::widened(ConstOperand op, int64_t n, Buffer& holder) {
  if (!op || op.dtype == DType::kF32) return static_cast<const float*>(op.data);
  holder = scratch(n);
  cast(holder.data(), DType::kF32, op.data, op.dtype, n);
  return holder.as<float>();
}

void CudaKernels::set_allow_tf32(bool allow) {
  ZT_CUBLAS_CHECK(
      cublasSetMathMode(impl_->cublas, allow ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  impl_->allow_tf32 = allow;
}

// ---------------------------------------------------------------------------------------------
// Optimizers and conversions.

void CudaKernels::adamw(float* param, ConstOperand grad, float* m, float* v, int64_t n,
                        const AdamWArgs& args, Operand working) {
  ZT_CUDA_ASSERT(args.step >= 1, "adamw step must be >= 1");
  if (n <= 0) return;
  const AdamScalars a = adam_scalars(args);  // the CPU back end's scalars
  visit_storage(grad.dtype, [&](auto tag) {
    visit_storage(working.dtype, [&](auto working_tag) {
      using G = decltype(tag);
      using W = decltype(working_tag);
      typename W::Elem* w = elems<W>(working);
      if (args.decoupled) {
        adamw_kernel<true, G, W>
            <<<grid_for(n), kThreads, 0, stream_>>>(param, elems<G>(grad), m, v, n, a, w);
      } else {
        adamw_kernel<false, G, W>
            <<<grid_for(n), kThreads, 0, stream_>>>(param, elems<G>(grad), m, v, n, a, w);
      }
    });
  });
  check_launch();
}

void CudaKernels::sgd(float* param, ConstOperand grad, float* momentum_buf, int64_t n,
                      const SgdArgs& args) {
  const bool momentum = args.momentum != 0.0f;
  ZT_CUDA_ASSERT(!momentum || momentum_buf, "sgd with momentum needs a momentum buffer");
  if (n <= 0) return;
  const bool decay = args.weight_decay != 0.0f;
  const unsigned grid = grid_for(n);
  visit_storage(grad.dtype, [&](auto tag) {
    using G = decltype(tag);
    const typename G::Elem* g = elems<G>(grad);
    if (decay && momentum) {
      sgd_kernel<true, true, G><<<grid, kThreads, 0, stream_>>>(param, g, momentum_buf, n, args);
    } else if (decay) {
      sgd_kernel<true, false, G><<<grid, kThreads, 0, stream_>>>(param, g, momentum_buf, n, args);
    } else if (momentum) {
      sgd_kernel<false, true, G><<<grid, kThreads, 0, stream_>>>(param, g, momentum_buf, n, args);
    } else {
      sgd_kernel<false, false, G><<<grid, kThreads, 0, stream_>>>(param, g, momentum_buf, n, args);
    }
  });
  check_launch();
}

void CudaKernels::cast(void* dst, DType dst_type, const void* src, DType src_type, int64_t n) {
  if (n <= 0) return;
  if (dst_type == src_type) {  // a copy, bit for bit
    if (dst != src) {
      ZT_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * dtype_size(dst_type),
                                    cudaMemcpyDeviceToDevice, stream_));
    }
    return;
  }
  visit_storage(dst_type, [&](auto dst_tag) {
    visit_storage(src_type, [&](auto src_tag) {
      using D = decltype(dst_tag);
      using S = decltype(src_tag);
      cast_kernel<D, S><<<grid_for(n), kThreads, 0, stream_>>>(
          static_cast<typename D::Elem*>(dst), static_cast<const typename S::Elem*>(src), n);
    });
  });
  check_launch();
}

void CudaKernels::round_to(float* x, DType dtype, int64_t n) {
  if (dtype == DType::kF32 || n <= 0) return;
  visit_storage(dtype, [&](auto tag) {
    round_kernel<decltype(tag)><<<grid_for(n), kThreads, 0, stream_>>>(x, n);
  });
  check_launch();
}

void CudaKernels::round_rows(float* x, const int32_t* rows, int64_t n_rows, int64_t row_len,
                             DType dtype) {
  if (dtype == DType::kF32 || n_rows <= 0 || row_len <= 0) return;
  visit_storage(dtype, [&](auto tag) {
    round_rows_kernel<decltype(tag)>
        <<<grid_for(n_rows * row_len), kThreads, 0, stream_>>>(x, rows, n_rows, row_len);
  });
  check_launch();
}

void CudaKernels::add(void* dst, DType dst_type, const void* a, DType a_type, const void* b,
                      DType b_type, int64_t n) {
  ZT_CUDA_ASSERT(dst != b || dst_type == b_type, "add: dst aliases b with another dtype");
  if (!a) {  // a rounding cast of b (so -0 stays -0, where 0 + b would give +0)
    if (dst != b) cast(dst, dst_type, b, b_type, n);
    return;
  }
  ZT_CUDA_ASSERT(dst != a || dst_type == a_type, "add: dst aliases a with another dtype");
  if (n <= 0) return;
  visit_storage(dst_type, [&](auto dst_tag) {
    visit_storage(a_type, [&](auto a_tag) {
      visit_storage(b_type, [&](auto b_tag) {
        using D = decltype(dst_tag);
        using A = decltype(a_tag);
        using B = decltype(b_tag);
        add_kernel<D, A, B><<<grid_for(n), kThreads, 0, stream_>>>(
            static_cast<typename D::Elem*>(dst), static_cast<const typename A::Elem*>(a),
            static_cast<const typename B::Elem*>(b), n);
      });
    });
  });
  check_launch();
}

// ---------------------------------------------------------------------------------------------
// Reductions into parameter gradients, for cuda_nn_kernels.cu and cuda_matmul_attention.cu.

// Stage 2 into dst (skipped when null) from one value's partials (column_chunks(M) · N floats).
void column_finish(Operand dst, const float* partials, int64_t M, int64_t N, cudaStream_t stream) {
  if (!dst) return;
  visit_storage(dst.dtype, [&](auto tag) {
    using S = decltype(tag);
    column_finish_kernel<S><<<blocks_for(N, kElementThreads), kElementThreads, 0, stream>>>(
        elems<S>(dst), partials, column_chunks(M), N);
  });
  check_launch();
}

// table[keys[bt]] += dout[bt] for bt in 0..BT-1, each row's contributions in ascending bt: the
// (key, bt) pairs sorted by key (stable, so bt stays ascending within a key), then one block per
// run head and channel chunk (add_sorted_runs_kernel).
void CudaKernels::add_rows_by_key(Operand table, ConstOperand dout, const int32_t* keys, int64_t BT,
                                  int64_t C) {
  const int n = int(BT);  // embedding_backward checked that it fits
  Buffer rows = scratch(BT), sorted_keys = scratch(BT), sorted_rows = scratch(BT);
  int32_t* rows_in = static_cast<int32_t*>(rows.data());
  iota_kernel<<<blocks_for(BT, kElementThreads), kElementThreads, 0, stream_>>>(rows_in, BT);
  check_launch();
  int32_t* keys_out = static_cast<int32_t*>(sorted_keys.data());
  int32_t* rows_out = static_cast<int32_t*>(sorted_rows.data());
  size_t temp_bytes = 0;
  ZT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys, keys_out, rows_in,
                                                rows_out, n, 0, 32, stream_));
  Buffer temp = scratch(int64_t((temp_bytes + sizeof(float) - 1) / sizeof(float)));
  ZT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data(), temp_bytes, keys, keys_out, rows_in,
                                                rows_out, n, 0, 32, stream_));
  const dim3 grid(unsigned(BT), blocks_for(C, kElementThreads));
  visit_storage(table.dtype, [&](auto table_tag) {
    visit_storage(dout.dtype, [&](auto dout_tag) {
      using S = decltype(table_tag);
      using A = decltype(dout_tag);
      add_sorted_runs_kernel<S, A><<<grid, kElementThreads, 0, stream_>>>(
          elems<S>(table), elems<A>(dout), keys_out, rows_out, BT, C);
    });
  });
  check_launch();
}

// ---------------------------------------------------------------------------------------------
// The reduction returned to the host: the result lands in a pinned slot, then the stream is
// waited.

double CudaKernels::sum_squares(ConstOperand x, int64_t n) {
  if (n <= 0) return 0.0;
  Impl& impl = *impl_;
  const int64_t blocks = (n + kSumSquaresBlock - 1) / kSumSquaresBlock;
  const size_t needed = static_cast<size_t>(blocks) + 1;  // the block sums, then the total
  if (impl.partials_capacity < needed) {
    // Every earlier use of partials ended with a stream synchronisation (below), so the old
    // buffer is idle; the synchronisation here makes that independent of the paths above.
    ZT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (impl.partials) ZT_CUDA_CHECK(cudaFree(impl.partials));
    impl.partials = nullptr;
    impl.partials_capacity = 0;
    ZT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&impl.partials), needed * sizeof(double)));
    impl.partials_capacity = needed;
  }
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(blocks, kMaxElementBlocks));
  visit_storage(x.dtype, [&](auto tag) {
    using S = decltype(tag);
    sum_squares_blocks_kernel<S>
        <<<grid, kThreads, 0, stream_>>>(impl.partials, elems<S>(x), n, blocks);
  });
  check_launch();
  sum_in_order_kernel<<<1, 1, 0, stream_>>>(impl.partials, blocks);
  check_launch();
  ZT_CUDA_CHECK(cudaMemcpyAsync(impl.host_result, impl.partials + blocks, sizeof(double),
                                cudaMemcpyDeviceToHost, stream_));
  ZT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return *impl.host_result;
}

}  // namespace zt
