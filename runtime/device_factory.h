// Which back end a process computes on, chosen at run time: the CPU device always exists; the
// CUDA device exists when the build found nvcc and the machine has a driver and a GPU. The only
// place above runtime/cuda that knows CUDA exists; callers never include CUDA headers.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "runtime/cpu/cpu_device.h"
#include "runtime/device.h"
#include "runtime/model.h"

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
// What attention of these heads over a (B, T) batch keeps in att on a device of `kind` whose
// activation dtype is `act`, by the back end's rules alone, making no device (the memory
// planner's question; Kernels::attention_record is a device's own answer). CPU: the
// probabilities. CUDA: cuDNN's record where ZT_CUDA_ATTENTION is not `reference`, the table is
// 16-bit and cudnn_rule_refusal (the linked cuDNN's version included) accepts the shape, else
// the probabilities; a shape whose plans then fail to build on the GPU keeps the probabilities,
// which this does not foresee.
AttentionRecord planned_attention_record(DeviceKind kind, DType act, const AttentionHeads& heads,
                                         int64_t B, int64_t T, bool packed);
// zt.allow_tf32: a GPU's fp32 GEMMs may use TF32 tensor cores. No effect on the CPU device.
void set_allow_tf32(Device& device, bool allow);
// How host memory is pinned for `device`'s copies (offload's pin_memory): a GPU registers it
// (cudaHostRegister, portable), within memory_lock_limit(). nullopt for the CPU device: its
// memory is the host's, no DMA engine reads it.
std::optional<HostPinning> host_pinning_for(Device& device);

}  // namespace zt
