// The cuDNN backend pieces of CudnnAttention (cudnn_attention.h): an owning descriptor, the
// refusal a failed cuDNN call raises while a plan is built, and the causal SDPA forward and
// backward plans (operation graph, heuristics, execution plan) with their execution. Private
// to runtime/cuda; compiled only with cuDNN (ZT_HAVE_CUDNN). Host code.
#pragma once

#include <cudnn_graph.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/cuda/cudnn_attention.h"

namespace zt {

// A cuDNN call that failed while a graph or plan was built: the call, cuDNN's status string and
// its last error message (cudnnGetLastErrorString).
struct CudnnRefusal {
  std::string reason;
};
std::string cudnn_status_text(const char* call, cudnnStatus_t status);

#define ZT_CUDNN_TRY(call)                                                        \
  do {                                                                            \
    const cudnnStatus_t zt_cudnn_status_ = (call);                                \
    if (zt_cudnn_status_ != CUDNN_STATUS_SUCCESS)                                 \
      throw ::zt::CudnnRefusal{::zt::cudnn_status_text(#call, zt_cudnn_status_)}; \
  } while (0)

// One backend descriptor, destroyed with its owner.
class CudnnDescriptor {
 public:
  explicit CudnnDescriptor(cudnnBackendDescriptorType_t type) {
    ZT_CUDNN_TRY(cudnnBackendCreateDescriptor(type, &desc_));
  }
  ~CudnnDescriptor() {
    if (desc_) cudnnBackendDestroyDescriptor(desc_);
  }
  CudnnDescriptor(CudnnDescriptor&& other) noexcept : desc_(std::exchange(other.desc_, nullptr)) {}
  CudnnDescriptor& operator=(CudnnDescriptor&&) = delete;
  cudnnBackendDescriptor_t get() const { return desc_; }

  // Attribute `name` of type `type` set to `value` (one element) or `values`.
  template <class T>
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const T& value) {
    ZT_CUDNN_TRY(cudnnBackendSetAttribute(desc_, name, type, 1, &value));
  }
  template <class T>
  void set_array(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                 const std::vector<T>& values) {
    ZT_CUDNN_TRY(
        cudnnBackendSetAttribute(desc_, name, type, int64_t(values.size()), values.data()));
  }
  void set_desc(cudnnBackendAttributeName_t name, const CudnnDescriptor& d) {
    cudnnBackendDescriptor_t raw = d.get();
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, raw);
  }
  void finalize() { ZT_CUDNN_TRY(cudnnBackendFinalize(desc_)); }

 private:
  cudnnBackendDescriptor_t desc_ = nullptr;
};

// A finalized execution plan and everything it was made from, with the uids of the tensors a
// call binds (0: not in this graph) and the host values of its by-value scalars.
struct SdpaPlan {
  std::vector<CudnnDescriptor> keep;                  // tensors, operations, graph, engine config
  std::vector<CudnnDescriptor> plan;                  // one: the execution plan
  int64_t workspace_bytes = 0;                        // the plan's own
  int64_t q = 0, k = 0, v = 0, o = 0, stats = 0;      // forward and backward
  int64_t dout = 0, dq = 0, dk = 0, dv = 0, sum = 0;  // backward (sum: rowsum(dO ∘ O), fp32)
  int64_t scale = 0, neg_inf = 0, one = 0;            // by-value scalars
  float scale_value = 0.0f, neg_inf_value = 0.0f, one_value = 1.0f;
};

// The plans of cudnn_attention.h's graphs for `key` (which passed static eligibility), made on
// `handle`; throw CudnnRefusal when cuDNN refuses any step.
SdpaPlan build_sdpa_forward(cudnnHandle_t handle, const CudnnAttentionKey& key);
SdpaPlan build_sdpa_backward(cudnnHandle_t handle, const CudnnAttentionKey& key);

// Runs `plan` with these (uid, device pointer) bindings plus its scalars; "" on success, else
// the failed call and cuDNN's reason.
std::string run_sdpa_plan(cudnnHandle_t handle, const SdpaPlan& plan,
                          std::vector<std::pair<int64_t, void*>> bindings, void* workspace);

}  // namespace zt
