// CudaKernels: construction, element-wise ops, optimizers and reductions. The neural-network
// ops are in cuda_nn_kernels.cu (embedding, layer norm, RMSNorm, cross-entropy) and
// cuda_matmul_attention.cu (matmul, attention); the launch helpers (check_launch, the grid-stride
// loop) in cuda_kernel_helpers.cuh.
// Every entry is enqueued on stream_ and returns at once, except sum_squares, which waits for its
// result. Activations written here (gelu out / dinp, swiglu out / dgate_up, rope's q and k
// heads, residual out, accumulate y, fill x) are rounded to the table's activation dtype by the
// kernel that writes them, on the value it stores (round_to_act, cuda_kernel_helpers.cuh, given
// act_: kF32 rounds nothing), so no pass over them follows; the optimizers, cast, round_to,
// round_rows, add and sum_squares round nothing (they work on fp32 master state, are exact, or
// are the rounding itself). A 16-bit gradient of adamw / sgd and a 16-bit x of sum_squares are
// widened as they are read (kernels templated on the storage type).
//
// Bitwise agreement with the CPU back end (runtime/cpu/). Element-wise kernels
// here run the same IEEE operations in the same order as the CPU's, one element per loop
// iteration of a grid-stride loop, so an element's bits depend neither on its position nor on
// the launch geometry. nvcc contracts a*b+c into one FMA by default (-fmad=true) and the build
// does not turn that off, so the float arithmetic is written with the _rn intrinsics
// (__fmul_rn, __fadd_rn, ...), which are never contracted; the CPU build uses
// -ffp-contract=off. GELU uses the CPU's exp_bounded (a polynomial of +, -, * and bit
// operations), not expf or tanhf, so it gives the CPU's bits rather than a nearby value.
// Conversions to fp16 / bf16 use the hardware's round-to-nearest-even (__float2half_rn,
// __float2bfloat16_rn), with NaN mapped as runtime/dtype.h maps it (the hardware would give one
// canonical NaN); fp16 -> fp32 is dtype.h's bit construction. The one thing that differs from
// the CPU is the payload of a NaN made by arithmetic on a NaN (the GPU gives the canonical NaN,
// x86 propagates the operand's).
// sum_squares sums fixed blocks of kSumSquaresBlock elements, each by one thread block in a
// fixed tree, then adds the block sums in order: deterministic, but not the CPU's bits (its
// blocks use 8 lanes), which agree to ~1e-15 relative.
// Pinned by tests/runtime/cuda_kernels_test.cpp (every entry here against the CPU's, bitwise
// where the operations are the same; ElementWiseResultsDoNotDependOnSplitting for position) and
// cuda_activation_rounding_test.cpp (a 16-bit table's outputs are the fp32 table's rounded).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "runtime/cuda/cuda_kernel_helpers.cuh"
#include "runtime/cuda/cuda_kernels_impl.h"

