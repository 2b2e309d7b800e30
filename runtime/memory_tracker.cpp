// MemoryTracker bookkeeping.
#include "runtime/memory_tracker.h"

#include <algorithm>

#include "runtime/status.h"

namespace zt {

std::string_view mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::kParams: return "params";
    case MemCategory::kGrads: return "grads";
    case MemCategory::kOptimizer: return "optimizer";
    case MemCategory::kActivations: return "activations";
    case MemCategory::kCommBuffers: return "comm";
    case MemCategory::kWorkspace: return "workspace";
    case MemCategory::kOther: return "other";
  }
  return "?";
}

void MemoryTracker::on_alloc(MemCategory c, size_t bytes) {
  size_t i = index(c);
  current_[i] += bytes;
  peak_[i] = std::max(peak_[i], current_[i]);
  current_total_ += bytes;
  peak_total_ = std::max(peak_total_, current_total_);
}

void MemoryTracker::on_free(MemCategory c, size_t bytes) {
  size_t i = index(c);
  ZT_ASSERT(current_[i] >= bytes, "freeing {} bytes of {} but only {} are live", bytes,
            mem_category_name(c), current_[i]);
  current_[i] -= bytes;
  current_total_ -= bytes;
}

void MemoryTracker::reset_peaks() {
  peak_ = current_;
  peak_total_ = current_total_;
}

}  // namespace zt
