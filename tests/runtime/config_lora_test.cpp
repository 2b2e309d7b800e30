// Tests for zt.freeze and zt.lora (runtime/config/tuning_block.cpp): the defaults, every
// LoraConfig key ZeroTrain reads, PEFT's other keys accepted at their harmless values and each
// refusal naming its key, and the file form: a PEFT adapter_config.json as PEFT 0.19 writes it,
// found by an absolute path, a path relative to the config file's folder, or its directory, its
// errors naming the adapter file; the adapter keys (zt.init_adapter, zt.save_adapter,
// zt.save_pretrained.merge_adapter) with zt.lora and refused without it. (The glob patterns
// themselves: glob_test.cpp.)
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "config_test_util.h"
#include "runtime/config.h"
#include "runtime/status.h"

namespace zt {
namespace {

using nlohmann::json;
using namespace config_test;

json with_lora(const json& lora) { return with(minimal(), "/zt/lora", lora); }

// A PEFT adapter_config.json as PEFT 0.19's save_pretrained writes it: every LoraConfig key,
// inference_mode true, the unused ones null or empty.
json peft_adapter_config() {
  return json::parse(R"({
    "alora_invocation_tokens": null,
    "alpha_pattern": {},
    "arrow_config": null,
    "auto_mapping": null,
    "base_model_name_or_path": "Qwen/Qwen2.5-0.5B",
    "bias": "none",
    "corda_config": null,
    "ensure_weight_tying": false,
    "eva_config": null,
    "exclude_modules": null,
    "fan_in_fan_out": false,
    "inference_mode": true,
    "init_lora_weights": true,
    "layer_replication": null,
    "layers_pattern": null,
    "layers_to_transform": null,
    "loftq_config": {},
    "lora_alpha": 32,
    "lora_bias": false,
    "lora_dropout": 0.05,
    "lora_ga_config": null,
    "megatron_config": null,
    "megatron_core": "megatron.core",
    "modules_to_save": null,
    "peft_type": "LORA",
    "peft_version": "0.19.1",
    "qalora_group_size": 16,
    "r": 16,
    "rank_pattern": {},
    "revision": null,
    "target_modules": ["q_proj", "v_proj"],
    "target_parameters": null,
    "task_type": "CAUSAL_LM",
    "trainable_token_indices": null,
    "use_bdlora": null,
    "use_dora": false,
    "use_qalora": false,
    "use_rslora": false
  })");
}

// ---- zt.freeze -------------------------------------------------------------------------------

TEST(ConfigFreeze, DefaultFreezesNothingAndTrainsNoAdapter) {
  const Tuning t = parse(minimal()).zt.tuning;
  EXPECT_TRUE(t.freeze.empty());
  EXPECT_FALSE(t.lora.enabled);
  EXPECT_FALSE(t.any());
}

TEST(ConfigFreeze, ReadsPatternsInOrder) {
  const Tuning t = parse(with(minimal(), "/zt/freeze",
                              {"model.embed_tokens.*", "model.layers.0.*", "lm_head.weight"}))
                       .zt.tuning;
  EXPECT_EQ(t.freeze, (std::vector<std::string>{"model.embed_tokens.*", "model.layers.0.*",
                                                "lm_head.weight"}));
  EXPECT_TRUE(t.any());
  EXPECT_FALSE(t.lora.enabled);
  EXPECT_FALSE(parse(with(minimal(), "/zt/freeze", json::array())).zt.tuning.any());
  EXPECT_FALSE(parse(with(minimal(), "/zt/freeze", nullptr)).zt.tuning.any());
}

TEST(ConfigFreeze, RefusalsNameTheKey) {
  EXPECT_EQ(input_error(with(minimal(), "/zt/freeze", "model.layers.0.*")),
            kSource +
                ": 'zt.freeze' must be a list, each a tensor-name pattern such as "
                "\"model.layers.0.*\", got string \"model.layers.0.*\"");
  EXPECT_EQ(input_error(with(minimal(), "/zt/freeze", {"model.norm.weight", 3})),
            kSource +
                ": 'zt.freeze[1]' must be a tensor-name pattern such as \"model.layers.0.*\", got "
                "integer 3");
  EXPECT_EQ(input_error(with(minimal(), "/zt/freeze", {"model.norm.weight", ""})),
            kSource +
                ": 'zt.freeze[1]' is an empty string; give a tensor-name pattern such as "
                "\"model.layers.0.*\"");
}

// ---- zt.lora inline --------------------------------------------------------------------------

TEST(ConfigLora, EmptyBlockTakesPeftDefaults) {
  const LoraConfig lora = parse(with_lora(json::object())).zt.tuning.lora;
  EXPECT_TRUE(lora.enabled);
  EXPECT_EQ(lora.r, 8);
  EXPECT_EQ(lora.alpha, 8.0f);
  EXPECT_EQ(lora.dropout, 0.0f);
  EXPECT_TRUE(lora.target_modules.empty());  // the model type's default
  EXPECT_FALSE(lora.use_rslora);
  EXPECT_TRUE(lora.modules_to_save.empty());
  EXPECT_EQ(lora.bias, "none");
  EXPECT_EQ(lora.scale(), 1.0f);
}

TEST(ConfigLora, ReadsEveryKey) {
  const LoraConfig lora = parse(with_lora({{"r", 16},
                                           {"lora_alpha", 32},
                                           {"lora_dropout", 0.05},
                                           {"target_modules", {"q_proj", "k_proj", "v_proj"}},
                                           {"use_rslora", true},
                                           {"modules_to_save", {"lm_head"}},
                                           {"bias", "lora_only"}}))
                              .zt.tuning.lora;
  EXPECT_TRUE(lora.enabled);
  EXPECT_EQ(lora.r, 16);
  EXPECT_EQ(lora.alpha, 32.0f);
  EXPECT_EQ(lora.dropout, 0.05f);
  EXPECT_EQ(lora.target_modules, (std::vector<std::string>{"q_proj", "k_proj", "v_proj"}));
  EXPECT_TRUE(lora.use_rslora);
  EXPECT_EQ(lora.modules_to_save, std::vector<std::string>{"lm_head"});
  EXPECT_EQ(lora.bias, "lora_only");
  EXPECT_FLOAT_EQ(lora.scale(), 32.0f / 4.0f);  // alpha / sqrt(r)
  EXPECT_FLOAT_EQ(parse(with_lora({{"r", 16}, {"lora_alpha", 32}})).zt.tuning.lora.scale(), 2.0f);
}

TEST(ConfigLora, TargetModulesAllLinearAndOtherForms) {
  auto targets = [](const json& v) {
    return parse(with_lora({{"target_modules", v}})).zt.tuning.lora.target_modules;
  };
  EXPECT_EQ(targets("all-linear"), std::vector<std::string>{"all-linear"});
  EXPECT_EQ(targets("ALL-LINEAR"), std::vector<std::string>{"all-linear"});  // PEFT lower()s it
  EXPECT_EQ(targets({"self_attn.o_proj"}), std::vector<std::string>{"self_attn.o_proj"});
  EXPECT_TRUE(targets(nullptr).empty());
  const LoraConfig lora =
      parse(with_lora({{"modules_to_save", nullptr}, {"bias", "all"}})).zt.tuning.lora;
  EXPECT_TRUE(lora.modules_to_save.empty());
  EXPECT_EQ(lora.bias, "all");
}

TEST(ConfigLora, PeftKeysAtHarmlessValuesAreAccepted) {
  const Config c = parse(with_lora({{"task_type", "CAUSAL_LM"},
                                    {"peft_type", "LORA"},
                                    {"inference_mode", false},
                                    {"fan_in_fan_out", false},
                                    {"init_lora_weights", true},
                                    {"use_dora", false},
                                    {"lora_bias", false},
                                    {"use_qalora", false},
                                    {"ensure_weight_tying", false},
                                    {"rank_pattern", json::object()},
                                    {"alpha_pattern", json::object()},
                                    {"exclude_modules", json::array()},
                                    {"loftq_config", json::object()},
                                    {"layers_to_transform", nullptr},
                                    {"layers_pattern", nullptr},
                                    {"megatron_config", nullptr},
                                    {"base_model_name_or_path", "meta-llama/Llama-3.2-1B"},
                                    {"revision", "main"},
                                    {"auto_mapping", nullptr},
                                    {"peft_version", "0.19.1"},
                                    {"megatron_core", "megatron.core"},
                                    {"qalora_group_size", 16}}));
  EXPECT_TRUE(c.zt.tuning.lora.enabled);
  EXPECT_EQ(c.zt.tuning.lora.r, 8);
  EXPECT_TRUE(c.notes.empty()) << c.notes.front();
}

TEST(ConfigLora, ValueErrorsNameTheKey) {
  const TypeCase cases[] = {
      {"/zt/lora", 5,
       "'zt.lora' must be an object of PEFT LoraConfig keys, or the path of a PEFT "
       "adapter_config.json, got integer 5"},
      {"/zt/lora/r", 0, "'zt.lora.r' must be > 0, got 0"},
      {"/zt/lora/r", 1.5, "'zt.lora.r' must be an integer, got number 1.5"},
      {"/zt/lora/lora_alpha", 0, "'zt.lora.lora_alpha' must be > 0, got 0"},
      {"/zt/lora/lora_alpha", "16", "'zt.lora.lora_alpha' must be a number, got string \"16\""},
      {"/zt/lora/lora_dropout", 1.0, "'zt.lora.lora_dropout' must be >= 0 and < 1, got 1.0"},
      {"/zt/lora/lora_dropout", -0.1, "'zt.lora.lora_dropout' must be >= 0 and < 1, got -0.1"},
      {"/zt/lora/use_rslora", "yes",
       "'zt.lora.use_rslora' must be a boolean (true or false), got string \"yes\""},
      {"/zt/lora/bias", "some",
       "'zt.lora.bias' must be one of \"none\", \"all\", \"lora_only\", got string \"some\""},
      {"/zt/lora/modules_to_save", "lm_head",
       "'zt.lora.modules_to_save' must be a list, each a module name such as \"lm_head\", got "
       "string \"lm_head\""},
      {"/zt/lora/modules_to_save",
       {""},
       "'zt.lora.modules_to_save[0]' is an empty string; give a module name such as \"lm_head\""},
      {"/zt/lora/target_modules", ".*(q|v)_proj$",
       "'zt.lora.target_modules' is string \".*(q|v)_proj$\": a single string is a regular "
       "expression in PEFT, which is not supported; give a list of module names such as "
       "[\"q_proj\", \"v_proj\"], or \"all-linear\""},
      {"/zt/lora/target_modules", json::array(),
       "'zt.lora.target_modules' is an empty list; list module names such as [\"q_proj\", "
       "\"v_proj\"], give \"all-linear\", or remove the key for the model's default"},
      {"/zt/lora/target_modules",
       {"q_proj", "all-linear"},
       "'zt.lora.target_modules[1]' is \"all-linear\": PEFT reads it as a module name inside a "
       "list; give \"all-linear\" alone, not in a list"},
      {"/zt/lora/target_modules",
       {"q_proj", 7},
       "'zt.lora.target_modules[1]' must be a module name such as \"q_proj\", got integer 7"},
      {"/zt/lora/target_modules", 7,
       "'zt.lora.target_modules' must be a list of module names such as [\"q_proj\", "
       "\"v_proj\"], or \"all-linear\", got integer 7"},
      {"/zt/lora/rank", 16,
       "unknown key 'zt.lora.rank' (not a PEFT LoraConfig key ZeroTrain reads)"},
      {"/zt/lora/lora_alpah", 16,
       "unknown key 'zt.lora.lora_alpah' (not a PEFT LoraConfig key ZeroTrain reads) (did you "
       "mean 'zt.lora.lora_alpha'?)"},
  };
  for (const TypeCase& c : cases) {
    json j = with_lora(json::object());
    EXPECT_EQ(input_error(with(j, c.pointer, c.value)), kSource + ": " + c.message);
  }
}

TEST(ConfigLora, UnsupportedPeftKeysAreRefusedNamingTheKey) {
  struct Refusal {
    std::string key;
    json value;
    std::string says;  // besides "'zt.lora.<key>'" and the value
  };
  const Refusal cases[] = {
      {"task_type", "SEQ_CLS", "must be \"CAUSAL_LM\""},
      {"peft_type", "ADALORA", "must be \"LORA\""},
      {"inference_mode", true, "zt.lora trains it: set false or remove it"},
      {"fan_in_fan_out", true, "is not supported"},
      {"init_lora_weights", "gaussian", "is not supported: only PEFT's default initialisation"},
      {"init_lora_weights", false, "is not supported"},
      {"use_dora", true, "is not supported: DoRA"},
      {"lora_bias", true, "is not supported"},
      {"use_qalora", true, "is not supported"},
      {"layers_to_transform", {0, 1}, "is not supported"},
      {"layers_to_transform", 0, "is not supported"},
      {"layers_pattern", "layers", "is not supported"},
      {"rank_pattern", {{"q_proj", 4}}, "is not supported: every adapter has rank r"},
      {"alpha_pattern", {{"q_proj", 4}}, "is not supported: every adapter has lora_alpha"},
      {"exclude_modules", {"lm_head"}, "is not supported"},
      {"target_parameters", {"experts.down_proj"}, "is not supported"},
      {"trainable_token_indices", {1, 2}, "is not supported"},
      {"layer_replication", {{0, 2}}, "is not supported"},
      {"megatron_config", json::object(), "is not supported"},
      {"loftq_config", {{"loftq_bits", 4}}, "is not supported: LoftQ"},
      {"eva_config", json::object(), "is not supported"},
      {"corda_config", json::object(), "is not supported"},
  };
  for (const Refusal& c : cases) {
    const std::string message = input_error(with_lora({{c.key, c.value}}));
    EXPECT_EQ(message.rfind(fmt::format("{}: 'zt.lora.{}' ", kSource, c.key), 0), 0u) << message;
    EXPECT_CONTAINS(message, c.says);
    EXPECT_CONTAINS(message, "(got ");
  }
  EXPECT_EQ(input_error(with_lora({{"use_dora", true}})),
            kSource +
                ": 'zt.lora.use_dora' is not supported: DoRA (weight-decomposed LoRA) is not "
                "built; set it to false or remove it (got boolean true)");
  // A boolean key with another type is a type error, not a refusal.
  EXPECT_EQ(input_error(with_lora({{"use_dora", "no"}})),
            kSource + ": 'zt.lora.use_dora' must be a boolean (true or false), got string \"no\"");
}

// ---- zt.lora as a PEFT adapter_config.json ---------------------------------------------------

class ConfigLoraFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           fmt::format("zt_config_lora_test_{}_{}", ::getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ / "adapter");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Writes `text` at dir_/name and returns its path.
  std::string write(const std::string& name, const std::string& text) {
    const std::filesystem::path path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }
  std::string write_adapter(const json& config) {
    return write("adapter/adapter_config.json", config.dump(2));
  }
  // The config file the job's JSON is said to come from: relative zt.lora paths start at its
  // folder (it need not exist).
  std::string config_path() const { return (dir_ / "job.json").string(); }
  Config parse_job(const json& lora) const {
    return parse_config(with(minimal(), "/zt/lora", lora), config_path(), 1);
  }
  // The kInput message parse_config throws, checked to be one line starting "<file>: ".
  std::string job_error(const json& lora, const std::string& file) const {
    try {
      parse_job(lora);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInput);
      EXPECT_EQ(e.message().find('\n'), std::string::npos) << e.message();
      EXPECT_EQ(e.message().rfind(file + ": ", 0), 0u) << e.message();
      return e.message();
    }
    ADD_FAILURE() << "no error for zt.lora " << lora.dump();
    return {};
  }

  std::filesystem::path dir_;
};

