// Tests for runtime/config's handling of DeepSpeed configs as users write them: DeepSpeed's
// aliases and older spellings, integral floats, comment keys, keys accepted with one start-up
// note, blocks and values refused by name with a reason, and suggestions for misspelt keys among
// all of them. The Hugging Face Trainer's "auto" and the shipped DeepSpeed files:
// deepspeed_auto_test.cpp; the helpers both use: deepspeed_test_util.h.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

#include "deepspeed_test_util.h"
#include "runtime/config.h"
#include "runtime/status.h"

namespace zt {
namespace {

using nlohmann::json;
using namespace deepspeed_test;

// ---- aliases, older spellings, numbers, comments ---------------------------------------------

TEST(DeepSpeedKeys, Stage3KeysAcceptTheirUnprefixedAliases) {
  Config c = parse(with(minimal(), "/zero_optimization",
                        {{"stage", 3},
                         {"prefetch_bucket_size", 111},
                         {"param_persistence_threshold", 222},
                         {"max_live_parameters", 333},
                         {"max_reuse_distance", 444},
                         {"gather_16bit_weights_on_model_save", true}}));
  const ZeroConfig& z = c.zero_optimization;
  EXPECT_EQ(z.stage3_prefetch_bucket_size, 111);
  EXPECT_EQ(z.stage3_param_persistence_threshold, 222);
  EXPECT_EQ(z.stage3_max_live_parameters, 333);
  EXPECT_EQ(z.stage3_max_reuse_distance, 444);
  EXPECT_TRUE(z.stage3_gather_16bit_weights_on_model_save);
  EXPECT_TRUE(c.notes.empty());
  Config prefixed = parse(with(
      minimal(), "/zero_optimization",
      {{"stage3_max_live_parameters", 5}, {"stage3_gather_16bit_weights_on_model_save", true}}));
  EXPECT_EQ(prefixed.zero_optimization.stage3_max_live_parameters, 5);
  EXPECT_TRUE(prefixed.zero_optimization.stage3_gather_16bit_weights_on_model_save);
  EXPECT_TRUE(parse(with(minimal(), "/zero_optimization",
                         {{"stage3_gather_fp16_weights_on_model_save", true}}))
                  .zero_optimization.stage3_gather_16bit_weights_on_model_save);
}

TEST(DeepSpeedKeys, BothSpellingsAreAnError) {
  EXPECT_EQ(
      input_error(with(minimal(), "/zero_optimization",
                       {{"stage3_max_live_parameters", 1}, {"max_live_parameters", 1}})),
      "'zero_optimization.stage3_max_live_parameters' and 'zero_optimization.max_live_parameters' "
      "are two spellings of the same key; give only one");
  EXPECT_CONTAINS(
      input_error(with(minimal(), "/zero_optimization",
                       {{"prefetch_bucket_size", 1}, {"stage3_prefetch_bucket_size", 1}})),
      "two spellings of the same key");
  EXPECT_CONTAINS(
      input_error(with(minimal(), "/zero_optimization",
                       {{"stage3_gather_fp16_weights_on_model_save", true},
                        {"gather_16bit_weights_on_model_save", true}})),
      "older spelling of 'zero_optimization.stage3_gather_16bit_weights_on_model_save'");
}

TEST(DeepSpeedKeys, ErrorsNameTheSpellingTheFileUsed) {
  EXPECT_EQ(input_error(with(minimal(), "/zero_optimization", {{"max_reuse_distance", -1}})),
            "'zero_optimization.max_reuse_distance' must be >= 0, got -1");
  EXPECT_EQ(input_error(with(minimal(), "/zero_optimization", {{"max_live_parameters", 1.5}})),
            "'zero_optimization.max_live_parameters' must be an integer, got number 1.5");
}

TEST(DeepSpeedKeys, IntegralFloatsAreIntegersEverywhere) {
  Config c = parse(with(minimal(), "/zero_optimization",
                        {{"stage", 3},
                         {"stage3_max_live_parameters", 1e9},
                         {"stage3_max_reuse_distance", 1e9},
                         {"allgather_bucket_size", 2e8},
                         {"sub_group_size", 1e12}}));
  EXPECT_EQ(c.zero_optimization.stage3_max_live_parameters, 1'000'000'000);
  EXPECT_EQ(c.zero_optimization.stage3_max_reuse_distance, 1'000'000'000);
  EXPECT_EQ(c.zero_optimization.allgather_bucket_size, 200'000'000);
  EXPECT_EQ(
      parse(with(minimal(), "/train_micro_batch_size_per_gpu", 4.0)).train_micro_batch_size_per_gpu,
      4);
  EXPECT_EQ(input_error(with(minimal(), "/zero_optimization", {{"sub_group_size", 1.5}})),
            "'zero_optimization.sub_group_size' must be an integer, got number 1.5");
}

TEST(DeepSpeedKeys, UnderscoreKeysAreCommentsAtAnyLevel) {
  json j = minimal();
  j["_comment"] = "top";
  j["zero_optimization"] = {{"stage", 2}, {"_note", {1, 2}}};
  j["optimizer"] = {
      {"type", "AdamW"}, {"_why", "x"}, {"params", {{"lr", 0.1}, {"_source", "paper"}}}};
  j["scheduler"] = {{"type", "WarmupLR"}, {"params", {{"_c", 1}}}};
  j["fp16"] = {{"enabled", false}, {"__", true}};
  j["zt"]["_c"] = 1;
  j["zt"]["model"] = {{"n_layer", 2}, {"_c", "two"}};
  Config c = parse(j);
  EXPECT_EQ(c.zero_optimization.stage, 2);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.1);
  EXPECT_EQ(c.zt.model.n_layer, 2);
  EXPECT_TRUE(c.notes.empty());
}

TEST(DeepSpeedKeys, MisspeltKeysStillGetSuggestions) {
  EXPECT_EQ(input_error(with(minimal(), "/zero_optimization", {{"contigous_gradients", true}})),
            "unknown key 'zero_optimization.contigous_gradients' (did you mean "
            "'zero_optimization.contiguous_gradients'?)");
  EXPECT_EQ(input_error(with(minimal(), "/zero_optimization", {{"max_live_parameter", 1}})),
            "unknown key 'zero_optimization.max_live_parameter' (did you mean "
            "'zero_optimization.max_live_parameters'?)");
  EXPECT_EQ(input_error(with(minimal(), "/tensorbord", json::object())),
            "unknown key 'tensorbord' (did you mean 'tensorboard'?)");
  EXPECT_CONTAINS(input_error(with(minimal(), "/optimizer",
                                   {{"type", "Adam"}, {"params", {{"torch_adamm", true}}}})),
                  "(did you mean 'optimizer.params.torch_adam'?)");
}

// ---- older offload spellings -----------------------------------------------------------------

TEST(DeepSpeedKeys, OlderOffloadSpellingsMapOntoTheBlocks) {
  Config c = parse(with(minimal(), "/zero_optimization",
                        {{"stage", 3},
                         {"cpu_offload", true},
                         {"cpu_offload_param", true},
                         {"cpu_offload_use_pin_memory", true}}));
  EXPECT_EQ(c.zero_optimization.offload_optimizer.device, OffloadDevice::kCpu);
  EXPECT_EQ(c.zero_optimization.offload_param.device, OffloadDevice::kCpu);
  EXPECT_TRUE(c.zero_optimization.offload_optimizer.pin_memory);
  EXPECT_TRUE(c.zero_optimization.offload_param.pin_memory);
  Config off = parse(with(minimal(), "/zero_optimization", {{"stage", 2}, {"cpu_offload", false}}));
  EXPECT_EQ(off.zero_optimization.offload_optimizer.device, OffloadDevice::kNone);
  EXPECT_EQ(input_error(with(
                minimal(), "/zero_optimization",
                {{"stage", 2}, {"cpu_offload", true}, {"offload_optimizer", {{"device", "cpu"}}}})),
            "'zero_optimization.cpu_offload' is the older spelling of "
            "'zero_optimization.offload_optimizer'; "
            "give only one");
  // The stage rules apply to the older spelling too.
  EXPECT_CONTAINS(input_error(with(minimal(), "/zero_optimization",
                                   {{"stage", 2}, {"cpu_offload_param", true}})),
                  "'zero_optimization.offload_param' needs zero_optimization.stage 3");
}

// ---- notes -----------------------------------------------------------------------------------

struct NoteCase {
  std::string pointer;  // where the key goes
  json value;
  std::string key;  // the path the note names
};

TEST(DeepSpeedKeys, NoEffectKeysGetExactlyOneNote) {
  const NoteCase cases[] = {
      {"/prescale_gradients", true, "prescale_gradients"},
      {"/gradient_predivide_factor", 2.0, "gradient_predivide_factor"},
      {"/gradient_allreduce_op", "mean", "gradient_allreduce_op"},
      {"/sparse_gradients", false, "sparse_gradients"},
      {"/managed_gradient_accumulation", true, "managed_gradient_accumulation"},
      {"/zero_allow_untested_optimizer", true, "zero_allow_untested_optimizer"},
      {"/zero_force_ds_cpu_optimizer", false, "zero_force_ds_cpu_optimizer"},
      {"/dump_state", true, "dump_state"},
      {"/memory_breakdown", true, "memory_breakdown"},
      {"/dataloader_drop_last", true, "dataloader_drop_last"},
      {"/flops_profiler", {{"enabled", true}, {"profile_step", 1}}, "flops_profiler"},
      {"/wandb", {{"enabled", true}, {"project", "p"}}, "wandb"},
      {"/comet", {{"enabled", false}}, "comet"},
      {"/comms_logger", {{"enabled", true}}, "comms_logger"},
      {"/checkpoint", {{"tag_validation", "Warn"}}, "checkpoint"},
      {"/compile", {{"deepcompile", false}}, "compile"},
      {"/elasticity", {{"enabled", false}}, "elasticity"},
      {"/autotuning", {{"enabled", false}}, "autotuning"},
      {"/progressive_layer_drop", {{"enabled", false}}, "progressive_layer_drop"},
      {"/curriculum_learning", {{"enabled", false}}, "curriculum_learning"},
      {"/data_efficiency", {{"enabled", false}}, "data_efficiency"},
      {"/amp", {{"enabled", false}}, "amp"},
      {"/torch_autocast", {{"enabled", false}}, "torch_autocast"},
      {"/tensor_parallel", {{"autotp_size", 1}}, "tensor_parallel"},
      {"/sequence_parallel_size", 1, "sequence_parallel_size"},
      {"/aio", {{"block_size", 1048576}}, "aio"},
      {"/zero_optimization/contiguous_gradients", true, "zero_optimization.contiguous_gradients"},
      {"/zero_optimization/reduce_scatter", true, "zero_optimization.reduce_scatter"},
      {"/zero_optimization/allgather_partitions", true, "zero_optimization.allgather_partitions"},
      {"/zero_optimization/sub_group_size", 1e9, "zero_optimization.sub_group_size"},
      {"/zero_optimization/load_from_fp32_weights", true,
       "zero_optimization.load_from_fp32_weights"},
      {"/zero_optimization/round_robin_gradients", false,
       "zero_optimization.round_robin_gradients"},
      {"/zero_optimization/elastic_checkpoint", false, "zero_optimization.elastic_checkpoint"},
      {"/zero_optimization/ignore_unused_parameters", true,
       "zero_optimization.ignore_unused_parameters"},
      {"/zero_optimization/stage3_module_granularity_threshold", 0,
       "zero_optimization.stage3_module_granularity_threshold"},
      {"/zero_optimization/zero_hpz_partition_size", 1,
       "zero_optimization.zero_hpz_partition_size"},
      {"/zero_optimization/zero_quantized_weights", false,
       "zero_optimization.zero_quantized_weights"},
      {"/zero_optimization/zero_quantized_gradients", false,
       "zero_optimization.zero_quantized_gradients"},
      {"/zero_optimization/mics_shard_size", -1, "zero_optimization.mics_shard_size"},
      {"/fp16/auto_cast", false, "fp16.auto_cast"},
      {"/bf16/bf16_optimizer_states", false, "bf16.bf16_optimizer_states"},
      {"/activation_checkpointing/partition_activations", false,
       "activation_checkpointing.partition_activations"},
      {"/activation_checkpointing/partition_activations", true,
       "activation_checkpointing.partition_activations"},
      {"/bf16/loss_scale", 0, "bf16.loss_scale"},
      {"/bf16/initial_scale_power", 16, "bf16.initial_scale_power"},
      {"/bf16/loss_scale_window", 1000, "bf16.loss_scale_window"},
      {"/bf16/hysteresis", 2, "bf16.hysteresis"},
      {"/bf16/consecutive_hysteresis", false, "bf16.consecutive_hysteresis"},
      {"/bf16/min_loss_scale", 1, "bf16.min_loss_scale"},
      {"/activation_checkpointing/profile", true, "activation_checkpointing.profile"},
  };
  for (const NoteCase& c : cases) {
    SCOPED_TRACE(c.key);
    Config config = parse(with(minimal(), c.pointer, c.value));
    std::vector<std::string> found = notes_naming(config, c.key);
    ASSERT_EQ(found.size(), 1u);
    EXPECT_CONTAINS(found[0], "no effect in ZeroTrain");
    EXPECT_EQ(config.notes.size(), 1u);  // nothing else is noted
  }
}

TEST(DeepSpeedKeys, OptimizerAndSchedulerNoEffectParams) {
  for (const char* key : {"torch_adam", "fused", "foreach", "capturable", "differentiable"}) {
    Config c = parse(with(minimal(), "/optimizer", {{"type", "Adam"}, {"params", {{key, true}}}}));
    EXPECT_EQ(notes_naming(c, std::string("optimizer.params.") + key).size(), 1u) << key;
  }
  Config adamw = parse(
      with(minimal(), "/optimizer", {{"type", "AdamW"}, {"params", {{"adam_w_mode", true}}}}));
  EXPECT_EQ(notes_naming(adamw, "optimizer.params.adam_w_mode").size(), 1u);
  EXPECT_TRUE(adamw.optimizer.decoupled_weight_decay());
  Config sgd = parse(with(
      minimal(), "/optimizer",
      {{"type", "SGD"}, {"params", {{"momentum", 0.9}, {"nesterov", false}, {"dampening", 0}}}}));
  EXPECT_EQ(sgd.notes.size(), 2u);
  Config legacy =
      parse(with(minimal(), "/optimizer", {{"type", "AdamW"}, {"legacy_fusion", false}}));
  EXPECT_EQ(notes_naming(legacy, "optimizer.legacy_fusion").size(), 1u);
  Config warm = parse(with(minimal(), "/scheduler",
                           {{"type", "WarmupLR"}, {"params", {{"last_batch_iteration", -1}}}}));
  EXPECT_EQ(notes_naming(warm, "scheduler.params.last_batch_iteration").size(), 1u);
}

TEST(DeepSpeedKeys, OneCycleMomentumCyclingIsNoted) {
  json one_cycle = {{"type", "OneCycle"},
                    {"params", {{"cycle_min_lr", 1e-4}, {"cycle_max_lr", 1e-3}}}};
  Config implicit = parse(with(minimal(), "/scheduler", one_cycle));
  EXPECT_EQ(notes_naming(implicit, "scheduler.params.cycle_momentum").size(), 1u);  // on by default
  one_cycle["params"]["cycle_min_mom"] = 0.85;
  one_cycle["params"]["cycle_max_mom"] = 0.99;
  Config keys = parse(with(minimal(), "/scheduler", one_cycle));
  EXPECT_EQ(keys.notes.size(), 3u);
  EXPECT_EQ(notes_naming(keys, "scheduler.params.cycle_max_mom").size(), 1u);
  one_cycle["params"] = {{"cycle_max_lr", 1e-3}};
  EXPECT_EQ(input_error(with(minimal(), "/scheduler", one_cycle)),
            "missing required key 'scheduler.params.cycle_min_lr'");
}

// ---- refusals --------------------------------------------------------------------------------

struct RefusalCase {
  std::string pointer;
  json value;
  std::string message_start;  // the error begins with it
  std::string advice;         // and contains this
};

TEST(DeepSpeedKeys, UnbuiltFeaturesAreRefusedByNameWithWhatToDo) {
  const RefusalCase cases[] = {
      {"/sparse_attention",
       {{"mode", "fixed"}},
       "'sparse_attention' is not supported",
       "dense causal attention"},
      {"/pipeline", {{"stages", 2}}, "'pipeline' is not supported", "zero_optimization.stage 3"},
      {"/tensor_parallel",
       {{"autotp_size", 2}},
       "'tensor_parallel' is not supported",
       "zero_optimization.stage 3"},
      {"/moe", {{"enabled", true}}, "'moe' is not supported", "remove the block"},
      {"/compression_training", json::object(), "'compression_training' is not supported",
       "remove the block"},
      {"/progressive_layer_drop",
       {{"enabled", true}},
       "'progressive_layer_drop' is not supported",
       "\"enabled\": false"},
      {"/curriculum_learning",
       {{"enabled", true}},
       "'curriculum_learning' is not supported",
       "zt.shuffle"},
      {"/data_efficiency",
       {{"enabled", true}},
       "'data_efficiency' is not supported",
       "\"enabled\": false"},
      {"/autotuning", {{"enabled", true}}, "'autotuning' is not supported", "zt-estimate"},
      {"/elasticity", {{"enabled", true}}, "'elasticity' is not supported", "any world size"},
      {"/amp", {{"enabled", true}}, "'amp' is not supported", "fp16 or bf16 block"},
      {"/eigenvalue", {{"enabled", true}}, "'eigenvalue' is not supported", "\"enabled\": false"},
      {"/hybrid_engine",
       {{"enabled", true}},
       "'hybrid_engine' is not supported",
       "\"enabled\": false"},
      {"/sparse_gradients", true, "'sparse_gradients' is not supported", "set it to false"},
      {"/gradient_allreduce_op", "sum", "'gradient_allreduce_op' is not supported",
       "scale optimizer.params.lr"},
      {"/zero_optimization/zero_quantized_weights", true,
       "'zero_optimization.zero_quantized_weights' is not supported", "communication_data_type"},
      {"/zero_optimization/zero_hpz_partition_size", 8,
       "'zero_optimization.zero_hpz_partition_size' is not supported", "set 1"},
      {"/zero_optimization/zenflow", json::object(), "'zero_optimization.zenflow' is not supported",
       "remove"},
      {"/bf16/bf16_optimizer_states", true, "'bf16.bf16_optimizer_states' is not supported",
       "fp32"},
      {"/optimizer",
       {{"type", "Adam"}, {"params", {{"amsgrad", true}}}},
       "'optimizer.params.amsgrad' is not supported",
       "set it to false"},
      {"/optimizer",
       {{"type", "SGD"}, {"params", {{"nesterov", true}}}},
       "'optimizer.params.nesterov' is not supported",
       "false"},
      {"/scheduler",
       {{"type", "WarmupLR"}, {"params", {{"last_batch_iteration", 100}}}},
       "'scheduler.params.last_batch_iteration' is not supported",
       "set -1"},
  };
  for (const RefusalCase& c : cases) {
    SCOPED_TRACE(c.pointer);
    std::string message = input_error(with(minimal(), c.pointer, c.value));
    EXPECT_EQ(message.rfind(c.message_start, 0), 0u) << message;
    EXPECT_CONTAINS(message, c.advice);
  }
}

TEST(DeepSpeedKeys, UnbuiltOptimizersAreRefusedByName) {
  for (const char* type : {"OneBitAdam", "ZeroOneAdam", "OneBitLamb", "onebitadam"}) {
    std::string message = input_error(
        with(minimal(), "/optimizer", {{"type", type}, {"params", {{"freeze_step", 10}}}}));
    EXPECT_CONTAINS(message, "is not supported: it compresses gradient communication");
    EXPECT_CONTAINS(message, "use \"Adam\" or \"AdamW\"");
  }
  EXPECT_EQ(
      input_error(with(minimal(), "/optimizer", {{"type", "Lamb"}})),
      "'optimizer.type' \"Lamb\" is not supported: it needs a trust ratio per tensor, that is "
      "per-tensor norms across shards, which ZeroTrain does not build; use \"AdamW\"");
  EXPECT_CONTAINS(input_error(with(minimal(), "/optimizer", {{"type", "Muon"}})), "use \"AdamW\"");
}

TEST(DeepSpeedKeys, NoEffectKeysStillCheckTheirType) {
  EXPECT_EQ(input_error(with(minimal(), "/zero_optimization/contiguous_gradients", "yes")),
            "'zero_optimization.contiguous_gradients' must be a boolean (true or false), got "
            "string \"yes\"");
  EXPECT_EQ(input_error(with(minimal(), "/tensorboard", true)),
            "'tensorboard' must be an object, got boolean true");
}

// tensorboard and csv_monitor are read (zt-train writes them: train/monitors.h), with
// DeepSpeed's keys only and its default job name.
TEST(DeepSpeedKeys, MonitorBlocksAreRead) {
  const Config c = parse(with(with(minimal(), "/tensorboard",
                                   {{"enabled", true}, {"output_path", "tb"}, {"job_name", "j"}}),
                              "/csv_monitor", {{"enabled", true}}));
  EXPECT_TRUE(c.tensorboard.enabled);
  EXPECT_EQ(c.tensorboard.output_path, "tb");
  EXPECT_EQ(c.tensorboard.job_name, "j");
  EXPECT_TRUE(c.csv_monitor.enabled);
  EXPECT_EQ(c.csv_monitor.output_path, "");
  EXPECT_EQ(c.csv_monitor.job_name, "DeepSpeedJobName");
  EXPECT_FALSE(parse(minimal()).tensorboard.enabled);
  EXPECT_NE(
      input_error(with(minimal(), "/csv_monitor", {{"enabled", true}, {"flush", 1}})).find("flush"),
      std::string::npos);
  EXPECT_NE(input_error(with(minimal(), "/tensorboard", {{"enabled", true}, {"job_name", ""}}))
                .find("tensorboard.job_name"),
            std::string::npos);
}

}  // namespace
}  // namespace zt
