// Back-end choice at run time; the one #if on CUDA outside runtime/cuda.
#include "runtime/device_factory.h"

#include "runtime/cpu/cpu_device.h"
#include "runtime/status.h"

#if ZT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/attention_path.h"
#include "runtime/cuda/cuda_kernels.h"
#include "runtime/cuda/cudnn_attention.h"
#endif

namespace zt {

DeviceKind parse_device_kind(const std::string& name, const std::string& what) {
  if (name == "cpu") return DeviceKind::kCpu;
  if (name == "cuda") return DeviceKind::kCuda;
  throw_input(fmt::format("{}: unknown device '{}'; use cpu or cuda", what, name));
}

int cuda_device_count() {
#if ZT_HAVE_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky status of the failed query
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

std::string cuda_unavailable_reason() {
#if ZT_HAVE_CUDA
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return fmt::format("no usable CUDA driver or device: {} ({})", cudaGetErrorString(status),
                       cudaGetErrorName(status));
  }
  return count > 0 ? std::string() : "no CUDA device visible (check CUDA_VISIBLE_DEVICES)";
#else
  return "this build has no CUDA back end (nvcc was not found when it was configured)";
#endif
}

std::unique_ptr<Device> make_device(DeviceKind kind, int ordinal) {
  if (kind == DeviceKind::kCpu) return std::make_unique<CpuDevice>();
#if ZT_HAVE_CUDA
  const int count = cuda_device_count();
  if (count > 0) return std::make_unique<CudaDevice>(ordinal % count);
#endif
  throw_input(fmt::format("a CUDA device was asked for, but {}", cuda_unavailable_reason()));
}

std::optional<HostPinning> host_pinning_for(Device& device) {
#if ZT_HAVE_CUDA
  if (auto* gpu = dynamic_cast<CudaDevice*>(&device)) {
    HostPinning p;
    p.what = "cudaHostRegister";
    const int ordinal = gpu->ordinal();
    p.pin = [ordinal](void* data, size_t bytes) -> std::string {
      cudaSetDevice(ordinal);
      const cudaError_t status = cudaHostRegister(data, bytes, cudaHostRegisterPortable);
      if (status == cudaSuccess) return {};
      cudaGetLastError();  // not sticky: the memory stays usable, unpinned
      return fmt::format("{} ({})", cudaGetErrorString(status), cudaGetErrorName(status));
    };
    p.unpin = [](void* data) { cudaHostUnregister(data); };
    p.lock_limit = memory_lock_limit();
    return p;
  }
#else
  (void)device;
#endif
  return std::nullopt;
}

AttentionRecord planned_attention_record(DeviceKind kind, DType act, const AttentionHeads& heads,
                                         int64_t B, int64_t T, bool packed) {
  const AttentionRecord probabilities{B * heads.NH * T * T, true};
#if ZT_HAVE_CUDA
  if (kind == DeviceKind::kCuda && act != DType::kF32 &&
      attention_path_from_env() != AttentionPath::kReference) {
    const CudnnAttentionKey key =
        cudnn_attention_key(B, T, heads.NH, heads.NKV, heads.hd, act, packed, heads.window);
    if (cudnn_rule_refusal(key).empty()) return {cudnn_record_floats(key), false};
  }
#else
  (void)kind, (void)act, (void)heads, (void)packed;
#endif
  return probabilities;
}

void set_allow_tf32(Device& device, bool allow) {
#if ZT_HAVE_CUDA
  if (auto* gpu = dynamic_cast<CudaDevice*>(&device)) gpu->cuda_kernels().set_allow_tf32(allow);
#endif
}

}  // namespace zt