TEST_F(ConfigLoraFile, ReadsAPeftAdapterConfig) {
  const std::string path = write_adapter(peft_adapter_config());
  for (const json& given : {json(path), json("adapter/adapter_config.json"), json("adapter"),
                            json((dir_ / "adapter").string())}) {
    const Config c = parse_job(given);
    const LoraConfig& lora = c.zt.tuning.lora;
    EXPECT_TRUE(lora.enabled) << given;
    EXPECT_EQ(lora.r, 16);
    EXPECT_EQ(lora.alpha, 32.0f);
    EXPECT_EQ(lora.dropout, 0.05f);
    EXPECT_EQ(lora.target_modules, (std::vector<std::string>{"q_proj", "v_proj"}));
    EXPECT_FALSE(lora.use_rslora);
    EXPECT_TRUE(lora.modules_to_save.empty());
    EXPECT_EQ(lora.bias, "none");
    EXPECT_EQ(lora.scale(), 2.0f);
    EXPECT_TRUE(c.notes.empty());
  }
}

TEST_F(ConfigLoraFile, ReadsPeftsFirstFormatAndAllLinear) {
  // An older PEFT's file: fewer keys, lora_alpha a float, "all-linear", rsLoRA, a saved head.
  const std::string path = write_adapter(json::parse(R"({
    "base_model_name_or_path": "gpt2", "bias": "all", "fan_in_fan_out": false,
    "inference_mode": false, "init_lora_weights": true, "layers_pattern": null,
    "layers_to_transform": null, "lora_alpha": 256.0, "lora_dropout": 0.0,
    "modules_to_save": ["lm_head"], "peft_type": "LORA", "r": 64, "revision": null,
    "target_modules": "all-linear", "task_type": "CAUSAL_LM", "use_rslora": true})"));
  const LoraConfig lora = parse_job(path).zt.tuning.lora;
  EXPECT_EQ(lora.r, 64);
  EXPECT_EQ(lora.target_modules, std::vector<std::string>{"all-linear"});
  EXPECT_EQ(lora.modules_to_save, std::vector<std::string>{"lm_head"});
  EXPECT_EQ(lora.bias, "all");
  EXPECT_FLOAT_EQ(lora.scale(), 256.0f / 8.0f);
}

