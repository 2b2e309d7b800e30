// Tests for runtime/config's files: unreadable, malformed and duplicate-key files, --set
// overrides (JSON or plain strings, nested objects created, errors quoted), and the shipped
// configs/ files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "runtime/config.h"
#include "runtime/status.h"

namespace zt {
namespace {

using nlohmann::json;

#define EXPECT_CONTAINS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

// The smallest valid config: one batch key and the required zt keys.
json minimal() {
  return {{"train_micro_batch_size_per_gpu", 4},
          {"zt",
           {{"model", "gpt2-tiny"},
            {"seq_len", 64},
            {"train_data", "data/corpus/train.bin"},
            {"steps", 10}}}};
}

// ---- files and overrides ---------------------------------------------------------------------

class ConfigFile : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const auto& p : written_) std::filesystem::remove(p);
  }
  std::string write(const std::string& name, const std::string& text) {
    auto path = std::filesystem::temp_directory_path() /
                fmt::format("zt_config_test_{}_{}", ::getpid(), name);
    std::ofstream(path) << text;
    written_.push_back(path);
    return path.string();
  }
  // The kInput message load_config_json throws.
  static std::string load_error(const std::string& path,
                                const std::vector<std::string>& overrides = {}) {
    try {
      load_config_json(path, overrides);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInput);
      EXPECT_EQ(e.message().find('\n'), std::string::npos) << e.message();
      return e.message();
    }
    ADD_FAILURE() << "no error loading " << path;
    return {};
  }
  std::vector<std::filesystem::path> written_;
};

TEST_F(ConfigFile, MissingFileNamesThePath) {
  EXPECT_CONTAINS(load_error("/nonexistent/zt.json"),
                  "/nonexistent/zt.json: cannot open config file");
  EXPECT_CONTAINS(load_error(std::filesystem::temp_directory_path().string()), "is a directory");
}

TEST_F(ConfigFile, MalformedJsonGivesLineAndColumn) {
  std::string path = write("bad.json", "{\n  \"zt\": {\n    \"steps\": 1,\n  }\n}\n");
  std::string message = load_error(path);
  EXPECT_EQ(message.rfind(path + ": malformed JSON: parse error at line 4, column 3", 0), 0u)
      << message;
  EXPECT_CONTAINS(message, "expected string literal");
}

TEST_F(ConfigFile, DuplicateKeysAreErrors) {
  std::string path =
      write("dup.json", R"({"zt": {"steps": 1, "model": {"n_layer": 1}, "steps": 2}})");
  EXPECT_EQ(load_error(path), path + ": duplicate key 'zt.steps'");
  std::string nested =
      write("dup2.json", R"({"a": [{"x": 1}], "zt": {"model": {"n_layer": 1, "n_layer": 2}}})");
  EXPECT_EQ(load_error(nested), nested + ": duplicate key 'zt.model.n_layer'");
}

TEST_F(ConfigFile, TopLevelMustBeObject) {
  std::string path = write("array.json", "[1, 2]");
  EXPECT_EQ(load_error(path), path + ": the top level must be an object, got array [1,2]");
}

TEST_F(ConfigFile, OverridesParseJsonOrTakeStrings) {
  std::string path = write("ok.json", minimal().dump());
  json j = load_config_json(
      path, {"optimizer.type=AdamW", "optimizer.params.lr=0.01",
             "optimizer.params.betas=[0.9,0.95]", "fp16.enabled=true", "zt.output_dir=runs/x",
             "zt.val_data=\"v.bin\"", "zero_optimization={\"stage\":2}", "zt.seq_len=128",
             "zt.init_from=", "zt.steps=10", "zt.steps=20"});
  EXPECT_EQ(j["optimizer"]["type"], "AdamW");
  EXPECT_EQ(j["optimizer"]["params"]["lr"], 0.01);
  EXPECT_EQ(j["optimizer"]["params"]["betas"], json({0.9, 0.95}));
  EXPECT_EQ(j["fp16"]["enabled"], true);
  EXPECT_EQ(j["zt"]["output_dir"], "runs/x");
  EXPECT_EQ(j["zt"]["val_data"], "v.bin");
  EXPECT_EQ(j["zero_optimization"], json({{"stage", 2}}));
  EXPECT_EQ(j["zt"]["seq_len"], 128);
  EXPECT_EQ(j["zt"]["init_from"], "");
  EXPECT_EQ(j["zt"]["steps"], 20);  // the last override wins
  Config c = parse_config(j, path, 1);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.01);
  EXPECT_DOUBLE_EQ(c.optimizer.betas[1], 0.95);
  EXPECT_EQ(c.zero_optimization.stage, 2);
  EXPECT_EQ(c.compute_dtype(), DType::kF16);
  EXPECT_EQ(c.zt.seq_len, 128);
  EXPECT_EQ(c.resolved, j);
}

