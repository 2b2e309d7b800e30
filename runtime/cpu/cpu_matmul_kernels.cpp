// CpuKernels, the matrix products: matmul forward and backward with the weights, the bias and
// their gradients in their stored dtypes. Every product is a row-major GEMM:
//   - fp32 operands: dnnl_sgemm, accumulating in place (beta = 1) where the contract adds;
//   - a 16-bit operand: the product's path (cpu_gemm_paths.h; the table installed in the
//     device's GemmRouting, measured per machine and model shape, else the feature-flag rule):
//     native   oneDNN's bf16 matmul (AVX512_BF16 or AMX-BF16; native_bf16_gemm()), the activation
//              operand narrowed to bf16 (exact: it holds bf16 values already) in row blocks,
//              accumulating in fp32;
//     packed   our packed GEMM (cpu_gemm.cpp): forward and dinput widen the weights in registers
//              where they are read (or as they are packed, where a product reads them
//              transposed) and round their output block by block; the weight gradient's fp32
//              sums are added into the stored 16-bit gradient with one rounding, a block at a
//              time while in cache (a reduction over more tokens than the GEMM packs at once
//              takes the widened path's code);
//     packed_b the packed GEMM with a weight it would read in place widened into its panels
//              (the same bits as packed);
//     widened  dnnl_sgemm on the weight widened to fp32 a block of output columns at a time
//              (forward, dinput), or on fp32 operands into an fp32 scratch a block of the
//              gradient's rows at a time, then added into the 16-bit gradient (dweight).
// A 16-bit bias gradient is the fp32 column sums added the same way. Activation outputs (out,
// dinp) are rounded to the table's activation dtype after their product.
// Determinism: oneDNN's GEMMs give the same bits for the same shapes and thread count (the
// ZeRO stages' bitwise equality compares runs of one shape); the paths differ in summation
// order, so a run's paths are part of its identity, and nothing here times anything.
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "runtime/cpu/cpu_device.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cpu_parallel.h"
#include "runtime/status.h"

namespace zt {
using namespace cpu;
namespace {

// Scratch bound of one blocked operand (a narrowed activation block, an fp32 gradient block): a
// few MiB, so blocks stay in the L2/L3 the GEMM streams from.
constexpr int64_t kBlockBytes = int64_t(4) << 20;

void check_gemm_dims(int64_t M, int64_t K, int64_t N) {
  ZT_ASSERT(M >= 0 && K >= 0 && N >= 0 && M <= INT_MAX && K <= INT_MAX && N <= INT_MAX,
            "matmul dimensions M={} K={} N={} must fit in a GEMM int", M, K, N);
}

// Rows (or columns) per block so that `per_row` elements of `bytes` each fit kBlockBytes, the
// blocks balanced (a short last block makes a slow GEMM) and a multiple of 16 when over 16.
int64_t block_size(int64_t per_row, int64_t bytes, int64_t total) {
  if (total <= 1) return 1;
  const int64_t row_bytes = std::max<int64_t>(1, per_row * bytes);
  const int64_t blocks = std::max<int64_t>(1, (total * row_bytes + kBlockBytes - 1) / kBlockBytes);
  int64_t n = (total + blocks - 1) / blocks;
  if (n > 16) n = (n + 15) / 16 * 16;
  return std::min(n, total);
}

void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const dnnl_status_t st =
      dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
  ZT_ASSERT(st == dnnl_success, "dnnl_sgemm failed with status {} (M={} N={} K={})", int(st), M, N,
            K);
}

// ---------------------------------------------------------------------------------------------
// bf16 GEMMs through oneDNN's matmul primitive, one primitive per shape, kept for the process.

struct Bf16Gemm {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::mutex mu;
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, bool, bool>;
  std::map<Key, dnnl::matmul> cache;

  static Bf16Gemm& get() {
    static Bf16Gemm g;
    return g;
  }