TEST_F(ConfigLoraFile, ErrorsInsideTheFileNameTheFileAndTheKey) {
  const std::string path = (dir_ / "adapter" / "adapter_config.json").string();
  auto edited = [](const char* key, const json& value) {
    json config = peft_adapter_config();
    config[key] = value;
    return config;
  };
  write_adapter(edited("use_dora", true));
  EXPECT_EQ(job_error("adapter", path),
            path +
                ": 'use_dora' is not supported: DoRA (weight-decomposed LoRA) is not built; set "
                "it to false or remove it (got boolean true)");
  write_adapter(edited("rank_pattern", {{"model.layers.0.self_attn.q_proj", 4}}));
  EXPECT_CONTAINS(job_error("adapter", path), "'rank_pattern' is not supported");
  write_adapter(edited("alpha_pattern", {{"q_proj", 64}}));
  EXPECT_CONTAINS(job_error("adapter", path), "'alpha_pattern' is not supported");
  write_adapter(edited("layers_to_transform", {0, 1, 2}));
  EXPECT_CONTAINS(job_error("adapter", path), "'layers_to_transform' is not supported");
  write_adapter(edited("fan_in_fan_out", true));
  EXPECT_CONTAINS(job_error("adapter", path), "'fan_in_fan_out' is not supported");
  write_adapter(edited("r", 0));
  EXPECT_EQ(job_error("adapter", path), path + ": 'r' must be > 0, got 0");
  // PEFT 0.21 writes its default targets as a regular expression.
  write_adapter(edited("target_modules", ".*\\.(q_proj|v_proj)"));
  EXPECT_CONTAINS(job_error("adapter", path),
                  "'target_modules' is string \".*\\\\.(q_proj|v_proj)\": a single string is a "
                  "regular expression in PEFT, which is not supported; give a list of module "
                  "names");
  write_adapter(edited("task_type", "SEQ_2_SEQ_LM"));
  EXPECT_CONTAINS(job_error("adapter", path), "'task_type' must be \"CAUSAL_LM\"");
  write_adapter(edited("some_future_key", 1));
  EXPECT_EQ(job_error("adapter", path),
            path + ": unknown key 'some_future_key' (not a PEFT LoraConfig key ZeroTrain reads)");
  // inference_mode true is what save_pretrained writes: accepted in a file, refused inline.
  write_adapter(edited("inference_mode", "yes"));
  EXPECT_EQ(job_error("adapter", path),
            path + ": 'inference_mode' must be a boolean (true or false), got string \"yes\"");
}

