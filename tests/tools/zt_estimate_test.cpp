// zt-estimate as a user runs it: the ZeRO paper's Figure 1 from `--params 7.5e9 --ranks 64`
// (Ψ = 7.5B, N_d = 64, mixed-precision Adam, K = 12: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB per device
// for the baseline and stages 1-3), in its table and its --json; the fit list with
// --device-memory; input errors exit 2.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace {

struct ToolRun {
  int code = -1;
  std::string out;
};

ToolRun run_estimate(const std::string& args) {
  const std::string command = std::string(ZT_BINARY_DIR) + "/bin/zt-estimate " + args + " 2>&1";
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

}  // namespace