  // C (M,N) = op(A) (M,K) · op(B) (K,N) [+ C] in row-major storage: A is (M,K) with row stride
  // lda, or (K,M) when ta; B is (K,N) with row stride ldb, or (N,K) when tb; A and B bf16; C
  // dense (M,N), fp32 or bf16 (c_dtype). oneDNN accumulates in fp32; a bf16 C receives
  // bf16(acc + float(C)) with one rounding (the sum post-op before the down-conversion).
  void run(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
           const uint16_t* B, int64_t ldb, void* C, bool accumulate, DType c_dtype = DType::kF32) {
    using dt = dnnl::memory::data_type;
    const dnnl::memory::desc a_md({M, K}, dt::bf16,
                                  ta ? dnnl::memory::dims{1, lda} : dnnl::memory::dims{lda, 1});
    const dnnl::memory::desc b_md({K, N}, dt::bf16,
                                  tb ? dnnl::memory::dims{1, ldb} : dnnl::memory::dims{ldb, 1});
    const bool c16 = c_dtype == DType::kBF16;
    ZT_ASSERT(c16 || c_dtype == DType::kF32, "bf16 GEMM into {}", dtype_name(c_dtype));
    const dnnl::memory::desc c_md({M, N}, c16 ? dt::bf16 : dt::f32, dnnl::memory::dims{N, 1});
    std::lock_guard<std::mutex> lock(mu);
    const Key key{M, N, K, lda, ldb, ta, tb, accumulate, c16};
    auto it = cache.find(key);
    if (it == cache.end()) {
      dnnl::primitive_attr attr;
      if (accumulate) {
        dnnl::post_ops ops;
        ops.append_sum(1.0f);
        attr.set_post_ops(ops);
      }
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, engine);
      it = cache.emplace(key, dnnl::matmul(pd)).first;
    }
    dnnl::memory a(a_md, engine, const_cast<uint16_t*>(A));
    dnnl::memory b(b_md, engine, const_cast<uint16_t*>(B));
    dnnl::memory c(c_md, engine, C);
    it->second.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    stream.wait();
  }
};

// dst (rows, cols) dense bf16 = src rows (cols each, stride ld) rounded to bf16, across threads.
void narrow_rows_bf16(uint16_t* dst, const float* src, int64_t rows, int64_t cols, int64_t ld) {
  parallel_ranges(rows, std::max<int64_t>(1, kElementGrain / std::max<int64_t>(cols, 1)),
                  [&](int64_t r0, int64_t r1) {
                    for (int64_t r = r0; r < r1; ++r) {
                      const float* s = src + r * ld;
                      uint16_t* d = dst + r * cols;
#pragma omp simd
                      for (int64_t c = 0; c < cols; ++c) d[c] = fp32_to_bf16(s[c]);
                    }
                  });
}

uint16_t* bf16_scratch(int64_t elements) {
  return reinterpret_cast<uint16_t*>(thread_scratch<ScratchSlot::kOperand>((elements + 1) / 2));
}

// A fresh gradient (kernels.h) of n elements, for a path that adds into it: zeroed first (zero
// bits in every dtype), then no longer fresh. The paths that write it directly keep it fresh.
Operand zeroed_if_fresh(Operand g, int64_t n) {
  if (!g.fresh) return g;
  zero_host_bytes(g.data, static_cast<size_t>(n) * dtype_size(g.dtype));
  g.fresh = false;
  return g;
}

// dbias (N) += column sums of dout (M,N), each column summed over rows in order.
void column_sums(float* dbias, const float* dout, int64_t M, int64_t N) {
  parallel_ranges(N, kColumnBlock, [&](int64_t c0, int64_t c1) {
    float acc[kColumnBlock] = {};
    const int64_t w = c1 - c0;
    for (int64_t r = 0; r < M; ++r) {
      const float* row = dout + r * N + c0;
#pragma omp simd
      for (int64_t c = 0; c < w; ++c) acc[c] += row[c];
    }
    for (int64_t c = 0; c < w; ++c) dbias[c0 + c] += acc[c];
  });
}

}  // namespace

bool native_bf16_gemm() {
  if (cpu::choose_isa() != cpu::Isa::kAvx512) return false;  // ZT_CPU_SIMD caps it too
  static const bool native = [] {
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
  }();
  return native;
}

const char* onednn_isa_name() {
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "unknown";
  }
}

