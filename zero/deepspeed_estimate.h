// DeepSpeedEstimate: DeepSpeed's own two model-state estimators, from their published formulas,
// printed beside the memory model's figures (zero/memory_model.h) for comparison. They count
// every parameter as trained. tests/zero/memory_model_test.cpp works DeepSpeed's documented
// case by hand. Pure arithmetic.
#pragma once

#include <cstdint>

namespace zt {

// DeepSpeed's own estimates (deepspeed.runtime.zero.stage_1_and_2 and .stage3; the formulas are
// written out in deepspeed_estimate.cpp). gpu: bytes per GPU; cpu: bytes per node.
struct DeepSpeedEstimate {
  int64_t gpu = 0;
  int64_t cpu = 0;
};
// estimate_zero2_model_states_mem_needs (used for stages 0-2 alike: DeepSpeed has one).
DeepSpeedEstimate deepspeed_zero2_estimate(int64_t params, int gpus_per_node, int nodes,
                                           bool cpu_offload, double buffer_factor = 1.5);
// estimate_zero3_model_states_mem_needs, one row of _all_cold.
DeepSpeedEstimate deepspeed_zero3_estimate(int64_t params, int64_t largest_layer_params,
                                           int gpus_per_node, int nodes, bool cpu_offload,
                                           bool cpu_offload_params, bool zero_init,
                                           double buffer_factor = 1.5);

}  // namespace zt
