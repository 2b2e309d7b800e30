// CudnnAttention: the operation graphs, their plans and their execution (cudnn_attention.h).
// Built without cuDNN (ZT_HAVE_CUDNN unset) every key is refused, naming why.
#include "runtime/cuda/cudnn_attention.h"

#include <cstdio>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "runtime/status.h"

#if ZT_HAVE_CUDNN
#include "runtime/cuda/cudnn_sdpa_graph.h"
#endif

namespace zt {

std::string describe(const CudnnAttentionKey& key) {
  return fmt::format("B={} T={} NH={} NKV={} hd={} {}", key.B, key.T, key.NH, key.NKV, key.hd,
                     dtype_name(key.dtype));
}

void throw_cudnn_attention_refused(const CudnnAttentionKey& key, const std::string& reason) {
  throw_system(
      fmt::format("attention {} cannot run through cuDNN ({}); the attention path is 'cudnn' "
                  "(ZT_CUDA_ATTENTION or CudaKernels::set_attention_path): use 'auto' to fall back",
                  describe(key), reason));
}

namespace {

// The rules that refuse a key before cuDNN is asked, "" when none does. cudnn_version: 91400
// for 9.14.0 (0: unknown, no version rule).
std::string static_refusal(const CudnnAttentionKey& k, size_t cudnn_version) {
  if (k.dtype == DType::kF32) return "fp32 activations";
  if (k.packed) return "packed documents (positions): no per-document causal mask is built";
  if (k.window > 0) return fmt::format("sliding window {}: no band mask is built", k.window);
  if (k.hd % 8 != 0 || k.hd > 128) return "head size must be a multiple of 8, at most 128";
  if (k.T < 2) return "T must be at least 2";
  // att (B,NH,T,T) floats holds the stats (B,NH,T) and the 16-bit O (B,T,NH·hd) for backward.
  if (k.T < 1 + k.hd / 2) return "T < 1 + hd/2: att cannot hold the stats and the 16-bit output";
  // cudnn-frontend adds a padding mask to the backward for these versions when T % 128 != 0 (a
  // known bug of the plain causal graph there); we build no padding mask, so we refuse instead.
  if (cudnn_version <= 91500 && k.T % 128 != 0)
    return fmt::format("T must be a multiple of 128 on cuDNN {} (its backward's known bug)",
                       cudnn_version);
  return "";
}

}  // namespace

int64_t cudnn_record_floats(const CudnnAttentionKey& k) {
  return cudnn_stats_floats(k.B, k.T, k.NH) + (k.B * k.T * k.NH * k.hd + 1) / 2;
}

#if ZT_HAVE_CUDNN

namespace {

constexpr size_t kAlign = 256;  // where the backward's rowsum tensor starts in its workspace
size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// `base` advanced by `elements` 16-bit elements.
void* at16(const void* base, int64_t elements) {
  return const_cast<char*>(static_cast<const char*>(base)) + elements * 2;
}

}  // namespace

struct CudnnAttention::State {
  // A key's decision: its refusal, or its two plans.
  struct Entry {
    std::string refusal;
    SdpaPlan forward, backward;
  };

  cudaStream_t stream;
  std::mutex mutex;
  cudnnHandle_t handle = nullptr;
  std::string handle_refusal;  // why cudnnCreate failed, once tried
  bool handle_tried = false;
  std::map<CudnnAttentionKey, Entry> entries;
  std::set<std::pair<CudnnAttentionKey, std::string>> noted;

  // The handle, created on first use and bound to the stream; "" or why it could not be made.
  std::string ensure_handle() {
    if (!handle_tried) {
      handle_tried = true;
      try {
        ZT_CUDNN_TRY(cudnnCreate(&handle));
        ZT_CUDNN_TRY(cudnnSetStream(handle, stream));
      } catch (const CudnnRefusal& refusal) {
        if (handle) cudnnDestroy(handle);
        handle = nullptr;
        handle_refusal = refusal.reason;
      }
    }
    return handle_refusal;
  }
  void note(const CudnnAttentionKey& key, const std::string& reason) {  // mutex held
    if (noted.emplace(key, reason).second)
      fmt::print(stderr, "zt: attention {}: reference path ({})\n", describe(key), reason);
  }
  Entry& entry(const CudnnAttentionKey& key) {  // mutex held; refusal() decided it
    auto it = entries.find(key);
    if (it == entries.end() || !it->second.refusal.empty())
      throw_internal(fmt::format("CudnnAttention: no plans for {}", describe(key)));
    return it->second;
  }
  // After a failed run: the key takes the reference path from now on (its plans stay: they
  // record that it was planned).
  std::string refuse(const CudnnAttentionKey& key, const std::string& reason) {
    entries[key].refusal = reason;
    note(key, reason);
    return reason;
  }
};

CudnnAttention::CudnnAttention(cudaStream_t stream) : state_(std::make_unique<State>()) {
  state_->stream = stream;
}

CudnnAttention::~CudnnAttention() {
  state_->entries.clear();  // the plans before the handle they were made on
  if (state_->handle) cudnnDestroy(state_->handle);
}

std::string cudnn_rule_refusal(const CudnnAttentionKey& key) {
  return static_refusal(key, cudnnGetVersion());
}

std::string CudnnAttention::refusal(const CudnnAttentionKey& key) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (auto it = s.entries.find(key); it != s.entries.end()) return it->second.refusal;
  State::Entry entry;
  entry.refusal = cudnn_rule_refusal(key);
  if (entry.refusal.empty()) entry.refusal = s.ensure_handle();
  if (entry.refusal.empty()) {
    try {
      entry.forward = build_sdpa_forward(s.handle, key);
      entry.backward = build_sdpa_backward(s.handle, key);
    } catch (const CudnnRefusal& refusal) {
      entry = State::Entry{fmt::format("cuDNN {}: {}", cudnnGetVersion(), refusal.reason), {}, {}};
    }
  }
  std::string why = entry.refusal;
  s.entries.emplace(key, std::move(entry));
  if (!why.empty())
    s.note(key, why);
  else  // named once per key, as a refusal is: which path a run's attention took
    fmt::print(stderr, "zt: attention {}: cuDNN {} fused SDPA\n", describe(key), cudnnGetVersion());
  return why;
}

