// Device: owns memory (every allocation tracked by category) and a Kernels table.
// Buffer is the RAII handle of one allocation. The CPU device lives in runtime/cpu/.
// Streams and events arrive with the CUDA back end; on the CPU every call completes on return.
// A device has a capacity: its memory limit (zt.device_memory_limit, on any back end) and the
// back end's own (a GPU's memory). An allocation past either is one error (kOutOfMemory) of the
// same form, never a bare allocator failure:
//   out of device memory on cpu: optimizer asked for 774.50 KiB (793,088 bytes) but only
//   158.75 KiB (162,560 bytes) of the 19.07 MiB (20,000,000 bytes) zt.device_memory_limit is
//   free; in use: params 4.80 MiB (5,029,888 bytes), grads ...; model states do not fit: shard
//   more of them (a higher zero_optimization.stage: ...), ..., or raise zt.device_memory_limit
// A back end out of room says why in place of the limit's clause ("but cudaMalloc of ... failed:
// out of memory ..."); what would make room depends on the category.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/kernels.h"
#include "runtime/memory_tracker.h"

namespace zt {

class Device;

// Times spans of the work a device queues on its compute stream, without waiting for it: start()
// and stop() mark where the span's work begins and ends in the queue (a GPU records an event
// there); collect() waits for the last marked work once and returns every span's seconds, in
// start order, then forgets them. One caller thread; spans do not nest. (ProfilingKernels uses
// it for zt-bench train --profile: one collect per step, no stall per entry.)
class StreamTimer {
 public:
  virtual ~StreamTimer() = default;
  virtual void start() = 0;
  virtual void stop() = 0;  // ends the span start() began
  virtual std::vector<double> collect() = 0;
};

// One tracked allocation; move-only; freed (and untracked) on destruction.
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  ~Buffer();

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }
  MemCategory category() const { return category_; }
  explicit operator bool() const { return data_ != nullptr; }
  void reset();

 private:
  friend class Device;
  Buffer(Device* device, void* data, size_t bytes, MemCategory category)
      : device_(device), data_(data), bytes_(bytes), category_(category) {}
  Device* device_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  MemCategory category_ = MemCategory::kOther;
};

// The chunk budget (Device::chunk_budget_bytes) of a GPU with `total_memory_bytes`: 1/32 of it
// (4.4 GB on an H200: GPT-2's logits for 16 x 1024 tokens, 3.3 GB, in one chunk, with room for
// the 16-bit GEMM operands beside them), never below the CPU's budget. Pure arithmetic.
int64_t gpu_chunk_budget_bytes(int64_t total_memory_bytes);

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  // The fp32 table: activations kept as computed.
  Kernels& kernels() { return kernels_for(DType::kF32); }
  // The table whose kernels round every activation they write to `activations` (kernels.h:
  // mixed precision computes with the table of its 16-bit dtype). Owned by the device.
  virtual Kernels& kernels_for(DType activations) = 0;
  // True when the host may read and write this device's memory directly (the CPU device);
  // false for a GPU, whose memory moves through copy_to_host / copy_from_host.
  virtual bool host_accessible() const { return true; }

  // Tracked allocation, 64-byte aligned, contents unspecified. Zero bytes gives an empty Buffer.
  // Throws kOutOfMemory (out_of_memory_message) when the buffers would hold more than
  // memory_limit() bytes, or when the back end has no room; nothing is allocated or tracked then.
  Buffer alloc(size_t bytes, MemCategory category);
  // Tracked allocation filled with zeros.
  Buffer alloc_zeroed(size_t bytes, MemCategory category);
  const MemoryTracker& memory() const { return memory_; }
  MemoryTracker& memory() { return memory_; }
  // The most bytes this device's buffers may hold at once, counted as the tracker counts them
  // (bytes asked for, not a back end's rounding or cache); 0: no limit but the back end's.
  // An allocation that would take memory().current_total() past it fails; one that reaches it
  // exactly does not. Buffers already live are kept when the limit is lowered below them.
  void set_memory_limit(size_t bytes) { memory_limit_ = bytes; }
  size_t memory_limit() const { return memory_limit_; }

  // A timer of this device's queued work (StreamTimer), or null where the host clock around a
  // call already measures it (the CPU device computes before returning).
  virtual std::unique_ptr<StreamTimer> make_stream_timer() { return nullptr; }

  // Bytes of fp32 a layer may allocate at once for one chunk of a chunked computation (the LM
  // head's logits, model_zoo/gpt2.cpp and llama.cpp), the chunk sized to it. A property of the
  // device, not of its free memory at the time, so every run (and the memory planner) chunks
  // the same way: the CPU allows 64 MiB (GPT-2's 256 rows of B=4 x T=64 in one chunk: one
  // GEMM where 32 MiB made two, 4% of zt-bench train's fp32 step on the 2-vCPU EPYC, for 32 MiB
  // more activation memory); a GPU allows a fraction of its memory, so a whole batch's logits
  // fit in one chunk (one large GEMM, not ~100 small).
  virtual int64_t chunk_budget_bytes() const { return kCpuChunkBudgetBytes; }
  static constexpr int64_t kCpuChunkBudgetBytes = int64_t{64} << 20;

  // Host <-> device copies (the CPU device copies with memcpy).
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy_from_host(void* dst, const void* host_src, size_t bytes) = 0;
  // Device -> device: dst and src are both this device's memory, disjoint or equal (equal: no
  // effect). Ordered with the device's kernels as they are (a GPU enqueues it on the compute
  // stream and returns; a later host copy sees it).
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void zero(void* dst, size_t bytes) = 0;

 protected:
  // nullptr when the back end has no room for `bytes` (after whatever it does to find some: a
  // GPU empties its cache and retries), with `why` saying so in its own terms ("cudaMalloc of
  // 2.00 MiB ... failed: out of memory ..."); alloc() reports it. Other failures throw.
  virtual void* raw_alloc(size_t bytes, std::string& why) = 0;
  virtual void raw_free(void* data, size_t bytes) = 0;

 private:
  friend class Buffer;
  void release(void* data, size_t bytes, MemCategory category);
  MemoryTracker memory_;
  size_t memory_limit_ = 0;
};

}  // namespace zt
