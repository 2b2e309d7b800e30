// CudaDevice: one GPU. A compute stream on which every kernel and copy of this device runs in
// order (collectives run on their communicator's own stream, ordered after compute with an
// event: comm/nccl_communicator.h), and a caching allocator behind Device::alloc: freed blocks are
// kept in size classes and reused on the compute stream, so steady-state steps call cudaMalloc no
// more, and every allocation is tracked by category by the base class (current and peak, like
// torch.cuda.max_memory_allocated); reserved_bytes() is what cudaMalloc holds.
// Host copies synchronise the compute stream (a read sees every kernel queued before it).
// Three kernel tables, one per activation dtype (kernels_for), share the compute stream, the
// cuBLAS handles, workspaces and TF32 setting (cuda_kernels.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/device.h"

namespace zt {

class CudaKernels;

class CudaDevice final : public Device {
 public:
  // `ordinal` among the visible GPUs. Throws kSystem naming the reason when it is unusable.
  explicit CudaDevice(int ordinal);
  ~CudaDevice() override;

  std::string name() const override;  // "cuda:0 (NVIDIA H200)"
  Kernels& kernels_for(DType activations) override;
  bool host_accessible() const override { return false; }
  // CUDA events on the compute stream (cuda_stream_timer.h).
  std::unique_ptr<StreamTimer> make_stream_timer() override;
  // gpu_chunk_budget_bytes(total memory) (runtime/device.h).
  int64_t chunk_budget_bytes() const override { return chunk_budget_; }
  // The fp32 table (set_allow_tf32 on it applies to all three).
  CudaKernels& cuda_kernels();

  void copy_to_host(void* host_dst, const void* src, size_t bytes) override;
  void copy_from_host(void* dst, const void* host_src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;  // on the compute stream
  void zero(void* dst, size_t bytes) override;

  int ordinal() const { return ordinal_; }
  cudaStream_t compute_stream() const { return compute_; }
  void synchronize();  // the compute stream (each communicator has its own: comm/)

  size_t reserved_bytes() const;   // held from cudaMalloc, in use or cached
  int64_t device_mallocs() const;  // cudaMalloc calls so far
  void empty_cache();              // returns cached blocks to the driver

 protected:
  void* raw_alloc(size_t bytes, std::string& why) override;
  void raw_free(void* data, size_t bytes) override;

 private:
  // Frees every cached block (mutex_ held); waits for the compute stream first.
  void release_cached_locked();

  int ordinal_;
  std::string device_name_;   // cudaDeviceProp::name
  int64_t chunk_budget_ = 0;  // chunk_budget_bytes()
  cudaStream_t compute_ = nullptr;
  std::unique_ptr<CudaKernels> kernels_[3];   // by DType: fp32, fp16, bf16
  mutable std::mutex mutex_;                  // the allocator's state (below)
  std::multimap<size_t, void*> free_blocks_;  // block size -> cached block
  std::map<void*, size_t> live_blocks_;       // handed-out block -> its (rounded) size
  size_t reserved_ = 0;                       // bytes of every block held from cudaMalloc
  int64_t mallocs_ = 0;
};

}  // namespace zt
