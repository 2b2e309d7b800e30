// The block parsers parse_config calls, one per DeepSpeed block and one for the zt block. Each
// checks its block's keys (unknown keys, rule keys with notes or refusals), reads the values
// through the Reader and returns the block's struct. Internal to runtime/config.
#pragma once

#include "runtime/config.h"
#include "runtime/config/reader.h"

namespace zt::config_detail {

inline constexpr std::string_view kTbs = "train_batch_size";
inline constexpr std::string_view kMicro = "train_micro_batch_size_per_gpu";
inline constexpr std::string_view kGas = "gradient_accumulation_steps";

// deepspeed_blocks.cpp
void resolve_batch(const Reader& r, const json& j, int world, Config& c);
ZeroConfig parse_zero(const Reader& r, const json* block);
void parse_precision(const Reader& r, const json& j, Config& c);
// "tensorboard" and "csv_monitor" into c.tensorboard, c.csv_monitor.
void parse_monitors(const Reader& r, const json& j, Config& c);
ActivationCheckpointing parse_checkpointing(const Reader& r, const json* block);
// `nvme_offload`: the optimizer is offloaded to NVMe, which the block tunes (else a note says it
// has no effect).
AioConfig parse_aio(const Reader& r, const json* block, bool nvme_offload);

// optimizer_blocks.cpp
OptimizerConfig parse_optimizer(const Reader& r, const json* block);
SchedulerConfig parse_scheduler(const Reader& r, const json* block, double optimizer_lr);

// zt_block.cpp
ZtConfig parse_zt(const Reader& r, const json& j);

}  // namespace zt::config_detail
