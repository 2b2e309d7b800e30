// CpuDevice: host memory with a size-keyed cache of freed blocks (activations are allocated
// and freed every step; the cache avoids paying page faults for them each time), and the
// oneDNN/OpenMP kernels (a table per activation dtype). The tracker counts bytes handed out,
// not bytes cached.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "runtime/device.h"

namespace zt {

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
  size_t cached_bytes() const { return cached_bytes_; }

 protected:
  void* raw_alloc(size_t bytes, std::string& why) override;
  void raw_free(void* data, size_t bytes) override;

 private:
  std::unique_ptr<Kernels> kernels_[3];  // by DType: fp32, fp16, bf16
  std::multimap<size_t, void*> cache_;  // freed blocks by exact size
  size_t cached_bytes_ = 0;
};

// Threads for the CPU kernels: OpenMP's thread count, which oneDNN's GEMMs run on as well, so
// one budget governs the cores a rank uses (several ranks on one machine divide its cores).
void set_cpu_threads(int threads);
int cpu_threads();  // OpenMP's current maximum
// The budget rule of the executables: `requested` threads when > 0 (zt.num_threads); else
// OMP_NUM_THREADS when set (left as the runtime read it); else `fitting`, the threads that fit
// this rank's CPUs (CpuPlacement::threads, runtime/cpu/cpu_affinity.h: the machine's CPUs
// divided among the ranks sharing it; MACHINE.md: oversubscribed ranks crawl otherwise).
void choose_cpu_threads(int requested, int fitting);

// The CPU kernel table (CpuKernels, runtime/cpu/cpu_kernels.h) rounding activations to
// `activations`.
std::unique_ptr<Kernels> make_cpu_kernels(DType activations = DType::kF32);

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
