// CudaDevice. PLACEHOLDER until implemented: construction throws.
#include "runtime/cuda/cuda_device.h"

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cuda_kernels.h"
#include "runtime/status.h"

namespace zt {

CudaDevice::CudaDevice(int ordinal) : ordinal_(ordinal) {
  throw_internal("CudaDevice: not implemented yet");
}
CudaDevice::~CudaDevice() = default;
std::string CudaDevice::name() const { return "cuda"; }
Kernels& CudaDevice::kernels() { return *kernels_; }
CudaKernels& CudaDevice::cuda_kernels() { return *kernels_; }
void CudaDevice::copy_to_host(void*, const void*, size_t) { throw_internal("not implemented"); }
void CudaDevice::copy_from_host(void*, const void*, size_t) { throw_internal("not implemented"); }
void CudaDevice::zero(void*, size_t) { throw_internal("not implemented"); }
void CudaDevice::synchronize() {}
size_t CudaDevice::reserved_bytes() const { return 0; }
int64_t CudaDevice::device_mallocs() const { return 0; }
void CudaDevice::empty_cache() {}
void* CudaDevice::raw_alloc(size_t) { throw_internal("not implemented"); }
void CudaDevice::raw_free(void*, size_t) {}

}  // namespace zt
