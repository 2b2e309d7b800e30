// Which back end a process computes on, chosen at run time: the CPU device always exists; the
// CUDA device exists when the build found nvcc and the machine has a driver and a GPU. The only
// place above runtime/cuda that knows CUDA exists; callers never include CUDA headers.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "runtime/cpu/cpu_device.h"
#include "runtime/device.h"

namespace zt {

enum class DeviceKind { kCpu, kCuda };
// "cpu" or "cuda"; anything else throws kInput naming `what` (e.g. "configs/x.json: zt.device").
DeviceKind parse_device_kind(const std::string& name, const std::string& what);

// GPUs the CUDA back end can use here (after CUDA_VISIBLE_DEVICES): 0 when built without CUDA,
// without a driver or without a GPU. Never throws.
int cuda_device_count();
// Why cuda_device_count() is 0, in words (e.g. "built without CUDA", "no CUDA driver: ..."); empty
// when a GPU is usable.
std::string cuda_unavailable_reason();

// A device of `kind`. For kCuda, `ordinal` picks among the visible GPUs (train/ passes the
// local rank modulo the count). Throws kInput naming the reason when CUDA is asked of a build
// or a machine without it.
std::unique_ptr<Device> make_device(DeviceKind kind, int ordinal = 0);
// zt.allow_tf32: a GPU's fp32 GEMMs may use TF32 tensor cores. No effect on the CPU device.
void set_allow_tf32(Device& device, bool allow);
// How host memory is pinned for `device`'s copies (offload's pin_memory): a GPU registers it
// (cudaHostRegister, portable), within memory_lock_limit(). nullopt for the CPU device: its
// memory is the host's, no DMA engine reads it.
std::optional<HostPinning> host_pinning_for(Device& device);

}  // namespace zt