TEST_F(ConfigLoraFile, BadPathsAndMalformedFilesAreOneLine) {
  EXPECT_EQ(job_error("missing/adapter_config.json", config_path()),
            config_path() + ": 'zt.lora' is \"missing/adapter_config.json\": no such file (" +
                (dir_ / "missing" / "adapter_config.json").string() +
                "); give a PEFT adapter_config.json or its directory, relative to the config "
                "file's folder");
  // A directory without an adapter_config.json.
  EXPECT_CONTAINS(job_error("adapter", config_path()),
                  "'zt.lora' is \"adapter\": no such file (" +
                      (dir_ / "adapter" / "adapter_config.json").string() + ")");
  EXPECT_EQ(job_error("", config_path()),
            config_path() + ": 'zt.lora' is an empty string; give an object or a file's path");
  const std::string bad = write("bad.json", "{\"r\": 8,\n}");
  EXPECT_CONTAINS(job_error("bad.json", bad), bad + ": malformed JSON: parse error at line 2");
  const std::string dup = write("dup.json", R"({"r": 8, "r": 16})");
  EXPECT_EQ(job_error("dup.json", dup), dup + ": duplicate key 'r'");
  const std::string list = write("list.json", "[1, 2]");
  EXPECT_CONTAINS(job_error("list.json", list), list + ": the top level must be an object");
}