std::string cpu_gemm_description() {
  const dnnl_version_t* v = dnnl_version();
  std::string bf16 = "bf16 GEMMs as fp16's (no native bf16)";
  if (native_bf16_gemm()) {
    bf16 = "bf16 GEMMs native";
    try {  // the implementation oneDNN picks for a representative shape
      using dt = dnnl::memory::data_type;
      using tag = dnnl::memory::format_tag;
      dnnl::engine engine(dnnl::engine::kind::cpu, 0);
      const dnnl::matmul::primitive_desc pd(
          dnnl::matmul::desc({{256, 768}, dt::bf16, tag::ab}, {{768, 768}, dt::bf16, tag::ab},
                             {{256, 768}, dt::f32, tag::ab}),
          engine);
      bf16 += std::string(" (") + pd.impl_info_str() + ")";
    } catch (const dnnl::error&) {
    }
  }
  return fmt::format(
      "oneDNN {}.{}.{} GEMMs, ISA {}; each 16-bit product on the path measured for its shape "
      "(native, packed, widened or packed_b; cpu_gemm_paths.h), where none is installed: {}, fp16 "
      "GEMMs "
      "on our packed GEMM",
      v->major, v->minor, v->patch, onednn_isa_name(), bf16);
}

void CpuKernels::matmul_forward(Operand out_op, ConstOperand inp_op, ConstOperand weight,
                                ConstOperand bias, int64_t M, int64_t K, int64_t N,
                                WeightLayout layout) {
  check_gemm_dims(M, K, N);
  if (M == 0 || N == 0) return;
  ActStage stage(*this);
  float* out = stage.out(out_op, M * N);
  const float* inp = stage.in(inp_op, M * K);
  // With a bias, out starts as bias rows and the products are added (beta = 1): one write pass
  // instead of a separate read-modify-write pass after the GEMM.
  if (bias) {
    const float* b = widened(bias, N, thread_scratch<ScratchSlot::kCall>(N));
    parallel_ranges(M, std::max<int64_t>(1, kElementGrain / N), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) std::memcpy(out + r * N, b, N * sizeof(float));
    });
  }
  const float beta = bias ? 1.0f : 0.0f;
  const bool in_out = layout == WeightLayout::kInOut;
  if (K == 0) {
    if (!bias) fill(out, 0.0f, M * N);
  } else if (weight.dtype == DType::kF32) {
    sgemm(false, !in_out, M, N, K, inp, K, static_cast<const float*>(weight.data), in_out ? N : K,
          beta, out, N);
  } else if (const GemmPath path = path_of(GemmProduct::kForward, M, K, N, layout, weight.dtype);
             path == GemmPath::kNative) {
    const int64_t rows = block_size(K, 2, M);
    uint16_t* a = bf16_scratch(rows * K);
    for (int64_t r0 = 0; r0 < M; r0 += rows) {
      const int64_t m = std::min(rows, M - r0);
      narrow_rows_bf16(a, inp + r0 * K, m, K, K);
      Bf16Gemm::get().run(false, !in_out, m, N, K, a, K, static_cast<const uint16_t*>(weight.data),
                          in_out ? N : K, out + r0 * N, bool(bias));
    }
  } else if (path == GemmPath::kWidened) {  // W (K,N), or (N,K) for kOutIn
    widened_product(M, N, K, inp, weight, !in_out, beta, out);
  } else {  // the packed GEMM widens W as it reads it and rounds out (cpu_gemm.cpp)
    gemm(M, N, K, {inp, K, 1}, in_out ? GemmMatrix{weight, N, 1} : GemmMatrix{weight, 1, K}, out, N,
         bool(bias), path == GemmPath::kPackedB);
    return;
  }
  if (act_ != DType::kF32)
    parallel_ranges(M * N, kElementGrain, [&](int64_t i0, int64_t i1) { round_act(out, i0, i1); });
}

