// Buffer lifetime, tracked allocation within the device's capacity, and the out-of-memory
// message.
#include "runtime/device.h"

#include <algorithm>
#include <utility>

#include "runtime/byte_count.h"
#include "runtime/status.h"

namespace zt {

namespace {

// What would make room, for the category that did not fit.
std::string_view what_would_fit(MemCategory category) {
  switch (category) {
    case MemCategory::kParams:
    case MemCategory::kGrads:
    case MemCategory::kOptimizer:
      return "model states do not fit: shard more of them (a higher zero_optimization.stage: "
             "stage 3 keeps 1/N of the parameters, gradients and optimizer state on each of N "
             "ranks), run on more ranks, or offload them (zero_optimization.offload_optimizer, "
             "zero_optimization.offload_param)";
    case MemCategory::kActivations:
      return "activations do not fit: lower train_micro_batch_size_per_gpu or zt.seq_len, or "
             "recompute them (activation_checkpointing)";
    case MemCategory::kCommBuffers:
      return "communication buffers do not fit: lower zero_optimization.reduce_bucket_size, "
             "allgather_bucket_size or stage3_prefetch_bucket_size";
    case MemCategory::kWorkspace:
    case MemCategory::kOther: break;
  }
  return "lower train_micro_batch_size_per_gpu, or shard more state (a higher "
         "zero_optimization.stage, more ranks)";
}

// The one line of device.h's example. `why`, when not empty, is the back end's reason and
// replaces the limit's clause. Categories holding nothing are left out of the list.
std::string out_of_memory_message(const std::string& device_name, MemCategory category,
                                  size_t bytes, const MemoryTracker& memory, size_t limit,
                                  const std::string& why) {
  const size_t in_use = memory.current_total();
  const std::string refusal =
      why.empty() ? fmt::format("only {} of the {} zt.device_memory_limit is free",
                                format_bytes(limit - std::min(limit, in_use)), format_bytes(limit))
                  : why;
  std::string held;
  for (int c = 0; c < kNumMemCategories; ++c) {
    const auto cat = static_cast<MemCategory>(c);
    if (memory.current(cat) == 0) continue;
    held += fmt::format("{}{} {}", held.empty() ? "" : ", ", mem_category_name(cat),
                        format_bytes(memory.current(cat)));
  }
  return fmt::format("out of device memory on {}: {} asked for {} but {}; in use: {}; {}{}",
                     device_name, mem_category_name(category), format_bytes(bytes), refusal,
                     held.empty() ? "nothing" : held, what_would_fit(category),
                     why.empty() ? ", or raise zt.device_memory_limit" : "");
}

}  // namespace

Buffer::Buffer(Buffer&& other) noexcept
    : device_(std::exchange(other.device_, nullptr)), data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)), category_(other.category_) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    reset();
    device_ = std::exchange(other.device_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    category_ = other.category_;
  }
  return *this;
}

Buffer::~Buffer() { reset(); }

void Buffer::reset() {
  if (data_) device_->release(data_, bytes_, category_);
  device_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

Buffer Device::alloc(size_t bytes, MemCategory category) {
  if (bytes == 0) return Buffer();
  const size_t room = memory_limit_ - std::min(memory_limit_, memory_.current_total());
  if (memory_limit_ > 0 && bytes > room)
    throw_out_of_memory(out_of_memory_message(name(), category, bytes, memory_, memory_limit_, {}));
  std::string why;
  void* data = raw_alloc(bytes, why);
  if (!data) {
    throw_out_of_memory(
        out_of_memory_message(name(), category, bytes, memory_, memory_limit_, why));
  }
  memory_.on_alloc(category, bytes);
  return Buffer(this, data, bytes, category);
}

Buffer Device::alloc_zeroed(size_t bytes, MemCategory category) {
  Buffer b = alloc(bytes, category);
  if (b) zero(b.data(), bytes);
  return b;
}

void Device::release(void* data, size_t bytes, MemCategory category) {
  memory_.on_free(category, bytes);
  raw_free(data, bytes);
}

int64_t gpu_chunk_budget_bytes(int64_t total_memory_bytes) {
  return std::max(Device::kCpuChunkBudgetBytes, total_memory_bytes / 32);
}

}  // namespace zt
