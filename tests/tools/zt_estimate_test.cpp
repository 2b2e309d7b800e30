// zt-estimate as a user runs it: the ZeRO paper's Figure 1 from `--params 7.5e9 --ranks 64`
// (Ψ = 7.5B, N_d = 64, mixed-precision Adam, K = 12: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB per device
// for the baseline and stages 1-3), in its table and its --json; the fit list with
// --device-memory; input errors exit 2. A LoRA run (--lora-r; a config's zt.lora, also through
// zt-train --dry-run) planned beside the full fine-tune: Llama-3.2-1B, r=16 on every linear
// layer, bf16, 8 ranks, stage 3 (docs/memory-planner.md's figures).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace {

struct ToolRun {
  int code = -1;
  std::string out;
};

// `env`: assignments the tool runs under ("NAME=value ...").
ToolRun run_tool(const std::string& tool, const std::string& args, const std::string& env = "") {
  const std::string command =
      env + " " + std::string(ZT_BINARY_DIR) + "/bin/" + tool + " " + args + " 2>&1";
  ToolRun r;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

ToolRun run_estimate(const std::string& args) { return run_tool("zt-estimate", args); }

std::string temp_json(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          (name + "_" + std::to_string(getpid()) + ".json"))
      .string();
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in);
  std::filesystem::remove(path);
  return j;
}

// The choice (stage, offload_optimizer, offload_param) of a plan's "choices" or
// "tuning_comparison".
const nlohmann::json& choice(const nlohmann::json& list, int stage, const std::string& offload,
                             const std::string& param_offload = "none") {
  for (const auto& c : list)
    if (c.at("stage") == stage && c.at("offload_optimizer") == offload &&
        c.at("offload_param") == param_offload)
      return c;
  throw std::runtime_error("no such choice");
}

