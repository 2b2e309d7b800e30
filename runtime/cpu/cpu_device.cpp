// CpuDevice allocation and copies.
#include "runtime/cpu/cpu_device.h"

#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "runtime/byte_count.h"
#include "runtime/status.h"

namespace zt {

namespace {
constexpr size_t kAlignment = 64;
size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
}  // namespace

CpuDevice::CpuDevice() {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16})
    kernels_[static_cast<int>(t)] = make_cpu_kernels(t);
}

Kernels& CpuDevice::kernels_for(DType activations) {
  return *kernels_[static_cast<int>(activations)];
}

CpuDevice::~CpuDevice() {
  for (auto& [bytes, data] : cache_) {
    if (pinned_.count(data)) pinning_.unpin(data);
    std::free(data);
  }
}

int64_t memory_lock_limit() {
  if (::geteuid() == 0) return -1;  // root may lock any amount (CAP_IPC_LOCK)
  rlimit limit{};
  if (::getrlimit(RLIMIT_MEMLOCK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return -1;
  return static_cast<int64_t>(limit.rlim_cur);
}

void CpuDevice::set_pinning(HostPinning pinning) {
  ZT_ASSERT(pinning.pin && pinning.unpin, "host pinning without pin and unpin");
  pinning_ = std::move(pinning);
  pinning_failure_.clear();
}

void* CpuDevice::raw_alloc(size_t bytes, std::string& why) {
  if (auto it = cache_.find(bytes); it != cache_.end()) {
    void* data = it->second;
    cache_.erase(it);
    cached_bytes_ -= bytes;
    return data;
  }
  const size_t size = round_up(bytes, kAlignment);
  void* data = std::aligned_alloc(kAlignment, size);
  if (!data) {
    why = "the host refused it (aligned_alloc failed: out of host memory)";
    return data;
  }
  if (pinning_.pin && pinning_failure_.empty() && size > 0) {
    const int64_t limit = pinning_.lock_limit;
    if (limit >= 0 && static_cast<int64_t>(pinned_bytes_ + size) > limit) {
      pinning_failure_ = fmt::format(
          "pinning {} more would pass the lock limit of {} ({} pinned already): raise it "
          "with `ulimit -l` (e.g. `ulimit -l unlimited`, or memlock in "
          "/etc/security/limits.conf), or set pin_memory false",
          format_bytes(size), format_bytes(static_cast<uint64_t>(limit)),
          format_bytes(pinned_bytes_));
    } else if (std::string failed = pinning_.pin(data, size); !failed.empty()) {
      pinning_failure_ = fmt::format("{} of {} failed: {} (the lock limit, `ulimit -l`, may be "
                                     "too low)",
                                     pinning_.what, format_bytes(size), failed);
    } else {
      pinned_.insert(data);
      pinned_bytes_ += size;
    }
  }
  return data;
}

void CpuDevice::raw_free(void* data, size_t bytes) {
  cache_.emplace(bytes, data);
  cached_bytes_ += bytes;
}

void CpuDevice::copy_to_host(void* host_dst, const void* src, size_t bytes) {
  std::memcpy(host_dst, src, bytes);
}
void CpuDevice::copy_from_host(void* dst, const void* host_src, size_t bytes) {
  std::memcpy(dst, host_src, bytes);
}
void CpuDevice::copy(void* dst, const void* src, size_t bytes) {
  if (dst != src) std::memcpy(dst, src, bytes);
}
void CpuDevice::zero(void* dst, size_t bytes) { std::memset(dst, 0, bytes); }

void set_cpu_threads(int threads) {
  ZT_ASSERT(threads > 0, "threads={}", threads);
  omp_set_num_threads(threads);
}

int cpu_threads() { return omp_get_max_threads(); }

void choose_cpu_threads(int requested, int fitting) {
  if (requested > 0) {
    set_cpu_threads(requested);
  } else if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    set_cpu_threads(std::max(1, fitting));
  }
}

}  // namespace zt
