// Tests for runtime/config's values: ranges, the aio block, choices, required keys, combinations
// that conflict, activation checkpointing, the defaults a minimal config takes and a full config
// with every block (config_test.cpp has the batch sizes, unknown keys and JSON types; the helpers
// both use are config_test_util.h's).
#include "runtime/config.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "config_test_util.h"
#include "runtime/status.h"

namespace zt {
namespace {

using nlohmann::json;
using namespace config_test;

// ---- ranges, choices, required keys, combinations --------------------------------------------

TEST(ConfigRanges, OutOfRangeValuesNameKeyAndValue) {
  const TypeCase cases[] = {
      {"/zero_optimization",
       {{"stage", 4}},
       "'zero_optimization.stage' must be between 0 and 3, got 4"},
      {"/zero_optimization",
       {{"reduce_bucket_size", 0}},
       "'zero_optimization.reduce_bucket_size' must be > 0, got 0"},
      {"/zero_optimization",
       {{"allgather_bucket_size", -5}},
       "'zero_optimization.allgather_bucket_size' must be > 0, got -5"},
      {"/zero_optimization",
       {{"stage3_param_persistence_threshold", -1}},
       "'zero_optimization.stage3_param_persistence_threshold' must be >= 0, got -1"},
      {"/zero_optimization",
       {{"stage", 3}, {"offload_param", {{"device", "cpu"}, {"buffer_count", 0}}}},
       "'zero_optimization.offload_param.buffer_count' must be > 0, got 0"},
      {"/gradient_clipping", -1.0, "'gradient_clipping' must be >= 0, got -1.0"},
      {"/steps_per_print", 0, "'steps_per_print' must be > 0, got 0"},
      {"/gradient_predivide_factor", 0.0, "'gradient_predivide_factor' must be > 0, got 0.0"},
      {"/optimizer",
       {{"type", "AdamW"}, {"params", {{"lr", -0.1}}}},
       "'optimizer.params.lr' must be >= 0, got -0.1"},
      {"/optimizer",
       {{"type", "AdamW"}, {"params", {{"betas", {0.9, 1.0}}}}},
       "'optimizer.params.betas[1]' must be >= 0 and < 1, got 1.0"},
      {"/scheduler",
       {{"type", "WarmupCosineLR"}, {"params", {{"total_num_steps", 10}, {"cos_min_ratio", 1.5}}}},
       "'scheduler.params.cos_min_ratio' must be between 0 and 1, got 1.5"},
      {"/scheduler",
       {{"type", "WarmupLR"}, {"params", {{"warmup_num_steps", 0}}}},
       "'scheduler.params.warmup_num_steps' must be > 0, got 0"},
      {"/fp16", {{"loss_scale_window", 0}}, "'fp16.loss_scale_window' must be > 0, got 0"},
      {"/fp16", {{"min_loss_scale", 0}}, "'fp16.min_loss_scale' must be > 0, got 0"},
      {"/activation_checkpointing",
       {{"number_checkpoints", -1}},
       "'activation_checkpointing.number_checkpoints' must be >= 0, got -1"},
      {"/aio", {{"thread_count", 0}}, "'aio.thread_count' must be > 0, got 0"},
      {"/zt/steps", 0, "'zt.steps' must be > 0, got 0"},
      {"/zt/seq_len", -64, "'zt.seq_len' must be > 0, got -64"},
      {"/zt/seq_len", 1LL << 40,
       "'zt.seq_len' must be between -2147483648 and 2147483647, got 1099511627776"},
      {"/zt/eval_every", -1, "'zt.eval_every' must be >= 0, got -1"},
      {"/zt/eval_batches", 0, "'zt.eval_batches' must be > 0, got 0"},
      {"/zt/seed", -1, "'zt.seed' must be >= 0, got -1"},
      {"/zt/num_threads", -2, "'zt.num_threads' must be >= 0, got -2"},
      {"/zt/comm_timeout_s", 0, "'zt.comm_timeout_s' must be > 0, got 0"},
      {"/zt/comm_init_timeout_s", 0, "'zt.comm_init_timeout_s' must be > 0, got 0"},
      {"/zt/comm_init_timeout_s", -1.5, "'zt.comm_init_timeout_s' must be > 0, got -1.5"},
      {"/zt/model", {{"n_head", 0}}, "'zt.model.n_head' must be > 0, got 0"},
      {"/zt/model",
       {{"n_embd", 100}, {"n_head", 12}},
       "'zt.model.n_embd' 100 must be a multiple of 'zt.model.n_head' 12"},
      {"/zt/model", "", "'zt.model' must not be empty"},
  };
  for (const TypeCase& c : cases) {
    EXPECT_EQ(input_error(with(minimal(), c.pointer, c.value)), kSource + ": " + c.message);
  }
}

// aio tunes the NVMe swap files: DeepSpeed's newer name for the worker count beside the older
// one (not both), no GPUDirect Storage, O_DIRECT-sized blocks; without NVMe offload a note says
// it has no effect, with it none does.
TEST(ConfigAio, NamesGdsBlockSizeAndTheNote) {
  EXPECT_EQ(parse(with(minimal(), "/aio", {{"intra_op_parallelism", 3}})).aio.thread_count, 3);
  EXPECT_CONTAINS(
      input_error(with(minimal(), "/aio", {{"intra_op_parallelism", 2}, {"thread_count", 2}})),
      "'aio.thread_count' is the older name of 'aio.intra_op_parallelism': give one of them");
  EXPECT_CONTAINS(input_error(with(minimal(), "/aio", {{"use_gds", true}})),
                  "'aio.use_gds' is true: GPUDirect Storage");
  EXPECT_EQ(parse(with(minimal(), "/aio", {{"use_gds", false}})).aio.queue_depth, 8);
  EXPECT_CONTAINS(input_error(with(minimal(), "/aio", {{"block_size", 1000}})),
                  "'aio.block_size' is 1000: O_DIRECT I/O needs a multiple of 4096 bytes");
  auto aio_notes = [](const Config& c) {
    return std::count_if(c.notes.begin(), c.notes.end(),
                         [](const std::string& n) { return n.find("'aio'") != std::string::npos; });
  };
  const json with_aio = with(minimal(), "/aio", {{"queue_depth", 4}});
  EXPECT_EQ(aio_notes(parse(with_aio)), 1);
  json nvme =
      with(with_aio, "/zero_optimization",
           {{"stage", 2}, {"offload_optimizer", {{"device", "nvme"}, {"nvme_path", "/x"}}}});
  const Config c = parse(nvme);
  EXPECT_EQ(aio_notes(c), 0);
  EXPECT_EQ(c.aio.queue_depth, 4);
  // The optimizer tier's tuning keys the streaming step does not take are notes, one each.
  json tuned = with(nvme, "/zero_optimization/offload_optimizer/pipeline_read", true);
  tuned = with(tuned, "/zero_optimization/offload_optimizer/buffer_count", 8);
  const Config t = parse(tuned);
  for (const char* key : {"'zero_optimization.offload_optimizer.pipeline_read' has no effect",
                          "'zero_optimization.offload_optimizer.buffer_count' has no effect"})
    EXPECT_EQ(std::count_if(t.notes.begin(), t.notes.end(),
                            [&](const std::string& n) { return n.find(key) != std::string::npos; }),
              1)
        << key;
  // The parameter tier on NVMe uses aio too; its buffer_count is honoured, buffer_size and
  // max_in_cpu are notes (the buffers are sized to the largest shard).
  json params = with(with_aio, "/zero_optimization",
                     {{"stage", 3},
                      {"offload_optimizer", {{"device", "cpu"}}},
                      {"offload_param",
                       {{"device", "nvme"},
                        {"nvme_path", "/x"},
                        {"buffer_count", 3},
                        {"buffer_size", 1e8},
                        {"max_in_cpu", 1e9}}}});
  const Config p = parse(params);
  EXPECT_EQ(aio_notes(p), 0);
  EXPECT_EQ(p.zero_optimization.offload_param.buffer_count, 3);
  for (const char* key : {"'zero_optimization.offload_param.buffer_size' has no effect",
                          "'zero_optimization.offload_param.max_in_cpu' has no effect"})
    EXPECT_EQ(std::count_if(p.notes.begin(), p.notes.end(),
                            [&](const std::string& n) { return n.find(key) != std::string::npos; }),
              1)
        << key;
}

TEST(ConfigChoices, UnknownNamesListChoicesAndSuggest) {
  EXPECT_EQ(input_error(with(minimal(), "/optimizer", {{"type", "Adamm"}})),
            "configs/x.json: 'optimizer.type' must be one of \"Adam\", \"AdamW\", \"SGD\", got "
            "string \"Adamm\" (did you mean \"Adam\"?)");
  EXPECT_EQ(input_error(with(minimal(), "/scheduler", {{"type", "warmupcosinelr"}})),
            "configs/x.json: 'scheduler.type' must be one of \"WarmupLR\", \"WarmupDecayLR\", "
            "\"WarmupCosineLR\", \"OneCycle\", \"LRRangeTest\", got string \"warmupcosinelr\" (did "
            "you mean \"WarmupCosineLR\"?)");
  EXPECT_CONTAINS(
      input_error(with(minimal(), "/scheduler",
                       {{"type", "WarmupLR"}, {"params", {{"warmup_type", "cosine"}}}})),
      "'scheduler.params.warmup_type' must be one of \"log\", \"linear\", got string \"cosine\"");
  EXPECT_CONTAINS(
      input_error(
          with(minimal(), "/zero_optimization", {{"offload_optimizer", {{"device", "gpu"}}}})),
      "'zero_optimization.offload_optimizer.device' must be one of \"none\", \"cpu\", \"nvme\"");
  EXPECT_CONTAINS(input_error(with(minimal(), "/data_types", {{"grad_accum_dtype", "fp8"}})),
                  "'data_types.grad_accum_dtype' must be one of \"fp32\"");
  EXPECT_CONTAINS(input_error(with(minimal(), "/communication_data_type", "bf17")),
                  "got string \"bf17\" (did you mean \"bf16\"?)");
}

TEST(ConfigChoices, OptimizerTypeIsCaseInsensitiveAsDeepSpeed) {
  EXPECT_EQ(parse(with(minimal(), "/optimizer", {{"type", "adamw"}})).optimizer.type,
            OptimizerType::kAdamW);
  EXPECT_EQ(parse(with(minimal(), "/optimizer", {{"type", "ADAM"}})).optimizer.type,
            OptimizerType::kAdam);
  EXPECT_EQ(parse(with(minimal(), "/optimizer", {{"type", "sgd"}})).optimizer.type,
            OptimizerType::kSGD);
}

TEST(ConfigRequired, MissingKeysAreNamed) {
  EXPECT_EQ(input_error(without(minimal(), "/zt")), "configs/x.json: missing required key 'zt'");
  for (const char* key : {"model", "seq_len", "train_data", "steps"}) {
    EXPECT_EQ(input_error(without(minimal(), std::string("/zt/") + key)),
              fmt::format("configs/x.json: missing required key 'zt.{}'", key));
  }
  EXPECT_EQ(input_error(with(minimal(), "/scheduler", {{"type", "WarmupDecayLR"}})),
            "configs/x.json: missing required key 'scheduler.params.total_num_steps'");
  EXPECT_EQ(input_error(with(minimal(), "/scheduler",
                             {{"type", "WarmupCosineLR"}, {"params", {{"warmup_num_steps", 5}}}})),
            "configs/x.json: missing required key 'scheduler.params.total_num_steps'");
  EXPECT_EQ(input_error(with(minimal(), "/scheduler", {{"params", json::object()}})),
            "configs/x.json: missing required key 'scheduler.type'");
  EXPECT_EQ(input_error(with(minimal(), "/optimizer", {{"params", {{"lr", 0.1}}}})),
            "configs/x.json: missing required key 'optimizer.type'");
  EXPECT_EQ(input_error(with(minimal(), "/zero_optimization",
                             {{"stage", 3}, {"offload_param", {{"device", "nvme"}}}})),
            "configs/x.json: 'zero_optimization.offload_param.nvme_path' is required when "
            "'zero_optimization.offload_param.device' is \"nvme\"");
}

TEST(ConfigCombinations, ConflictsAreErrors) {
  json both = minimal();
  both["fp16"] = {{"enabled", true}};
  both["bf16"] = {{"enabled", true}};
  EXPECT_EQ(input_error(both),
            "configs/x.json: 'fp16.enabled' and 'bf16.enabled' are both true; enable at most one");
  json alias = minimal();
  alias["bf16"] = {{"enabled", false}};
  alias["bfloat16"] = {{"enabled", true}};
  EXPECT_EQ(input_error(alias),
            "configs/x.json: 'bf16' and 'bfloat16' name the same block; give only one");
  EXPECT_EQ(input_error(with(minimal(), "/zero_optimization",
                             {{"stage", 2}, {"offload_param", {{"device", "cpu"}}}})),
            "configs/x.json: 'zero_optimization.offload_param' needs zero_optimization.stage 3, "
            "got stage 2");
  // At stage 0 DeepSpeed ignores both offload blocks (ZeRO is off): a note, no offload.
  const Config stage0 = parse(with(minimal(), "/zero_optimization",
                                   {{"stage", 0},
                                    {"offload_optimizer", {{"device", "cpu"}}},
                                    {"offload_param", {{"device", "cpu"}}}}));
  EXPECT_EQ(stage0.zero_optimization.offload_optimizer.device, OffloadDevice::kNone);
  EXPECT_EQ(stage0.zero_optimization.offload_param.device, OffloadDevice::kNone);
  ASSERT_EQ(stage0.notes.size(), 2u);
  EXPECT_NE(stage0.notes[0].find("'zero_optimization.offload_optimizer' has no effect at "
                                 "zero_optimization.stage 0"),
            std::string::npos);
  EXPECT_NE(stage0.notes[1].find("'zero_optimization.offload_param' has no effect"),
            std::string::npos);
  EXPECT_EQ(input_error(
                with(minimal(), "/zero_optimization",
                     {{"stage", 3}, {"offload_param", {{"device", "nvme"}, {"nvme_path", "/x"}}}})),
            "configs/x.json: 'zero_optimization.offload_param' needs "
            "'zero_optimization.offload_optimizer' too (device \"cpu\" or \"nvme\"): the optimizer "
            "writes the updated parameter shards where it runs, on the host");
}

TEST(ConfigCheckpointing, PoliciesAndUnsupportedOptions) {
  EXPECT_EQ(parse(minimal()).activation_checkpointing.policy,
            ActivationCheckpointing::Policy::kNone);
  auto every =
      parse(with(minimal(), "/activation_checkpointing", json::object())).activation_checkpointing;
  EXPECT_EQ(every.policy, ActivationCheckpointing::Policy::kEveryUnit);
  auto three = parse(with(minimal(), "/activation_checkpointing", {{"number_checkpoints", 3}}))
                   .activation_checkpointing;
  EXPECT_EQ(three.policy, ActivationCheckpointing::Policy::kCount);
  EXPECT_EQ(three.count, 3);
  auto none = parse(with(minimal(), "/activation_checkpointing", {{"number_checkpoints", 0}}))
                  .activation_checkpointing;
  EXPECT_EQ(none.policy, ActivationCheckpointing::Policy::kCount);
  EXPECT_EQ(none.count, 0);
  // Without model parallelism there is nothing to partition: a note (DeepSpeed does nothing).
  EXPECT_EQ(parse(with(minimal(), "/activation_checkpointing", {{"partition_activations", true}}))
                .notes.size(),
            1u);
  EXPECT_EQ(
      input_error(with(minimal(), "/activation_checkpointing", {{"cpu_checkpointing", true}})),
      "configs/x.json: 'activation_checkpointing.cpu_checkpointing' is not supported yet; set it "
      "to false");
  EXPECT_NO_THROW(parse(with(minimal(), "/activation_checkpointing",
                             {{"partition_activations", false}, {"cpu_checkpointing", false}})));
}

// ---- defaults and a full config --------------------------------------------------------------

TEST(ConfigDefaults, MinimalConfigTakesDeepSpeedDefaults) {
  Config c = parse(minimal());
  EXPECT_EQ(c.source, kSource);
  EXPECT_EQ(c.resolved, minimal());
  EXPECT_EQ(c.optimizer.type, OptimizerType::kAdamW);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-3);
  EXPECT_DOUBLE_EQ(c.optimizer.betas[0], 0.9);
  EXPECT_DOUBLE_EQ(c.optimizer.betas[1], 0.999);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-8);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.0);
  EXPECT_EQ(c.scheduler.type, SchedulerType::kNone);
  EXPECT_EQ(c.gradient_clipping, 0.0);
  EXPECT_EQ(c.steps_per_print, 10);
  EXPECT_TRUE(c.notes.empty());
  EXPECT_EQ(c.zero_optimization.stage, 0);
  EXPECT_FALSE(c.zero_optimization.overlap_comm);
  EXPECT_EQ(c.zero_optimization.reduce_bucket_size, 500'000'000);
  EXPECT_EQ(c.zero_optimization.offload_optimizer.buffer_count, 4);
  EXPECT_EQ(c.zero_optimization.offload_param.buffer_count, 5);
  EXPECT_EQ(c.fp16.initial_scale_power, 16);
  EXPECT_EQ(c.fp16.hysteresis, 2);
  EXPECT_EQ(c.compute_dtype(), DType::kF32);
  EXPECT_FALSE(c.data_types.grad_accum_dtype.has_value());
  EXPECT_EQ(c.aio.queue_depth, 8);
  EXPECT_EQ(c.zt.model.zoo_name, "gpt2-tiny");
  EXPECT_FALSE(c.zt.model.has_object);
  EXPECT_EQ(c.zt.eval_every, 0);
  EXPECT_EQ(c.zt.eval_batches, 8);
  EXPECT_EQ(c.zt.seed, 1337u);
  EXPECT_EQ(c.zt.output_dir, "runs/default");
  EXPECT_FALSE(c.zt.shuffle);
  EXPECT_EQ(c.zt.num_threads, 0);
  EXPECT_EQ(c.zt.comm_timeout_s, 1800.0);
  EXPECT_EQ(c.zt.comm_init_timeout_s, 120.0);  // NCCL's init: its own deadline
  EXPECT_EQ(parse(with(minimal(), "/zt/comm_init_timeout_s", 300)).zt.comm_init_timeout_s, 300.0);
}

