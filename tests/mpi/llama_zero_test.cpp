// ZeRO stages across ranks on a tiny Llama (run under mpirun -np 2 and -np 4): stages 0-3 give
// bitwise-equal parameters and losses after five AdamW steps with clipping, with and without
// activation checkpointing, for grouped-query attention with a tied head and q/k/v biases, an
// untied head without biases, and MLP biases, and for the families past Llama (Mistral's sliding
// window, Qwen3's q/k norms, Phi-3's fused projections and window: tests/model_zoo/tiny_llama.h's
// tiny_family_config); and the losses track a single-process run of the
// same global batch within 1e-5 relative. (zero_test.cpp holds the same properties for GPT-2 and
// the stage machinery's other options.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <span>
#include <string>

#include "comm/mpi_communicator.h"
#include "comm/self_communicator.h"
#include "model_zoo/llama.h"
#include "runtime/cpu/cpu_device.h"
#include "zero/engine.h"
#include "zero_test_util.h"
#include "tests/model_zoo/tiny_llama.h"

namespace zt {
namespace {

using namespace zero_test;

// tests/model_zoo/tiny_llama.h's over kModel's vocabulary (GlobalBatch's tokens) and kT positions.
LlamaConfig tiny_llama(bool tied, bool qkv_bias, bool mlp_bias) {
  return tiny_llama_config(kModel.vocab_size, static_cast<int>(kT), tied, qkv_bias, mlp_bias);
}

struct Variant {
  const char* name;
  LlamaConfig config;
};
const Variant kVariants[] = {
    {"gqa tied qkv-bias", tiny_llama(true, true, false)},
    {"gqa untied no-bias", tiny_llama(false, false, false)},
    {"gqa untied mlp-bias", tiny_llama(false, false, true)},
    {"mistral", tiny_family_config(LlamaFamily::kMistral, kModel.vocab_size, int(kT))},
    {"qwen3", tiny_family_config(LlamaFamily::kQwen3, kModel.vocab_size, int(kT))},
    {"phi3", tiny_family_config(LlamaFamily::kPhi3, kModel.vocab_size, int(kT))},
};

struct RunResult {
  std::vector<double> losses;
  std::vector<std::vector<float>> params;  // every unit, full
};

RunResult run(const LlamaConfig& config, int stage, bool checkpoint, bool single_process = false) {
  CpuDevice device;
  std::unique_ptr<Communicator> comm;
  if (single_process)
    comm = std::make_unique<SelfCommunicator>(device);
  else
    comm = std::make_unique<MpiCommunicator>(device);
  const int world = world_size(), rank = my_rank();
  Llama model(config);
  EngineOptions o;
  o.optimizer.type = OptimizerOptions::Type::kAdamW;
  o.optimizer.weight_decay = 0.1f;
  o.gradient_clipping = 0.5f;  // small enough to clip: the norm path must agree too
  o.policy = ZeroPolicy::for_stage(stage);
  o.prefetch_bucket_size = 20'000;
  o.reduce_bucket_size = 10'000;
  if (checkpoint)
    for (Layer* l : model.layers()) o.checkpoint.push_back(l->checkpointable());
  Engine engine(device, *comm, model, o);
  RunResult r;
  for (int step = 0; step < kSteps; ++step) {
    const GlobalBatch global(step, 0, world);
    const Batch batch = single_process ? global.rows(0, world * kB) : global.rows(rank * kB, kB);
    r.losses.push_back(engine.train_step(std::span<const Batch>(&batch, 1), 1e-3f).loss);
  }
  for (int u = 0; u < engine.num_units(); ++u) {
    r.params.emplace_back(model.units()[u]->layout().numel());
    engine.read_unit_params(u, r.params.back().data());
  }
  return r;
}

bool bitwise_equal(const RunResult& a, const RunResult& b) {
  if (a.params.size() != b.params.size()) return false;
  for (size_t u = 0; u < a.params.size(); ++u)
    if (a.params[u].size() != b.params[u].size() ||
        std::memcmp(a.params[u].data(), b.params[u].data(), a.params[u].size() * 4) != 0)
      return false;
  return true;
}

TEST(LlamaZeroStages, BitwiseIdenticalParametersAfterFiveSteps) {
  for (const Variant& v : kVariants)
    for (bool checkpoint : {false, true}) {
      const RunResult reference = run(v.config, 0, checkpoint);
      for (int stage = 1; stage <= 3; ++stage) {
        const RunResult r = run(v.config, stage, checkpoint);
        EXPECT_TRUE(bitwise_equal(reference, r))
            << v.name << ": stage " << stage << " differs from stage 0, checkpointing "
            << checkpoint;
        EXPECT_EQ(reference.losses, r.losses) << v.name << ": stage " << stage;
      }
    }
}

// Each step's loss (the mean over ranks) equals the single-process loss of the whole global
// batch within 1e-5 relative (the order of the sums differs).
TEST(LlamaZeroStages, LossesTrackASingleProcessRun) {
  const LlamaConfig& config = kVariants[0].config;
  const RunResult single = run(config, 0, false, /*single_process=*/true);
  const RunResult sharded = run(config, 3, false);
  ASSERT_EQ(single.losses.size(), sharded.losses.size());
  for (size_t s = 0; s < single.losses.size(); ++s)
    EXPECT_LE(std::abs(sharded.losses[s] - single.losses[s]), 1e-5 * std::abs(single.losses[s]))
        << "step " << s << ": " << sharded.losses[s] << " vs " << single.losses[s];
}

}  // namespace
}  // namespace zt
