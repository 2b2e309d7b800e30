// The peak-FMA probe: one loop per instruction set, each compiled for its target only (the
// rest of the build stays generic; no -march=native in shipped binaries), chosen by
// __builtin_cpu_supports.
//
// What keeps the loop honest (checked with objdump: the loop body is 20 vfmadd132ps on zmm
// registers and one counter, nothing else):
//   - accumulators are scalar vector variables, not an array (an array spills to the stack);
//   - an empty asm that reads and writes every accumulator each iteration: without it GCC
//     deletes a loop whose results are unused, or folds its iterations;
//   - enough independent chains to cover FMA latency x ports: with 4-cycle latency and two
//     ports 8 would do in theory, but 12 reached only half of the AVX-512 peak on a Sapphire
//     Rapids VM; 20 reach it (and leave 12 of the 32 zmm registers). AVX2 has 16 ymm
//     registers: 12 accumulators and the two constants.
#include "runtime/cpu/cpu_peak.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "runtime/cpu/cpu_simd.h"

namespace zt {

namespace {

using Clock = std::chrono::steady_clock;

#if defined(__x86_64__)
// X-lists of accumulator indices; S() separates the items (S is a macro name, expanded only
// after the list is, so it may be a comma).
// (Not clang-formatted: the lists read as lists.)
// clang-format off
#define ZT_ACC12(X, S) X(0) S() X(1) S() X(2) S() X(3) S() X(4) S() X(5) S() X(6) S() X(7) \
  S() X(8) S() X(9) S() X(10) S() X(11)
#define ZT_ACC20(X, S) ZT_ACC12(X, S) S() X(12) S() X(13) S() X(14) S() X(15) S() X(16) \
  S() X(17) S() X(18) S() X(19)
#define ZT_COMMA() ,
#define ZT_PLUS() +
#define ZT_NOTHING()
// clang-format on
// a = a * x + y with x just below 1 converges to y / (1 - x) = 1: no overflow, no denormals.
#define ZT_START(i) a##i = SET1(1.0f + (i)*1e-3f)
#define ZT_FMA(i) a##i = FMADD(a##i, x, y);
#define ZT_KEEP(i) "+v"(a##i)
#define ZT_NAME(i) a##i

constexpr int kAccumulators512 = 20, kAccumulators256 = 12;

#define SET1 _mm512_set1_ps
#define FMADD _mm512_fmadd_ps
__attribute__((target("avx512f,fma"))) double fma_loop_avx512(int64_t iterations) {
  const __m512 x = SET1(0.9999999f), y = SET1(1e-7f);
  __m512 ZT_ACC20(ZT_START, ZT_COMMA);
  for (int64_t i = 0; i < iterations; ++i) {
    ZT_ACC20(ZT_FMA, ZT_NOTHING)
    // GCC allows 30 asm operands and "+v" counts twice: two statements of ten.
    asm volatile(""
                 : ZT_KEEP(0), ZT_KEEP(1), ZT_KEEP(2), ZT_KEEP(3), ZT_KEEP(4), ZT_KEEP(5),
                   ZT_KEEP(6), ZT_KEEP(7), ZT_KEEP(8), ZT_KEEP(9));
    asm volatile(""
                 : ZT_KEEP(10), ZT_KEEP(11), ZT_KEEP(12), ZT_KEEP(13), ZT_KEEP(14), ZT_KEEP(15),
                   ZT_KEEP(16), ZT_KEEP(17), ZT_KEEP(18), ZT_KEEP(19));
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, ZT_ACC20(ZT_NAME, ZT_PLUS));
  double sum = 0.0;
  for (float v : lanes) sum += v;
  return sum;
}
#undef SET1
#undef FMADD

#define SET1 _mm256_set1_ps
#define FMADD _mm256_fmadd_ps
__attribute__((target("avx2,fma"))) double fma_loop_avx2(int64_t iterations) {
  const __m256 x = SET1(0.9999999f), y = SET1(1e-7f);
  __m256 ZT_ACC12(ZT_START, ZT_COMMA);
  for (int64_t i = 0; i < iterations; ++i) {
    ZT_ACC12(ZT_FMA, ZT_NOTHING)
    asm volatile("" : ZT_KEEP(0), ZT_KEEP(1), ZT_KEEP(2), ZT_KEEP(3), ZT_KEEP(4), ZT_KEEP(5));
    asm volatile("" : ZT_KEEP(6), ZT_KEEP(7), ZT_KEEP(8), ZT_KEEP(9), ZT_KEEP(10), ZT_KEEP(11));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, ZT_ACC12(ZT_NAME, ZT_PLUS));
  double sum = 0.0;
  for (float v : lanes) sum += v;
  return sum;
}
#undef SET1
#undef FMADD
#endif  // __x86_64__

struct FmaLoop {
  double (*run)(int64_t iterations) = nullptr;
  double flops_per_iteration = 0.0;  // accumulators x lanes x 2
  const char* isa = "none";
};

// The widest loop the kernels may use: the CPU's, capped by ZT_CPU_SIMD as the kernels are
// (cpu::choose_isa), so a stand-in run (ZT_CPU_SIMD=avx2 on an AVX-512 machine) is measured
// against the peak of the instructions it runs.
FmaLoop choose_loop() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  const cpu::Isa cap = cpu::choose_isa();
  const bool fma = __builtin_cpu_supports("fma");
  if (cap == cpu::Isa::kAvx512 && __builtin_cpu_supports("avx512f") && fma)
    return {fma_loop_avx512, kAccumulators512 * 16 * 2.0, "avx512"};
  if (cap != cpu::Isa::kSse2 && __builtin_cpu_supports("avx2") && fma)
    return {fma_loop_avx2, kAccumulators256 * 8 * 2.0, "avx2"};
#endif
  return {};
}

// Seconds for `threads` threads to run `iterations` each, from the fork to the join.
double timed_run(const FmaLoop& loop, int threads, int64_t iterations) {
  std::vector<double> sink(static_cast<size_t>(threads));  // results used: nothing to drop
  const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads)
  sink[static_cast<size_t>(omp_get_thread_num())] = loop.run(iterations);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  volatile double keep = 0.0;
  for (double s : sink) keep = keep + s;
  return seconds;
}

}  // namespace

