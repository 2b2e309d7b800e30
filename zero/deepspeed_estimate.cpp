// DeepSpeed's estimators (zero/deepspeed_estimate.h).
#include "zero/deepspeed_estimate.h"

#include <algorithm>

namespace zt {

// DeepSpeed's estimators, from their published definitions (deepspeed/runtime/zero/
// stage_1_and_2.py and stage3.py), with N = gpus_per_node * nodes, Ψ = params,
// f = buffer_factor (additional_buffer_factor, 1.5 by default):
//   zero2, cpu_offload:     gpu = 2Ψ                    cpu = Ψ * max(4N, 16) * f
//   zero2, no offload:      gpu = 4Ψ + int(16Ψ / N)     cpu = 4Ψ * gpus_per_node * f
DeepSpeedEstimate deepspeed_zero2_estimate(int64_t params, int gpus_per_node, int nodes,
                                           bool cpu_offload, double f) {
  const double psi = static_cast<double>(params);
  const int64_t gpus = static_cast<int64_t>(gpus_per_node) * nodes;
  DeepSpeedEstimate e;
  if (cpu_offload) {
    e.gpu = 2 * params;
    e.cpu = static_cast<int64_t>(psi * static_cast<double>(std::max<int64_t>(4 * gpus, 16)) * f);
  } else {
    e.gpu = 4 * params + static_cast<int64_t>(16.0 * psi / static_cast<double>(gpus));
    e.cpu = static_cast<int64_t>(psi * 4.0 * gpus_per_node * f);
  }
  return e;
}

// With L = 4 * largest_layer_params (its fp32 gather), g = 1 / nodes:
//   offload optimizer and params: gpu = L
//                                 cpu = zero_init ? 18Ψg f : Ψ max(4 gpus_per_node, 18g) f
//   offload optimizer only:       gpu = L + int(2Ψ / N)
//                                 cpu = zero_init ? 16Ψg f : Ψ max(4 gpus_per_node, 16g) f
//   no offload:                   gpu = L + int(18Ψ / N)
//                                 cpu = zero_init ? 4 largest gpus_per_node f : 4Ψ gpus_per_node f
DeepSpeedEstimate deepspeed_zero3_estimate(int64_t params, int64_t largest_layer_params,
                                           int gpus_per_node, int nodes, bool cpu_offload,
                                           bool cpu_offload_params, bool zero_init, double f) {
  const double psi = static_cast<double>(params), g = 1.0 / nodes;
  const double per_node = static_cast<double>(gpus_per_node);
  const double gpus = per_node * nodes;
  const int64_t largest = 4 * largest_layer_params;
  DeepSpeedEstimate e;
  if (cpu_offload && cpu_offload_params) {
    e.gpu = largest;
    e.cpu = static_cast<int64_t>(zero_init ? psi * 18.0 * g * f
                                           : psi * std::max(4.0 * per_node, 18.0 * g) * f);
  } else if (cpu_offload) {
    e.gpu = largest + static_cast<int64_t>(2.0 * psi / gpus);
    e.cpu = static_cast<int64_t>(zero_init ? psi * 16.0 * g * f
                                           : psi * std::max(4.0 * per_node, 16.0 * g) * f);
  } else {
    e.gpu = largest + static_cast<int64_t>(18.0 * psi / gpus);
    e.cpu = static_cast<int64_t>(zero_init ? static_cast<double>(largest_layer_params) * 4.0 *
                                                 per_node * f
                                           : psi * 4.0 * per_node * f);
  }
  return e;
}

}  // namespace zt