namespace zt {
namespace {

constexpr int kThreads = 256;         // threads per block of every kernel here
constexpr int64_t kMaxBlocks = 8192;  // grid cap; grid-stride loops cover the rest
constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;
constexpr int64_t kSumSquaresBlock = 16384;  // the CPU's block (cpu_elementwise_kernels.cpp)
constexpr int kSumSquaresPerThread = kSumSquaresBlock / kThreads;  // 64
static_assert(kSumSquaresBlock % kThreads == 0);
static_assert((kThreads & (kThreads - 1)) == 0, "the tree reductions need a power of two");

unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

// ---------------------------------------------------------------------------------------------
// GELU: the CPU's formulas and operation order exactly (cpu_nn_kernels.cpp's gelu_*_range and
// cpu_simd.h's exp_bounded), with every float operation an uncontracted _rn intrinsic.

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

// e^x for x clamped to [-86, 80]: cpu_simd.h's exp_bounded, operation for operation.
__device__ __forceinline__ float exp_bounded(float x) {
  x = x < -86.0f ? -86.0f : x;
  x = x > 80.0f ? 80.0f : x;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
  const float t = __fadd_rn(__fmul_rn(x, 1.44269504088896341f), kRound);
  const float n = __fsub_rn(t, kRound);
  const uint32_t ni = __float_as_uint(t) - 0x4B400000u;  // n as an integer (two's complement)
  float r = __fsub_rn(x, __fmul_rn(n, 0.693359375f));
  r = __fsub_rn(r, __fmul_rn(n, -2.12194440e-4f));
  float p = __fadd_rn(__fmul_rn(r, 1.9875691500e-4f), 1.3981999507e-3f);
  p = __fadd_rn(__fmul_rn(p, r), 8.3334519073e-3f);
  p = __fadd_rn(__fmul_rn(p, r), 4.1665795894e-2f);
  p = __fadd_rn(__fmul_rn(p, r), 1.6666665459e-1f);
  p = __fadd_rn(__fmul_rn(p, r), 5.0000001201e-1f);
  p = __fadd_rn(__fadd_rn(__fmul_rn(__fmul_rn(p, r), r), r), 1.0f);  // p*r*r + r + 1
  return __fmul_rn(p, __uint_as_float((ni + 127u) << 23));
}

// u = sqrt(2/pi) * (x + 0.044715 x^3), with x^3 evaluated as ((0.044715 * x) * x) * x.
__device__ __forceinline__ float gelu_u(float x) {
  const float cubic = __fmul_rn(__fmul_rn(__fmul_rn(kGeluCubic, x), x), x);
  return __fmul_rn(kGeluScale, __fadd_rn(x, cubic));
}

// out = x / (1 + e^(-2u)) = 0.5 x (1 + tanh u), rounded to act (as every kernel here that
// takes `act`: round_to_act on the stored value).
__global__ void gelu_forward_kernel(float* out, const float* inp, int64_t n, DType act) {
  ZT_GRID_STRIDE_LOOP(i, n) {
    const float x = inp[i];
    const float e = exp_bounded(__fmul_rn(-2.0f, gelu_u(x)));
    out[i] = round_to_act(__fdiv_rn(x, __fadd_rn(1.0f, e)), act);
  }
}

// dinp += dout * (s + 2 x s (1-s) du/dx), s = 1/(1+e), 1-s = e s.
__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, int64_t n,
                                     DType act) {
  ZT_GRID_STRIDE_LOOP(i, n) {
    const float x = inp[i];
    const float e = exp_bounded(__fmul_rn(-2.0f, gelu_u(x)));
    const float s = __fdiv_rn(1.0f, __fadd_rn(1.0f, e));
    // 3.0f * kGeluCubic * x * x: the product of the two constants is folded in float, as GCC
    // folds it on the CPU.
    const float du =
        __fmul_rn(kGeluScale, __fadd_rn(1.0f, __fmul_rn(__fmul_rn(3.0f * kGeluCubic, x), x)));
    // s * (1 + ((2 x) (e s)) du)
    const float inner = __fmul_rn(__fmul_rn(__fmul_rn(2.0f, x), __fmul_rn(e, s)), du);
    const float grad = __fmul_rn(s, __fadd_rn(1.0f, inner));
    dinp[i] = round_to_act(__fadd_rn(dinp[i], __fmul_rn(dout[i], grad)), act);
  }
}

// ---------------------------------------------------------------------------------------------
// SwiGLU: the CPU's formulas and operation order (cpu_nn_kernels.cpp's swiglu_*_range),
// uncontracted. gate_up rows are 2F wide: gate in [0, F), up in [F, 2F).

// out = (g / (1 + e^-g)) · u.
__global__ void swiglu_forward_kernel(float* out, const float* gate_up, int64_t n, int64_t F,
                                      DType act) {
  ZT_GRID_STRIDE_LOOP(i, n) {
    const int64_t row = i / F, f = i % F;
    const float g = gate_up[row * 2 * F + f], u = gate_up[row * 2 * F + F + f];
    const float e = exp_bounded(-g);
    out[i] = round_to_act(__fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, e)), u), act);
  }
}