TEST(ConfigDefaults, OverlapCommDefaultsOnAtStage3) {
  EXPECT_TRUE(
      parse(with(minimal(), "/zero_optimization", {{"stage", 3}})).zero_optimization.overlap_comm);
  EXPECT_FALSE(parse(with(minimal(), "/zero_optimization", {{"stage", 3}, {"overlap_comm", false}}))
                   .zero_optimization.overlap_comm);
}

TEST(ConfigDefaults, SchedulerPeakFollowsDeepSpeedConstructors) {
  json j = with(minimal(), "/optimizer", {{"type", "AdamW"}, {"params", {{"lr", 6e-4}}}});
  EXPECT_DOUBLE_EQ(parse(with(j, "/scheduler", {{"type", "WarmupLR"}})).scheduler.warmup_max_lr,
                   6e-4);
  Config decay = parse(
      with(j, "/scheduler", {{"type", "WarmupDecayLR"}, {"params", {{"total_num_steps", 9}}}}));
  EXPECT_DOUBLE_EQ(decay.scheduler.warmup_max_lr, 1e-3);
  EXPECT_EQ(decay.scheduler.warmup_num_steps, 1000);
  EXPECT_EQ(decay.scheduler.warmup_type, WarmupType::kLog);
  Config cosine = parse(
      with(j, "/scheduler", {{"type", "WarmupCosineLR"}, {"params", {{"total_num_steps", 9}}}}));
  EXPECT_DOUBLE_EQ(cosine.scheduler.warmup_min_ratio, 0.0);
  EXPECT_DOUBLE_EQ(cosine.scheduler.cos_min_ratio, 0.0001);
}

