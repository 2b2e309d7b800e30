// Tests for runtime/config: batch-size derivation, every class of input error (one line, the key
// path and the file name, kind kInput), suggestions for misspelt keys, defaults and a full
// config. Files, --set overrides and the shipped configs: config_file_test.cpp; DeepSpeed keys as
// users write them: deepspeed_keys_test.cpp.
#include "runtime/config.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "runtime/status.h"

namespace zt {
namespace {

using nlohmann::json;

const std::string kSource = "configs/x.json";

// The smallest valid config: one batch key and the required zt keys.
json minimal() {
  return {{"train_micro_batch_size_per_gpu", 4},
          {"zt",
           {{"model", "gpt2-tiny"},
            {"seq_len", 64},
            {"train_data", "data/corpus/train.bin"},
            {"steps", 10}}}};
}

Config parse(const json& j, int world = 1) { return parse_config(j, kSource, world); }

// The message of the kInput error parse_config throws; checks the error is one line and names
// the file.
std::string input_error(const json& j, int world = 1) {
  try {
    parse(j, world);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput);
    EXPECT_EQ(e.message().find('\n'), std::string::npos) << e.message();
    EXPECT_EQ(e.message().rfind(kSource + ": ", 0), 0u) << e.message();
    return e.message();
  }
  ADD_FAILURE() << "no error for " << j.dump();
  return {};
}

// `j` with `value` set at the JSON pointer `pointer` ("/zt/seq_len").
json with(json j, const std::string& pointer, const json& value) {
  j[json::json_pointer(pointer)] = value;
  return j;
}
json without(json j, const std::string& pointer) {
  json::json_pointer p(pointer);
  j[p.parent_pointer()].erase(p.back());
  return j;
}

#define EXPECT_CONTAINS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

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

struct TypeCase {
  std::string pointer;
  json value;
  std::string message;  // after "configs/x.json: "
};

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
  EXPECT_EQ(
      input_error(
          with(minimal(), "/zero_optimization", {{"offload_optimizer", {{"device", "cpu"}}}})),
      "configs/x.json: 'zero_optimization.offload_optimizer' needs zero_optimization.stage >= 1, "
      "got stage 0");
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
  EXPECT_EQ(
      input_error(with(minimal(), "/activation_checkpointing", {{"partition_activations", true}})),
      "configs/x.json: 'activation_checkpointing.partition_activations' is not supported yet; "
      "set it to false");
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
                                              "weight_decay": 0.01, "adam_w_mode": false}},
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