bool CudnnAttention::planned(const CudnnAttentionKey& key) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  const auto it = state_->entries.find(key);
  return it != state_->entries.end() && !it->second.forward.plan.empty();
}

void CudnnAttention::note_fallback(const CudnnAttentionKey& key, const std::string& reason) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->note(key, reason);
}

size_t CudnnAttention::forward_workspace_bytes(const CudnnAttentionKey& key) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return size_t(state_->entry(key).forward.workspace_bytes);
}

size_t CudnnAttention::backward_workspace_bytes(const CudnnAttentionKey& key) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  const size_t rowsum_bytes = size_t(key.B * key.NH * key.T) * sizeof(float);
  return round_up(size_t(state_->entry(key).backward.workspace_bytes)) + rowsum_bytes;
}

std::string CudnnAttention::forward(const CudnnAttentionKey& key, const void* qkv, void* out,
                                    float* stats, void* workspace) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  const SdpaPlan& plan = s.entry(key).forward;
  const int64_t q_heads = key.NH * key.hd, kv_heads = key.NKV * key.hd;
  const std::string failed = run_sdpa_plan(s.handle, plan,
                                           {{plan.q, at16(qkv, 0)},
                                            {plan.k, at16(qkv, q_heads)},
                                            {plan.v, at16(qkv, q_heads + kv_heads)},
                                            {plan.o, out},
                                            {plan.stats, stats}},
                                           plan.workspace_bytes ? workspace : nullptr);
  return failed.empty() ? failed : s.refuse(key, "forward run: " + failed);
}

std::string CudnnAttention::backward(const CudnnAttentionKey& key, const void* qkv, const void* out,
                                     const void* dout, const float* stats, void* dqkv,
                                     void* workspace) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  const SdpaPlan& plan = s.entry(key).backward;
  const int64_t q_heads = key.NH * key.hd, kv_heads = key.NKV * key.hd;
  void* rowsum = static_cast<char*>(workspace) + round_up(size_t(plan.workspace_bytes));
  const std::string failed = run_sdpa_plan(s.handle, plan,
                                           {{plan.q, at16(qkv, 0)},
                                            {plan.k, at16(qkv, q_heads)},
                                            {plan.v, at16(qkv, q_heads + kv_heads)},
                                            {plan.o, const_cast<void*>(out)},
                                            {plan.dout, const_cast<void*>(dout)},
                                            {plan.stats, const_cast<float*>(stats)},
                                            {plan.dq, at16(dqkv, 0)},
                                            {plan.dk, at16(dqkv, q_heads)},
                                            {plan.dv, at16(dqkv, q_heads + kv_heads)},
                                            {plan.sum, rowsum}},
                                           workspace);
  return failed.empty() ? failed : s.refuse(key, "backward run: " + failed);
}

#else  // !ZT_HAVE_CUDNN

struct CudnnAttention::State {
  cudaStream_t stream;
  std::mutex mutex;
  std::set<std::pair<CudnnAttentionKey, std::string>> noted;
};

CudnnAttention::CudnnAttention(cudaStream_t stream) : state_(new State{stream, {}, {}}) {}
CudnnAttention::~CudnnAttention() = default;

std::string cudnn_rule_refusal(const CudnnAttentionKey& key) {
  std::string why = static_refusal(key, 0);
  return why.empty() ? "built without cuDNN" : why;
}

std::string CudnnAttention::refusal(const CudnnAttentionKey& key) {
  const std::string why = cudnn_rule_refusal(key);
  note_fallback(key, why);
  return why;
}

bool CudnnAttention::planned(const CudnnAttentionKey&) { return false; }

void CudnnAttention::note_fallback(const CudnnAttentionKey& key, const std::string& reason) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->noted.emplace(key, reason).second)
    fmt::print(stderr, "zt: attention {}: reference path ({})\n", describe(key), reason);
}

size_t CudnnAttention::forward_workspace_bytes(const CudnnAttentionKey&) { return 0; }
size_t CudnnAttention::backward_workspace_bytes(const CudnnAttentionKey&) { return 0; }
std::string CudnnAttention::forward(const CudnnAttentionKey&, const void*, void*, float*, void*) {
  return "built without cuDNN";
}
std::string CudnnAttention::backward(const CudnnAttentionKey&, const void*, const void*,
                                     const void*, const float*, void*, void*) {
  return "built without cuDNN";
}

#endif  // ZT_HAVE_CUDNN

}  // namespace zt