// ---- the adapter keys: zt.init_adapter, zt.save_adapter, zt.save_pretrained.merge_adapter ----

TEST(ConfigAdapterKeys, ReadWithZtLora) {
  json j = with_lora(json::object());
  j = with(j, "/zt/init_adapter", "adapters/start");
  j = with(j, "/zt/save_adapter", "runs/x/adapter");
  j = with(j, "/zt/save_pretrained", {{"dir", "runs/x/merged"}, {"merge_adapter", true}});
  const Config c = parse(j);
  EXPECT_EQ(c.zt.init_adapter, "adapters/start");
  EXPECT_EQ(c.zt.save_adapter, "runs/x/adapter");
  EXPECT_TRUE(c.zt.save_pretrained.merge_adapter);
  EXPECT_FALSE(parse(minimal()).zt.save_pretrained.merge_adapter);
  EXPECT_TRUE(parse(minimal()).zt.save_adapter.empty());
}

TEST(ConfigAdapterKeys, RefusedWithoutZtLoraOrMergeNamingTheKey) {
  EXPECT_EQ(input_error(with(minimal(), "/zt/save_adapter", "out/adapter")),
            kSource +
                ": 'zt.save_adapter' is 'out/adapter', but there is no 'zt.lora': adapter files go "
                "with LoRA runs; add a zt.lora block or remove the key");
  EXPECT_CONTAINS(input_error(with(minimal(), "/zt/init_adapter", "in/adapter")),
                  "'zt.init_adapter' is 'in/adapter', but there is no 'zt.lora'");
  EXPECT_EQ(input_error(with(minimal(), "/zt/save_pretrained",
                             {{"dir", "out/hf"}, {"merge_adapter", true}})),
            kSource +
                ": 'zt.save_pretrained.merge_adapter' is true, but there is no 'zt.lora': there "
                "are no adapters to merge; remove it or add a zt.lora block");
  // A LoRA run's save_pretrained writes the merged model only: unmerged would drop the training.
  for (const json& save : {json("out/hf"), json{{"dir", "out/hf"}, {"merge_adapter", false}}})
    EXPECT_EQ(input_error(with(with_lora(json::object()), "/zt/save_pretrained", save)),
              kSource +
                  ": 'zt.save_pretrained' ('out/hf') under zt.lora writes the merged model: set "
                  "'zt.save_pretrained.merge_adapter' to true (each adapted weight W + s·B·A), or "
                  "use 'zt.save_adapter' for PEFT's adapter files");
  EXPECT_CONTAINS(input_error(with(with_lora(json::object()), "/zt/save_pretrained",
                                   {{"dir", "out/hf"}, {"merge_adapter", "yes"}})),
                  "'zt.save_pretrained.merge_adapter' must be a boolean");
  // zt.save_weights holds the base model's tensors: under LoRA, not what trained.
  EXPECT_CONTAINS(input_error(with(with_lora(json::object()), "/zt/save_weights", "w.safetensors")),
                  "'zt.save_weights' ('w.safetensors') writes the base model's tensors");
}

}  // namespace
}  // namespace zt
