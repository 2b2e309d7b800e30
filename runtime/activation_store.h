// ActivationStore: what one layer keeps between its forward and its backward. Allocates through
// the Device and converts through its Kernels; computes nothing itself, and knows neither the
// layers that fill it (runtime/model.h) nor the engine that owns it (zero/).
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
// Under mixed precision on a back end that computes in fp32, the engine packs a store after the
// layer's forward (activations kept as 16-bit) and unpacks it before the backward.
class ActivationStore {
 public:
  // `kernels`: the table pack() and unpack() cast with (the engine passes its own, so a
  // profiling table sees those casts); null: the device's fp32 table.
  explicit ActivationStore(Device& device, Kernels* kernels = nullptr)
      : device_(&device), kernels_(kernels ? kernels : &device.kernels()) {}
  // An fp32 activation buffer of n elements; packed to 16-bit by pack().
  float* alloc_floats(int64_t n);
  // An fp32 buffer that stays fp32 whatever the precision (layer-norm mean and rstd).
  float* alloc_stats(int64_t n);
  // Attention's att as Kernels::attention_record asked: the probabilities (alloc_floats), or a
  // back end's own record, kept as written (alloc_stats).
  float* alloc_attention(const AttentionRecord& record) {
    return record.packable ? alloc_floats(record.floats) : alloc_stats(record.floats);
  }
  // The i-th buffer in allocation order (alloc_floats and alloc_stats count alike): backward
  // finds what forward saved by position. Not while packed.
  float* at(size_t i) const;
  // Every alloc_floats buffer is converted to `dtype` (kF16 or kBF16; rounding to nearest even)
  // in a new kActivations buffer of half the size and its fp32 buffer freed; stats stay.
  // kF32: no-op. Packing a packed store is an internal error.
  void pack(DType dtype);
  // The inverse: fp32 buffers again (kActivations), holding the packed values exactly; the
  // 16-bit buffers freed. Addresses returned by at() may differ from before pack(). No-op when
  // not packed.
  void unpack();
  bool packed() const { return packed_dtype_ != DType::kF32; }
  void release();  // frees everything this store holds; the store is empty and unpacked
  bool empty() const { return buffers_.empty(); }
  Device& device() const { return *device_; }

 private:
  struct Entry {
    Buffer buffer;  // fp32, or packed_dtype_ while packed (stats entries never packed)
    int64_t n = 0;
    bool stats = false;
  };
  float* alloc(int64_t n, bool stats);
  Device* device_;
  std::vector<Entry> buffers_;
  DType packed_dtype_ = DType::kF32;
  Kernels* kernels_;
};

}  // namespace zt
