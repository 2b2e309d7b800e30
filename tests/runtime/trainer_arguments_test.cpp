// The Hugging Face Trainer's arguments in the zt block (runtime/config/trainer_arguments.h):
// "auto" filled from them as the Trainer's DeepSpeed integration fills it, each filled value a
// row of Config::from_arguments; a value given that an argument contradicts refused naming
// both; an absent key left absent; lr_scheduler_type building the equivalent scheduler block
// only when the config has none; "auto" no argument gives still named as before.
#include <gtest/gtest.h>

#include "deepspeed_test_util.h"
#include "runtime/config.h"

namespace zt {
namespace {

using nlohmann::json;
using namespace deepspeed_test;

json hf_auto() {
  json j = {{"train_batch_size", "auto"},
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
            {"bf16", {{"enabled", "auto"}}},
            {"zt", minimal()["zt"]}};
  j["zt"].erase("steps");
  j["zt"].update({{"learning_rate", 3e-4},
                  {"weight_decay", 0.1},
                  {"adam_beta1", 0.9},
                  {"adam_beta2", 0.95},
                  {"adam_epsilon", 1e-6},
                  {"max_grad_norm", 0.5},
                  {"warmup_ratio", 0.25},
                  {"max_steps", 10},
                  {"per_device_train_batch_size", 2},
                  {"gradient_accumulation_steps", 3},
                  {"bf16", true}});
  return j;
}

std::string from_of(const Config& c, const std::string& key) {
  for (const auto& row : c.from_arguments)
    if (row.key == key) return row.value + " <- " + row.from;
  return "none";
}

TEST(TrainerArguments, FillEveryAutoAsTheTrainerDoes) {
  const Config c = parse(hf_auto(), 2);
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 2);
  EXPECT_EQ(c.gradient_accumulation_steps, 3);
  EXPECT_EQ(c.train_batch_size, 12);  // then follows: 2 x 3 x world 2
  EXPECT_DOUBLE_EQ(c.gradient_clipping, 0.5);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-4);
  EXPECT_DOUBLE_EQ(c.optimizer.betas[1], 0.95);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.1);
  EXPECT_EQ(c.zt.steps, 10);
  EXPECT_EQ(c.scheduler.total_num_steps, 10);
  EXPECT_EQ(c.scheduler.warmup_num_steps, 3);  // ceil(0.25 x 10)
  EXPECT_DOUBLE_EQ(c.scheduler.warmup_max_lr, 3e-4);
  EXPECT_TRUE(c.bf16.enabled);
  EXPECT_EQ(from_of(c, "optimizer.params.betas"), "[0.9,0.95] <- zt.adam_beta1, zt.adam_beta2");
  EXPECT_EQ(from_of(c, "scheduler.params.warmup_num_steps"), "3 <- zt.warmup_ratio x steps");
  EXPECT_EQ(from_of(c, "zt.steps"), "10 <- zt.max_steps");
  EXPECT_EQ(c.from_arguments.size(), 12u);
}

TEST(TrainerArguments, ContradictionsAreRefusedNamingBoth) {
  EXPECT_EQ(input_error(with(hf_auto(), "/optimizer/params/lr", 1e-3), 2),
            "'optimizer.params.lr' is 0.001 but 'zt.learning_rate' gives "
            "0.0003; they must agree (or make 'optimizer.params.lr' \"auto\")");
  EXPECT_NE(input_error(with(hf_auto(), "/zt/steps", 11), 2).find("'zt.max_steps' gives 10"),
            std::string::npos);
  // An explicit value the argument agrees with is fine, and is no row.
  const Config c = parse(with(hf_auto(), "/gradient_clipping", 0.5), 2);
  EXPECT_EQ(from_of(c, "gradient_clipping"), "none");
}

TEST(TrainerArguments, WithoutAnArgumentAutoIsNamedAsBefore) {
  json j = hf_auto();
  j["zt"].erase("learning_rate");
  EXPECT_NE(input_error(j, 2).find("'optimizer.params.lr'"), std::string::npos);
  // One beta given: the Trainer's default for the other.
  j = hf_auto();
  j["zt"].erase("adam_beta2");
  EXPECT_DOUBLE_EQ(parse(j, 2).optimizer.betas[1], 0.999);
}

TEST(TrainerArguments, SchedulerTypeBuildsTheBlockWhenThereIsNone) {
  json j = hf_auto();
  j.erase("scheduler");
  j["zt"]["lr_scheduler_type"] = "cosine";
  Config c = parse(j, 2);
  EXPECT_EQ(c.scheduler.type, SchedulerType::kWarmupCosineLR);
  EXPECT_EQ(c.scheduler.warmup_num_steps, 3);
  EXPECT_EQ(c.scheduler.total_num_steps, 10);
  EXPECT_EQ(from_of(c, "scheduler"), "WarmupCosineLR <- zt.lr_scheduler_type");
  j["zt"]["lr_scheduler_type"] = "linear";
  EXPECT_EQ(parse(j, 2).scheduler.type, SchedulerType::kWarmupDecayLR);
  j["zt"]["lr_scheduler_type"] = "polynomial";
  EXPECT_NE(input_error(j, 2).find("'zt.lr_scheduler_type' is 'polynomial'"), std::string::npos);
  // With a scheduler block of its own, the block wins (a note says so).
  json k = hf_auto();
  k["zt"]["lr_scheduler_type"] = "cosine";
  c = parse(k, 2);
  EXPECT_EQ(c.scheduler.type, SchedulerType::kWarmupDecayLR);
  EXPECT_FALSE(notes_naming(c, "zt.lr_scheduler_type").empty());
}

TEST(TrainerArguments, ArgumentsAreChecked) {
  EXPECT_NE(input_error(with(hf_auto(), "/zt/learning_rate", "fast"), 2).find("zt.learning_rate"),
            std::string::npos);
  EXPECT_NE(input_error(with(hf_auto(), "/zt/fp16", true), 2).find("'zt.fp16' and 'zt.bf16'"),
            std::string::npos);
}

}  // namespace
}  // namespace zt