TEST(ZtEstimate, ReproducesFigure1OfTheZeroPaper) {
  const std::string json_path = (std::filesystem::temp_directory_path() /
                                 ("zt_estimate_" + std::to_string(getpid()) + ".json"))
                                    .string();
  const ToolRun r =
      run_estimate("--params 7.5e9 --ranks 64 --device-memory 32GB --json " + json_path);
  std::printf("%s", r.out.c_str());
  ASSERT_EQ(r.code, 0) << r.out;
  std::ifstream in(json_path);
  const nlohmann::json j = nlohmann::json::parse(in);
  std::filesystem::remove(json_path);
  const double paper[4] = {120.0, 31.4, 16.6, 1.9};
  int seen = 0;
  for (const auto& choice : j.at("choices")) {
    if (choice.at("offload_optimizer") != "none") continue;
    const int stage = choice.at("stage");
    const double gb = choice.at("model_states_bytes").at("device").get<double>() / 1e9;
    // Within rounding of the paper's one decimal.
    EXPECT_NEAR(gb, paper[stage], 0.05) << "stage " << stage;
    EXPECT_TRUE(choice.at("activation_bytes").is_null());  // a raw count has no layers
    // 2Ψ (stages 0-2) or 3Ψ (stage 3) over Ψ padded to a multiple of 64 ranks x 16: 7,500,000,256.
    EXPECT_EQ(choice.at("comm_elements_per_step").get<int64_t>(),
              (stage == 3 ? 3 : 2) * int64_t{7'500'000'256});
    ++seen;
  }
  EXPECT_EQ(seen, 4);
  // 32 GB holds stages 1-3 (31.4, 16.6, 1.9 GB), not the 120 GB baseline; cheapest first.
  ASSERT_FALSE(j.at("fitting_cheapest_first").empty());
  EXPECT_EQ(j.at("fitting_cheapest_first")[0].at("stage"), 1);
  EXPECT_NE(r.out.find("fits 29.80 GiB (32,000,000,000 bytes) of device memory"),
            std::string::npos);
}

TEST(ZtEstimate, ZooModelHasActivationsAndBadInputExitsTwo) {
  const ToolRun r =
      run_estimate("--model gpt2-tiny --ranks 2 --micro-batch 2 --seq-len 64 --checkpoint");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("n/a"), std::string::npos) << r.out;  // activations estimated
  EXPECT_EQ(run_estimate("--params 1e9 --model gpt2-tiny").code, 2);
  EXPECT_EQ(run_estimate("--params lots").code, 2);
  EXPECT_EQ(run_estimate("--params 1e9 --device-memory 6gigs").code, 2);
  EXPECT_EQ(run_estimate("--model gpt2-huge").code, 2);
}

// A GPU job's LM head computes its logits in chunks of the GPU's budget (1/32 of its memory,
// Device::chunk_budget_bytes), not the CPU's 64 MiB: the plan counts them so when it is given
// the device memory, and says it under-counts them when it is not.
TEST(ZtEstimate, GpuPlanCountsTheGpusLogitsChunk) {
  const std::string json_path = (std::filesystem::temp_directory_path() /
                                 ("zt_estimate_gpu_" + std::to_string(getpid()) + ".json"))
                                    .string();
  const auto plan = [&](const std::string& extra, std::string* out) {
    const ToolRun r = run_estimate(std::string("--config ") + ZT_SOURCE_DIR +
                                   "/configs/gpt2-124M.json --set train_micro_batch_size_per_gpu=16"
                                   " --set zt.seq_len=1024 --json " +
                                   json_path + " " + extra);
    EXPECT_EQ(r.code, 0) << r.out;
    if (out) *out = r.out;
    std::ifstream in(json_path);
    nlohmann::json j = nlohmann::json::parse(in);
    std::filesystem::remove(json_path);
    return j;
  };
  const auto activations = [](const nlohmann::json& j) {
    return j.at("choices").at(0).at("activation_bytes").get<int64_t>();
  };
  std::string unsized_text;
  const nlohmann::json cpu = plan("", nullptr);
  const nlohmann::json gpu = plan("--set zt.device=cuda --device-memory 80GiB", nullptr);
  const nlohmann::json unsized = plan("--set zt.device=cuda", &unsized_text);
  EXPECT_EQ(cpu.at("logits_chunk_budget_bytes").get<int64_t>(), int64_t{64} << 20);
  EXPECT_EQ(gpu.at("logits_chunk_budget_bytes").get<int64_t>(), (int64_t{80} << 30) / 32);
  EXPECT_EQ(gpu.at("device"), "cuda");
  // 16 x 1024 positions of 50,304 fp32 logits are 3.3 GB: a 2.5 GiB chunk holds 13,026 rows of
  // them where 64 MiB holds 333, so the GPU's head peak is higher (by 0.99 GB: the step's peak
  // moves to the head). Unsized, the GPU plan differs from the CPU's only by the token ids it
  // copies to the device (int32 inputs and targets).
  EXPECT_GT(activations(gpu), activations(cpu) + (int64_t{512} << 20));
  EXPECT_EQ(activations(unsized), activations(cpu) + 2 * 16 * 1024 * 4);  // inputs, targets
  EXPECT_NE(unsized_text.find("under-counted"), std::string::npos) << unsized_text;
}

// A bf16 GPU job's attention keeps cuDNN's record where its rules take the shape
// (planned_attention_record): GPT-2 124M at 16 x 1024, T a multiple of 128, so every cuDNN 9
// takes it. Each of the 12 layers keeps the statistics and the 16-bit output (26 MB) where the
// reference path (ZT_CUDA_ATTENTION=reference, as on the CPU) keeps the probabilities packed to
// 16 bits (403 MB); the plan's text says what it counted.
TEST(ZtEstimate, Bf16GpuPlanCountsCudnnsAttentionRecord) {
#if !ZT_HAVE_CUDA || !ZT_HAVE_CUDNN
  GTEST_SKIP() << "built without CUDA or cuDNN: a GPU job's attention keeps the probabilities";
#else
  const std::string json_path = temp_json("zt_estimate_cudnn");
  const auto plan = [&](const std::string& env, std::string* out) {
    const ToolRun r = run_tool("zt-estimate",
                               std::string("--config ") + ZT_SOURCE_DIR +
                                   "/configs/gpt2-124M.json --set bf16.enabled=true"
                                   " --set train_micro_batch_size_per_gpu=16 --set zt.seq_len=1024"
                                   " --set zt.device=cuda --device-memory 80GiB --json " +
                                   json_path,
                               env);
    EXPECT_EQ(r.code, 0) << r.out;
    if (out) *out = r.out;
    const nlohmann::json j = read_json(json_path);
    return j.at("choices").at(0).at("activation_bytes").get<int64_t>();
  };
  std::string text, reference_text;
  const int64_t cudnn = plan("ZT_CUDA_ATTENTION=auto", &text);
  const int64_t reference = plan("ZT_CUDA_ATTENTION=reference", &reference_text);
  const int64_t B = 16, T = 1024, NH = 12, hd = 64, layers = 12;
  const int64_t probabilities = B * NH * T * T * 2;               // packed to bf16
  const int64_t record = (B * NH * T + B * T * NH * hd / 2) * 4;  // kept as written
  EXPECT_EQ(reference - cudnn, layers * (probabilities - record));
  EXPECT_NE(text.find("Attention: what cuDNN's fused SDPA keeps"), std::string::npos) << text;
#endif
}

// The headline: Llama-3.2-1B with LoRA r=16 on every linear layer (all-linear), bf16 with an
// fp32 master for the adapters, 8 ranks at stage 3, planned from the formula at full size (the
// tables only, nothing allocated) beside the full fine-tune. Sanity, not the figures: the
// adapters' optimizer state is under 5% of the full run's, the frozen base keeps its working
// params, and the two plans are those printed.
TEST(ZtEstimate, PlansLoraBesideTheFullFineTune) {
  const std::string json_path = temp_json("zt_estimate_lora");
  const ToolRun r = run_estimate(
      "--model llama-3.2-1B --ranks 8 --precision bf16 --seq-len 2048 --lora-r 16 --json " +
      json_path);
  std::printf("%s", r.out.c_str());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("The full fine-tune:"), std::string::npos);
  EXPECT_NE(r.out.find("LoRA r=16 on all-linear against the full fine-tune"), std::string::npos);
  const nlohmann::json j = read_json(json_path);
  EXPECT_EQ(j.at("tuning"), "LoRA r=16 on all-linear");
  EXPECT_EQ(j.at("frozen_units"), 17);  // each block's base, and the root
  const int64_t params = j.at("params"), trained = j.at("trained_params");
  EXPECT_EQ(j.at("full_fine_tune").at("params"), 1'235'814'400);  // tests/model_zoo/llama_test
  EXPECT_EQ(params, 1'235'814'400 + trained);
  EXPECT_LT(trained, params / 50);
  const nlohmann::json& c = choice(j.at("tuning_comparison"), 3, "none");
  const int64_t full_optim = c.at("full_optimizer_bytes"),
                lora_optim = c.at("tuned_optimizer_bytes");
  const int64_t full_states = c.at("full_model_states_bytes");
  const int64_t lora_states = c.at("tuned_model_states_bytes");
  std::printf(
      "stage 3, 8 ranks, per rank: full fine-tune %lld bytes of model states (%lld of "
      "optimizer state), LoRA %lld (%lld): %.2f%% and %.2f%%\n",
      static_cast<long long>(full_states), static_cast<long long>(full_optim),
      static_cast<long long>(lora_states), static_cast<long long>(lora_optim),
      100.0 * static_cast<double>(lora_states) / static_cast<double>(full_states),
      100.0 * static_cast<double>(lora_optim) / static_cast<double>(full_optim));
  EXPECT_GT(lora_optim, 0);
  EXPECT_LT(lora_optim, full_optim / 20);
  EXPECT_LT(lora_states, full_states);
  // The frozen base keeps its bf16 working shard: at least the base's params / 8 ranks x 2 bytes.
  const nlohmann::json& lora = choice(j.at("choices"), 3, "none");
  EXPECT_GE(lora.at("bytes_by_category").at("device").at("params").get<int64_t>(),
            int64_t{2} * 1'235'814'400 / 8);
  // The comparison's figures are the two plans' own (no offload: the device tier alone).
  EXPECT_EQ(lora.at("model_states_bytes").at("device").get<int64_t>(), lora_states);
  EXPECT_EQ(choice(j.at("full_fine_tune").at("choices"), 3, "none")
                .at("model_states_bytes")
                .at("device")
                .get<int64_t>(),
            full_states);
  // Fewer targets, fewer adapters.
  const std::string qv_path = temp_json("zt_estimate_lora_qv");
  ASSERT_EQ(run_estimate("--model llama-3.2-1B --ranks 8 --seq-len 2048 --lora-r 16 "
                         "--lora-targets q_proj,v_proj --json " +
                         qv_path)
                .code,
            0);
  const nlohmann::json qv = read_json(qv_path);
  EXPECT_EQ(qv.at("tuning"), "LoRA r=16 on q_proj,v_proj");
  EXPECT_LT(qv.at("trained_params").get<int64_t>(), trained);
  // What LoRA cannot plan exits 2.
  EXPECT_EQ(run_estimate("--params 1e9 --lora-r 16").code, 2);      // no layers
  EXPECT_EQ(run_estimate("--model gpt2-tiny --lora-r 4").code, 2);  // Llama family only
  EXPECT_EQ(run_estimate("--model llama-tiny --lora-r 0").code, 2);
  EXPECT_EQ(run_estimate("--model llama-tiny --lora-targets q_proj").code, 2);  // no --lora-r
}

// A config's zt.lora, in zt-estimate --config and in zt-train --dry-run (one rank, no mpirun):
// both plan with the frozen units, beside the full fine-tune.
TEST(ZtEstimate, ConfigLoraIsPlannedWithItsFrozenUnits) {
  const std::string config = std::string(ZT_SOURCE_DIR) + "/configs/llama-tiny-pretrain.json";
  // The pre-training config saves a model directory, which a LoRA run must merge into: none here.
  const std::string lora =
      " --set 'zt.lora={\"r\":4,\"target_modules\":\"all-linear\"}' --set zt.save_pretrained=null";
  const std::string json_path = temp_json("zt_estimate_config_lora");
  const ToolRun estimate =
      run_estimate("--config " + config + lora + " --ranks 2 --json " + json_path);
  ASSERT_EQ(estimate.code, 0) << estimate.out;
  const nlohmann::json j = read_json(json_path);
  EXPECT_EQ(j.at("tuning"), "LoRA r=4 on all-linear");
  EXPECT_GT(j.at("frozen_units").get<int>(), 0);
  const nlohmann::json& c = choice(j.at("tuning_comparison"), 2, "none");  // the config's stage
  EXPECT_LT(c.at("tuned_optimizer_bytes").get<int64_t>(),
            c.at("full_optimizer_bytes").get<int64_t>() / 20);
  const ToolRun dry = run_tool("zt-train", "--config " + config + lora + " --dry-run");
  ASSERT_EQ(dry.code, 0) << dry.out;
  EXPECT_NE(dry.out.find("trained (LoRA r=4 on all-linear;"), std::string::npos) << dry.out;
  EXPECT_NE(dry.out.find("LoRA r=4 on all-linear against the full fine-tune"), std::string::npos)
      << dry.out;
}

}  // namespace