TEST(ConfigFull, EveryBlockParses) {
  json j = R"({
    "train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4,
    "optimizer": {"type": "Adam", "params": {"lr": 3e-4, "betas": [0.8, 0.9], "eps": 1e-6,
                                              "weight_decay": 0.01, "adam_w_mode": false,
                                              "bias_correction": false}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 1e-5, "warmup_max_lr": 3e-4,
                  "warmup_num_steps": 20, "warmup_type": "linear", "total_num_steps": 200}},
    "gradient_clipping": 0.5, "steps_per_print": 5, "wall_clock_breakdown": true,
    "prescale_gradients": true, "gradient_predivide_factor": 2.0,
    "zero_optimization": {"stage": 3, "overlap_comm": false, "contiguous_gradients": false,
      "reduce_scatter": false, "reduce_bucket_size": 1000, "allgather_partitions": false,
      "allgather_bucket_size": 2000, "stage3_prefetch_bucket_size": 3000,
      "stage3_param_persistence_threshold": 0, "stage3_max_live_parameters": 4000,
      "stage3_max_reuse_distance": 5000, "sub_group_size": 6000,
      "offload_optimizer": {"device": "cpu", "pin_memory": true, "buffer_count": 3},
      "offload_param": {"device": "nvme", "nvme_path": "/local_nvme", "pin_memory": true, "buffer_count": 6}},
    "fp16": {"enabled": false, "loss_scale": 0, "initial_scale_power": 12, "loss_scale_window": 500,
             "hysteresis": 1, "consecutive_hysteresis": true, "min_loss_scale": 0.5},
    "bfloat16": {"enabled": true},
    "data_types": {"grad_accum_dtype": "fp32"},
    "communication_data_type": "bfloat16",
    "activation_checkpointing": {"partition_activations": false, "cpu_checkpointing": false,
      "contiguous_memory_optimization": true, "number_checkpoints": 2,
      "synchronize_checkpoint_boundary": true, "profile": true},
    "aio": {"block_size": 262144, "queue_depth": 4, "thread_count": 2, "single_submit": true,
            "overlap_events": false},
    "zt": {"model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 512, "n_positions": 128},
           "seq_len": 32, "train_data": "t.bin", "val_data": "v.bin", "steps": 100, "eval_every": 10,
           "eval_batches": 2, "seed": 7, "output_dir": "runs/full", "init_from": "init.safetensors",
           "save_weights": "out.safetensors", "shuffle": true, "num_threads": 3}
  })"_json;
  Config c = parse(j, 2);
  EXPECT_EQ(c.resolved, j);
  EXPECT_EQ(c.train_batch_size, 32);
  EXPECT_EQ(c.optimizer.type, OptimizerType::kAdam);
  EXPECT_FALSE(c.optimizer.adam_w_mode);
  EXPECT_FALSE(c.optimizer.bias_correction);
  EXPECT_FALSE(c.optimizer.decoupled_weight_decay());
  EXPECT_DOUBLE_EQ(c.optimizer.betas[0], 0.8);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-6);
  EXPECT_EQ(c.scheduler.type, SchedulerType::kWarmupDecayLR);
  EXPECT_EQ(c.scheduler.warmup_type, WarmupType::kLinear);
  EXPECT_EQ(c.scheduler.total_num_steps, 200);
  EXPECT_DOUBLE_EQ(c.scheduler.warmup_max_lr, 3e-4);
  EXPECT_DOUBLE_EQ(c.gradient_clipping, 0.5);
  EXPECT_EQ(c.steps_per_print, 5);
  EXPECT_TRUE(c.wall_clock_breakdown);
  const ZeroConfig& z = c.zero_optimization;
  EXPECT_EQ(z.stage, 3);
  EXPECT_FALSE(z.overlap_comm);
  EXPECT_EQ(z.reduce_bucket_size, 1000);
  EXPECT_EQ(z.allgather_bucket_size, 2000);
  EXPECT_EQ(z.stage3_prefetch_bucket_size, 3000);
  EXPECT_EQ(z.stage3_param_persistence_threshold, 0);
  EXPECT_EQ(z.stage3_max_live_parameters, 4000);
  EXPECT_EQ(z.stage3_max_reuse_distance, 5000);
  EXPECT_EQ(z.offload_optimizer.device, OffloadDevice::kCpu);
  EXPECT_EQ(z.offload_optimizer.buffer_count, 3);
  EXPECT_EQ(z.offload_param.device, OffloadDevice::kNvme);
  EXPECT_EQ(z.offload_param.nvme_path, "/local_nvme");
  EXPECT_TRUE(z.offload_param.pin_memory);
  EXPECT_EQ(c.fp16.initial_scale_power, 12);
  EXPECT_TRUE(c.fp16.consecutive_hysteresis);
  EXPECT_DOUBLE_EQ(c.fp16.min_loss_scale, 0.5);
  EXPECT_TRUE(c.bf16.enabled);
  EXPECT_EQ(c.compute_dtype(), DType::kBF16);
  EXPECT_EQ(c.data_types.grad_accum_dtype, DType::kF32);
  EXPECT_EQ(c.communication_data_type, DType::kBF16);
  EXPECT_EQ(c.activation_checkpointing.policy, ActivationCheckpointing::Policy::kCount);
  EXPECT_EQ(c.activation_checkpointing.count, 2);
  // Keys with no effect are notes now, not fields (one line each, naming the key).
  for (const char* key :
       {"'prescale_gradients'", "'gradient_predivide_factor'",
        "'zero_optimization.contiguous_gradients'", "'zero_optimization.reduce_scatter'",
        "'zero_optimization.allgather_partitions'", "'zero_optimization.sub_group_size'",
        "'activation_checkpointing.contiguous_memory_optimization'",
        "'activation_checkpointing.profile'"}) {
    EXPECT_EQ(std::count_if(c.notes.begin(), c.notes.end(),
                            [&](const std::string& n) { return n.find(key) != std::string::npos; }),
              1)
        << key;
  }
  // offload_param's nvme tier uses the aio block: no note about it.
  EXPECT_EQ(
      std::count_if(c.notes.begin(), c.notes.end(),
                    [](const std::string& n) { return n.find("'aio'") != std::string::npos; }),
      0);
  EXPECT_EQ(c.aio.block_size, 262144);
  EXPECT_EQ(c.aio.thread_count, 2);
  EXPECT_FALSE(c.aio.overlap_events);
  EXPECT_TRUE(c.zt.model.has_object);
  EXPECT_TRUE(c.zt.model.zoo_name.empty());
  EXPECT_EQ(c.zt.model.n_layer, 2);
  EXPECT_EQ(c.zt.model.n_embd, 64);
  EXPECT_EQ(c.zt.model.vocab_size, 512);
  EXPECT_EQ(c.zt.model.n_positions, 128);
  EXPECT_EQ(c.zt.seq_len, 32);
  EXPECT_EQ(c.zt.val_data, "v.bin");
  EXPECT_EQ(c.zt.steps, 100);
  EXPECT_EQ(c.zt.eval_every, 10);
  EXPECT_EQ(c.zt.seed, 7u);
  EXPECT_EQ(c.zt.init_from, "init.safetensors");
  EXPECT_EQ(c.zt.save_weights, "out.safetensors");
  EXPECT_TRUE(c.zt.shuffle);
  EXPECT_EQ(c.zt.num_threads, 3);
}

TEST(ConfigFull, ModelObjectTakesGpt2ConfigDefaults) {
  ModelChoice m = parse(with(minimal(), "/zt/model", {{"n_layer", 2}})).zt.model;
  EXPECT_TRUE(m.has_object);
  EXPECT_EQ(m.n_layer, 2);
  EXPECT_EQ(m.n_head, 12);
  EXPECT_EQ(m.n_embd, 768);
  EXPECT_EQ(m.vocab_size, 50257);
  EXPECT_EQ(m.n_positions, 1024);
}

}  // namespace
}  // namespace zt
