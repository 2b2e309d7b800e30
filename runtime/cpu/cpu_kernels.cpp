// CpuKernels: construction, the instruction-set choice (ZT_CPU_SIMD) and make_cpu_kernels. The
// kernels themselves are in cpu_nn_kernels.cpp, cpu_attention_kernels.cpp,
// cpu_elementwise_kernels.cpp and cpu_optimizer_kernels.cpp (see cpu_kernels.h); nothing here
// computes.
#include "runtime/cpu/cpu_kernels.h"

#include <cstdlib>
#include <memory>
#include <string_view>

#include "runtime/cpu/cpu_device.h"
#include "runtime/status.h"

namespace zt {
namespace cpu {

Isa choose_isa() {
  __builtin_cpu_init();
  Isa isa = Isa::kSse2;
  if (__builtin_cpu_supports("avx2")) isa = Isa::kAvx2;
  if (__builtin_cpu_supports("avx512f")) isa = Isa::kAvx512;
  if (const char* cap = std::getenv("ZT_CPU_SIMD")) {
    std::string_view s(cap);
    if (s == "sse2")
      isa = Isa::kSse2;
    else if (s == "avx2" && isa == Isa::kAvx512)
      isa = Isa::kAvx2;
    else if (s != "avx2" && s != "avx512" && !s.empty())
      throw_input(fmt::format("ZT_CPU_SIMD must be sse2, avx2 or avx512; got '{}'", s));
  }
  return isa;
}

}  // namespace cpu

CpuKernels::CpuKernels(cpu::Isa isa, DType activations, GemmRouting* routing)
    : isa_(isa),
      act_(activations), abilities_{.native_bf16 = isa == cpu::Isa::kAvx512 && native_bf16_gemm()},
      routing_(routing), f16c_(isa != cpu::Isa::kSse2 && __builtin_cpu_supports("f16c")) {}

std::unique_ptr<Kernels> make_cpu_kernels(DType activations, GemmRouting* routing) {
  return std::make_unique<CpuKernels>(cpu::choose_isa(), activations, routing);
}

}  // namespace zt
