// Tests for runtime/config's handling of DeepSpeed configs as users write them: DeepSpeed's
// aliases and older spellings, integral floats, comment keys, keys accepted with one start-up
// note, blocks and values refused by name with a reason, the Hugging Face Trainer's "auto"
// (resolved, recorded for the model, or named with the --set that fixes it), and suggestions
// for misspelt keys among all of them.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

#include "runtime/config.h"
#include "runtime/status.h"

namespace zt {
namespace {

using nlohmann::json;

const std::string kSource = "configs/ds.json";

json minimal() {
  return {{"train_micro_batch_size_per_gpu", 4},
          {"zt",
           {{"model", "gpt2-tiny"},
            {"seq_len", 64},
            {"train_data", "data/corpus/train.bin"},
            {"steps", 10}}}};
}

json with(json j, const std::string& pointer, const json& value) {
  j[json::json_pointer(pointer)] = value;
  return j;
}

Config parse(const json& j, int world = 1) { return parse_config(j, kSource, world); }

std::string input_error(const json& j, int world = 1) {
  try {
    parse(j, world);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput);
    EXPECT_EQ(e.message().find('\n'), std::string::npos) << e.message();
    EXPECT_EQ(e.message().rfind(kSource + ": ", 0), 0u) << e.message();
    return e.message().substr(kSource.size() + 2);
  }
  ADD_FAILURE() << "no error for " << j.dump();
  return {};
}

// The notes that name `key` (quoted, as every note quotes its key).
std::vector<std::string> notes_naming(const Config& c, const std::string& key) {
  std::vector<std::string> found;
  for (const std::string& n : c.notes) {
    EXPECT_EQ(n.find('\n'), std::string::npos) << n;
    if (n.find("'" + key + "'") != std::string::npos) found.push_back(n);
  }
  return found;
}

#define EXPECT_CONTAINS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

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
      {"/tensorboard", {{"enabled", true}, {"output_path", "x"}}, "tensorboard"},
      {"/wandb", {{"enabled", true}, {"project", "p"}}, "wandb"},
      {"/comet", {{"enabled", false}}, "comet"},
      {"/csv_monitor", {{"enabled", true}}, "csv_monitor"},
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
      {"/activation_checkpointing/partition_activations", true,
       "'activation_checkpointing.partition_activations' is not supported yet", "set it to false"},
      {"/optimizer",
       {{"type", "Adam"}, {"params", {{"amsgrad", true}}}},
       "'optimizer.params.amsgrad' is not supported",
       "set it to false"},
      {"/optimizer",
       {{"type", "Adam"}, {"params", {{"bias_correction", false}}}},
       "'optimizer.params.bias_correction' is not supported",
       "set it to true"},
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

// ---- "auto" ----------------------------------------------------------------------------------

TEST(DeepSpeedAuto, BatchKeyDerivedFromTheOtherTwo) {
  json j = minimal();
  j["train_batch_size"] = "auto";
  j["gradient_accumulation_steps"] = 2;
  Config c = parse(j, 2);
  EXPECT_EQ(c.train_batch_size, 16);
  ASSERT_EQ(notes_naming(c, "train_batch_size").size(), 1u);
  EXPECT_CONTAINS(notes_naming(c, "train_batch_size")[0], "resolved to 16");
  json micro = {{"train_batch_size", 32},
                {"train_micro_batch_size_per_gpu", "auto"},
                {"gradient_accumulation_steps", 2},
                {"zt", minimal()["zt"]}};
  Config m = parse(micro, 2);
  EXPECT_EQ(m.train_micro_batch_size_per_gpu, 8);
  EXPECT_EQ(notes_naming(m, "train_micro_batch_size_per_gpu").size(), 1u);
  // An absent gradient_accumulation_steps is DeepSpeed's 1, so micro and tbs determine the rest.
  Config t = parse(with(minimal(), "/train_batch_size", "auto"), 2);
  EXPECT_EQ(t.train_batch_size, 8);
}

TEST(DeepSpeedAuto, UnderivableKeysAreNamedInOneLineWithTheirFix) {
  json hf = {{"train_batch_size", "auto"},
             {"train_micro_batch_size_per_gpu", "auto"},
             {"gradient_accumulation_steps", "auto"},
             {"gradient_clipping", "auto"},
             {"optimizer",
              {{"type", "AdamW"},
               {"params",
                {{"lr", "auto"}, {"betas", "auto"}, {"eps", "auto"}, {"weight_decay", "auto"}}}}},
             {"scheduler",
              {{"type", "WarmupDecayLR"},
               {"params",
                {{"warmup_min_lr", "auto"},
                 {"warmup_max_lr", "auto"},
                 {"warmup_num_steps", "auto"},
                 {"total_num_steps", "auto"}}}}},
             {"zt", minimal()["zt"]}};
  std::string message = input_error(hf, 2);
  for (const char* key :
       {"'train_micro_batch_size_per_gpu'", "'gradient_accumulation_steps'", "'train_batch_size'",
        "'optimizer.params.lr'", "'optimizer.params.betas'", "'optimizer.params.eps'",
        "'optimizer.params.weight_decay'", "'scheduler.params.warmup_max_lr'",
        "'scheduler.params.warmup_num_steps'", "'gradient_clipping'"}) {
    EXPECT_CONTAINS(message, key);
  }
  EXPECT_CONTAINS(message, "\"auto\", which the Hugging Face Trainer fills in");
  for (const char* fix :
       {"--set train_micro_batch_size_per_gpu=8", "--set gradient_accumulation_steps=1",
        "--set optimizer.params.lr=5e-05", "--set optimizer.params.betas=[0.9,0.999]",
        "--set optimizer.params.eps=1e-08", "--set optimizer.params.weight_decay=0.0",
        "--set scheduler.params.warmup_num_steps=1", "--set gradient_clipping=1.0"}) {
    EXPECT_CONTAINS(message, fix);
  }
  // Applying the fixes leaves only derivable "auto" values, each resolved with a note.
  json fixed = hf;
  fixed["train_micro_batch_size_per_gpu"] = 8;
  fixed["gradient_accumulation_steps"] = 1;
  fixed["gradient_clipping"] = 1.0;
  fixed["optimizer"]["params"] = {
      {"lr", 5e-05}, {"betas", {0.9, 0.999}}, {"eps", 1e-08}, {"weight_decay", 0.0}};
  fixed["scheduler"]["params"]["warmup_num_steps"] = 1;
  Config c = parse(fixed, 2);
  EXPECT_EQ(c.train_batch_size, 16);
  EXPECT_DOUBLE_EQ(c.scheduler.warmup_min_lr, 0.0);
  EXPECT_DOUBLE_EQ(c.scheduler.warmup_max_lr, 5e-05);
  EXPECT_EQ(c.scheduler.total_num_steps, 10);  // zt.steps
  for (const char* key : {"train_batch_size", "scheduler.params.warmup_min_lr",
                          "scheduler.params.warmup_max_lr", "scheduler.params.total_num_steps"}) {
    EXPECT_EQ(notes_naming(c, key).size(), 1u) << key;
  }
  EXPECT_EQ(c.notes.size(), 4u);
}

TEST(DeepSpeedAuto, TheFixIsOneLineEvenForOneKey) {
  EXPECT_EQ(input_error(with(minimal(), "/gradient_clipping", "auto")),
            "'gradient_clipping' is \"auto\", which the Hugging Face Trainer fills in from its own "
            "arguments; zt-train has none, so give values, e.g. --set gradient_clipping=1.0");
}

TEST(DeepSpeedAuto, PrecisionEnabledResolvesToFalseUnlessTheOtherIsOn) {
  Config both =
      parse(with(with(minimal(), "/fp16", {{"enabled", "auto"}}), "/bf16", {{"enabled", "auto"}}));
  EXPECT_EQ(both.compute_dtype(), DType::kF32);
  EXPECT_CONTAINS(notes_naming(both, "fp16.enabled").at(0), "without --fp16");
  EXPECT_CONTAINS(notes_naming(both, "bf16.enabled").at(0), "without --bf16");
  Config axolotl = parse(with(with(minimal(), "/fp16", {{"enabled", "auto"}, {"loss_scale", 0}}),
                              "/bf16", {{"enabled", true}}));
  EXPECT_EQ(axolotl.compute_dtype(), DType::kBF16);
  EXPECT_CONTAINS(notes_naming(axolotl, "fp16.enabled").at(0), "since 'bf16.enabled' is true");
  Config amp = parse(with(minimal(), "/amp", {{"enabled", "auto"}, {"opt_level", "auto"}}));
  EXPECT_EQ(notes_naming(amp, "amp.enabled").size(), 1u);
  EXPECT_EQ(notes_naming(amp, "amp").size(), 1u);  // disabled now: the block's own note
  Config alias = parse(with(minimal(), "/bfloat16", {{"enabled", "auto"}}));
  EXPECT_EQ(notes_naming(alias, "bfloat16.enabled").size(), 1u);
}

TEST(DeepSpeedAuto, HiddenSizeKeysAreResolvedOnceTheModelIsKnown) {
  Config c = parse(with(minimal(), "/zero_optimization",
                        {{"stage", 3},
                         {"reduce_bucket_size", "auto"},
                         {"stage3_prefetch_bucket_size", "auto"},
                         {"param_persistence_threshold", "auto"},
                         {"stage3_gather_16bit_weights_on_model_save", "auto"}}));
  EXPECT_TRUE(c.auto_from_model.reduce_bucket_size);
  EXPECT_TRUE(c.auto_from_model.stage3_prefetch_bucket_size);
  EXPECT_TRUE(c.auto_from_model.stage3_param_persistence_threshold);
  EXPECT_FALSE(c.zero_optimization.stage3_gather_16bit_weights_on_model_save);
  EXPECT_EQ(notes_naming(c, "zero_optimization.stage3_gather_16bit_weights_on_model_save").size(),
            1u);
  EXPECT_EQ(c.notes.size(), 1u);
  resolve_auto_from_model(c, 768);
  EXPECT_EQ(c.zero_optimization.reduce_bucket_size, 768 * 768);
  EXPECT_EQ(c.zero_optimization.stage3_prefetch_bucket_size, 530841);  // floor(0.9 * 589824)
  EXPECT_EQ(c.zero_optimization.stage3_param_persistence_threshold, 7680);
  EXPECT_FALSE(c.auto_from_model.any());
  EXPECT_CONTAINS(notes_naming(c, "zero_optimization.reduce_bucket_size").at(0),
                  "resolved to 589824");
  EXPECT_EQ(c.notes.size(), 4u);
  // A config without "auto" is left alone.
  Config plain = parse(minimal());
  resolve_auto_from_model(plain, 768);
  EXPECT_EQ(plain.zero_optimization.reduce_bucket_size, 500'000'000);
  EXPECT_TRUE(plain.notes.empty());
}

TEST(DeepSpeedAuto, AutoOnOtherKeysSaysTheTrainerDoesNotFillThem) {
  EXPECT_EQ(
      input_error(with(minimal(), "/fp16", {{"loss_scale", "auto"}})),
      "'fp16.loss_scale' is \"auto\", a value the Hugging Face Trainer fills in for some keys, but "
      "not this one; give a number");
  EXPECT_CONTAINS(input_error(with(minimal(), "/zero_optimization", {{"stage", "auto"}})),
                  "'zero_optimization.stage' is \"auto\"");
}

// ---- the shipped DeepSpeed files ---------------------------------------------------------------

// Every "auto" in `j`, as a key path.
void auto_paths(const json& j, const std::string& path, std::vector<std::string>& out) {
  if (j.is_object()) {
    for (const auto& item : j.items())
      auto_paths(item.value(), path.empty() ? item.key() : path + "." + item.key(), out);
  } else if (j == "auto") {
    out.push_back(path);
  }
}

// Each configs/deepspeed file with a zt block parses on 2 ranks, after at most one round of the
// --set fixes its "auto" error prints; every "auto" is then named by that error or by a note.
// (tests/e2e/deepspeed_configs.sh trains them; this runs without the corpus.)
TEST(ShippedDeepSpeedConfigs, ParseWithAZtBlockAndEveryAutoIsResolvedOrNamed) {
  const std::filesystem::path dir = std::filesystem::path(ZT_SOURCE_DIR) / "configs/deepspeed";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    ++files;
    SCOPED_TRACE(entry.path().filename().string());
    json j = json::parse(std::ifstream(entry.path()));
    ASSERT_FALSE(j.contains("zt")) << "a DeepSpeed file has no zt block";
    std::vector<std::string> autos;
    auto_paths(j, "", autos);
    j["zt"] = minimal()["zt"];
    const auto path = std::filesystem::temp_directory_path() /
                      fmt::format("zt_ds_test_{}_{}", ::getpid(), entry.path().filename().string());
    std::ofstream(path) << j.dump();
    std::vector<std::string> fixes;
    std::string named;
    std::optional<Config> config;
    for (int attempt = 0; attempt < 2 && !config; ++attempt) {
      try {
        config = load_config(path.string(), fixes, 2);
      } catch (const Error& e) {
        ASSERT_EQ(attempt, 0) << e.message();
        ASSERT_NE(e.message().find("which the Hugging Face Trainer fills in"), std::string::npos)
            << e.message();
        named = e.message();
        const std::regex set("--set ([^ ()]+)");
        for (std::sregex_iterator it(named.begin(), named.end(), set), end; it != end; ++it) {
          fixes.push_back((*it)[1]);
        }
        ASSERT_FALSE(fixes.empty()) << named;
      }
    }
    std::filesystem::remove(path);
    ASSERT_TRUE(config.has_value());
    resolve_auto_from_model(*config, 128);  // gpt2-tiny's hidden size
    std::string said = named;
    for (const std::string& n : config->notes) said += "\n" + n;
    EXPECT_EQ(said.find("unknown key"), std::string::npos);
    for (const std::string& key : autos)
      EXPECT_NE(said.find("'" + key + "'"), std::string::npos) << key;
  }
  EXPECT_GE(files, 6);
}

}  // namespace
}  // namespace zt
