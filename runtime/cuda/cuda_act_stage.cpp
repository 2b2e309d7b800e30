// CudaKernels::ActStage: a call's 16-bit activation operands widened into tracked fp32 scratch
// and the written ones narrowed back (cuda_kernels.h).
#include <exception>

#include "runtime/cuda/cuda_kernels.h"

namespace zt {

CudaKernels::ActStage::ActStage(CudaKernels& k) : k_(k), exceptions_(std::uncaught_exceptions()) {}

// The casts are enqueued before the scratch is freed: its next user runs after them on the
// same stream (cuda_device.cpp's stream-ordered reuse).
CudaKernels::ActStage::~ActStage() noexcept(false) {
  if (std::uncaught_exceptions() != exceptions_) return;
  for (Written& w : written_) k_.cast(w.dst.data, w.dst.dtype, w.fp32.data(), DType::kF32, w.n);
}

const float* CudaKernels::ActStage::in(ConstOperand a, int64_t n) {
  if (!a || a.dtype == DType::kF32 || n <= 0) return static_cast<const float*>(a.data);
  Buffer holder;
  const float* fp32 = k_.widened(a, n, holder);
  read_.push_back(std::move(holder));
  return fp32;
}

float* CudaKernels::ActStage::stage(Operand a, int64_t n, bool read) {
  if (!a || a.dtype == DType::kF32 || n <= 0) return static_cast<float*>(a.data);
  Buffer fp32 = k_.scratch(n);
  if (read) k_.cast(fp32.data(), DType::kF32, a.data, a.dtype, n);
  float* p = fp32.as<float>();
  written_.push_back({a, std::move(fp32), n});
  return p;
}

}  // namespace zt
