// Tests for zero/precision: the Precision each combination of the fp16 / bf16 / data_types /
// communication_data_type blocks resolves to, and the combinations refused with one line
// naming the key and the file.
#include "zero/precision.h"

#include <gtest/gtest.h>

#include "runtime/status.h"

namespace zt {
namespace {

using nlohmann::json;

json minimal() {
  return {{"train_micro_batch_size_per_gpu", 4},
          {"zt",
           {{"model", "gpt2-tiny"},
            {"seq_len", 64},
            {"train_data", "data/corpus/train.bin"},
            {"steps", 10}}}};
}

Precision resolve(json j) { return precision_from_config(parse_config(j, "configs/x.json", 1)); }

std::string refusal(json j) {
  try {
    resolve(std::move(j));
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput);
    return e.message();
  }
  return "(accepted)";
}

TEST(Precision, Fp32ByDefault) {
  const Precision p = resolve(minimal());
  EXPECT_FALSE(p.mixed());
  EXPECT_EQ(p.grad_accum, DType::kF32);
  EXPECT_EQ(p.comm, DType::kF32);
  EXPECT_STREQ(precision_name(p), "fp32");
}

TEST(Precision, MixedDefaultsToTheSixteenBitTypeEverywhere) {
  json j = minimal();
  j["bf16"] = {{"enabled", true}};
  Precision p = resolve(j);
  EXPECT_EQ(p.compute, DType::kBF16);
  EXPECT_EQ(p.grad_accum, DType::kBF16);
  EXPECT_EQ(p.comm, DType::kBF16);
  EXPECT_TRUE(p.has_master());
  EXPECT_FALSE(p.loss_scaling());
  EXPECT_STREQ(precision_name(p), "bf16 mixed");

  j = minimal();
  j["fp16"] = {{"enabled", true}, {"loss_scale_window", 100}, {"hysteresis", 1}};
  p = resolve(j);
  EXPECT_EQ(p.compute, DType::kF16);
  EXPECT_TRUE(p.loss_scaling());
  EXPECT_EQ(p.fp16.loss_scale_window, 100);
  EXPECT_EQ(p.fp16.hysteresis, 1);
}

TEST(Precision, BfloatSixteenIsAnAlias) {
  json j = minimal();
  j["bfloat16"] = {{"enabled", true}};
  EXPECT_EQ(resolve(j).compute, DType::kBF16);
}

TEST(Precision, DataTypesAndCommunicationType) {
  json j = minimal();
  j["fp16"] = {{"enabled", true}};
  j["data_types"] = {{"grad_accum_dtype", "fp32"}};
  j["communication_data_type"] = "fp32";
  const Precision p = resolve(j);
  EXPECT_EQ(p.grad_accum, DType::kF32);
  EXPECT_EQ(p.comm, DType::kF32);
  EXPECT_EQ(p.grad_bytes(), 4);
  EXPECT_EQ(p.param_bytes(), 2);
  EXPECT_EQ(p.optimizer_bytes(8), 12);
}

TEST(Precision, PureSixteenBit) {
  json j = minimal();
  j["bf16"] = {{"enabled", true}, {"bf16_master_weights_and_grads", true}};
  Precision p = resolve(j);
  EXPECT_FALSE(p.has_master());
  EXPECT_EQ(p.optimizer_bytes(8), 8);
  EXPECT_STREQ(precision_name(p), "bf16 pure");
  j = minimal();
  j["fp16"] = {{"enabled", true}, {"fp16_master_weights_and_grads", true}};
  EXPECT_STREQ(precision_name(resolve(j)), "fp16 pure");
}

TEST(Precision, RefusesTypesThatDoNotFit) {
  json j = minimal();
  j["data_types"] = {{"grad_accum_dtype", "bf16"}};
  EXPECT_EQ(refusal(j),
            "configs/x.json: 'data_types.grad_accum_dtype' is bf16 but neither fp16 nor bf16 is "
            "enabled; use fp32 or enable one of them");
  j = minimal();
  j["communication_data_type"] = "fp16";
  EXPECT_NE(refusal(j).find("'communication_data_type' is fp16 but neither"), std::string::npos);
  j = minimal();
  j["bf16"] = {{"enabled", true}};
  j["communication_data_type"] = "fp16";
  EXPECT_EQ(refusal(j),
            "configs/x.json: 'communication_data_type' is fp16 but training runs in bf16; use "
            "fp32 or bf16");
}

}  // namespace
}  // namespace zt