// d up += dout · silu(g); d gate += (dout · u) · s·(1 + g·(e·s)), s = 1/(1+e), 1-s = e·s.
__global__ void swiglu_backward_kernel(float* dgate_up, const float* gate_up, const float* dout,
                                       int64_t n, int64_t F, DType act) {
  ZT_GRID_STRIDE_LOOP(i, n) {
    const int64_t row = i / F, f = i % F;
    const int64_t ig = row * 2 * F + f, iu = ig + F;
    const float g = gate_up[ig], u = gate_up[iu], dy = dout[i];
    const float e = exp_bounded(-g);
    const float s = __fdiv_rn(1.0f, __fadd_rn(1.0f, e));
    const float silu = __fdiv_rn(g, __fadd_rn(1.0f, e));
    const float dsilu = __fmul_rn(s, __fadd_rn(1.0f, __fmul_rn(g, __fmul_rn(e, s))));
    dgate_up[ig] = round_to_act(__fadd_rn(dgate_up[ig], __fmul_rn(__fmul_rn(dy, u), dsilu)), act);
    dgate_up[iu] = round_to_act(__fadd_rn(dgate_up[iu], __fmul_rn(dy, silu)), act);
  }
}

// ---------------------------------------------------------------------------------------------
// Rotary position embedding, in place on the NH + NKV query and key heads of qkv rows R wide, at
// positions[bt] (null: bt % T). One thread per (token, head, i < hd/2) pair. The angle's
// precision as the CPU's (kernels.h): inverse frequency in double rounded to fp32, angle an fp32
// product, cos/sin in double rounded to fp32 (the CPU's libm and CUDA's double cos/sin agree
// after rounding to fp32 but for rare ties: cuda_nn_kernels_llama_test has a tolerance).
// sign -1: the inverse rotation. Each thread reads its pair before it writes it (in place);
// only the q and k elements are written and rounded, the value heads keep their bits.
__global__ void rope_kernel(float* qkv, const int32_t* positions, int64_t n, int64_t T,
                            int64_t heads, int64_t R, int64_t hd, RopeFrequencies rope, float sign,
                            DType act) {
  ZT_GRID_STRIDE_LOOP(idx, n) {
    const int64_t half = hd / 2;
    const int64_t i = idx % half, head = (idx / half) % heads, bt = idx / (half * heads);
    const float inv_freq = rope_inv_freq(rope, i, hd);
    const int64_t position = positions ? positions[bt] : bt % T;
    const float angle = __fmul_rn(static_cast<float>(position), inv_freq);
    const float c = static_cast<float>(cos(double(angle)));
    const float sn = __fmul_rn(sign, static_cast<float>(sin(double(angle))));
    float* x = qkv + bt * R + head * hd;
    const float x1 = x[i], x2 = x[i + half];
    x[i] = round_to_act(__fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, sn)), act);
    x[i + half] = round_to_act(__fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, sn)), act);
  }
}

// ---------------------------------------------------------------------------------------------
// Simple element-wise kernels (out may be a or b: an element is read before it is written).

__global__ void residual_kernel(float* out, const float* a, const float* b, int64_t n, DType act) {
  ZT_GRID_STRIDE_LOOP(i, n) out[i] = round_to_act(__fadd_rn(a[i], b[i]), act);
}

__global__ void accumulate_kernel(float* y, const float* x, int64_t n, DType act) {
  ZT_GRID_STRIDE_LOOP(i, n) y[i] = round_to_act(__fadd_rn(y[i], x[i]), act);
}

__global__ void fill_kernel(float* x, float value, int64_t n, DType act) {
  const float stored = round_to_act(value, act);
  ZT_GRID_STRIDE_LOOP(i, n) x[i] = stored;
}

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

