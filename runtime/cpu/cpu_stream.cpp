// StreamTriad: the triad loop is cpu_simd.h's simd_loop on the widest instruction set of this CPU
// (capped by ZT_CPU_SIMD, as the kernels are), each thread a contiguous range of the arrays.
#include "runtime/cpu/cpu_stream.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "runtime/cpu/cpu_simd.h"

namespace zt {
using namespace cpu;
namespace {

constexpr float kScalar = 3.0f;

// f(begin, end) on each OpenMP thread for its contiguous share of [0, n).
template <class F>
void per_thread_range(int64_t n, const F& f) {
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    f(n * t / threads, n * (t + 1) / threads);
  }
}

}  // namespace

int64_t last_level_cache_bytes() {
  for (int name : {_SC_LEVEL4_CACHE_SIZE, _SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
    const long bytes = sysconf(name);
    if (bytes > 0) return bytes;
  }
  return 0;
}

int64_t StreamTriad::default_elements() {
  return std::max<int64_t>(int64_t(1) << 24, 4 * last_level_cache_bytes() / int64_t(sizeof(float)));
}

StreamTriad::StreamTriad(int64_t elements)
    : n_(elements > 0 ? elements : default_elements()), a_(new float[static_cast<size_t>(n_)]),
      b_(new float[static_cast<size_t>(n_)]), c_(new float[static_cast<size_t>(n_)]) {
  per_thread_range(n_, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      a_[i] = 0.0f;
      b_[i] = 1.0f + static_cast<float>(i % 1000) * 1e-3f;
      c_[i] = 2.0f - static_cast<float>(i % 997) * 1e-3f;
    }
  });
}

double StreamTriad::run_gbps() {
  float* a = a_.get();
  const float* b = b_.get();
  const float* c = c_.get();
  const Isa isa = choose_isa();
  const auto t0 = std::chrono::steady_clock::now();
  per_thread_range(n_, [&](int64_t begin, int64_t end) {
    run_isa(isa, [&](auto lanes) {
      using V = typename decltype(lanes)::type;
      simd_loop<V>(begin, end, [&](auto l, int64_t i) {
        using T = typename decltype(l)::type;
        store<T>(a + i, load<T>(b + i) + kScalar * load<T>(c + i));
      });
    });
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 12.0 * static_cast<double>(n_) / seconds / 1e9;
}

double StreamTriad::best_gbps(int runs) {
  double best = 0.0;
  for (int r = 0; r < std::max(runs, 1); ++r) best = std::max(best, run_gbps());
  return best;
}

bool StreamTriad::check() const {
  for (int64_t i = 0; i < n_; ++i)
    if (a_[i] != b_[i] + kScalar * c_[i]) return false;
  return true;
}

}  // namespace zt