void CpuKernels::matmul_backward(Operand dinp_op, Operand dweight, Operand dbias,
                                 ConstOperand dout_op, ConstOperand inp_op, ConstOperand weight,
                                 int64_t M, int64_t K, int64_t N, WeightLayout layout,
                                 GradOutput dinp_output) {
  check_gemm_dims(M, K, N);
  ActStage stage(*this);
  float* dinp =
      dinp_output == GradOutput::kAdd ? stage.inout(dinp_op, M * K) : stage.out(dinp_op, M * K);
  const float* dout = stage.in(dout_op, M * N);
  const float* inp = dweight ? stage.in(inp_op, M * K) : nullptr;
  // dinp written, not added into: its products' first (or only) block overwrites it.
  const bool add_dinp = dinp_output == GradOutput::kAdd;
  if (dinp && !add_dinp && N == 0) fill(dinp, 0.0f, M * K);
  ZT_ASSERT(!dbias.fresh, "matmul_backward: a fresh bias gradient (only dweight may be)");
  if (dbias && M > 0 && N > 0) {
    if (dbias.dtype == DType::kF32) {
      column_sums(static_cast<float*>(dbias.data), dout, M, N);
    } else {
      float* sums = thread_scratch<ScratchSlot::kCall>(N);
      std::fill(sums, sums + N, 0.0f);
      column_sums(sums, dout, M, N);
      parallel_ranges(N, kElementGrain,
                      [&](int64_t i0, int64_t i1) { add_range(dbias.at(i0), sums + i0, i1 - i0); });
    }
  }
  if (dweight && M == 0) dweight = zeroed_if_fresh(dweight, K * N);
  if (M == 0 || N == 0 || K == 0) return;
  const bool in_out = layout == WeightLayout::kInOut;
  // The native path narrows dout into the start of the kOperand scratch; when dinp's product
  // took it whole (one block), a native weight gradient reuses it (the scratch keeps its
  // contents when it grows).
  bool dout_narrowed = false;

  if (dinp) {  // dinp (M,K) += dout (M,N) · Wᵀ, W (K,N) or (N,K)
    GemmPath path = GemmPath::kPacked;
    if (weight.dtype == DType::kF32) {
      sgemm(false, in_out, M, K, N, dout, N, static_cast<const float*>(weight.data), in_out ? N : K,
            add_dinp ? 1.0f : 0.0f, dinp, K);
    } else if (path = path_of(GemmProduct::kDinput, M, K, N, layout, weight.dtype);
               path == GemmPath::kNative) {
      // Blocks along N, the reduction dimension, summed in fp32 in dinp: a block of dout's
      // columns narrowed to bf16, times Wᵀ's rows [n0, n0 + nb) (W's columns for kInOut, row
      // stride N; its rows for kOutIn).
      const int64_t cols = block_size(M, 2, N);
      uint16_t* d16 = bf16_scratch(M * cols);
      dout_narrowed = cols >= N;
      for (int64_t n0 = 0; n0 < N; n0 += cols) {
        const int64_t nb = std::min(cols, N - n0);
        const ConstOperand wb = weight.at(in_out ? n0 : n0 * K);
        narrow_rows_bf16(d16, dout + n0, M, nb, N);
        Bf16Gemm::get().run(false, in_out, M, K, nb, d16, nb, static_cast<const uint16_t*>(wb.data),
                            in_out ? N : K, dinp, add_dinp || n0 > 0);
      }
    } else if (path == GemmPath::kWidened) {  // Wᵀ's values (N,K): W (K,N) or (N,K)
      widened_product(M, K, N, dout, weight, in_out, add_dinp ? 1.0f : 0.0f, dinp);
    } else {  // the packed GEMM over Wᵀ's elements (n, k), rounding dinp itself
      gemm(M, K, N, {dout, N, 1}, in_out ? GemmMatrix{weight, 1, N} : GemmMatrix{weight, K, 1},
           dinp, K, add_dinp, path == GemmPath::kPackedB);
    }
    if (act_ != DType::kF32 &&
        (weight.dtype == DType::kF32 || path == GemmPath::kNative || path == GemmPath::kWidened))
      parallel_ranges(M * K, kElementGrain,
                      [&](int64_t i0, int64_t i1) { round_act(dinp, i0, i1); });
  }

  if (!dweight) return;
  // A fresh dweight is written, not added into (beta = 0): the products are the same sums.
  const bool add = !dweight.fresh;
  if (dweight.dtype == DType::kF32) {
    float* dw = static_cast<float*>(dweight.data);
    if (in_out)  // dW (K,N) += inpᵀ (K,M) · dout (M,N)
      sgemm(true, false, K, N, M, inp, K, dout, N, add ? 1.0f : 0.0f, dw, N);
    else  // dW (N,K) += doutᵀ (N,M) · inp (M,K)
      sgemm(true, false, N, K, M, dout, N, inp, K, add ? 1.0f : 0.0f, dw, K);
    return;
  }
  const GemmPath path = path_of(GemmProduct::kDweight, M, K, N, layout, dweight.dtype);
  if (path == GemmPath::kNative) {  // one GEMM into the bf16 gradient (a bf16 key: bf16 dW)
    uint16_t* d16 = bf16_scratch(M * N + M * K);
    uint16_t* inp16 = d16 + M * N;
    if (!dout_narrowed) narrow_rows_bf16(d16, dout, M, N, N);
    narrow_rows_bf16(inp16, inp, M, K, K);
    if (in_out)  // dW (K,N) = bf16(dW + inpᵀ (K,M) · dout (M,N))
      Bf16Gemm::get().run(true, false, K, N, M, inp16, K, d16, N, dweight.data, add, DType::kBF16);
    else  // dW (N,K) = bf16(dW + doutᵀ (N,M) · inp (M,K))
      Bf16Gemm::get().run(true, false, N, K, M, d16, N, inp16, K, dweight.data, add, DType::kBF16);
    return;
  }
  // dW (R,S) += Xᵀ (R,M) · Y (M,S), with (X, Y) = (inp, dout) for kInOut and (dout, inp) for
  // kOutIn, each block of dW summed in fp32 and added into the 16-bit gradient with one
  // rounding: packed, in the packed GEMM a block at a time while in cache; widened (and packed
  // for a reduction too long for it: M tokens past a few thousand), a block of dW's rows at a
  // time, an sgemm into an fp32 scratch, then the add.
  const float* X = in_out ? inp : dout;
  const float* Y = in_out ? dout : inp;
  const int64_t R = in_out ? K : N, S = in_out ? N : K;
  if ((path == GemmPath::kPacked || path == GemmPath::kPackedB) && gemm_takes_16bit_c(M)) {
    gemm(R, S, M, {X, 1, R}, {Y, S, 1}, dweight, S, add);
    return;
  }
  dweight = zeroed_if_fresh(dweight, R * S);
  const int64_t rows = block_size(S, 4, R);
  float* acc = thread_scratch<ScratchSlot::kCall>(rows * S);
  for (int64_t r0 = 0; r0 < R; r0 += rows) {
    const int64_t rb = std::min(rows, R - r0);
    sgemm(true, false, rb, S, M, X + r0, R, Y, S, 0.0f, acc, S);
    parallel_ranges(rb * S, kElementGrain, [&](int64_t i0, int64_t i1) {
      add_range(dweight.at(r0 * S + i0), acc + i0, i1 - i0);
    });
  }
}