TEST_F(ConfigFile, OverridesCreateNestedObjects) {
  std::string path = write("nest.json", minimal().dump());
  json j = load_config_json(path, {"zero_optimization.offload_optimizer.device=cpu", "a.b.c=1"});
  EXPECT_EQ(j["zero_optimization"]["offload_optimizer"]["device"], "cpu");
  EXPECT_EQ(j["a"]["b"]["c"], 1);
  // The new key is then checked like any other.
  try {
    parse_config(j, path, 1);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), path + ": unknown key 'a'");
  }
}

TEST_F(ConfigFile, OverrideTypeErrorsComeFromValidation) {
  std::string path = write("types.json", minimal().dump());
  try {
    load_config(path, {"zt.seq_len=abc"}, 1);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput);
    EXPECT_EQ(e.message(), path + ": 'zt.seq_len' must be an integer, got string \"abc\"");
  }
  try {
    load_config(path, {"zero_optimization.stage=2.5"}, 1);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), path + ": 'zero_optimization.stage' must be an integer, got number 2.5");
  }
}

TEST_F(ConfigFile, MalformedOverridesAreQuoted) {
  std::string path = write("bad_override.json", minimal().dump());
  EXPECT_EQ(load_error(path, {"zt.seq_len"}), "--set 'zt.seq_len': expected key.path=value");
  EXPECT_EQ(load_error(path, {"=5"}), "--set '=5': expected key.path=value");
  EXPECT_EQ(load_error(path, {"zt..seq_len=5"}),
            "--set 'zt..seq_len=5': empty key in 'zt..seq_len'");
  EXPECT_EQ(load_error(path, {"zt.model.n_layer=2"}),
            "--set 'zt.model.n_layer=2': 'zt.model' is string \"gpt2-tiny\", not an object");
}

// ---- shipped configs -------------------------------------------------------------------------

TEST(ShippedConfigs, Gpt2TinyParses) {
  std::string path = std::string(ZT_SOURCE_DIR) + "/configs/gpt2-tiny.json";
  for (int world : {1, 2}) {
    Config c = load_config(path, {}, world);
    EXPECT_EQ(c.zt.model.zoo_name, "gpt2-tiny");
    EXPECT_EQ(c.train_micro_batch_size_per_gpu, 8);
    EXPECT_EQ(c.train_batch_size, 8 * world);
    EXPECT_EQ(c.optimizer.type, OptimizerType::kAdamW);
    EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-3);
    EXPECT_EQ(c.scheduler.type, SchedulerType::kWarmupCosineLR);
    EXPECT_EQ(c.scheduler.total_num_steps, c.zt.steps);
    EXPECT_EQ(c.zt.steps, 300);
    EXPECT_EQ(c.zt.seq_len, 64);
    EXPECT_EQ(c.zero_optimization.stage, 2);  // the demo runs 2 ranks with stage 2
  }
}

TEST(ShippedConfigs, Gpt2_124MParses) {
  Config c = load_config(std::string(ZT_SOURCE_DIR) + "/configs/gpt2-124M.json", {}, 1);
  EXPECT_EQ(c.zt.model.zoo_name, "gpt2-124M");
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 4);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 6e-4);
  EXPECT_EQ(c.scheduler.total_num_steps, c.zt.steps);
  EXPECT_EQ(c.zt.steps, 50);
  EXPECT_EQ(c.zt.eval_every, 25);
}

}  // namespace
}  // namespace zt
