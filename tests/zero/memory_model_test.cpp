// The memory model against the ZeRO paper and DeepSpeed's published estimators, and what a
// frozen unit holds (pure arithmetic; tests/mpi/memory_model_test.cpp holds it equal to real
// engines' trackers).
#include "zero/memory_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "model_zoo/gpt2.h"
#include "model_zoo/model_spec.h"
#include "runtime/status.h"
#include "tests/model_zoo/tiny_llama.h"
#include "zero/deepspeed_estimate.h"
#include "zero/engine.h"

namespace zt {
namespace {

// Mixed-precision Adam, K = 12: fp16 working params and gradients, fp32 master, m and v.
StateOptions figure1_options(int stage) {
  StateOptions o;
  o.policy = ZeroPolicy::for_stage(stage);
  o.precision.compute = o.precision.grad_accum = o.precision.comm = DType::kF16;
  o.optimizer.type = OptimizerOptions::Type::kAdam;
  o.world = 64;
  return o;
}

// ZeRO (Rajbhandari et al., 2020), Figure 1: Ψ = 7.5B, N_d = 64, K = 12 gives 120 GB, 31.4 GB,
// 16.6 GB and 1.9 GB per device for the baseline and stages 1-3 (1 GB = 1e9 bytes, one
// decimal). The same figures zt-estimate --params 7.5e9 --ranks 64 prints.
TEST(MemoryModel, ReproducesFigure1OfTheZeroPaper) {
  const std::vector<UnitSize> units = synthetic_unit_sizes(7'500'000'000, 1);
  const double paper[4] = {120.0, 31.4, 16.6, 1.9};
  for (int stage = 0; stage <= 3; ++stage) {
    const TierBytes b = model_state_bytes(units, figure1_options(stage));
    const double gb = static_cast<double>(b.model_states(Tier::kDevice)) / 1e9;
    std::printf("stage %d: %.4f GB per device (paper %.1f GB)\n", stage, gb, paper[stage]);
    EXPECT_NEAR(gb, paper[stage], 0.05) << "stage " << stage;
    EXPECT_EQ(b.total(Tier::kHost), 0);
    EXPECT_EQ(b.total(Tier::kNvme), 0);
  }
}

TEST(MemoryModel, MixedPrecisionFormulaPerCategoryAndTier) {
  // Three units whose padding differs; every byte from the padded sizes ShardLayout gives.
  const std::vector<UnitSize> units = {{1000}, {4096}, {333}};
  const int world = 4;
  int64_t padded = 0, shard = 0;
  for (const UnitSize& u : units) {
    padded += ShardLayout(u.numel, world, 0).padded;
    shard += ShardLayout(u.numel, world, 0).shard;
  }
  StateOptions o;
  o.precision.compute = o.precision.grad_accum = o.precision.comm = DType::kBF16;
  o.world = world;
  o.persistence_threshold = 0;
  for (int stage = 0; stage <= 3; ++stage) {
    o.policy = ZeroPolicy::for_stage(stage);
    const TierBytes b = model_state_bytes(units, o);
    EXPECT_EQ(b.get(Tier::kDevice, MemCategory::kParams), 2 * (stage == 3 ? shard : padded));
    EXPECT_EQ(b.get(Tier::kDevice, MemCategory::kGrads), 2 * (stage >= 2 ? shard : padded));
    EXPECT_EQ(b.get(Tier::kDevice, MemCategory::kOptimizer), 12 * (stage >= 1 ? shard : padded));
  }
  o.policy = ZeroPolicy::for_stage(2);
  o.offload_optimizer = OffloadDevice::kCpu;
  TierBytes b = model_state_bytes(units, o);
  EXPECT_EQ(b.get(Tier::kDevice, MemCategory::kOptimizer), 0);
  EXPECT_EQ(b.get(Tier::kHost, MemCategory::kOptimizer), 12 * shard);
  // The pipelined cpu step holds every unit's gradient shard and updated working values.
  EXPECT_EQ(b.get(Tier::kHost, MemCategory::kGrads), 2 * shard);
  EXPECT_EQ(b.get(Tier::kHost, MemCategory::kWorkspace), 2 * shard);
  o.offload_optimizer = OffloadDevice::kNvme;
  b = model_state_bytes(units, o);
  EXPECT_EQ(b.get(Tier::kHost, MemCategory::kOptimizer), 0);
  EXPECT_EQ(b.get(Tier::kNvme, MemCategory::kOptimizer), 12 * shard);
  // The streamed NVMe step stages one chunk of gradients (here the largest shard).
  EXPECT_EQ(b.get(Tier::kHost, MemCategory::kGrads), 2 * ShardLayout(4096, world, 0).shard);
  // Stage 3's parameters: on the host, or in swap files through param_buffers aligned buffers.
  o.policy = ZeroPolicy::for_stage(3);
  o.offload_param = OffloadDevice::kCpu;
  o.offload_optimizer = OffloadDevice::kCpu;
  b = model_state_bytes(units, o);
  EXPECT_EQ(b.get(Tier::kDevice, MemCategory::kParams), 0);
  EXPECT_EQ(b.get(Tier::kHost, MemCategory::kParams), 2 * shard);
  o.offload_param = OffloadDevice::kNvme;
  o.param_buffers = 3;
  b = model_state_bytes(units, o);
  EXPECT_EQ(b.get(Tier::kNvme, MemCategory::kParams), 2 * shard);
  EXPECT_EQ(b.get(Tier::kHost, MemCategory::kParams), 3 * (4096 + 4096));  // 2 KiB shards
  o.offload_optimizer = OffloadDevice::kNone;
  EXPECT_THROW(model_state_bytes(units, o), Error);  // offload_param needs offload_optimizer
  o.offload_param = OffloadDevice::kNone;
  o.policy = ZeroPolicy::for_stage(2);
  // fp32 training: the working params are the master, except offloaded (a master of its own).
  o.precision = Precision{};
  o.offload_optimizer = OffloadDevice::kNone;
  b = model_state_bytes(units, o);
  EXPECT_EQ(b.get(Tier::kDevice, MemCategory::kOptimizer), 8 * shard);
  o.offload_optimizer = OffloadDevice::kCpu;
  EXPECT_EQ(model_state_bytes(units, o).get(Tier::kHost, MemCategory::kOptimizer), 12 * shard);
  // What the engine refuses, the model refuses.
  o.policy = ZeroPolicy::for_stage(0);
  EXPECT_FALSE(state_options_problem(o).empty());
  EXPECT_THROW(model_state_bytes(units, o), Error);
  o.offload_optimizer = OffloadDevice::kNone;
  o.offload_param = OffloadDevice::kCpu;
  EXPECT_THROW(model_state_bytes(units, o), Error);  // not modelled yet
}

TEST(MemoryModel, CommunicationIsTwoPsiUpToStageTwoAndThreePsiAtStageThree) {
  const std::vector<UnitSize> units = synthetic_unit_sizes(7'500'000'000, 1);
  const int64_t psi = ShardLayout(units[0].numel, 64, 0).padded;
  for (int stage = 0; stage <= 3; ++stage)
    EXPECT_EQ(comm_elements_per_step(units, figure1_options(stage)), (stage == 3 ? 3 : 2) * psi);
}

// A frozen unit (zt.freeze, LoRA's base) holds its working params, sharded and offloaded as any
// unit's, and nothing else; it sizes none of the NVMe staging and is never reduced.
TEST(MemoryModel, FrozenUnitsHoldTheirWorkingParamsOnly) {
  const int world = 4;
  const std::vector<UnitSize> trained = {{1000}, {333}};
  std::vector<UnitSize> units = trained;
  units.push_back({40'000, true});
  const ShardLayout big(40'000, world, 0);
  StateOptions o;
  o.precision.compute = o.precision.grad_accum = o.precision.comm = DType::kBF16;
  o.world = world;
  o.persistence_threshold = 0;
  for (int stage = 0; stage <= 3; ++stage) {
    o.policy = ZeroPolicy::for_stage(stage);
    const TierBytes with = model_state_bytes(units, o), without = model_state_bytes(trained, o);
    EXPECT_EQ(with.get(Tier::kDevice, MemCategory::kParams),
              without.get(Tier::kDevice, MemCategory::kParams) +
                  2 * (stage == 3 ? big.shard : big.padded));
    EXPECT_EQ(with.get(Tier::kDevice, MemCategory::kGrads),
              without.get(Tier::kDevice, MemCategory::kGrads));
    EXPECT_EQ(with.get(Tier::kDevice, MemCategory::kOptimizer),
              without.get(Tier::kDevice, MemCategory::kOptimizer));
    // Stage 3 gathers it twice; no stage reduces it. Run by no layer of the backward (below
    // the first that trains), once.
    EXPECT_EQ(comm_elements_per_step(units, o),
              comm_elements_per_step(trained, o) + (stage == 3 ? 2 * big.padded : 0));
    std::vector<UnitSize> forward_only = trained;
    forward_only.push_back({40'000, true, false});
    EXPECT_EQ(comm_elements_per_step(forward_only, o),
              comm_elements_per_step(trained, o) + (stage == 3 ? big.padded : 0));
  }
  // Offloaded: its parameter shard moves to the parameters' tier, and (NVMe) it is the largest
  // shard, so it sizes the param_buffers host buffers; the optimizer's tiers and the staging
  // (sized by the largest master range, a trained unit's) are the trained units' alone.
  o.policy = ZeroPolicy::for_stage(3);
  for (OffloadDevice tier : {OffloadDevice::kCpu, OffloadDevice::kNvme}) {
    o.offload_optimizer = o.offload_param = tier;
    const TierBytes with = model_state_bytes(units, o), without = model_state_bytes(trained, o);
    TierBytes expected = without;
    expected.at(tier == OffloadDevice::kCpu ? Tier::kHost : Tier::kNvme, MemCategory::kParams) +=
        2 * big.shard;
    if (tier == OffloadDevice::kNvme)
      expected.at(Tier::kHost, MemCategory::kParams) =
          o.param_buffers * ((2 * big.shard + 4095) / 4096 * 4096 + 4096);
    for (Tier t : {Tier::kDevice, Tier::kHost, Tier::kNvme})
      for (int c = 0; c < kNumMemCategories; ++c)
        EXPECT_EQ(with.get(t, static_cast<MemCategory>(c)),
                  expected.get(t, static_cast<MemCategory>(c)))
            << (tier == OffloadDevice::kCpu ? "cpu " : "nvme ") << tier_name(t) << " "
            << mem_category_name(static_cast<MemCategory>(c));
  }
}

// DeepSpeed's estimators on the case its docs print (1 node, 8 GPUs, 13e9 params, largest
// layer 325e6), worked by hand from the formulas.
TEST(MemoryModel, DeepSpeedEstimatorFormulas) {
  const int64_t psi = 13'000'000'000, largest = 325'000'000;
  DeepSpeedEstimate e = deepspeed_zero2_estimate(psi, 8, 1, false);
  EXPECT_EQ(e.gpu, 4 * psi + 16 * psi / 8);
  EXPECT_EQ(e.cpu, static_cast<int64_t>(psi * 4.0 * 8 * 1.5));
  e = deepspeed_zero2_estimate(psi, 8, 1, true);
  EXPECT_EQ(e.gpu, 2 * psi);
  EXPECT_EQ(e.cpu, static_cast<int64_t>(psi * 32.0 * 1.5));  // max(4 * 8, 16)
  e = deepspeed_zero3_estimate(psi, largest, 8, 1, false, false, true);
  EXPECT_EQ(e.gpu, 4 * largest + 18 * psi / 8);
  EXPECT_EQ(e.cpu, static_cast<int64_t>(largest * 4.0 * 8 * 1.5));
  e = deepspeed_zero3_estimate(psi, largest, 8, 1, true, false, true);
  EXPECT_EQ(e.gpu, 4 * largest + 2 * psi / 8);
  EXPECT_EQ(e.cpu, static_cast<int64_t>(psi * 16.0 * 1.5));
  e = deepspeed_zero3_estimate(psi, largest, 8, 1, true, true, false);
  EXPECT_EQ(e.gpu, 4 * largest);
  EXPECT_EQ(e.cpu, static_cast<int64_t>(psi * 32.0 * 1.5));  // max(4 * 8, 18)
}

TEST(MemoryModel, CheckpointingLowersTheActivationPeak) {
  Gpt2 model(gpt2_zoo_config("gpt2-tiny"));
  ActivationOptions a;
  a.B = 2;
  a.T = 64;
  const std::optional<int64_t> fp32 = activation_peak_bytes(model, a);
  ASSERT_TRUE(fp32.has_value());
  a.checkpoint.clear();
  for (Layer* l : model.layers()) a.checkpoint.push_back(l->checkpointable());
  EXPECT_LT(*activation_peak_bytes(model, a), *fp32);  // recomputing keeps less
}

// A device the host cannot address holds the batch's positions beside its token ids (the
// engine's DeviceBatch: one buffer of 3 arrays, live through the pass): B*T int32 more at the
// peak. On a host-addressable device nothing is copied.
TEST(MemoryModel, BatchPositionsOnTheDeviceAddTheirBytes) {
  Gpt2 model(gpt2_zoo_config("gpt2-tiny"));
  ActivationOptions a;
  a.B = 2;
  a.T = 64;
  const int64_t host = *activation_peak_bytes(model, a);
  a.batch_positions = true;
  EXPECT_EQ(*activation_peak_bytes(model, a), host);
  a.tokens_on_device = true;
  const int64_t three = *activation_peak_bytes(model, a);
  a.batch_positions = false;
  const int64_t two = *activation_peak_bytes(model, a);
  EXPECT_EQ(two, host + 2 * a.B * a.T * 4);
  EXPECT_EQ(three, two + a.B * a.T * 4);
}

// UnitSize::backward from the model: zt.freeze of block 0 leaves it in the backward while the
// embedding before it trains; with the root frozen too (embedding, final norm, head) the
// backward stops at block 1, and block 0's unit alone is gathered in the forward only. The root
// is the head's, which the backward runs first.
TEST(MemoryModel, AUnitBelowTheFirstTrainedLayerIsGatheredOnce) {
  for (bool root : {false, true}) {
    Tuning tuning;
    tuning.freeze = {"model.layers.0.*"};
    if (root)
      for (const char* pattern : {"model.embed_tokens.*", "model.norm.*", "lm_head.*"})
        tuning.freeze.push_back(pattern);
    const LlamaConfig c = tiny_llama_config(97, 64, false, false, false);
    const std::unique_ptr<Model> model = build_model(ModelSpec{c, tuning});
    const std::vector<UnitSize> units = unit_sizes(*model);
    std::vector<UnitSize> all_backward = units;
    int forward_only = 0;
    int64_t forward_only_padded = 0;
    StateOptions o;
    o.world = 2;
    o.persistence_threshold = 0;
    o.policy = ZeroPolicy::for_stage(3);
    for (size_t u = 0; u < units.size(); ++u) {
      if (units[u].backward) continue;
      ++forward_only;
      EXPECT_TRUE(units[u].frozen) << "unit " << u;
      forward_only_padded += ShardLayout(units[u].numel, o.world, 0).padded;
      all_backward[u].backward = true;
    }
    EXPECT_EQ(forward_only, root ? 1 : 0) << "root frozen " << root;
    EXPECT_EQ(comm_elements_per_step(units, o),
              comm_elements_per_step(all_backward, o) - forward_only_padded);
  }
}

// A device whose attention keeps its own record in att (a GPU through cuDNN): the replay asks
// ActivationOptions::attention for each layer's att, with the layer's heads and the batch, and
// counts the answer in place of the probabilities the layer declares; the same answer counts
// the same bytes. Every layer keeps its att to the end of the forward, so a record D floats
// smaller, kept fp32 (no packing to shift which moment is the peak), lowers the peak by
// layers · 4·D bytes.
TEST(MemoryModel, TheDevicesAttentionRecordReplacesTheProbabilities) {
  const Gpt2Config config = gpt2_zoo_config("gpt2-tiny");
  Gpt2 model(config);
  ActivationOptions a;
  a.B = 2;
  a.T = 64;
  a.batch_positions = true;
  const int64_t probabilities = a.B * config.n_head * a.T * a.T;
  const int64_t declared = *activation_peak_bytes(model, a);
  int calls = 0;
  a.attention = [&](const AttentionHeads& h, int64_t B, int64_t T, bool packed) {
    ++calls;
    EXPECT_EQ(h.NH, config.n_head);
    EXPECT_EQ(h.NKV, config.n_head);
    EXPECT_EQ(h.hd, config.n_embd / config.n_head);
    EXPECT_EQ(h.window, 0);
    EXPECT_EQ(B, 2);
    EXPECT_EQ(T, 64);
    EXPECT_TRUE(packed);
    return AttentionRecord{B * h.NH * T * T, true};
  };
  EXPECT_EQ(*activation_peak_bytes(model, a), declared);
  EXPECT_EQ(calls, config.n_layer);
  const int64_t D = 1000;
  a.attention = [&](const AttentionHeads&, int64_t, int64_t, bool) {
    return AttentionRecord{probabilities - D, false};
  };
  EXPECT_EQ(*activation_peak_bytes(model, a), declared - config.n_layer * 4 * D);
}

}  // namespace
}  // namespace zt
