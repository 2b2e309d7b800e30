// The cores' own speed limit: the peak fp32 FMA rate measured on every OpenMP thread, and the
// CPU's name and SIMD features as the kernel sees them. A benchmark reports compute figures
// against this rather than against a GEMM library's rate, which depends on whether the library
// knows the CPU (OpenBLAS fell back to its SSE3 kernels on one of our test machines).
// Measurement only: no allocation, no logging.
#pragma once

#include <string>

namespace zt {

struct PeakFma {
  double gflops = 0.0;       // all threads together; 0 when no FMA instruction set is present
  const char* isa = "none";  // "avx512" or "avx2": the loop that ran, chosen at run time
  int threads = 0;           // the OpenMP threads that ran it
};

// Best of `runs` timed runs of a register-resident FMA loop (independent accumulators, no
// memory traffic) run by `threads` OpenMP threads (0: omp_get_max_threads()), each run about
// `seconds_per_run` long. AVX-512 when the CPU has it and ZT_CPU_SIMD does not cap it below
// (the kernels' cap), else AVX2+FMA. Bound: 2 FMA ports x 16
// lanes x 2 flops = 64 flops per cycle per core under AVX-512 (32 under AVX2); the test
// (tests/runtime/cpu_peak_test.cpp) holds the result under threads x 64 x 5 GHz.
PeakFma measure_peak_fma(int runs = 5, double seconds_per_run = 0.05, int threads = 0);

// "model name" from /proc/cpuinfo (the VM may hide it: "Intel(R) Xeon(R) Processor"), or
// "unknown CPU".
std::string cpu_model_name();
// The SIMD features that decide a training kernel's speed, those present, space-separated
// (from "avx2 fma avx512f avx512_bf16 avx512_fp16 amx_bf16"), as the compiler's CPU check
// sees them; "none" when there are none.
std::string cpu_simd_features();

}  // namespace zt
