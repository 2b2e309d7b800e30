// ActivationStore: tracked activation buffers of one layer.
#include "runtime/activation_store.h"

#include "runtime/status.h"

namespace zt {

Operand ActivationStore::alloc_acts(int64_t n) {
  buffers_.push_back(
      Entry{device_->alloc(static_cast<size_t>(n) * dtype_size(dtype_), MemCategory::kActivations),
            dtype_});
  return {buffers_.back().buffer.data(), dtype_};
}

float* ActivationStore::alloc_stats(int64_t n) {
  buffers_.push_back(
      Entry{device_->alloc(static_cast<size_t>(n) * sizeof(float), MemCategory::kActivations),
            DType::kF32});
  return buffers_.back().buffer.as<float>();
}

Operand ActivationStore::at(size_t i) const {
  const Entry& e = buffers_.at(i);
  return {e.buffer.data(), e.dtype};
}

float* ActivationStore::stats_at(size_t i) const {
  const Entry& e = buffers_.at(i);
  ZT_ASSERT(e.dtype == DType::kF32, "activation {} is {}, not an fp32 statistic", i,
            dtype_name(e.dtype));
  return e.buffer.as<float>();
}

}  // namespace zt
