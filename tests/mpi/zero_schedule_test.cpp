// ZeRO-3's schedule and the engine's unit I/O across ranks (run under mpirun -np 2 and -np 4):
// evaluation between training steps changes nothing, in stage 3 as in stage 0; a persistent unit
// is never gathered; stage3_max_live_parameters bounds what is gathered at once and
// stage3_max_reuse_distance saves gathers, both without changing a bit; unit parameters written
// on every rank read back on every rank; unit_grads is the same full reduced gradient in every
// stage.
#include <gtest/gtest.h>

#include <cstring>

#include "comm/mpi_communicator.h"
#include "model_zoo/gpt2.h"
#include "runtime/cpu/cpu_device.h"
#include "zero/engine.h"
#include "zero_test_util.h"

namespace zt {
namespace {

using namespace zero_test;

EngineOptions options_for(int stage, DType compute = DType::kF32) {
  EngineOptions o;
  o.optimizer.type = OptimizerOptions::Type::kAdamW;
  o.optimizer.weight_decay = 0.1f;
  o.gradient_clipping = 0.5f;
  o.policy = ZeroPolicy::for_stage(stage);
  o.reduce_bucket_size = 10'000;
  o.prefetch_bucket_size = 20'000;
  o.persistence_threshold = 0;
  if (compute != DType::kF32) {
    o.precision.compute = o.precision.grad_accum = o.precision.comm = compute;
    if (compute == DType::kF16) o.precision.fp16.initial_scale_power = 8;
  }
  return o;
}

Batch rank_rows(const GlobalBatch& g) { return g.rows(my_rank() * kB, kB); }

struct Trace {
  std::vector<double> losses;  // training steps and evaluations, in order
  std::vector<std::vector<float>> params;
  std::vector<int64_t> gathers;  // per unit
  int64_t peak_gathered = 0, window = 0;
};

bool bitwise_equal(const std::vector<std::vector<float>>& a,
                   const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t u = 0; u < a.size(); ++u)
    if (a[u].size() != b[u].size() ||
        std::memcmp(a[u].data(), b[u].data(), a[u].size() * sizeof(float)) != 0)
      return false;
  return true;
}

// Steps, with an evaluation after each when `evaluate`.
Trace train(const EngineOptions& o, bool evaluate, const Gpt2Config& config = kModel) {
  CpuDevice device;
  MpiCommunicator comm(device);
  Gpt2 model(config);
  Engine engine(device, comm, model, o);
  Trace t;
  const GlobalBatch held_out(99, 0, world_size());
  for (int step = 0; step < 3; ++step) {
    const GlobalBatch g(step, 0, world_size());
    const Batch b = rank_rows(g);
    t.losses.push_back(engine.train_step({&b, 1}, 1e-3f).loss);
    if (evaluate) t.losses.push_back(engine.eval_loss(rank_rows(held_out)));
  }
  for (int u = 0; u < engine.num_units(); ++u) t.gathers.push_back(engine.gather_count(u));
  for (int u = 0; u < engine.num_units(); ++u) {
    t.params.emplace_back(model.units()[u]->layout().numel());
    engine.read_unit_params(u, t.params.back().data());
  }
  t.peak_gathered = engine.peak_gathered_bytes();
  t.window = engine.gather_window_bytes();
  return t;
}

std::vector<double> training_losses(const Trace& t, bool evaluated) {
  if (!evaluated) return t.losses;
  std::vector<double> out;
  for (size_t i = 0; i < t.losses.size(); i += 2) out.push_back(t.losses[i]);
  return out;
}

TEST(ZeroSchedule, EvaluationBetweenStepsChangesNothingInAnyStage) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const Trace plain = train(options_for(0, dtype), false);
    const Trace reference = train(options_for(0, dtype), true);
    EXPECT_TRUE(bitwise_equal(plain.params, reference.params));
    EXPECT_EQ(training_losses(reference, true), plain.losses);
    for (int stage = 1; stage <= 3; ++stage) {
      const Trace t = train(options_for(stage, dtype), true);
      EXPECT_TRUE(bitwise_equal(reference.params, t.params))
          << "stage " << stage << " " << dtype_name(dtype);
      EXPECT_EQ(reference.losses, t.losses) << "stage " << stage << " " << dtype_name(dtype);
    }
  }
}

TEST(ZeroSchedule, APersistentUnitIsNeverGathered) {
  // In this model the root unit (embeddings, final norm) is smaller than a block: a threshold
  // of the root's size persists the root only; one of a block's size persists every unit.
  Gpt2 shapes(kModel);
  const int64_t root = shapes.units()[0]->layout().numel();
  int64_t block = 0;
  for (size_t u = 1; u < shapes.units().size(); ++u)
    block = std::max(block, shapes.units()[u]->layout().numel());
  ASSERT_LT(root, block);
  EngineOptions o = options_for(3);
  o.persistence_threshold = root;
  const Trace persistent_root = train(o, true);
  EXPECT_EQ(persistent_root.gathers[0], 0);
  for (size_t u = 1; u < persistent_root.gathers.size(); ++u)
    EXPECT_GT(persistent_root.gathers[u], 0) << "unit " << u;
  o.persistence_threshold = block;
  const Trace all_persistent = train(o, true);
  for (size_t u = 0; u < all_persistent.gathers.size(); ++u)
    EXPECT_EQ(all_persistent.gathers[u], 0) << "unit " << u;
  EXPECT_EQ(all_persistent.peak_gathered, 0);
  const Trace reference = train(options_for(0), true);
  EXPECT_TRUE(bitwise_equal(reference.params, persistent_root.params));
  EXPECT_TRUE(bitwise_equal(reference.params, all_persistent.params));
  EXPECT_EQ(reference.losses, persistent_root.losses);
}

