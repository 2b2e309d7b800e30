// Tests for runtime/config: batch-size derivation, every class of input error (one line, the key
// path and the file name, kind kInput) for unknown keys (with suggestions for misspelt ones), JSON
// types, zt.checkpoint and zt.device_memory_limit. Ranges, choices, required keys, combinations,
// defaults and a full config: config_values_test.cpp; the helpers both use: config_test_util.h.
// Files, --set overrides and the shipped configs: config_file_test.cpp; DeepSpeed keys as users
// write them: deepspeed_keys_test.cpp.
#include "runtime/config.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "config_test_util.h"
#include "runtime/status.h"

namespace zt {
namespace {

using nlohmann::json;
using namespace config_test;

// ---- batch sizes -----------------------------------------------------------------------------

struct BatchCase {
  json given;  // batch keys only
  int world;
  int64_t tbs, micro, gas;
};

TEST(ConfigBatch, DerivesAsDeepSpeed) {
  const BatchCase cases[] = {
      {{{"train_micro_batch_size_per_gpu", 4}}, 1, 4, 4, 1},
      {{{"train_micro_batch_size_per_gpu", 4}}, 2, 8, 4, 1},
      {{{"train_batch_size", 16}}, 2, 16, 8, 1},
      {{{"train_batch_size", 32}, {"train_micro_batch_size_per_gpu", 4}}, 2, 32, 4, 4},
      {{{"train_batch_size", 32}, {"gradient_accumulation_steps", 2}}, 2, 32, 8, 2},
      {{{"train_micro_batch_size_per_gpu", 4}, {"gradient_accumulation_steps", 3}}, 2, 24, 4, 3},
      {{{"train_batch_size", 24},
        {"train_micro_batch_size_per_gpu", 4},
        {"gradient_accumulation_steps", 3}},
       2,
       24,
       4,
       3},
  };
  for (const BatchCase& c : cases) {
    json j = without(minimal(), "/train_micro_batch_size_per_gpu");
    j.update(c.given);
    Config config = parse(j, c.world);
    SCOPED_TRACE(c.given.dump());
    EXPECT_EQ(config.train_batch_size, c.tbs);
    EXPECT_EQ(config.train_micro_batch_size_per_gpu, c.micro);
    EXPECT_EQ(config.gradient_accumulation_steps, c.gas);
  }
}

TEST(ConfigBatch, InconsistentTripleQuotesAllNumbers) {
  json j = minimal();
  j["train_batch_size"] = 32;
  j["gradient_accumulation_steps"] = 2;
  EXPECT_EQ(input_error(j, 2),
            "configs/x.json: inconsistent batch sizes: train_batch_size 32 != "
            "train_micro_batch_size_per_gpu 4 * gradient_accumulation_steps 2 * world size 2");
}

TEST(ConfigBatch, DerivationMustDivideExactly) {
  json j = minimal();
  j["train_batch_size"] = 30;
  EXPECT_EQ(
      input_error(j, 2),
      "configs/x.json: inconsistent batch sizes: gradient_accumulation_steps = "
      "train_batch_size 30 / (train_micro_batch_size_per_gpu 4 * world size 2) is not a whole "
      "number (30 / 8)");
  json only_tbs = without(minimal(), "/train_micro_batch_size_per_gpu");
  only_tbs["train_batch_size"] = 5;
  EXPECT_CONTAINS(input_error(only_tbs, 2),
                  "train_micro_batch_size_per_gpu = train_batch_size 5 / world size 2");
  json tbs_gas = with(only_tbs, "/gradient_accumulation_steps", 2);
  tbs_gas["train_batch_size"] = 12;
  EXPECT_CONTAINS(input_error(tbs_gas, 4), "(12 / 8)");
}

TEST(ConfigBatch, NeedsTrainOrMicroBatch) {
  json j = without(minimal(), "/train_micro_batch_size_per_gpu");
  j["gradient_accumulation_steps"] = 2;
  EXPECT_EQ(
      input_error(j),
      "configs/x.json: one of 'train_batch_size' or 'train_micro_batch_size_per_gpu' is required");
}

TEST(ConfigBatch, ValuesMustBePositiveIntegers) {
  EXPECT_EQ(input_error(with(minimal(), "/train_micro_batch_size_per_gpu", -1)),
            "configs/x.json: 'train_micro_batch_size_per_gpu' must be > 0, got -1");
  EXPECT_EQ(input_error(with(minimal(), "/gradient_accumulation_steps", 0)),
            "configs/x.json: 'gradient_accumulation_steps' must be > 0, got 0");
  EXPECT_EQ(input_error(with(minimal(), "/train_micro_batch_size_per_gpu", 1.5)),
            "configs/x.json: 'train_micro_batch_size_per_gpu' must be an integer, got number 1.5");
}

// ---- unknown keys and suggestions ------------------------------------------------------------

TEST(ConfigKeys, UnknownTopLevelKeySuggestsNearest) {
  EXPECT_EQ(input_error(with(minimal(), "/zero_optimisation", json::object())),
            "configs/x.json: unknown key 'zero_optimisation' (did you mean 'zero_optimization'?)");
  EXPECT_EQ(input_error(with(minimal(), "/gradient_cliping", 1.0)),
            "configs/x.json: unknown key 'gradient_cliping' (did you mean 'gradient_clipping'?)");
}

TEST(ConfigKeys, UnknownKeyFarFromAllGetsNoSuggestion) {
  // (This test used "tensorboard", which is now accepted with a note.)
  EXPECT_EQ(input_error(with(minimal(), "/my_custom_setting", json::object())),
            "configs/x.json: unknown key 'my_custom_setting'");
}

TEST(ConfigKeys, UnknownNestedKeysNameTheFullPath) {
  EXPECT_EQ(input_error(with(minimal(), "/zero_optimization", {{"stag", 2}})),
            "configs/x.json: unknown key 'zero_optimization.stag' (did you mean "
            "'zero_optimization.stage'?)");
  EXPECT_EQ(input_error(with(minimal(), "/zt/seqlen", 64)),
            "configs/x.json: unknown key 'zt.seqlen' (did you mean 'zt.seq_len'?)");
  EXPECT_EQ(input_error(with(minimal(), "/zero_optimization/offload_param", {{"devise", "cpu"}})),
            "configs/x.json: unknown key 'zero_optimization.offload_param.devise' (did you mean "
            "'zero_optimization.offload_param.device'?)");
  EXPECT_EQ(input_error(with(minimal(), "/zt/model", {{"n_layers", 2}})),
            "configs/x.json: unknown key 'zt.model.n_layers' (did you mean 'zt.model.n_layer'?)");
  EXPECT_CONTAINS(input_error(with(minimal(), "/fp16", {{"enable", true}})),
                  "unknown key 'fp16.enable' (did you mean 'fp16.enabled'?)");
  EXPECT_CONTAINS(input_error(with(minimal(), "/aio", {{"queue_dept", 8}})),
                  "unknown key 'aio.queue_dept' (did you mean 'aio.queue_depth'?)");
  EXPECT_CONTAINS(
      input_error(with(minimal(), "/activation_checkpointing", {{"number_checkpoint", 2}})),
      "did you mean 'activation_checkpointing.number_checkpoints'?");
  EXPECT_CONTAINS(input_error(with(minimal(), "/data_types", {{"grad_accum_type", "fp32"}})),
                  "did you mean 'data_types.grad_accum_dtype'?");
}

TEST(ConfigKeys, OptimizerParamsDependOnType) {
  json adamw =
      with(minimal(), "/optimizer", {{"type", "AdamW"}, {"params", {{"learning_rate", 0.1}}}});
  EXPECT_EQ(input_error(adamw),
            "configs/x.json: unknown key 'optimizer.params.learning_rate' (not a parameter of "
            "optimizer type \"AdamW\")");
  adamw["optimizer"]["params"] = {{"momentum", 0.9}};
  EXPECT_CONTAINS(input_error(adamw), "unknown key 'optimizer.params.momentum'");
  // DeepSpeed accepts adam_w_mode beside AdamW (true is a note); false is refused with a reason.
  adamw["optimizer"]["params"] = {{"adam_w_mode", false}};
  EXPECT_CONTAINS(input_error(adamw),
                  "'optimizer.params.adam_w_mode' false asks for L2 weight decay");
  json sgd = with(minimal(), "/optimizer", {{"type", "SGD"}, {"params", {{"betas", {0.9, 0.99}}}}});
  EXPECT_CONTAINS(input_error(sgd),
                  "unknown key 'optimizer.params.betas' (not a parameter of "
                  "optimizer type \"SGD\")");
  json weight =
      with(minimal(), "/optimizer", {{"type", "Adam"}, {"params", {{"weightdecay", 0.1}}}});
  EXPECT_CONTAINS(input_error(weight), "(did you mean 'optimizer.params.weight_decay'?)");
}

TEST(ConfigKeys, SchedulerParamsDependOnType) {
  json cosine = with(
      minimal(), "/scheduler",
      {{"type", "WarmupCosineLR"}, {"params", {{"total_num_steps", 10}, {"warmup_steps", 2}}}});
  EXPECT_EQ(
      input_error(cosine),
      "configs/x.json: unknown key 'scheduler.params.warmup_steps' (not a parameter of "
      "scheduler type \"WarmupCosineLR\") (did you mean 'scheduler.params.warmup_num_steps'?)");
  json warmup =
      with(minimal(), "/scheduler", {{"type", "WarmupLR"}, {"params", {{"total_num_steps", 10}}}});
  EXPECT_CONTAINS(input_error(warmup), "unknown key 'scheduler.params.total_num_steps'");
  cosine["scheduler"]["params"] = {{"total_num_steps", 10}, {"warmup_max_lr", 0.1}};
  EXPECT_CONTAINS(input_error(cosine), "unknown key 'scheduler.params.warmup_max_lr'");
}

// ---- JSON types ------------------------------------------------------------------------------

TEST(ConfigTypes, WrongTypesNameKeyAndTypeFound) {
  const json adam = {{"type", "Adam"}, {"params", json::object()}};
  const TypeCase cases[] = {
      {"/optimizer", adam, ""},  // valid: sets up the block the next rows edit
      {"/optimizer/params/lr", "fast",
       "'optimizer.params.lr' must be a number, got string \"fast\""},
      {"/optimizer/params/adam_w_mode", "yes",
       "'optimizer.params.adam_w_mode' must be a boolean (true or false), got string \"yes\""},
      {"/optimizer/params/betas",
       {0.9},
       "'optimizer.params.betas' must be an array of 2 numbers, got array [0.9]"},
      {"/optimizer/params/betas",
       {0.9, "x"},
       "'optimizer.params.betas[1]' must be a number, got string \"x\""},
      {"/optimizer/type", 3,
       "'optimizer.type' must be one of \"Adam\", \"AdamW\", \"SGD\", got integer 3"},
      {"/zt/seq_len", "64", "'zt.seq_len' must be an integer, got string \"64\""},
      {"/zt/seq_len", 1.5, "'zt.seq_len' must be an integer, got number 1.5"},
      {"/zt/train_data", 3, "'zt.train_data' must be a string, got integer 3"},
      {"/zt/shuffle", 1, "'zt.shuffle' must be a boolean (true or false), got integer 1"},
      {"/zt/model", 5,
       "'zt.model' must be a string (a model zoo name) or an object (GPT2Config keys, or a "
       "config.json's with its model_type), got integer 5"},
      {"/zt/model", {{"n_layer", "2"}}, "'zt.model.n_layer' must be an integer, got string \"2\""},
      {"/fp16",
       {{"enabled", 1}},
       "'fp16.enabled' must be a boolean (true or false), got integer 1"},
      {"/zero_optimization", "yes", "'zero_optimization' must be an object, got string \"yes\""},
      {"/zero_optimization",
       {{"stage", "2"}},
       "'zero_optimization.stage' must be an integer, got string \"2\""},
      {"/zero_optimization",
       {{"overlap_comm", "true"}},
       "'zero_optimization.overlap_comm' must be a boolean (true or false), got string \"true\""},
      {"/scheduler",
       {{"type", "WarmupLR"}, {"params", {1, 2}}},
       "'scheduler.params' must be an object, got array [1,2]"},
      {"/aio", {{"block_size", true}}, "'aio.block_size' must be an integer, got boolean true"},
      {"/gradient_clipping", "1.0", "'gradient_clipping' must be a number, got string \"1.0\""},
  };
  json j = minimal();
  for (const TypeCase& c : cases) {
    if (c.message.empty()) {
      j[json::json_pointer(c.pointer)] = c.value;
      continue;
    }
    EXPECT_EQ(input_error(with(j, c.pointer, c.value)), kSource + ": " + c.message);
  }
}

TEST(ConfigTypes, IntegralFloatsAreIntegers) {
  Config c =
      parse(with(minimal(), "/zero_optimization", {{"reduce_bucket_size", 5e8}, {"stage", 2.0}}));
  EXPECT_EQ(c.zero_optimization.reduce_bucket_size, 500'000'000);
  EXPECT_EQ(c.zero_optimization.stage, 2);
}

TEST(ConfigTypes, NullMeansDefault) {
  json j = minimal();
  j["gradient_clipping"] = nullptr;
  j["zt"]["val_data"] = nullptr;
  Config c = parse(j);
  EXPECT_EQ(c.gradient_clipping, 0.0);
  EXPECT_EQ(c.zt.val_data, "");
}

TEST(ConfigTypes, TopLevelMustBeObject) {
  EXPECT_EQ(input_error(json::array({1})),
            "configs/x.json: the top level must be an object, got array [1]");
}

// ---- zt.checkpoint ------------------------------------------------------------------------------

TEST(ConfigCheckpoint, DefaultsAndValues) {
  const CheckpointConfig absent = parse(minimal()).zt.checkpoint;
  EXPECT_FALSE(absent.given);
  EXPECT_EQ(absent.dir, "");
  EXPECT_EQ(absent.every_n_steps, 0);
  EXPECT_EQ(absent.keep_last, 0);
  EXPECT_FALSE(absent.async);
  const CheckpointConfig c =
      parse(with(minimal(), "/zt/checkpoint",
                 {{"dir", "ck"}, {"every_n_steps", 50}, {"keep_last", 3}, {"async", false}}))
          .zt.checkpoint;
  EXPECT_TRUE(c.given);
  EXPECT_EQ(c.dir, "ck");
  EXPECT_EQ(c.every_n_steps, 50);
  EXPECT_EQ(c.keep_last, 3);
  EXPECT_TRUE(parse(with(minimal(), "/zt/checkpoint", json::object())).zt.checkpoint.given);
}

TEST(ConfigCheckpoint, BadValuesNameTheKey) {
  EXPECT_EQ(input_error(with(minimal(), "/zt/checkpoint", {{"every_n_steps", -1}})),
            "configs/x.json: 'zt.checkpoint.every_n_steps' must be >= 0, got -1");
  EXPECT_EQ(input_error(with(minimal(), "/zt/checkpoint", {{"keep_lst", 2}})),
            "configs/x.json: unknown key 'zt.checkpoint.keep_lst' (did you mean "
            "'zt.checkpoint.keep_last'?)");
  EXPECT_EQ(input_error(with(minimal(), "/zt/checkpoint", 5)),
            "configs/x.json: 'zt.checkpoint' must be an object, got integer 5");
}

// ---- zt.device_memory_limit -------------------------------------------------------------------

TEST(ConfigMemoryLimit, BytesOrAStringWithAUnit) {
  EXPECT_EQ(parse(minimal()).zt.device_memory_limit, 0u);  // absent: no limit
  const std::pair<json, uint64_t> cases[] = {
      {6000000000, 6'000'000'000u}, {6e9, 6'000'000'000u},       {"6GB", 6'000'000'000u},
      {"6 GB", 6'000'000'000u},     {"6GiB", uint64_t{6} << 30}, {"512MiB", 512u << 20},
      {"1.5GiB", 1'610'612'736u},   {"6e9", 6'000'000'000u},     {1, 1u},
  };
  for (const auto& [value, bytes] : cases) {
    SCOPED_TRACE(value.dump());
    EXPECT_EQ(parse(with(minimal(), "/zt/device_memory_limit", value)).zt.device_memory_limit,
              bytes);
  }
  EXPECT_EQ(parse(with(minimal(), "/zt/device_memory_limit", nullptr)).zt.device_memory_limit, 0u);
}

TEST(ConfigMemoryLimit, BadValuesNameKeyValueAndFile) {
  const std::pair<json, std::string> cases[] = {
      {0, "'zt.device_memory_limit' must be > 0, got 0"},
      {-1, "'zt.device_memory_limit' must be > 0, got -1"},
      {0.0, "'zt.device_memory_limit' must be > 0, got 0.0"},
      {1.5, "'zt.device_memory_limit' is number 1.5: not a whole number of bytes"},
      {1e20, "'zt.device_memory_limit' is number 1e+20: more than 2^64 - 1 bytes"},
      {"0GB",
       "'zt.device_memory_limit' is string \"0GB\": less than one byte (a size must be > 0)"},
      {"-6GB", "'zt.device_memory_limit' is string \"-6GB\": negative (a size must be > 0)"},
      {"6 gigs",
       "'zt.device_memory_limit' is string \"6 gigs\": unknown unit 'gigs'; use B, kB, MB, GB, "
       "TB, PB (powers of 1000) or KiB, MiB, GiB, TiB, PiB (powers of 1024)"},
      {"6G",
       "'zt.device_memory_limit' is string \"6G\": the unit 'G' could mean GB (powers of 1000) "
       "or GiB (powers of 1024); write one of them"},
      {"lots",
       "'zt.device_memory_limit' is string \"lots\": not a byte count; write a number and an "
       "optional unit, e.g. 6000000000, \"6GB\" or \"1.5GiB\""},
      {"20000000000000000000",
       "'zt.device_memory_limit' is string \"20000000000000000000\": more than 2^64 - 1 = "
       "18,446,744,073,709,551,615 bytes"},
      {true,
       "'zt.device_memory_limit' must be a byte count: an integer, or a string such as \"6GB\" "
       "(10^9 bytes) or \"512MiB\" (2^20 bytes), got boolean true"},
      {"auto",
       "'zt.device_memory_limit' is \"auto\", a value the Hugging Face Trainer fills in for some "
       "keys, but not this one; give a byte count: an integer, or a string such as \"6GB\" (10^9 "
       "bytes) or \"512MiB\" (2^20 bytes)"},
  };
  for (const auto& [value, message] : cases) {
    EXPECT_EQ(input_error(with(minimal(), "/zt/device_memory_limit", value)),
              kSource + ": " + message);
  }
  // A JSON integer past 2^64 - 1 reads as a number, refused the same way.
  EXPECT_CONTAINS(
      input_error(with(minimal(), "/zt/device_memory_limit", json::parse("18446744073709551616"))),
      "more than 2^64 - 1 bytes");
}

}  // namespace
}  // namespace zt
