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

// tuning_block.cpp: zt.freeze and zt.lora of the zt block `zt` (either may be absent).
Tuning parse_tuning(const Reader& r, const json& zt);

// load.cpp: the JSON object in the file at `path` (a config file, a PEFT adapter_config.json).
// Unreadable files, malformed JSON (line and column), duplicate keys and a top level that is not
// an object are kInput errors naming `path`; `what` names the kind of file ("config file").
json read_json_object(const std::string& path, std::string_view what);

}  // namespace zt::config_detail
