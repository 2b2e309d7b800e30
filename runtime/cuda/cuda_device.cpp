// CudaDevice: streams, host copies and the caching allocator. No kernels (cuda_kernels.cu,
// cuda_nn_kernels.cu, cuda_matmul_attention.cu) and no communication (comm/).
//
// The caching allocator. A request is rounded up (to 512 B below 1 MiB, to 2 MiB from there),
// served by the smallest cached block of at least that size and at most twice it (a bigger
// block would waste more than it saves), else by cudaMalloc. A freed block goes back to the
// cache whole, at its own size; nothing is split or merged, and only empty_cache() (or a failed
// cudaMalloc, which empties the cache and retries once) returns blocks to the driver.
// Reuse is stream-ordered: a block freed while kernels on the compute stream may still read it
// can be handed out at once, because its next user enqueues on the same stream after them.
// A collective (on its communicator's own stream) is waited for before the call returns, so
// no buffer it uses is freed while it runs.
// Pinned by tests/runtime/cuda_device_test.cpp (ReusedBlocksHoldTheirNewOwnersData,
// ImpossibleAllocationNamesCategoryBytesAndWhatWouldFit, MemoryLimitCapsTheGpu); the reuse itself
// (device_mallocs() flat in steady state) is not visible through Device, so no test there checks
// it.
#include "runtime/cuda/cuda_device.h"

#include <utility>

#include "runtime/byte_count.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cuda_kernels.h"
#include "runtime/cuda/cuda_stream_timer.h"
#include "runtime/status.h"

namespace zt {

namespace {

constexpr size_t kSmallLimit = size_t{1} << 20;  // below: rounded to kSmallRound
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = size_t{2} << 20;  // from kSmallLimit up: rounded to 2 MiB
constexpr size_t kMaxReuseFactor = 2;            // a cached block serves requests >= half it

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

size_t block_size_for(size_t bytes) {
  return bytes < kSmallLimit ? round_up(bytes, kSmallRound) : round_up(bytes, kLargeRound);
}

}  // namespace

CudaDevice::CudaDevice(int ordinal) : ordinal_(ordinal) {
  int count = 0;
  ZT_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (ordinal < 0 || ordinal >= count) {
    throw_system(fmt::format("CUDA device ordinal {} is out of range: {} device(s) visible",
                             ordinal, count));
  }
  ZT_CUDA_CHECK(cudaSetDevice(ordinal_));
  cudaDeviceProp prop{};
  ZT_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal_));
  device_name_ = prop.name;
  chunk_budget_ = gpu_chunk_budget_bytes(static_cast<int64_t>(prop.totalGlobalMem));
  try {
    ZT_CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
    auto& fp32 = kernels_[static_cast<int>(DType::kF32)];
    fp32 = std::make_unique<CudaKernels>(*this, compute_);
    for (DType t : {DType::kF16, DType::kBF16})
      kernels_[static_cast<int>(t)] = std::make_unique<CudaKernels>(*fp32, t);
  } catch (...) {
    for (auto& k : kernels_) k.reset();
    if (compute_) cudaStreamDestroy(compute_);
    throw;
  }
}

// Errors are ignored here: a destructor cannot report them, and the process is usually ending.
CudaDevice::~CudaDevice() {
  cudaSetDevice(ordinal_);
  for (auto& k : kernels_) k.reset();  // wait for the compute stream; the last frees the handles
  cudaStreamSynchronize(compute_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [bytes, data] : free_blocks_) cudaFree(data);
    // Blocks of Buffers that outlive the device (a caller's bug) are freed too.
    for (auto& [data, bytes] : live_blocks_) cudaFree(data);
    free_blocks_.clear();
    live_blocks_.clear();
    reserved_ = 0;
  }
  cudaStreamDestroy(compute_);
}

std::string CudaDevice::name() const { return fmt::format("cuda:{} ({})", ordinal_, device_name_); }

Kernels& CudaDevice::kernels_for(DType activations) {
  return *kernels_[static_cast<int>(activations)];
}
CudaKernels& CudaDevice::cuda_kernels() { return *kernels_[static_cast<int>(DType::kF32)]; }

// The host copies wait for the compute stream: a read sees every kernel queued before it, and
// the host buffer may be reused as soon as the call returns.
void CudaDevice::copy_to_host(void* host_dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  ZT_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, compute_));
  ZT_CUDA_CHECK(cudaStreamSynchronize(compute_));
}

