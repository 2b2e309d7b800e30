// Tests for runtime/config's handling of the Hugging Face Trainer's "auto" in DeepSpeed configs
// (resolved, recorded for the model, or named with the --set that fixes it), and of the shipped
// configs/deepspeed files. The rest of DeepSpeed's keys as users write them:
// deepspeed_keys_test.cpp; the helpers both use: deepspeed_test_util.h.
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