const void* CudaKernels::narrowed_to_act(const float* x, int64_t n, Buffer& holder) {
  ZT_CUDA_ASSERT(act_ != DType::kF32, "narrowed_to_act on the fp32 table");
  holder = scratch(n, act_);
  cast(holder.data(), act_, x, DType::kF32, n);
  return holder.data();
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
// Element-wise entries.

void CudaKernels::gelu_forward(Operand out_op, ConstOperand inp_op, int64_t n) {
  ActStage stage(*this);
  float* out = stage.out(out_op, n);
  const float* inp = stage.in(inp_op, n);
  if (n <= 0) return;
  gelu_forward_kernel<<<grid_for(n), kThreads, 0, stream_>>>(out, inp, n, act_);
  check_launch();
}

void CudaKernels::gelu_backward(Operand dinp_op, ConstOperand inp_op, ConstOperand dout_op,
                                int64_t n) {
  ActStage stage(*this);
  float* dinp = stage.inout(dinp_op, n);
  const float* inp = stage.in(inp_op, n);
  const float* dout = stage.in(dout_op, n);
  if (n <= 0) return;
  gelu_backward_kernel<<<grid_for(n), kThreads, 0, stream_>>>(dinp, inp, dout, n, act_);
  check_launch();
}

void CudaKernels::swiglu_forward(Operand out_op, ConstOperand gate_up_op, int64_t N, int64_t F) {
  ActStage stage(*this);
  float* out = stage.out(out_op, N * F);
  const float* gate_up = stage.in(gate_up_op, N * 2 * F);
  const int64_t n = N * F;
  if (n <= 0) return;
  swiglu_forward_kernel<<<grid_for(n), kThreads, 0, stream_>>>(out, gate_up, n, F, act_);
  check_launch();
}

void CudaKernels::swiglu_backward(Operand dgate_up_op, ConstOperand gate_up_op,
                                  ConstOperand dout_op, int64_t N, int64_t F) {
  ActStage stage(*this);
  float* dgate_up = stage.inout(dgate_up_op, N * 2 * F);
  const float* gate_up = stage.in(gate_up_op, N * 2 * F);
  const float* dout = stage.in(dout_op, N * F);
  const int64_t n = N * F;
  if (n <= 0) return;
  swiglu_backward_kernel<<<grid_for(n), kThreads, 0, stream_>>>(dgate_up, gate_up, dout, n, F,
                                                                act_);
  check_launch();
}

void CudaKernels::rope_forward(Operand qkv_op, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                               int64_t hd, const RopeFrequencies& rope, const int32_t* positions) {
  ActStage stage(*this);
  float* qkv = stage.inout(qkv_op, B * T * (NH + 2 * NKV) * hd);
  ZT_CUDA_ASSERT(hd > 0 && hd % 2 == 0, "rope_forward: head_dim must be even");
  const int64_t n = B * T * (NH + NKV) * (hd / 2), R = (NH + 2 * NKV) * hd;
  if (n <= 0) return;
  rope_kernel<<<grid_for(n), kThreads, 0, stream_>>>(qkv, positions, n, T, NH + NKV, R, hd, rope,
                                                     1.0f, act_);
  check_launch();
}

void CudaKernels::rope_backward(Operand dqkv_op, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                                int64_t hd, const RopeFrequencies& rope, const int32_t* positions) {
  ActStage stage(*this);
  float* dqkv = stage.inout(dqkv_op, B * T * (NH + 2 * NKV) * hd);
  ZT_CUDA_ASSERT(hd > 0 && hd % 2 == 0, "rope_backward: head_dim must be even");
  const int64_t n = B * T * (NH + NKV) * (hd / 2), R = (NH + 2 * NKV) * hd;
  if (n <= 0) return;
  rope_kernel<<<grid_for(n), kThreads, 0, stream_>>>(dqkv, positions, n, T, NH + NKV, R, hd, rope,
                                                     -1.0f, act_);
  check_launch();
}

void CudaKernels::residual_forward(Operand out_op, ConstOperand a_op, ConstOperand b_op,
                                   int64_t n) {
  ActStage stage(*this);
  float* out = stage.out(out_op, n);
  const float* a = stage.in(a_op, n);
  const float* b = stage.in(b_op, n);
  if (n <= 0) return;
  residual_kernel<<<grid_for(n), kThreads, 0, stream_>>>(out, a, b, n, act_);
  check_launch();
}

void CudaKernels::accumulate(Operand y_op, ConstOperand x_op, int64_t n) {
  ActStage stage(*this);
  float* y = stage.inout(y_op, n);
  const float* x = stage.in(x_op, n);
  if (n <= 0) return;
  accumulate_kernel<<<grid_for(n), kThreads, 0, stream_>>>(y, x, n, act_);
  check_launch();
}

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

void CudaKernels::fill(Operand x_op, float value, int64_t n) {
  ActStage stage(*this);
  float* x = stage.out(x_op, n);
  if (n <= 0) return;
  fill_kernel<<<grid_for(n), kThreads, 0, stream_>>>(x, value, n, act_);
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
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(blocks, kMaxBlocks));
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
