// How the CPU kernels split work over OpenMP threads, and the per-thread scratch they reuse
// across calls. Work is split into a count of independent items, distributed statically over the
// threads; reductions pass their fixed block size as the grain, so their results never depend on
// the thread count. No arithmetic here (cpu_simd.h) and no kernels (cpu_*_kernels.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace zt::cpu {

// A single item runs on the calling thread without entering a parallel region
// (libgomp wakes a futex per region even for a team of one, ~1 us).
template <class F>
void parallel_for(int64_t count, const F& f) {
  if (count <= 0) return;
  if (count == 1) {
    f(0);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) f(i);
}

// f(begin, end) over [0, n) in chunks of `grain` (the last shorter). Element-wise kernels do not
// care where the cuts fall; reductions pass their fixed block size as the grain.
template <class F>
void parallel_ranges(int64_t n, int64_t grain, const F& f) {
  const int64_t chunks = (n + grain - 1) / grain;
  parallel_for(chunks, [&](int64_t c) { f(c * grain, std::min(n, (c + 1) * grain)); });
}

// Scratch memory kept per thread across calls (grown, never shrunk), so a warm kernel neither
// allocates nor page-faults: fresh multi-megabyte buffers cost more than layernorm's whole
// backward pass. Per thread, because OpenMP workers and concurrent callers each need their own.
// Slots: kCall for a buffer the calling thread shares with its workers during one call,
// kWorker for each worker's private buffer, kOperand for 16-bit operands widened (or narrowed)
// by the calling thread for its workers to read (a bias, a GEMM's activations narrowed to bf16).
enum class ScratchSlot { kCall, kWorker, kOperand };
template <ScratchSlot kSlot>
float* thread_scratch(int64_t floats) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < static_cast<size_t>(floats)) buffer.resize(static_cast<size_t>(floats));
  return buffer.data();
}

// parallel_for handing each call a thread's private scratch of `floats` floats (contents
// unspecified).
template <class F>
void parallel_with_scratch(int64_t count, int64_t floats, const F& f) {
  if (count <= 0) return;
  if (count == 1) {
    f(0, thread_scratch<ScratchSlot::kWorker>(floats));
    return;
  }
#pragma omp parallel
  {
    float* scratch = thread_scratch<ScratchSlot::kWorker>(floats);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < count; ++i) f(i, scratch);
  }
}

constexpr int64_t kElementGrain = 32768;  // 128 KiB of floats per chunk of element-wise work
constexpr int64_t kColumnBlock = 64;      // columns per task in column reductions

}  // namespace zt::cpu
