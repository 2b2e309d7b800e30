// MemoryTracker: current and peak bytes per category and in total, like
// torch.cuda.max_memory_allocated. Every allocation of the runtime reports here (Device::alloc).
// Counting only; it never allocates.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

namespace zt {

// kWorkspace: transient fp32 copies a back end that computes in fp32 makes of 16-bit values
// (the CPU back end under mixed precision: a unit's parameters while in use, its gradient
// while produced, a shard's gradient during the optimizer step), and a kernel's transient
// operands (the CUDA back end: 16-bit copies of a GEMM's activation operand and output, column
// reductions' partial sums). Not model state.
enum class MemCategory {
  kParams,
  kGrads,
  kOptimizer,
  kActivations,
  kCommBuffers,
  kWorkspace,
  kOther
};
inline constexpr int kNumMemCategories = 7;
// "params", "grads", "optimizer", "activations", "comm", "workspace", "other": the metrics
// file's keys.
std::string_view mem_category_name(MemCategory c);

class MemoryTracker {
 public:
  void on_alloc(MemCategory c, size_t bytes);
  void on_free(MemCategory c, size_t bytes);
  size_t current(MemCategory c) const { return current_[index(c)]; }
  size_t peak(MemCategory c) const { return peak_[index(c)]; }
  size_t current_total() const { return current_total_; }
  size_t peak_total() const { return peak_total_; }
  // Starts a new peak window at the current values (per category and total).
  void reset_peaks();

 private:
  static size_t index(MemCategory c) { return static_cast<size_t>(c); }
  std::array<size_t, kNumMemCategories> current_{};
  std::array<size_t, kNumMemCategories> peak_{};
  size_t current_total_ = 0;
  size_t peak_total_ = 0;
};

}  // namespace zt