GemmPath CpuKernels::path_of(GemmProduct product, int64_t M, int64_t K, int64_t N,
                             WeightLayout layout, DType operand) {
  const GemmKey key{product, M, K, N, layout, operand, act_};
  const GemmPath path =
      routing_ ? routing_->path_for(key, abilities_) : fallback_gemm_path(key, abilities_);
  ZT_ASSERT(path != GemmPath::kNative || fallback_gemm_path(key, abilities_) == GemmPath::kNative,
            "GEMM path native for '{}' where this table has no native {} matmul", to_string(key),
            dtype_name(operand));
  return path;
}

void CpuKernels::widened_product(int64_t M, int64_t P, int64_t Q, const float* A, ConstOperand W,
                                 bool w_pq, float beta, float* C) {
  const int64_t cols = block_size(Q, 4, P);
  float* wb = thread_scratch<ScratchSlot::kCall>(cols * Q);
  for (int64_t p0 = 0; p0 < P; p0 += cols) {
    const int64_t pb = std::min(cols, P - p0);
    if (w_pq) {  // W's rows [p0, p0 + pb), contiguous: (pb, Q)
      parallel_ranges(pb * Q, kElementGrain, [&](int64_t i0, int64_t i1) {
        widen_range(wb + i0, W.at(p0 * Q + i0), i1 - i0);
      });
      sgemm(false, true, M, pb, Q, A, Q, wb, Q, beta, C + p0, P);
    } else {  // W's columns [p0, p0 + pb), a row of pb at a time: (Q, pb)
      parallel_ranges(Q, std::max<int64_t>(1, kElementGrain / pb), [&](int64_t q0, int64_t q1) {
        for (int64_t q = q0; q < q1; ++q) widen_range(wb + q * pb, W.at(q * P + p0), pb);
      });
      sgemm(false, false, M, pb, Q, A, Q, wb, pb, beta, C + p0, P);
    }
  }
}

}  // namespace zt
