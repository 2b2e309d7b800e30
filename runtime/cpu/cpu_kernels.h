// CpuKernels: the Kernels table on the host. Matrix products go to oneDNN (dnnl_sgemm for fp32,
// its matmul primitive for bf16 where the CPU computes bf16 natively: AVX512_BF16 or AMX-BF16);
// everything else is written in runtime/cpu as loops split across OpenMP threads, the runtime
// oneDNN runs on too, so one thread pool owns the rank's cores. Pure compute:
// no communication, no logging, and no allocation once warm (scratch such as layernorm's
// per-block partial sums and attention's per-head copies of K and V is kept per thread across
// calls, cpu_parallel.h).
//
// Determinism. Element-wise kernels give an element the same bits wherever it sits and whichever
// instruction set ran. Reductions use fixed lane structures (16 float lanes, or 8 double lanes,
// indexed by the element's position) and fixed row/element blocks summed in order, so their
// results depend neither on the thread count nor on the instruction set.
//
// The methods are split by op family, as the CUDA back end's are:
//   cpu_kernels.cpp              construction, the instruction-set choice, make_cpu_kernels
//   cpu_matmul_kernels.cpp       matmul forward and backward (oneDNN), typed weights, each
//                                16-bit product on its path (cpu_gemm_paths.h: the keys, the
//                                table the device installs, the routing; cpu_gemm_measure.cpp
//                                times the candidates; cpu_gemm_cache.h keeps the results)
//   cpu_gemm.cpp                 the packed GEMM for 16-bit weights without a native GEMM,
//                                their gradients included (its microkernels and packing in
//                                cpu_gemm_micro.h and cpu_gemm_pack.h)
//   cpu_nn_kernels.cpp           embedding, layer norm, RMSNorm, GELU, SwiGLU, rotary embedding,
//                                softmax cross-entropy
//   cpu_head_norm_kernels.cpp    per-head RMSNorm (Qwen3's q_norm, k_norm), on the row kernels
//                                of cpu_rmsnorm_rows.h that RMSNorm's share
//   cpu_attention_kernels.cpp    causal attention, multi-head and grouped-query, optionally
//                                within a sliding window
//   cpu_elementwise_kernels.cpp  residual, accumulate, cast, round_to, round_rows, add, fill,
//                                sum_squares
//   cpu_optimizer_kernels.cpp    AdamW (cpu_adam_fused.h's loop, shared with offload's
//                                CpuAdam), SGD
//   cpu_lora_kernels.cpp         LoRA adapters' add_columns and dropout (dropout_mask.h's mask)
// sharing the vector helpers of cpu_simd.h (and cpu_lane_codecs.h's in-register 16-bit loads
// and stores) and the threading of cpu_parallel.h. Private to
// runtime/cpu: the rest of the tree gets the table from make_cpu_kernels (cpu_device.h).
#pragma once

#include <cstdint>

#include "runtime/cpu/cpu_gemm_paths.h"
#include "runtime/cpu/cpu_simd.h"
#include "runtime/kernels.h"

namespace zt {

// Operands in 16 bits are widened where they are read, in blocks of at most a few MiB (a
// whole small vector such as a bias; a GEMM's weights panel by panel as the packed GEMM packs
// them), and outputs are rounded in the task that wrote them while still in cache (kernels.h,
// Precision).
class CpuKernels final : public Kernels {
 public:
  // `activations`: the dtype every activation written is rounded to (kernels.h). `routing`: the
  // GEMM paths to compute 16-bit products with (cpu_gemm_paths.h), shared by a device's tables
  // and outliving this one; null: the feature-flag rule.
  CpuKernels(cpu::Isa isa, DType activations, GemmRouting* routing = nullptr);

  // Every entry of runtime/kernel_entries.h.
#define ZT_KERNEL(ret, name, params, args, memory) ret name params override;
#include "runtime/kernel_entries.h"

