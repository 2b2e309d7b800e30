// CpuDevice allocation and copies.
#include "runtime/cpu/cpu_device.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

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
  for (auto& [bytes, data] : cache_) std::free(data);
}

void* CpuDevice::raw_alloc(size_t bytes, std::string& why) {
  if (auto it = cache_.find(bytes); it != cache_.end()) {
    void* data = it->second;
    cache_.erase(it);
    cached_bytes_ -= bytes;
    return data;
  }
  void* data = std::aligned_alloc(kAlignment, round_up(bytes, kAlignment));
  if (!data) why = "the host refused it (aligned_alloc failed: out of host memory)";
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