PeakFma measure_peak_fma(int runs, double seconds_per_run, int threads) {
  PeakFma peak;
  peak.threads = threads > 0 ? threads : omp_get_max_threads();
  const FmaLoop loop = choose_loop();
  if (!loop.run) return peak;
  peak.isa = loop.isa;
  // Calibrate: iterations for about seconds_per_run, from a short run (which also wakes the
  // threads and raises the clock).
  int64_t iterations = 1 << 16;
  double seconds = timed_run(loop, peak.threads, iterations);
  while (seconds < 2e-3) {
    iterations *= 4;
    seconds = timed_run(loop, peak.threads, iterations);
  }
  iterations = std::max<int64_t>(1, static_cast<int64_t>(iterations * seconds_per_run / seconds));
  for (int r = 0; r < std::max(runs, 1); ++r) {
    seconds = timed_run(loop, peak.threads, iterations);
    const double flops = loop.flops_per_iteration * static_cast<double>(iterations) * peak.threads;
    peak.gflops = std::max(peak.gflops, flops / seconds / 1e9);
  }
  return peak;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("model name")) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    const size_t begin = line.find_first_not_of(" \t", colon + 1);
    if (begin != std::string::npos) return line.substr(begin);
  }
  return "unknown CPU";
}

std::string cpu_simd_features() {
  std::string out;
#if defined(__x86_64__)
  __builtin_cpu_init();
  const auto add = [&](bool present, const char* name) {
    if (present) out += (out.empty() ? "" : " ") + std::string(name);
  };
  add(__builtin_cpu_supports("avx2"), "avx2");
  add(__builtin_cpu_supports("fma"), "fma");
  add(__builtin_cpu_supports("avx512f"), "avx512f");
  add(__builtin_cpu_supports("avx512bf16"), "avx512_bf16");
  add(__builtin_cpu_supports("avx512fp16"), "avx512_fp16");
  add(__builtin_cpu_supports("amx-bf16"), "amx_bf16");
#endif
  return out.empty() ? "none" : out;
}

}  // namespace zt
