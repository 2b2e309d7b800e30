// ActivationStore: tracked activation buffers of one layer.
#include "runtime/model.h"

namespace zt {

float* ActivationStore::alloc_floats(int64_t n) {
  buffers_.push_back(device_->alloc(static_cast<size_t>(n) * sizeof(float),
                                    MemCategory::kActivations));
  return buffers_.back().as<float>();
}

void ActivationStore::release() { buffers_.clear(); }

}  // namespace zt