 private:
  // x[i0, i1) rounded to the activation dtype, in the task that wrote it (fp32: nothing).
  void round_act(float* x, int64_t i0, int64_t i1) {
    if (act_ != DType::kF32) round_range(x, act_, i0, i1);
  }
  // dst[0, n) = src[0, n) as fp32, on the calling thread (exact).
  void widen_range(float* dst, ConstOperand src, int64_t n);
  // dst[0, n) = dst.dtype(float(dst[i]) + x[i]), one rounding (add's bits), calling thread.
  void add_range(Operand dst, const float* x, int64_t n);
  // dst[0, n) = dst.dtype(x[i]) (round to nearest even), calling thread.
  void narrow_range(Operand dst, const float* x, int64_t n);
  // fp32 -> fp16 of src[i0, i1) into dst[i0, i1) by the conversion instructions (f16c_ holds):
  // AVX-512's 16 lanes where isa_ has them, else F16C's 8.
  void narrow_fp16_range(uint16_t* dst, const float* src, int64_t i0, int64_t i1) const;
  // fp32 -> bf16 of src[i0, i1) into dst[i0, i1) on integer lanes (dtype.h's fp32_to_bf16).
  void narrow_bf16_range(uint16_t* dst, const float* src, int64_t i0, int64_t i1) const;
  // `op` as fp32: its own pointer when fp32, else widened whole into `scratch` (n floats).
  const float* widened(ConstOperand op, int64_t n, float* scratch);
  // A GEMM operand as it lies in memory: element (i, j) at op.at(i·row_stride + j·col_stride).
  struct GemmMatrix {
    ConstOperand op;
    int64_t row_stride, col_stride;
  };
  // C (M,N) = A (M,K) · B (K,N) [+ C when accumulate], the products summed in fp32 registers
  // and C finished a block at a time while in cache (cpu_gemm.cpp): an fp32 C rounded to the
  // activation dtype once complete (round_act); a 16-bit C (gemm_takes_16bit_c(K) only)
  // becomes dtype(float(C) + the block's fp32 sums), one rounding, as add_range gives, or
  // dtype(the sums) when not accumulated into. matmul's products for 16-bit weights without a
  // native GEMM for their dtype: forward and dinput (fp32 C) and the weight gradient (16-bit
  // C). A is fp32; B any dtype, widened in registers as it is read (in place where its rows are
  // contiguous, else as it is packed), with row_stride or col_stride 1; C has row stride ldc.
  // `b_packed`: a 16-bit B whose rows could be read in place is widened into packed panels
  // instead (GemmPath::kPackedB; the same bits).
  void gemm(int64_t M, int64_t N, int64_t K, const GemmMatrix& A, const GemmMatrix& B, Operand C,
            int64_t ldc, bool accumulate, bool b_packed = false);
  // The path of a 16-bit product (the routing's, else the feature-flag rule); asserts it can run
  // here.
  GemmPath path_of(GemmProduct product, int64_t M, int64_t K, int64_t N, WeightLayout layout,
                   DType operand);
  // C (M,P) = A (M,Q) · W's values as (Q,P) [beta: + C], W 16-bit, stored (P,Q) when `w_pq`
  // else (Q,P): oneDNN's sgemm on W widened to fp32 a block of C's columns at a time (the
  // widened path of forward and dinput).
  void widened_product(int64_t M, int64_t P, int64_t Q, const float* A, ConstOperand W, bool w_pq,
                       float beta, float* C);
  // Whether gemm takes a 16-bit C for reduction length K: its row block's A packed whole for
  // the reduction (a few MiB), so each block of C is summed to the end before it is added in.
  bool gemm_takes_16bit_c(int64_t K) const;
  // One gemm call's plan, and one thread's share of it (cpu_gemm.cpp).
  struct GemmPlan;
  class GemmThread;
  // One call's activation operands as the fp32 arrays the entries compute on (cpu_act_stage.cpp).
  class ActStage;
  // The optimizers' gradient over [i0, i1) as fp32, indexed by the element's position.
  const float* grad_range(ConstOperand grad, int64_t i0, int64_t i1, float* scratch);

  // Throws unless positions (B,T) are model.h's Batch::positions: 0 at each row's first token,
  // else 0 (a new document) or the previous token's plus one. Null passes. any_start: a row may
  // also start at any position > 0 (generation continues a sequence: embeddings, rope). On the
  // calling thread, before a kernel's parallel region (an exception must not leave an OpenMP
  // task).
  static void check_positions(const int32_t* positions, int64_t B, int64_t T, const char* kernel,
                              bool any_start = false);
  // The number of positions the n positions (null: 0..T-1) need a table of: max + 1, at least T.
  static int64_t position_count(const int32_t* positions, int64_t n, int64_t T);
  // rope_forward (sign 1) and rope_backward (sign -1, the inverse rotation).
  void rope_apply(Operand qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hd,
                  const RopeFrequencies& rope, const int32_t* positions, float sign);
  // x[i0, i1) rounded to dtype (not kF32): round_to's arithmetic, for round_to and round_rows.
  void round_range(float* x, DType dtype, int64_t i0, int64_t i1);

  cpu::Isa isa_;
  DType act_;
  GemmAbilities abilities_;  // bf16 GEMMs native or not (native_bf16_gemm() when made)
  GemmRouting* routing_;     // null: the feature-flag rule
  bool f16c_;  // fp16 conversions by the F16C instructions in cast (fp32 -> fp16), round_to and
               // add (AVX2 paths only, so ZT_CPU_SIMD=sse2 tests the portable conversions)
};

// The activation operands of one entry's call as fp32 arrays (kernels.h, Precision): an fp32
// operand is its own pointer; a 16-bit one is widened into scratch kept per thread across calls
// (in, inout) or handed scratch to be written (out), and what was written is narrowed back when
// the stage ends, in parallel, unless an exception is leaving the entry. Exact both ways: a
// 16-bit value widens to itself, and the entries round what they write to the table's
// activation dtype, so narrowing it changes no value. Stages nest (an entry calling another
// takes scratch past its caller's). Null operands stay null.
class CpuKernels::ActStage {
 public:
  explicit ActStage(CpuKernels& k);
  ~ActStage();
  ActStage(const ActStage&) = delete;
  ActStage& operator=(const ActStage&) = delete;
  // n elements read.
  const float* in(ConstOperand a, int64_t n);
  // n elements written, none read.
  float* out(Operand a, int64_t n) { return stage(a, n, false); }
  // n elements read and written (accumulated into, updated in place, or written in part).
  float* inout(Operand a, int64_t n) { return stage(a, n, true); }

 private:
  float* stage(Operand a, int64_t n, bool read);
  float* scratch(int64_t n);
  struct Written {
    Operand dst;
    const float* src = nullptr;
    int64_t n = 0;
  };
  static constexpr int kMaxWritten = 4;
  CpuKernels& k_;
  int exceptions_;
  size_t first_slot_;
  Written written_[kMaxWritten];
  int n_written_ = 0;
};

}  // namespace zt
