// CpuDevice: host memory with a size-keyed cache of freed blocks (activations are allocated
// and freed every step; the cache avoids paying page faults for them each time), and the
// oneDNN/OpenMP kernels (a table per activation dtype). The tracker counts bytes handed out,
// not bytes cached.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "runtime/cpu/cpu_gemm_paths.h"
#include "runtime/device.h"

namespace zt {

// Page-locking of host memory for another device's DMA (offload's pin_memory: the host tier's
// buffers registered with the GPU, so copies to and from it run at full bandwidth and can be
// asynchronous). `pin` returns an empty string on success, else the reason; `unpin` undoes it.
// `lock_limit`: the bytes the process may lock (RLIMIT_MEMLOCK's soft limit, from
// memory_lock_limit()); negative: no limit.
struct HostPinning {
  std::string what;  // "cudaHostRegister"
  std::function<std::string(void* data, size_t bytes)> pin;
  std::function<void(void* data)> unpin;
  int64_t lock_limit = -1;
};

// RLIMIT_MEMLOCK's soft limit in bytes; -1 when unlimited or when the process may lock any
// amount (CAP_IPC_LOCK, as root has).
int64_t memory_lock_limit();

class CpuDevice final : public Device {
 public:
  CpuDevice();
  ~CpuDevice() override;
  std::string name() const override { return "cpu"; }
  Kernels& kernels_for(DType activations) override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override;
  void copy_from_host(void* dst, const void* host_src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void zero(void* dst, size_t bytes) override;

  // From now on every new allocation is pinned, until one cannot be (it would pass the lock
  // limit, or `pin` fails): that one and later ones stay unpinned, and pinning_failure() says
  // why, naming `ulimit -l` when it is the limit. Blocks are unpinned when freed for good (the
  // destructor).
  void set_pinning(HostPinning pinning);
  bool pinning() const { return static_cast<bool>(pinning_.pin); }
  const std::string& pinning_failure() const { return pinning_failure_; }
  size_t pinned_bytes() const { return pinned_bytes_; }

  // The GEMM paths every kernel table of this device computes 16-bit products with, and the
  // recording of the keys they meet (cpu_gemm_paths.h; installed by train/gemm_choice.h).
  GemmRouting& gemm_routing() { return gemm_routing_; }

 protected:
  void* raw_alloc(size_t bytes, std::string& why) override;
  void raw_free(void* data, size_t bytes) override;

 private:
  GemmRouting gemm_routing_;             // declared before the tables that point to it
  std::unique_ptr<Kernels> kernels_[3];  // by DType: fp32, fp16, bf16
  std::multimap<size_t, void*> cache_;   // freed blocks by exact size
  size_t cached_bytes_ = 0;
  HostPinning pinning_;
  std::set<void*> pinned_;  // blocks registered by pinning_
  size_t pinned_bytes_ = 0;
  std::string pinning_failure_;
};

// Threads for the CPU kernels: OpenMP's thread count, which oneDNN's GEMMs run on as well, so
// one budget governs the cores a rank uses (several ranks on one machine divide its cores).
void set_cpu_threads(int threads);
int cpu_threads();  // OpenMP's current maximum
// The budget rule of the executables: `requested` threads when > 0 (zt.num_threads); else
// OMP_NUM_THREADS when set (left as the runtime read it); else `fitting`, the threads that fit
// this rank's CPUs (CpuPlacement::threads, runtime/cpu/cpu_affinity.h: the machine's CPUs
// divided among the ranks sharing it; oversubscribed ranks crawl otherwise).
void choose_cpu_threads(int requested, int fitting);

// Zeroes host memory as CpuDevice::zero does: memset below 1 MiB, else streaming stores on
// every thread.
void zero_host_bytes(void* dst, size_t bytes);

// The CPU kernel table (CpuKernels, runtime/cpu/cpu_kernels.h) rounding activations to
// `activations`, computing 16-bit GEMMs by `routing`'s paths (null: the feature-flag rule;
// else it must outlive the table).
std::unique_ptr<Kernels> make_cpu_kernels(DType activations = DType::kF32,
                                          GemmRouting* routing = nullptr);

// True when bf16 GEMMs run natively (oneDNN reports AVX512_BF16 or AMX-BF16 and ZT_CPU_SIMD
// does not cap the instruction set below AVX-512); otherwise they widen to fp32 in blocks.
bool native_bf16_gemm();
// The instruction set oneDNN's CPU kernels are built for here (dnnl_get_effective_cpu_isa),
// e.g. "avx512_core_amx".
const char* onednn_isa_name();
// One line for the start-up log: the GEMM library, the instruction set its kernels use, and
// the path each 16-bit dtype takes.
std::string cpu_gemm_description();

}  // namespace zt