void CudaDevice::copy_from_host(void* dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  ZT_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, compute_));
  ZT_CUDA_CHECK(cudaStreamSynchronize(compute_));
}

// Enqueued on the compute stream like the kernels (not waited for): the kernels after it and
// the host copies, which synchronise that stream, see the result.
void CudaDevice::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  ZT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, compute_));
}

void CudaDevice::zero(void* dst, size_t bytes) {
  if (bytes == 0) return;
  ZT_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, compute_));
}

std::unique_ptr<StreamTimer> CudaDevice::make_stream_timer() {
  return std::make_unique<CudaStreamTimer>(ordinal_, compute_);
}

void CudaDevice::synchronize() { ZT_CUDA_CHECK(cudaStreamSynchronize(compute_)); }

size_t CudaDevice::reserved_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reserved_;
}

int64_t CudaDevice::device_mallocs() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return mallocs_;
}

void CudaDevice::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
}

void CudaDevice::release_cached_locked() {
  if (free_blocks_.empty()) return;
  // A cached block may still be read by queued work (stream-ordered reuse): wait for it. (The
  // communicators' streams hold no queued work between calls: each collective is waited for.)
  ZT_CUDA_CHECK(cudaStreamSynchronize(compute_));
  ZT_CUDA_CHECK(cudaSetDevice(ordinal_));
  while (!free_blocks_.empty()) {
    const auto it = free_blocks_.begin();
    const size_t bytes = it->first;
    void* data = it->second;
    free_blocks_.erase(it);
    reserved_ -= bytes;
    ZT_CUDA_CHECK(cudaFree(data));
  }
}

void* CudaDevice::raw_alloc(size_t bytes, std::string& why) {
  const size_t size = block_size_for(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  // Best fit among cached blocks of [size, 2 * size].
  if (auto it = free_blocks_.lower_bound(size);
      it != free_blocks_.end() && it->first <= kMaxReuseFactor * size) {
    const size_t block = it->first;
    void* data = it->second;
    free_blocks_.erase(it);
    live_blocks_.emplace(data, block);
    return data;
  }
  // The thread asking may not have this device current (a communicator thread).
  ZT_CUDA_CHECK(cudaSetDevice(ordinal_));
  void* data = nullptr;
  cudaError_t status = cudaMalloc(&data, size);
  const bool retried = status == cudaErrorMemoryAllocation && !free_blocks_.empty();
  if (retried) {
    cudaGetLastError();  // clear the error before retrying
    release_cached_locked();
    status = cudaMalloc(&data, size);
  }
  if (status == cudaErrorMemoryAllocation) {
    // Out of memory: Device::alloc reports it in the form of every back end (the category, what
    // each holds, what would fit), with the driver's view here.
    cudaGetLastError();
    size_t in_use = 0;
    for (const auto& [block_data, block] : live_blocks_) in_use += block;
    size_t driver_free = 0, driver_total = 0;
    const bool known = cudaMemGetInfo(&driver_free, &driver_total) == cudaSuccess;
    if (!known) cudaGetLastError();
    why = fmt::format(
        "cudaMalloc of {} failed: {} ({}){}; {} reserved by the caching allocator, "
        "{} of it handed out{}",
        format_bytes(size), cudaGetErrorString(status), cudaGetErrorName(status),
        retried ? " after emptying the cache and retrying" : "", format_bytes(reserved_),
        format_bytes(in_use),
        known ? fmt::format("; the driver reports {} free of {}", format_bytes(driver_free),
                            format_bytes(driver_total))
              : std::string());
    return nullptr;
  }
  if (status != cudaSuccess) {
    cudaGetLastError();
    throw_system(fmt::format("cudaMalloc of {} bytes ({} asked) failed on {}: {} ({})", size, bytes,
                             name(), cudaGetErrorString(status), cudaGetErrorName(status)));
  }
  ++mallocs_;
  reserved_ += size;
  live_blocks_.emplace(data, size);
  return data;
}

void CudaDevice::raw_free(void* data, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = live_blocks_.find(data);
  ZT_ASSERT(it != live_blocks_.end(), "CudaDevice::raw_free of {} ({} bytes): not a live block",
            data, bytes);
  free_blocks_.emplace(it->second, data);
  live_blocks_.erase(it);
}

}  // namespace zt
