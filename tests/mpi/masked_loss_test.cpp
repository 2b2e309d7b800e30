// The masked loss across ranks (run under mpirun -np 2 and -np 4): with most targets ignored
// (kIgnoreTarget: prompt tokens of instruction data) and the counted ones spread unevenly over
// the ranks, the reduced gradient is the mean of the counted positions' gradients over the
// global batch. It is checked against single-process gradients of one counted position at a
// time, so an ignored position that contributed anything, or a loss normalised per rank, fails.
// Stages 0-3 then train on such batches to the same bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

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

// Tied, with Qwen2's q/k/v biases.
LlamaConfig tiny_llama() {
  return tiny_llama_config(kModel.vocab_size, static_cast<int>(kT), true, true, false);
}

// GlobalBatch with its targets ignored but at a few positions: rank 0's rows keep 1 position
// each and the others' rows 1 + (row mod 3), so the ranks' shares differ.
struct MaskedBatch : GlobalBatch {
  std::vector<int64_t> counted;  // global positions whose targets count
  MaskedBatch(int step, int world) : GlobalBatch(step, 0, world) {
    for (int64_t row = 0; row < world * kB; ++row) {
      const int64_t keep = row < kB ? 1 : 1 + row % 3;
      for (int64_t t = 0; t < kT; ++t) {
        const int64_t at = row * kT + t;
        if (t >= kT - keep)
          counted.push_back(at);
        else
          targets[at] = kIgnoreTarget;
      }
    }
  }
};

struct Grads {
  std::vector<std::vector<float>> units;
};

Grads grads_of(Engine& engine) {
  Grads g;
  for (int u = 0; u < engine.num_units(); ++u) g.units.push_back(engine.unit_grads(u));
  return g;
}

EngineOptions options(int stage) {
  EngineOptions o;
  o.optimizer.type = OptimizerOptions::Type::kAdamW;
  o.policy = ZeroPolicy::for_stage(stage);
  o.reduce_bucket_size = 10'000;
  o.prefetch_bucket_size = 20'000;
  return o;
}

TEST(MaskedLoss, TheGradientIsTheMeanOverCountedTargetsOfTheGlobalBatch) {
  const int world = world_size(), rank = my_rank();
  const MaskedBatch global(0, world);
  CpuDevice device;
  for (int stage : {0, 3}) {
    Llama model(tiny_llama());
    MpiCommunicator comm(device);
    Engine engine(device, comm, model, options(stage));
    engine.compute_gradients(global.rows(rank * kB, kB));
    const Grads masked = grads_of(engine);

    // One counted position at a time, the whole global batch in one process.
    Llama single_model(tiny_llama());
    SelfCommunicator self(device);
    Engine single(device, self, single_model, options(0));
    Grads sum;
    for (const int64_t at : global.counted) {
      std::vector<int32_t> one(global.targets.size(), kIgnoreTarget);
      one[at] = global.targets[at];
      single.compute_gradients(Batch{global.inputs.data(), one.data(), world * kB, kT});
      const Grads g = grads_of(single);
      if (sum.units.empty())
        sum = g;
      else
        for (size_t u = 0; u < g.units.size(); ++u)
          for (size_t i = 0; i < g.units[u].size(); ++i) sum.units[u][i] += g.units[u][i];
    }
    const double n = static_cast<double>(global.counted.size());
    double max_error = 0.0, max_value = 0.0;
    for (size_t u = 0; u < sum.units.size(); ++u)
      for (size_t i = 0; i < sum.units[u].size(); ++i) {
        max_error = std::max(max_error, std::abs(masked.units[u][i] - sum.units[u][i] / n));
        max_value = std::max(max_value, std::abs(sum.units[u][i] / n));
      }
    EXPECT_GT(max_value, 0.0);
    EXPECT_LE(max_error, 1e-5 * max_value) << "stage " << stage;

    // The unmasked batch's gradient is another one: the mask is what the check above sees.
    const GlobalBatch unmasked(0, 0, world);
    engine.compute_gradients(unmasked.rows(rank * kB, kB));
    const Grads all = grads_of(engine);
    double difference = 0.0;
    for (size_t u = 0; u < all.units.size(); ++u)
      for (size_t i = 0; i < all.units[u].size(); ++i)
        difference = std::max(difference, double(std::abs(all.units[u][i] - masked.units[u][i])));
    EXPECT_GT(difference, 100 * max_error) << "stage " << stage;
  }
}

// Stages 0-3 on masked batches: the same losses and parameters, bit for bit; StepResult::targets
// is the global batch's count of counted targets.
TEST(MaskedLoss, StagesTrainToTheSameBitsOnMaskedBatches) {
  const int world = world_size(), rank = my_rank();
  std::vector<double> reference_losses;
  std::vector<std::vector<float>> reference_params;
  for (int stage = 0; stage <= 3; ++stage) {
    CpuDevice device;
    MpiCommunicator comm(device);
    Llama model(tiny_llama());
    Engine engine(device, comm, model, options(stage));
    std::vector<double> losses;
    for (int step = 0; step < kSteps; ++step) {
      const MaskedBatch global(step, world);
      const Batch batch = global.rows(rank * kB, kB);
      const StepResult r = engine.train_step(std::span<const Batch>(&batch, 1), 1e-3f);
      EXPECT_EQ(r.targets, static_cast<int64_t>(global.counted.size()));
      losses.push_back(r.loss);
    }
    std::vector<std::vector<float>> params;
    for (int u = 0; u < engine.num_units(); ++u) {
      params.emplace_back(model.units()[u]->layout().numel());
      engine.read_unit_params(u, params.back().data());
    }
    if (stage == 0) {
      reference_losses = losses;
      reference_params = params;
      continue;
    }
    EXPECT_EQ(losses, reference_losses) << "stage " << stage;
    EXPECT_EQ(params, reference_params) << "stage " << stage;
  }
}

}  // namespace
}  // namespace zt
