// ActivationStore: what one layer keeps between its forward and its backward. Allocates through
// the Device; computes nothing itself, and knows neither the layers that fill it
// (runtime/model.h) nor the engine that owns it (zero/).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/kernels.h"

namespace zt {

// The activations one layer keeps between its forward and its backward, allocated from the
// device under MemCategory::kActivations so the tracker sees them; released as a whole.
// Activations are stored in the store's dtype, the job's working dtype (kernels.h, Precision:
// the kernels read and write them in it); statistics (layer-norm mean and rstd, RMSNorm's rstd)
// and a back end's own attention record stay fp32.
class ActivationStore {
 public:
  explicit ActivationStore(Device& device, DType dtype = DType::kF32)
      : device_(&device), dtype_(dtype) {}
  // An activation buffer of n elements of the store's dtype.
  Operand alloc_acts(int64_t n);
  // An fp32 buffer of n elements, whatever the store's dtype.
  float* alloc_stats(int64_t n);
  // Attention's att as Kernels::attention_record asked: the probabilities (alloc_acts), or a
  // back end's own record, kept as written (alloc_stats, an fp32 Operand).
  Operand alloc_attention(const AttentionRecord& record) {
    return record.packable ? alloc_acts(record.floats) : Operand(alloc_stats(record.floats));
  }
  // The i-th buffer in allocation order (alloc_acts and alloc_stats count alike): backward
  // finds what forward saved by position. stats_at: one allocated by alloc_stats.
  Operand at(size_t i) const;
  float* stats_at(size_t i) const;
  DType dtype() const { return dtype_; }
  void release() { buffers_.clear(); }  // frees everything this store holds
  bool empty() const { return buffers_.empty(); }
  Device& device() const { return *device_; }

 private:
  struct Entry {
    Buffer buffer;
    DType dtype = DType::kF32;
  };
  Device* device_;
  DType dtype_;
  std::vector<Entry> buffers_;
};

}  // namespace zt