TEST(ZeroSchedule, MaxLiveBoundsGatheredAndReuseSavesGathers) {
  const Gpt2Config six{6, 2, 32, 97, 16};
  Gpt2 shapes(six);
  int64_t block = 0;
  for (size_t u = 1; u < shapes.units().size(); ++u)
    block = ShardLayout(shapes.units()[u]->layout().numel(), world_size(), 0).padded;
  EngineOptions wide = options_for(3);
  wide.prefetch_bucket_size = 4 * block;
  const Trace unbounded = train(wide, false, six);
  EngineOptions bounded = wide;
  bounded.max_live_parameters = 2 * block;  // the unit in use and one more
  const Trace live = train(bounded, false, six);
  EXPECT_GT(unbounded.peak_gathered, 3 * 4 * block);  // prefetching four blocks happened
  // The unit in use plus at most max_live of others (blocks are the largest units).
  EXPECT_EQ(live.window, 4 * (block + 2 * block));
  EXPECT_LE(live.peak_gathered, live.window);
  EXPECT_LT(live.peak_gathered, unbounded.peak_gathered);
  EXPECT_TRUE(bitwise_equal(unbounded.params, live.params));

  EngineOptions reuse = options_for(3);
  reuse.max_reuse_distance = 1'000'000;  // keep every unit between forward and backward
  const Trace kept = train(reuse, false, six);
  const Trace released = train(options_for(3), false, six);
  int64_t kept_total = 0, released_total = 0;
  for (size_t u = 0; u < kept.gathers.size(); ++u) {
    kept_total += kept.gathers[u];
    released_total += released.gathers[u];
  }
  if (my_rank() == 0)
    std::printf("stage 3, 3 steps: %lld gathers released after use, %lld kept for reuse\n",
                static_cast<long long>(released_total), static_cast<long long>(kept_total));
  // Released: per step the root 3 times (embedding, the head's adjacent forward and backward,
  // the embedding's backward) and each block twice; kept: every unit once per step (gathered
  // for the forward, kept through the backward).
  EXPECT_EQ(released_total, 3 * (3 + 2 * 6));
  EXPECT_EQ(kept_total, 3 * 7);
  EXPECT_TRUE(bitwise_equal(kept.params, released.params));
}

TEST(ZeroSchedule, UnitParametersWrittenOnEveryRankReadBackOnEveryRank) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int stage = 0; stage <= 3; ++stage) {
      CpuDevice device;
      MpiCommunicator comm(device);
      Gpt2 model(kModel);
      Engine engine(device, comm, model, options_for(stage, dtype));
      for (int u = 0; u < engine.num_units(); ++u) {
        const int64_t n = model.units()[u]->layout().numel();
        std::vector<float> values(n);
        // bf16-exact values (a few significant bits), distinct per unit and element.
        for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>((i * 7 + u) % 61 - 30) / 16;
        engine.write_unit_params(u, values.data());
        std::vector<float> back(n, -1.0f);
        engine.read_unit_params(u, back.data());
        EXPECT_EQ(std::memcmp(values.data(), back.data(), n * sizeof(float)), 0)
            << "stage " << stage << " " << dtype_name(dtype) << " unit " << u;
      }
      // And they train like values written anywhere else: a step's loss is finite and agreed.
      const GlobalBatch g(0, 0, world_size());
      const Batch b = rank_rows(g);
      EXPECT_TRUE(std::isfinite(engine.train_step({&b, 1}, 1e-3f).loss));
    }
  }
}

TEST(ZeroSchedule, UnitGradsAreTheFullReducedGradientInEveryStage) {
  std::vector<std::vector<float>> reference;
  for (int stage = 0; stage <= 3; ++stage) {
    CpuDevice device;
    MpiCommunicator comm(device);
    Gpt2 model(kModel);
    Engine engine(device, comm, model, options_for(stage));
    const GlobalBatch g(0, 0, world_size());
    engine.compute_gradients(rank_rows(g));
    std::vector<std::vector<float>> grads;
    for (int u = 0; u < engine.num_units(); ++u) grads.push_back(engine.unit_grads(u));
    if (stage == 0) {
      reference = grads;
      double norm = 0;
      for (auto& unit : grads)
        for (float x : unit) norm += double(x) * x;
      EXPECT_GT(norm, 0);
      continue;
    }
    EXPECT_TRUE(bitwise_equal(reference, grads)) << "stage " << stage;
  }
}

}  // namespace
}  // namespace zt
