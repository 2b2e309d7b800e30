// CudaKernels: construction, element-wise ops, optimizers and reductions. PLACEHOLDER until
// implemented: every entry throws.
#include "runtime/cuda/cuda_kernels_impl.h"

namespace zt {

CudaKernels::CudaKernels(cudaStream_t stream) : stream_(stream), impl_(std::make_unique<Impl>()) {}
CudaKernels::~CudaKernels() = default;
void CudaKernels::set_allow_tf32(bool allow) { impl_->allow_tf32 = allow; }

void CudaKernels::gelu_forward(float* out, const float* inp, int64_t n) {
  ZT_CUDA_ASSERT(false, "CudaKernels::gelu_forward: not implemented yet");
}

void CudaKernels::gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  ZT_CUDA_ASSERT(false, "CudaKernels::gelu_backward: not implemented yet");
}

void CudaKernels::residual_forward(float* out, const float* a, const float* b, int64_t n) {
  ZT_CUDA_ASSERT(false, "CudaKernels::residual_forward: not implemented yet");
}

void CudaKernels::accumulate(float* y, const float* x, int64_t n) {
  ZT_CUDA_ASSERT(false, "CudaKernels::accumulate: not implemented yet");
}

void CudaKernels::adamw(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWArgs& args) {
  ZT_CUDA_ASSERT(false, "CudaKernels::adamw: not implemented yet");
}

void CudaKernels::sgd(float* param, const float* grad, float* momentum_buf, int64_t n, const SgdArgs& args) {
  ZT_CUDA_ASSERT(false, "CudaKernels::sgd: not implemented yet");
}

void CudaKernels::cast(void* dst, DType dst_type, const void* src, DType src_type, int64_t n) {
  ZT_CUDA_ASSERT(false, "CudaKernels::cast: not implemented yet");
}

void CudaKernels::round_to(float* x, DType dtype, int64_t n) {
  ZT_CUDA_ASSERT(false, "CudaKernels::round_to: not implemented yet");
}

void CudaKernels::add(void* dst, DType dst_type, const void* a, DType a_type, const void* b, DType b_type, int64_t n) {
  ZT_CUDA_ASSERT(false, "CudaKernels::add: not implemented yet");
}

void CudaKernels::scale(float* x, float s, int64_t n) {
  ZT_CUDA_ASSERT(false, "CudaKernels::scale: not implemented yet");
}

void CudaKernels::fill(float* x, float value, int64_t n) {
  ZT_CUDA_ASSERT(false, "CudaKernels::fill: not implemented yet");
}

bool CudaKernels::has_nonfinite(const float* x, int64_t n) {
  ZT_CUDA_ASSERT(false, "CudaKernels::has_nonfinite: not implemented yet");
}

double CudaKernels::sum_squares(const float* x, int64_t n) {
  ZT_CUDA_ASSERT(false, "CudaKernels::sum_squares: not implemented yet");
}

}  // namespace zt
