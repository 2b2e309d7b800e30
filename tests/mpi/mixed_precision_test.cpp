// Mixed precision across ranks (run under mpirun -np 2 and -np 4): stages 0-3 give bitwise-equal
// fp32 masters and losses in bf16, fp16 and pure 16-bit, with 16-bit or fp32 gradient storage
// and reduction; with accumulation {0,1} and {2,3} are bitwise pairs; an inf injected into one
// rank's gradient at step 3 skips that step on every rank, halves the fp16 loss scale and leaves
// every byte of model state unchanged, and training goes on; model-state bytes per rank equal
// the (2 + 2 + K)Ψ formula of the ZeRO paper in every stage; with every 16-bit GEMM pinned to
// each path the CPU has (runtime/cpu/cpu_gemm_paths.h), stages 0-3 stay bitwise equal.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>

#include "comm/mpi_communicator.h"
#include "runtime/cpu/cpu_device.h"
#include "zero/engine.h"
#include "zero_test_util.h"

namespace zt {
namespace {

using namespace zero_test;

Precision precision(DType compute, DType accum, DType comm, bool master = true) {
  Precision p;
  p.compute = compute;
  p.grad_accum = accum;
  p.comm = comm;
  p.master_weights = master;
  p.fp16.initial_scale_power = 10;  // small enough that this model never overflows by itself
  return p;
}
const Precision kBf16 = precision(DType::kBF16, DType::kBF16, DType::kBF16);
const Precision kFp16 = precision(DType::kF16, DType::kF16, DType::kF16);

struct Spec {
  int stage = 0;
  Precision precision = kBf16;
  int accumulation = 1;
  bool checkpoint = false;
  // Every 16-bit product on this path (the keys found by one evaluation forward, as zt-train
  // finds them); unset: the feature-flag rule, no table installed.
  std::optional<GemmPath> gemm = std::nullopt;
};

struct Result {
  std::vector<double> losses;
  std::vector<std::vector<float>> masters;  // every unit, full fp32 (read_unit_params)
  size_t params_bytes = 0, grads_bytes = 0, optimizer_bytes = 0;
};

EngineOptions options(const Spec& spec, Model& model) {
  EngineOptions o;
  o.optimizer.type = OptimizerOptions::Type::kAdamW;
  o.optimizer.weight_decay = 0.1f;
  o.gradient_clipping = 0.5f;
  o.policy = ZeroPolicy::for_stage(spec.stage);
  o.reduce_bucket_size = 10'000;
  o.prefetch_bucket_size = 20'000;
  o.persistence_threshold = 0;
  o.precision = spec.precision;
  if (spec.checkpoint)
    for (Layer* l : model.layers()) o.checkpoint.push_back(l->checkpointable());
  return o;
}

std::vector<Batch> micro_batches(std::vector<GlobalBatch>& globals, int step, int accumulation) {
  globals.clear();
  for (int m = 0; m < accumulation; ++m) globals.emplace_back(step, m, world_size());
  std::vector<Batch> micro;
  for (auto& g : globals) micro.push_back(g.rows(my_rank() * kB, kB));
  return micro;
}

Result run(const Spec& spec) {
  CpuDevice device;
  MpiCommunicator comm(device);
  Gpt2 model(kModel);
  Engine engine(device, comm, model, options(spec, model));
  Result r;
  if (spec.gemm) {
    std::vector<GlobalBatch> first;
    device.gemm_routing().start_recording();
    engine.eval_loss(micro_batches(first, 0, 1)[0]);
    auto pinned = std::make_shared<GemmPaths>();
    for (const GemmKey& key :
         training_gemm_keys(device.gemm_routing().stop_recording(), spec.precision.grad_accum))
      pinned->set(key, *spec.gemm);
    EXPECT_FALSE(pinned->empty());
    device.gemm_routing().install(pinned);
  }
  r.params_bytes = device.memory().current(MemCategory::kParams);
  r.grads_bytes = device.memory().current(MemCategory::kGrads);
  r.optimizer_bytes = device.memory().current(MemCategory::kOptimizer);
  std::vector<GlobalBatch> globals;
  for (int step = 0; step < kSteps; ++step) {
    const StepResult s = engine.train_step(micro_batches(globals, step, spec.accumulation), 1e-3f);
    EXPECT_FALSE(s.skipped) << "step " << step;
    r.losses.push_back(s.loss);
  }
  for (int u = 0; u < engine.num_units(); ++u) {
    r.masters.emplace_back(model.units()[u]->layout().numel());
    engine.read_unit_params(u, r.masters.back().data());
  }
  return r;
}

bool bitwise_equal(const Result& a, const Result& b) {
  for (size_t u = 0; u < a.masters.size(); ++u)
    if (std::memcmp(a.masters[u].data(), b.masters[u].data(), a.masters[u].size() * 4) != 0)
      return false;
  return a.losses == b.losses;
}

struct Named {
  const char* name;
  Precision precision;
};
const Named kPrecisions[] = {
    {"bf16", kBf16},
    {"fp16 (dynamic loss scale)", kFp16},
    {"bf16, fp32 gradient store and reduction", precision(DType::kBF16, DType::kF32, DType::kF32)},
    {"fp16, fp32 reduction", precision(DType::kF16, DType::kF16, DType::kF32)},
    {"bf16 pure (no master)", precision(DType::kBF16, DType::kBF16, DType::kBF16, false)},
};

TEST(MixedPrecision, StagesAreBitwiseIdentical) {
  for (const Named& p : kPrecisions) {
    const Result reference = run({0, p.precision});
    for (int stage = 1; stage <= 3; ++stage)
      EXPECT_TRUE(bitwise_equal(reference, run({stage, p.precision})))
          << p.name << ": stage " << stage << " differs from stage 0";
  }
  // Recomputation changes nothing either.
  EXPECT_TRUE(bitwise_equal(run({0, kFp16}), run({3, kFp16, 1, true})));
}

TEST(MixedPrecision, StagesAreBitwiseIdenticalOnEveryGemmPath) {
  for (const Named& p : {kPrecisions[0], kPrecisions[1]})
    for (GemmPath path : kAllGemmPaths) {
      const GemmKey probe{GemmProduct::kForward, 1, 1, 1, WeightLayout::kInOut, p.precision.compute,
                          p.precision.compute};
      const std::vector<GemmPath> can = gemm_candidates(probe, cpu_gemm_abilities());
      if (std::find(can.begin(), can.end(), path) == can.end()) continue;
      const Result reference = run({.stage = 0, .precision = p.precision, .gemm = path});
      for (int stage = 1; stage <= 3; ++stage)
        EXPECT_TRUE(
            bitwise_equal(reference, run({.stage = stage, .precision = p.precision, .gemm = path})))
            << p.name << " on the " << gemm_path_name(path) << " path: stage " << stage
            << " differs from stage 0";
    }
}

TEST(MixedPrecision, GradientAccumulationPairs) {
  for (const Named& p : {kPrecisions[0], kPrecisions[1]}) {
    EXPECT_TRUE(bitwise_equal(run({0, p.precision, 2}), run({1, p.precision, 2}))) << p.name;
    EXPECT_TRUE(bitwise_equal(run({2, p.precision, 2}), run({3, p.precision, 2}))) << p.name;
  }
}

TEST(MixedPrecision, TracksFp32) {
  // Five steps of the small model: 16-bit rounding moves the losses by well under 1%.
  const Result fp32 = run({2, Precision{}});
  for (const Named& p : {kPrecisions[0], kPrecisions[1]}) {
    const Result r = run({2, p.precision});
    EXPECT_NE(r.losses, fp32.losses) << p.name << ": no 16-bit rounding took effect";
    for (int s = 0; s < kSteps; ++s)
      EXPECT_LE(std::abs(r.losses[s] - fp32.losses[s]), 1e-2 * fp32.losses[s])
          << p.name << " step " << s << ": " << r.losses[s] << " vs " << fp32.losses[s];
  }
}

// fp16 with hysteresis 1: an inf written into one rank's gradient at step 3 (1-based) must skip
// that step on every rank, halve the scale, leave parameters, master and optimizer state
// bitwise unchanged, and not stop training.
TEST(MixedPrecision, OverflowOnOneRankSkipsTheStepEverywhere) {
  const int last = world_size() - 1;
  for (int stage = 0; stage <= 3; ++stage) {
    CpuDevice device;
    MpiCommunicator comm(device);
    Gpt2 model(kModel);
    Spec spec{stage, kFp16};
    spec.precision.fp16.hysteresis = 1;
    Engine engine(device, comm, model, options(spec, model));
    int step = 0;
    engine.set_gradient_hook([&](int unit, Operand grad, int64_t numel) {
      // Only the last rank, one element of one unit; the reduction carries the inf into
      // whichever rank's shard holds that element (the gradient is fp16 here).
      if (step == 3 && my_rank() == last && unit == 1) {
        ASSERT_EQ(grad.dtype, DType::kF16);
        static_cast<uint16_t*>(grad.data)[numel - 1] = 0x7C00;  // +inf
      }
    });
    auto state = [&] {
      std::vector<std::vector<std::byte>> all;
      for (int u = 0; u < engine.num_units(); ++u) all.push_back(engine.model_state_bytes(u));
      return all;
    };
    std::vector<GlobalBatch> globals;
    for (step = 1; step <= 5; ++step) {
      const auto before = state();
      const float scale = engine.loss_scaler()->scale();
      const StepResult r = engine.train_step(micro_batches(globals, step, 1), 1e-3f);
      EXPECT_TRUE(std::isfinite(r.loss)) << "stage " << stage << " step " << step;
      if (step == 3) {
        EXPECT_TRUE(r.skipped) << "stage " << stage << ": every rank skips, rank " << my_rank();
        EXPECT_EQ(r.scale_update.kind, LossScaleUpdate::kSkippedDecreased);
        EXPECT_EQ(engine.loss_scaler()->scale(), scale / 2) << "stage " << stage;
        EXPECT_TRUE(state() == before)
            << "stage " << stage << ": model state changed on rank " << my_rank();
        EXPECT_FALSE(std::isfinite(r.grad_norm));
      } else {
        EXPECT_FALSE(r.skipped) << "stage " << stage << " step " << step;
        EXPECT_EQ(engine.loss_scaler()->scale(), scale);
        EXPECT_FALSE(state() == before) << "stage " << stage << " step " << step;
        EXPECT_TRUE(std::isfinite(r.grad_norm));
      }
    }
    EXPECT_EQ(engine.optimizer_steps(), 4) << "stage " << stage;
    EXPECT_EQ(engine.loss_scaler()->counters().skipped_steps, 1);
  }
}

// Model-state bytes per rank from the tracker against the mixed-precision formula: 2 bytes of
// working params, g bytes of stored gradients (2, or 4 with an fp32 store) and K bytes of fp32
// optimizer state (12 with a master, 8 without), each per element of Psi or of Psi/N by stage.
TEST(MixedPrecision, ModelStateMemoryMatchesTheFormula) {
  const int world = world_size();
  Gpt2 model(kModel);
  double psi = 0;
  for (Unit* u : model.units()) psi += ShardLayout(u->layout().numel(), world, 0).padded;
  const double n = world;
  struct Case {
    const char* name;
    Precision precision;
    double g, k;
  };
  const Case cases[] = {
      {"bf16 mixed", kBf16, 2, 12},
      {"fp16 mixed, fp32 grad store", precision(DType::kF16, DType::kF32, DType::kF16), 4, 12},
      {"bf16 pure", precision(DType::kBF16, DType::kBF16, DType::kBF16, false), 2, 8},
  };
  if (my_rank() == 0)
    std::printf(
        "model states per rank, Psi = %.0f, N = %d\n"
        "%-30s stage  params    grads     optimizer total     formula\n",
        psi, world, "precision");
  for (const Case& c : cases) {
    // Stage 0: (2 + g + K)Ψ; 1: (2 + g)Ψ + KΨ/N; 2: 2Ψ + (g + K)Ψ/N; 3: (2 + g + K)Ψ/N; with
    // g = 2, K = 12: 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N.
    const double formula[4] = {(2 + c.g + c.k) * psi, (2 + c.g) * psi + c.k * psi / n,
                               2 * psi + (c.g + c.k) * psi / n, (2 + c.g + c.k) * psi / n};
    for (int stage = 0; stage <= 3; ++stage) {
      CpuDevice device;
      MpiCommunicator comm(device);
      Gpt2 m(kModel);
      Engine engine(device, comm, m, options({stage, c.precision}, m));
      const MemoryTracker& mem = device.memory();
      const double total =
          static_cast<double>(mem.current(MemCategory::kParams) + mem.current(MemCategory::kGrads) +
                              mem.current(MemCategory::kOptimizer));
      if (my_rank() == 0)
        std::printf("%-30s %-6d %-9zu %-9zu %-9zu %-9.0f %-9.0f\n", c.name, stage,
                    mem.current(MemCategory::kParams), mem.current(MemCategory::kGrads),
                    mem.current(MemCategory::kOptimizer), total, formula[stage]);
      EXPECT_EQ(total, formula[stage]) << c.name << " stage " << stage;
    }
  }
}

}  // namespace
}  // namespace zt
