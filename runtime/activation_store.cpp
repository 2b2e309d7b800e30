// ActivationStore: tracked activation buffers of one layer, and their packing to 16 bits.
#include "runtime/activation_store.h"

#include "runtime/status.h"

namespace zt {

float* ActivationStore::alloc(int64_t n, bool stats) {
  ZT_ASSERT(!packed(), "allocation in an activation store packed to {}", dtype_name(packed_dtype_));
  buffers_.push_back(Entry{
      device_->alloc(static_cast<size_t>(n) * sizeof(float), MemCategory::kActivations), n, stats});
  return buffers_.back().buffer.as<float>();
}

float* ActivationStore::alloc_floats(int64_t n) { return alloc(n, false); }
float* ActivationStore::alloc_stats(int64_t n) { return alloc(n, true); }

float* ActivationStore::at(size_t i) const {
  ZT_ASSERT(!packed(), "activation {} read while the store is packed to {}; unpack() first", i,
            dtype_name(packed_dtype_));
  return buffers_.at(i).buffer.as<float>();
}

// Each buffer is converted and its fp32 original freed before the next is allocated, so the
// peak is the fp32 total plus one packed buffer. An entry tells its own state by its size
// (n * 2 bytes packed, n * 4 fp32), so a pack interrupted by a failed allocation leaves a
// store that reads as packed and that unpack() restores whole.
void ActivationStore::pack(DType dtype) {
  if (dtype == DType::kF32) return;
  ZT_ASSERT(!packed(), "packing an activation store already packed to {}",
            dtype_name(packed_dtype_));
  packed_dtype_ = dtype;
  Kernels& k = *kernels_;
  for (Entry& e : buffers_) {
    if (e.stats || e.n == 0) continue;
    Buffer half =
        device_->alloc(static_cast<size_t>(e.n) * dtype_size(dtype), MemCategory::kActivations);
    k.cast(half.data(), dtype, e.buffer.data(), DType::kF32, e.n);
    e.buffer = std::move(half);
  }
}

void ActivationStore::unpack() {
  if (!packed()) return;
  Kernels& k = *kernels_;
  for (Entry& e : buffers_) {
    const size_t full_bytes = static_cast<size_t>(e.n) * sizeof(float);
    if (e.stats || e.buffer.bytes() == full_bytes) continue;
    Buffer full = device_->alloc(full_bytes, MemCategory::kActivations);
    k.cast(full.data(), DType::kF32, e.buffer.data(), packed_dtype_, e.n);
    e.buffer = std::move(full);
  }
  packed_dtype_ = DType::kF32;
}

void ActivationStore::release() {
  buffers_.clear();
  packed_dtype_ = DType::kF32;
}

}  // namespace zt
