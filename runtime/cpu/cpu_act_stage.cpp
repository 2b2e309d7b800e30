// CpuKernels::ActStage: a call's 16-bit activation operands widened into fp32 scratch and the
// written ones narrowed back (cpu_kernels.h).
#include <exception>
#include <vector>

#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cpu_parallel.h"
#include "runtime/status.h"

namespace zt {
using namespace cpu;

namespace {

// The calling thread's staging buffers, grown and never shrunk (a warm call allocates nothing),
// and how many the stages now open on it hold.
struct StagePool {
  std::vector<std::vector<float>> slots;
  size_t used = 0;
};
StagePool& pool() {
  thread_local StagePool p;
  return p;
}

}  // namespace

CpuKernels::ActStage::ActStage(CpuKernels& k)
    : k_(k), exceptions_(std::uncaught_exceptions()), first_slot_(pool().used) {}

CpuKernels::ActStage::~ActStage() {
  if (std::uncaught_exceptions() == exceptions_) {
    for (int w = 0; w < n_written_; ++w) {
      const Written& x = written_[w];
      parallel_ranges(x.n, kElementGrain, [&](int64_t i0, int64_t i1) {
        k_.narrow_range(x.dst.at(i0), x.src + i0, i1 - i0);
      });
    }
  }
  pool().used = first_slot_;
}

float* CpuKernels::ActStage::scratch(int64_t n) {
  StagePool& p = pool();
  if (p.slots.size() <= p.used) p.slots.resize(p.used + 1);
  std::vector<float>& slot = p.slots[p.used++];
  if (slot.size() < static_cast<size_t>(n)) slot.resize(static_cast<size_t>(n));
  return slot.data();
}

const float* CpuKernels::ActStage::in(ConstOperand a, int64_t n) {
  if (!a || a.dtype == DType::kF32) return static_cast<const float*>(a.data);
  float* s = scratch(n);
  parallel_ranges(n, kElementGrain,
                  [&](int64_t i0, int64_t i1) { k_.widen_range(s + i0, a.at(i0), i1 - i0); });
  return s;
}

float* CpuKernels::ActStage::stage(Operand a, int64_t n, bool read) {
  if (!a || a.dtype == DType::kF32) return static_cast<float*>(a.data);
  ZT_ASSERT(n_written_ < kMaxWritten, "an entry writes more than {} staged operands", kMaxWritten);
  float* s = read ? const_cast<float*>(in(a, n)) : scratch(n);
  written_[n_written_++] = {a, s, n};
  return s;
}

}  // namespace zt
