// CudnnAttention: causal grouped-query attention through cuDNN's fused SDPA, forward and
// backward, as composite operation graphs of the backend API (cudnn_graph.h): one cached
// forward and one cached backward execution plan per CudnnAttentionKey, both built on the key's
// first use, so a key is either runnable both ways or refused both ways. It runs plans on 16-bit
// device buffers; the copies around them, the accumulation into dqkv and the fallback to the
// materialised kernels are CudaKernels' (cuda_attention_cudnn.cu). Not here: masks other than plain
// causal (packed documents, sliding windows are refused), fp32.
//
// The graphs follow the composite SDPA of cuDNN 9.14 (the GPU machine's library; no attribute
// newer than it is set):
//   forward:  S = Q·Kᵀ (fp32) · scale; causal select (row >= column, else -inf); softmax as
//             max, sub, exp, sum, div, with stats = max + log(sum) written out; O = P·V.
//   backward: D = rowsum(dO ∘ O) (a non-virtual fp32 tensor in our workspace); P = exp(S·scale -
//             stats) under the causal select; dV = Pᵀ·dO; dS = P ∘ (dO·Vᵀ - D) · scale;
//             dK = dSᵀ·Q; dQ = dS·K, written directly (cuDNN's deterministic Hopper path: dP is
//             kept in the plan's workspace and dQ is one GEMM, with no fp32 dQ accumulator
//             filled by atomics). Under GQA, dK and dV are per query head, summed over the group
//             by a reduction in the graph.
// Heuristics: CUDNN_HEUR_MODE_A, then CUDNN_HEUR_MODE_FALLBACK; an engine whose numerical notes
// say non-deterministic is passed over. The first engine config whose plan finalizes is kept.
// Layout (elements of the 16-bit dtype): qkv (B,T,R), R = (NH + 2·NKV)·hd, as
// gqa_attention_forward's, so Q is the view [B,NH,T,hd] with strides [T·R, hd, R, 1] and K, V
// the same at NH·hd and (NH + NKV)·hd with NKV heads; O and dO (B,T,NH·hd); dQ, dK, dV the
// (B,T,R) layout of qkv; stats (B,NH,T) fp32. Every pointer 16-byte aligned.
// Thread-safe behind one mutex (the engine calls from one thread). Host code.
#pragma once

#include <cuda_runtime_api.h>

#include <compare>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/dtype.h"

namespace zt {

// One attention call's shape. packed (positions given) and window (> 0 and < T) make a key that
// is refused without asking cuDNN; they are in the key so that each is named once.
struct CudnnAttentionKey {
  int64_t B = 0, T = 0, NH = 0, NKV = 0, hd = 0;
  DType dtype = DType::kBF16;
  bool packed = false;
  int64_t window = 0;  // 0: plain causal

  friend auto operator<=>(const CudnnAttentionKey&, const CudnnAttentionKey&) = default;
};

std::string describe(const CudnnAttentionKey& key);  // "B=2 T=128 NH=4 NKV=2 hd=64 bf16"

// A call's key (a window reading every key is plain causal, as the attention entries take it).
inline CudnnAttentionKey cudnn_attention_key(int64_t B, int64_t T, int64_t NH, int64_t NKV,
                                             int64_t hd, DType act, bool packed, int64_t window) {
  return {B, T, NH, NKV, hd, act, packed, window >= T ? 0 : window};
}

// Why the rules refuse `key` before cuDNN is asked (the dtype, the masks, the sizes, the linked
// cuDNN's version; "built without cuDNN"), "" when none does: what can be known without a GPU.
// On one, a key the rules accept is still refused when its plans fail to build (refusal()).
std::string cudnn_rule_refusal(const CudnnAttentionKey& key);
// The floats of att that cuDNN's record of `key` takes: the statistics (B,NH,T) fp32, rounded
// up to 4 floats so that O after them is 16-byte aligned where att is, then the 16-bit O
// (B,T,NH·hd).
int64_t cudnn_record_floats(const CudnnAttentionKey& key);
// The floats before O in that record: the statistics (B·NH·T), rounded up to 4.
inline int64_t cudnn_stats_floats(int64_t B, int64_t T, int64_t NH) {
  return (B * NH * T + 3) / 4 * 4;
}

class CudnnAttention {
 public:
  // Plans run on `stream`; the cuDNN handle is created on the first key that needs it.
  explicit CudnnAttention(cudaStream_t stream);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Why `key` takes the reference path, empty when both of its plans are built. Decided on the
  // key's first call (eligibility, then the two plans) and remembered; a refusal is printed to
  // stderr once, one line naming the shape and the reason.
  std::string refusal(const CudnnAttentionKey& key);
  // Whether both of `key`'s plans were built on its first call (a later failed run refuses the
  // key but leaves this true): the caller may then have sized att for cuDNN's record alone.
  bool planned(const CudnnAttentionKey& key);
  // Prints "attention <shape>: reference path (<reason>)" once per key and reason.
  void note_fallback(const CudnnAttentionKey& key, const std::string& reason);
  // Device bytes each call's workspace must have (the key must have no refusal).
  size_t forward_workspace_bytes(const CudnnAttentionKey& key);
  size_t backward_workspace_bytes(const CudnnAttentionKey& key);

  // O = attention(qkv), stats = the rows' log-sum-exp. Empty on success, else cuDNN's reason
  // (the outputs are then unspecified).
  std::string forward(const CudnnAttentionKey& key, const void* qkv, void* out, float* stats,
                      void* workspace);
  // dqkv = the gradient of O w.r.t. qkv given dO (written, not added), from forward's out and
  // stats. Empty on success, else cuDNN's reason (dqkv unspecified).
  std::string backward(const CudnnAttentionKey& key, const void* qkv, const void* out,
                       const void* dout, const float* stats, void* dqkv, void* workspace);

  struct State;  // the handle and the plans: cudnn_attention.cpp

 private:
  std::unique_ptr<State> state_;
};

// An error (kSystem) for the `cudnn` path: attention of `key` could not run through cuDNN.
[[noreturn]] void throw_cudnn_attention_refused(const CudnnAttentionKey& key,
                                                const std::string& reason);

}  // namespace zt
