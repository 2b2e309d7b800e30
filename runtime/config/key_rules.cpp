// The rule tables for DeepSpeed keys ZeroTrain does not implement, block by block, and the one
// function that applies them. Each reason says what ZeroTrain does instead; each refusal says
// what to write instead. Classes and reasons are listed in docs/configs.md.
#include "runtime/config/key_rules.h"

namespace zt::config_detail {

namespace {

using E = Expect;
using H = Harmless;

// ---- top level -------------------------------------------------------------------------------

constexpr KeyRule kTopLevel[] = {
    {"prescale_gradients", E::kBool, H::kAlways,
     "gradients are always divided by the world size before the reduction (each rank's loss is "
     "scaled by 1/world)",
     ""},
    {"gradient_predivide_factor", E::kNumber, H::kAlways,
     "gradients are divided by the whole world size before the reduction, so no other "
     "pre-division applies",
     "", Bound::kPositive},
    {"gradient_allreduce_op", E::kString, H::kMean, "gradients are always averaged over ranks",
     "is not supported: ZeroTrain always averages gradients over ranks (\"mean\"); for a sum, "
     "scale optimizer.params.lr by the world size instead"},
    {"sparse_gradients", E::kBool, H::kFalse,
     "embedding gradients are dense rows of the unit's flat buffer",
     "is not supported: embedding gradients are dense rows of the unit's flat buffer; set it to "
     "false"},
    {"managed_gradient_accumulation", E::kBool, H::kAlways,
     "zt-train runs the loop itself and steps after gradient_accumulation_steps micro-batches", ""},
    {"zero_allow_untested_optimizer", E::kBool, H::kAlways,
     "the optimizer is one of ZeroTrain's own (Adam, AdamW, SGD), each tested with every stage",
     ""},
    {"zero_force_ds_cpu_optimizer", E::kBool, H::kAlways,
     "it concerns DeepSpeed's CPU Adam under offload; ZeroTrain chooses its optimizer kernel "
     "itself",
     ""},
    {"dump_state", E::kBool, H::kAlways, "zt-train prints its own start-up summary", ""},
    {"memory_breakdown", E::kBool, H::kAlways,
     "zt-train always reports peak memory per category, at the end of the run and in "
     "metrics.jsonl",
     ""},
    {"dataloader_drop_last", E::kBool, H::kAlways, "zt-train's loader yields whole batches only",
     ""},
    {"disable_allgather", E::kBool, H::kAlways,
     "stages 0-2 always all-gather the updated working params", ""},
    {"graph_harvesting", E::kBool, H::kAlways, "ZeroTrain does not capture CUDA graphs", ""},
    {"use_data_before_expert_parallelism", E::kBool, H::kAlways,
     "ZeroTrain has no expert parallelism", ""},
    {"seq_parallel_communication_data_type", E::kString, H::kAlways,
     "ZeroTrain has no sequence parallelism", ""},
    {"sequence_parallel_size", E::kInteger, H::kOne, "ZeroTrain has no sequence parallelism",
     "is not supported: ZeroTrain has no sequence parallelism; remove it or set 1"},
    {"flops_profiler", E::kObject, H::kAlways,
     "ZeroTrain has no flops profiler; metrics.jsonl has tokens/s per step and zt-bench reports "
     "MFU",
     ""},
    {"wandb", E::kObject, H::kAlways,
     "zt-train logs to no tracker; its metrics go to zt.output_dir/metrics.jsonl", ""},
    {"comet", E::kObject, H::kAlways,
     "zt-train logs to no tracker; its metrics go to zt.output_dir/metrics.jsonl", ""},
    {"comms_logger", E::kObject, H::kAlways,
     "ZeroTrain has no communication logger; zt-bench measures each collective", ""},
    {"timers", E::kObject, H::kAlways, "zt-train reports step time and tokens/s itself", ""},
    {"checkpoint", E::kObject, H::kAlways,
     "ZeroTrain checkpoints are its own (a manifest and one shard file per rank), loadable at any "
     "world size",
     ""},
    {"compile", E::kObject, H::kAlways,
     "ZeroTrain is compiled C++; there is no graph compiler to configure", ""},
    {"elasticity", E::kObject, H::kDisabled, "ZeroTrain has no elastic batch-size search",
     "is not supported: ZeroTrain fixes the world size at launch (its checkpoints load into any "
     "world size); remove the block or set \"enabled\": false"},
    {"autotuning", E::kObject, H::kDisabled, "ZeroTrain has no autotuner",
     "is not supported: ZeroTrain has no autotuner; zt-estimate predicts memory per stage, choose "
     "batch sizes from it; remove the block or set \"enabled\": false"},
    {"eigenvalue", E::kObject, H::kDisabled, "ZeroTrain computes no Hessian eigenvalues",
     "is not supported: ZeroTrain computes no Hessian eigenvalues; remove the block or set "
     "\"enabled\": false"},
    {"progressive_layer_drop", E::kObject, H::kDisabled,
     "ZeroTrain runs every transformer block every step",
     "is not supported: ZeroTrain runs every transformer block every step (no layer drop); "
     "remove the block or set \"enabled\": false"},
    {"curriculum_learning", E::kObject, H::kDisabled,
     "ZeroTrain has no curriculum; batches come from zt.train_data",
     "is not supported: ZeroTrain has no curriculum (batches come from zt.train_data, in order or "
     "with zt.shuffle); remove the block or set \"enabled\": false"},
    {"data_efficiency", E::kObject, H::kDisabled,
     "ZeroTrain has no data sampling or routing; batches come from zt.train_data",
     "is not supported: ZeroTrain has no data sampling or routing (batches come from "
     "zt.train_data); remove the block or set \"enabled\": false"},
    {"quantize_training", E::kObject, H::kDisabled, "ZeroTrain has no quantization-aware training",
     "is not supported: ZeroTrain has no quantization-aware training; train with the fp16 or "
     "bf16 block; remove the block or set \"enabled\": false"},
    {"hybrid_engine", E::kObject, H::kDisabled, "ZeroTrain has no inference engine to switch to",
     "is not supported: ZeroTrain has no hybrid training/inference engine; remove the block or "
     "set \"enabled\": false"},
    {"amp", E::kObject, H::kDisabled, "mixed precision comes from the fp16 or bf16 block",
     "is not supported: Apex AMP is not used; use the fp16 or bf16 block (16-bit compute, fp32 "
     "master weights)"},
    {"torch_autocast", E::kObject, H::kDisabled,
     "mixed precision comes from the fp16 or bf16 block",
     "is not supported: there is no autocast; use the fp16 or bf16 block (16-bit compute, fp32 "
     "master weights)"},
    {"expert_parallel", E::kObject, H::kDisabled, "ZeroTrain's models have no experts",
     "is not supported: ZeroTrain's models have no mixture-of-experts layers; remove the block"},
    {"moe", E::kObject, H::kDisabled, "ZeroTrain's models have no experts",
     "is not supported: ZeroTrain's models have no mixture-of-experts layers; remove the block"},
    {"tensor_parallel", E::kObject, H::kTpOne, "autotp_size 1 is no tensor parallelism",
     "is not supported: ZeroTrain has no tensor parallelism; remove the block and shard with "
     "zero_optimization.stage 3"},
    {"pipeline", E::kObject, H::kNever, "",
     "is not supported: ZeroTrain is data-parallel (ZeRO) only, with no pipeline stages; remove "
     "the block and shard with zero_optimization.stage 3"},
    {"sparse_attention", E::kObject, H::kNever, "",
     "is not supported: ZeroTrain's GPT-2 uses dense causal attention; remove the block"},
    {"compression_training", E::kObject, H::kNever, "",
     "is not supported: ZeroTrain has no layer reduction, quantization or pruning; remove the "
     "block (train, then compress the exported weights elsewhere)"},
};

// ---- zero_optimization -----------------------------------------------------------------------

constexpr std::string_view kNoZeroPlusPlus =
    "is not supported: ZeRO++ quantized communication is not built; set it to false "
    "(communication_data_type chooses a 16-bit reduction)";
constexpr std::string_view kWholeUnits =
    "ZeroTrain gathers whole units (one transformer block each) with one all-gather into the "
    "unit's flat buffer";

constexpr KeyRule kZero[] = {
    {"contiguous_gradients", E::kBool, H::kAlways,
     "gradients are always contiguous flat buffers, one per unit", ""},
    {"reduce_scatter", E::kBool, H::kAlways, "stages 1-3 always reduce-scatter gradients", ""},
    {"allgather_partitions", E::kBool, H::kAlways,
     "updated parameters are always all-gathered, never broadcast", ""},
    {"sub_group_size", E::kInteger, H::kAlways,
     "it sizes the optimizer's sub-groups; ZeroTrain steps each unit's shard, and an offloaded "
     "optimizer streams it in chunks of 2^20 elements",
     ""},
    {"load_from_fp32_weights", E::kBool, H::kAlways,
     "ZeroTrain checkpoints hold the fp32 master and a load restores it", ""},
    {"grad_hooks", E::kBool, H::kAlways,
     "stages 2/3 reduce a unit's gradients as its backward finishes, stages 0/1 after the last "
     "micro-batch",
     ""},
    {"round_robin_gradients", E::kBool, H::kAlways,
     "it spreads gradient copies for CPU offload across ranks; ZeroTrain's offloaded optimizer "
     "copies each rank's own gradient shard to the host a chunk at a time",
     ""},
    {"elastic_checkpoint", E::kBool, H::kAlways,
     "every ZeroTrain checkpoint loads into any world size", ""},
    {"ignore_unused_parameters", E::kBool, H::kAlways,
     "every parameter of a ZeroTrain model is used", ""},
    {"legacy_stage1", E::kBool, H::kAlways, "ZeroTrain has one stage 1", ""},
    {"use_multi_rank_bucket_allreduce", E::kBool, H::kAlways,
     "gradients are reduced per unit, not in per-rank buckets", ""},
    {"stage3_model_persistence_threshold", E::kInteger, H::kAlways,
     "ZeroTrain puts no cap on the total size of persistent parameters", ""},
    {"model_persistence_threshold", E::kInteger, H::kAlways,
     "ZeroTrain puts no cap on the total size of persistent parameters", ""},
    {"stage3_module_granularity_threshold", E::kInteger, H::kAlways, kWholeUnits, ""},
    {"module_granularity_threshold", E::kInteger, H::kAlways, kWholeUnits, ""},
    {"stage3_use_all_reduce_for_fetch_params", E::kBool, H::kAlways, kWholeUnits, ""},
    {"use_all_reduce_for_fetch_params", E::kBool, H::kAlways, kWholeUnits, ""},
    {"stage3_allgather_sequential", E::kBool, H::kAlways, kWholeUnits, ""},
    {"allgather_sequential", E::kBool, H::kAlways, kWholeUnits, ""},
    {"stage3_partition_stream_chunk_size", E::kInteger, H::kAlways,
     "shards are cut from the flat buffer, never from a materialised full parameter", ""},
    {"partition_stream_chunk_size", E::kInteger, H::kAlways,
     "shards are cut from the flat buffer, never from a materialised full parameter", ""},
    {"memory_efficient_linear", E::kBool, H::kAlways,
     "stage 3 gathers a unit again for its backward instead of keeping its full weights", ""},
    {"pipeline_loading_checkpoint", E::kBool, H::kAlways, "ZeroTrain has no pipeline mode", ""},
    {"override_module_apply", E::kBool, H::kAlways, "ZeroTrain has no module hooks to override",
     ""},
    {"log_trace_cache_warnings", E::kBool, H::kAlways,
     "the unit order comes from the model, never from a traced cache", ""},
    {"enable_sanity_checks", E::kBool, H::kAlways,
     "the parameter state machine always checks its transitions", ""},
    {"save_muon_momentum_buffer_in_memory", E::kBool, H::kAlways, "ZeroTrain has no Muon optimizer",
     ""},
    {"leaf_module", E::kObject, H::kAlways, "every transformer block is already one unit", ""},
    {"zeropp_loco_param", E::kObject, H::kAlways,
     "it tunes zero_quantized_gradients, which is not built", ""},
    {"zero_hpz_partition_size", E::kInteger, H::kOne, "1 is no secondary partition",
     "is not supported: hierarchical partitioning (ZeRO++ hpZ) is not built; remove it or set 1"},
    {"zero_quantized_weights", E::kBool, H::kFalse, "false is what ZeroTrain does",
     kNoZeroPlusPlus},
    {"zero_quantized_nontrainable_weights", E::kBool, H::kFalse, "false is what ZeroTrain does",
     kNoZeroPlusPlus},
    {"zero_quantized_gradients", E::kBool, H::kFalse, "false is what ZeroTrain does",
     kNoZeroPlusPlus},
    {"mics_shard_size", E::kInteger, H::kMinusOne, "-1 is no MiCS sub-group; shards span all ranks",
     "is not supported: MiCS sub-group sharding is not built (shards span all ranks); remove it"},
    {"mics_hierarchical_params_gather", E::kBool, H::kFalse, "false is what ZeroTrain does",
     "is not supported: MiCS is not built; set it to false"},
    {"zenflow", E::kObject, H::kNever, "",
     "is not supported: ZenFlow (stall-free offload) is not built; remove the block"},
};

// ---- precision -------------------------------------------------------------------------------

constexpr KeyRule kFp16[] = {
    {"auto_cast", E::kBool, H::kAlways,
     "inputs are token ids; with fp16 enabled the model computes in fp16 throughout", ""},
};

constexpr std::string_view kNoBf16LossScale =
    "bf16 training uses no loss scale (a key of the fp16 block; DeepSpeed ignores it here too)";

constexpr KeyRule kBf16[] = {
    {"bf16_optimizer_states", E::kBool, H::kFalse, "optimizer states are fp32",
     "is not supported: ZeroTrain keeps optimizer states in fp32; set it to false"},
    {"immediate_grad_update", E::kBool, H::kAlways,
     "gradients go to the gradient store as each unit's backward finishes (stages 2/3) or after "
     "the last micro-batch (0/1)",
     ""},
    {"check_grad_overflow", E::kBool, H::kAlways,
     "bf16 training needs no overflow check, and ZeroTrain runs none", ""},
    // The fp16 block's loss-scaling keys: DeepSpeed reads none of them from the bf16 block.
    {"loss_scale", E::kNumber, H::kAlways, kNoBf16LossScale, "", Bound::kNonNegative},
    {"initial_scale_power", E::kInteger, H::kAlways, kNoBf16LossScale, "", Bound::kNonNegative},
    {"loss_scale_window", E::kNumber, H::kAlways, kNoBf16LossScale, "", Bound::kPositive},
    {"hysteresis", E::kInteger, H::kAlways, kNoBf16LossScale, "", Bound::kPositive},
    {"consecutive_hysteresis", E::kBool, H::kAlways, kNoBf16LossScale, ""},
    {"min_loss_scale", E::kNumber, H::kAlways, kNoBf16LossScale, "", Bound::kPositive},
};

// ---- optimizer and scheduler -----------------------------------------------------------------

constexpr KeyRule kOptimizerBlock[] = {
    {"legacy_fusion", E::kBool, H::kAlways, "ZeroTrain has one optimizer kernel per type", ""},
};

#define ZT_TORCH_OPTIMIZER_RULES                                                                  \
  {"foreach", E::kBool, H::kAlways, "ZeroTrain runs its own optimizer kernel over each shard",    \
   ""},                                                                                           \
      {"fused", E::kBool, H::kAlways, "ZeroTrain runs its own fused kernel over each shard", ""}, \
      {"capturable", E::kBool, H::kAlways, "ZeroTrain does not capture CUDA graphs", ""},         \
      {"differentiable", E::kBool, H::kAlways, "optimizer steps are never differentiated", ""}, { \
    "maximize", E::kBool, H::kFalse, "ZeroTrain minimises the loss",                              \
        "is not supported: ZeroTrain minimises the loss; set it to false"                         \
  }

constexpr KeyRule kAdam[] = {
    ZT_TORCH_OPTIMIZER_RULES,
    {"torch_adam", E::kBool, H::kAlways, "ZeroTrain runs its own Adam kernel over each shard", ""},
    {"amsgrad", E::kBool, H::kFalse, "false is what ZeroTrain does",
     "is not supported: AMSGrad is not built; set it to false"},
};

constexpr KeyRule kAdamW[] = {
    ZT_TORCH_OPTIMIZER_RULES,
    {"torch_adam", E::kBool, H::kAlways, "ZeroTrain runs its own Adam kernel over each shard", ""},
    {"amsgrad", E::kBool, H::kFalse, "false is what ZeroTrain does",
     "is not supported: AMSGrad is not built; set it to false"},
    {"adam_w_mode", E::kBool, H::kTrue, "AdamW always decouples weight decay",
     "false asks for L2 weight decay, but AdamW always decouples it; use \"type\": \"Adam\" with "
     "adam_w_mode false"},
};

constexpr KeyRule kSgd[] = {
    ZT_TORCH_OPTIMIZER_RULES,
    {"dampening", E::kNumber, H::kZero, "0 is what ZeroTrain does",
     "is not supported: dampened momentum is not built; set it to 0"},
    {"nesterov", E::kBool, H::kFalse, "false is what ZeroTrain does",
     "is not supported: Nesterov momentum is not built; set it to false"},
};
#undef ZT_TORCH_OPTIMIZER_RULES

constexpr KeyRule kSchedulerParams[] = {
    {"last_batch_iteration", E::kInteger, H::kMinusOne, "-1 starts the schedule at step 0",
     "is not supported: a schedule always starts at step 0 of the run; remove it or set -1"},
};

// ---- activation checkpointing ----------------------------------------------------------------

constexpr KeyRule kCheckpointing[] = {
    {"partition_activations", E::kBool, H::kAlways,
     "DeepSpeed partitions checkpointed activations across model-parallel ranks, and ZeroTrain "
     "has no model parallelism (a model-parallel size of 1: nothing to partition)",
     ""},
    {"cpu_checkpointing", E::kBool, H::kFalse, "false is what ZeroTrain does",
     "is not supported yet; set it to false"},
    {"contiguous_memory_optimization", E::kBool, H::kAlways,
     "checkpointed blocks keep their inputs in the engine's activation store, with no separate "
     "contiguous buffer",
     ""},
    {"synchronize_checkpoint_boundary", E::kBool, H::kAlways,
     "it is a debugging synchronisation; ZeroTrain orders a rank's compute on one stream", ""},
    {"profile", E::kBool, H::kAlways, "ZeroTrain has no checkpointing profiler", ""},
};

bool harmless(const KeyRule& rule, const json& v) {
  switch (rule.harmless) {
    case H::kAlways: return true;
    case H::kNever: return false;
    case H::kFalse: return v.is_boolean() && !v.get<bool>();
    case H::kTrue: return v.is_boolean() && v.get<bool>();
    case H::kDisabled: {
      auto it = v.find("enabled");
      return it != v.end() && it->is_boolean() && !it->get<bool>();
    }
    case H::kOne: return v.is_number() && v.get<double>() == 1.0;
    case H::kMinusOne: return v.is_number() && v.get<double>() == -1.0;
    case H::kZero: return v.is_number() && v.get<double>() == 0.0;
    case H::kMean: return v.is_string() && v.get<std::string>() == "mean";
    case H::kTpOne: {
      auto it = v.find("autotp_size");
      return it == v.end() || it->is_null() || (it->is_number() && it->get<double>() <= 1.0);
    }
  }
  return false;
}

void check_type(const Reader& r, const json& v, const std::string& path, Expect expect) {
  switch (expect) {
    case E::kAny: return;
    case E::kBool: r.boolean(v, path); return;
    case E::kNumber: r.number(v, path); return;
    case E::kInteger: r.integer(v, path); return;
    case E::kString: r.string(v, path); return;
    case E::kObject: r.expect_object(v, path); return;
  }
}

}  // namespace

std::vector<std::string_view> rule_keys(std::span<const KeyRule> rules) {
  std::vector<std::string_view> keys;
  for (const KeyRule& rule : rules) keys.push_back(rule.key);
  return keys;
}

void apply_rules(const Reader& r, const json& block, std::string_view path,
                 std::span<const KeyRule> rules) {
  for (const KeyRule& rule : rules) {
    const json* v = Reader::find(block, rule.key);
    if (!v) continue;
    const std::string key_path = join(path, rule.key);
    check_type(r, *v, key_path, rule.expect);
    if (v->is_number()) r.check_bound(*v, rule.bound, key_path);
    if (!harmless(rule, *v)) r.fail(fmt::format("'{}' {}", key_path, rule.refusal));
    if (rule.harmless == H::kDisabled) {
      r.note(
          fmt::format("'{}' is disabled and has no effect in ZeroTrain: {}", key_path, rule.why));
    } else {
      r.note(fmt::format("'{}' has no effect in ZeroTrain: {}", key_path, rule.why));
    }
  }
}

std::span<const KeyRule> top_level_rules() { return kTopLevel; }
std::span<const KeyRule> zero_rules() { return kZero; }
std::span<const KeyRule> fp16_rules() { return kFp16; }
std::span<const KeyRule> bf16_rules() { return kBf16; }
std::span<const KeyRule> optimizer_block_rules() { return kOptimizerBlock; }
std::span<const KeyRule> adam_param_rules(bool adamw) {
  return adamw ? std::span<const KeyRule>(kAdamW) : std::span<const KeyRule>(kAdam);
}
std::span<const KeyRule> sgd_param_rules() { return kSgd; }
std::span<const KeyRule> scheduler_param_rules() { return kSchedulerParams; }
std::span<const KeyRule> checkpointing_rules() { return kCheckpointing; }

}  // namespace zt::config_detail
