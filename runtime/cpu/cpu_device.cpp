// CpuDevice allocation and copies.
#include "runtime/cpu/cpu_device.h"

#include <immintrin.h>
#include <omp.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "runtime/byte_count.h"
#include "runtime/cpu/cpu_simd.h"
#include "runtime/status.h"

namespace zt {

namespace {
constexpr size_t kAlignment = 64;
// Buffers of 2 MiB or more start on a 2 MiB boundary and ask for transparent huge pages
// (madvise, the kernel's default THP mode here): with 4 KiB pages every row of a weight a GEMM
// packs and every 4 KiB of a stream Adam or the norm reads is a TLB miss (GPT-2 124M's model
// states are half a million pages), and the fp32 step measured 1-5% slower in alternated runs.
// The last huge page of a buffer may hold up to 2 MiB past its end; a kernel without THP
// ignores the advice.
constexpr size_t kHugePage = size_t(2) << 20;
size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Zeroing large buffers. One thread's memset reads every line before it writes it and reached
// about 10 GB/s on the Xeon VM of 2026-12-02 (50 ms for a 124M model's fp32 gradients, each
// step); streaming stores from every thread write without reading and reached 45 GB/s. They
// also leave the buffer out of the caches, which suits a gradient store that backward fills
// much later; a buffer below kStreamZeroBytes is memset, warm for its next use.
constexpr size_t kStreamZeroBytes = size_t(1) << 20;

// [p, p + bytes), p 64-byte aligned, bytes a multiple of 64.
__attribute__((target("avx512f"))) void stream_zero_avx512(char* p, size_t bytes) {
  const __m512i z = _mm512_setzero_si512();
  for (size_t i = 0; i < bytes; i += 64) _mm512_stream_si512(reinterpret_cast<__m512i*>(p + i), z);
  _mm_sfence();
}
void stream_zero_sse2(char* p, size_t bytes) {
  const __m128i z = _mm_setzero_si128();
  for (size_t i = 0; i < bytes; i += 64)
    for (size_t j = 0; j < 64; j += 16) _mm_stream_si128(reinterpret_cast<__m128i*>(p + i + j), z);
  _mm_sfence();
}

void parallel_stream_zero(void* dst, size_t bytes) {
  char* p = static_cast<char*>(dst);
  const size_t head = std::min(
      bytes, round_up(reinterpret_cast<uintptr_t>(p), 64) - reinterpret_cast<uintptr_t>(p));
  std::memset(p, 0, head);
  char* body = p + head;
  const size_t lines = (bytes - head) / 64;
  std::memset(body + lines * 64, 0, bytes - head - lines * 64);
  const bool avx512 = cpu::choose_isa() == cpu::Isa::kAvx512;
#pragma omp parallel
  {
    const size_t threads = static_cast<size_t>(omp_get_num_threads());
    const size_t t = static_cast<size_t>(omp_get_thread_num());
    const size_t first = lines * t / threads, last = lines * (t + 1) / threads;
    if (last > first) {
      char* q = body + first * 64;
      if (avx512)
        stream_zero_avx512(q, (last - first) * 64);
      else
        stream_zero_sse2(q, (last - first) * 64);
    }
  }
}
}  // namespace

CpuDevice::CpuDevice() {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16})
    kernels_[static_cast<int>(t)] = make_cpu_kernels(t, &gemm_routing_);
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
  const bool huge = bytes >= kHugePage;
  const size_t size = round_up(bytes, huge ? kHugePage : kAlignment);
  void* data = std::aligned_alloc(huge ? kHugePage : kAlignment, size);
  if (!data) {
    why = "the host refused it (aligned_alloc failed: out of host memory)";
    return data;
  }
  if (huge) madvise(data, size, MADV_HUGEPAGE);  // advice: refused, the pages stay small
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
      pinning_failure_ = fmt::format(
          "{} of {} failed: {} (the lock limit, `ulimit -l`, may be "
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
void zero_host_bytes(void* dst, size_t bytes) {
  if (bytes < kStreamZeroBytes)
    std::memset(dst, 0, bytes);
  else
    parallel_stream_zero(dst, bytes);
}

void CpuDevice::zero(void* dst, size_t bytes) { zero_host_bytes(dst, bytes); }

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
