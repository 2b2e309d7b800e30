// AttentionPath: its names, the environment's default and the setter over a Device.
#include "runtime/cuda/attention_path.h"

#include <cstdlib>
#include <string>

#include "runtime/cuda/cuda_kernels.h"
#include "runtime/status.h"

namespace zt {
namespace {

AttentionPath parse_env() {
  const char* value = std::getenv("ZT_CUDA_ATTENTION");
  const std::string text = value ? value : "";
  if (text.empty() || text == "auto") return AttentionPath::kAuto;
  if (text == "reference") return AttentionPath::kReference;
  if (text == "cudnn") return AttentionPath::kCudnn;
  throw_input(fmt::format("ZT_CUDA_ATTENTION must be auto, reference or cudnn; got '{}'", text));
}

}  // namespace

AttentionPath attention_path_from_env() {
  static const AttentionPath path = parse_env();
  return path;
}

void set_cuda_attention_path(Device& device, AttentionPath path) {
  auto* kernels = dynamic_cast<CudaKernels*>(&device.kernels());
  if (!kernels)
    throw_input(fmt::format("set_cuda_attention_path: {} is not a CUDA device", device.name()));
  kernels->set_attention_path(path);
}

}  // namespace zt
