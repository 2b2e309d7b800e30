// The memory planner against real engines (run under mpirun -np 2 and -np 4): for ZeRO stages
// 0-3 with the optimizer on the device, offloaded to the host tier, and in NVMe swap files, in
// fp32 and bf16, the model-state bytes zero/memory_model.h computes equal what the engine's
// trackers hold after a training step, per category and tier: the device's, the host tier's
// (offload_optimizer's CpuDevice) and Engine::nvme_bytes(). The activation peak it replays is
// within 10% of the device tracker's kActivations peak of that step, with and without
// activation checkpointing, and the device's whole peak it replays (device_peak_bytes: states,
// activations, gathers, gradient and reduction buffers, staging, workspace) equals the
// tracker's peak_total and every category's peak, exactly. Rank 0 prints the table. Every rank runs
// every case; checks use EXPECT so that no rank skips a collective. The tiny GPT-2 throughout, and
// the tiny Mistral, Qwen3 and Phi-3 (tests/model_zoo/tiny_llama.h) for every stage: their new
// parameters (q_norm, k_norm, fused projections) and activations (Qwen3's pre-norm q/k/v and the
// norms' statistics) counted. Tuned runs on the tiny Llama: LoRA (r=4, all-linear: multi-unit
// layers, frozen base units and root) and zt.freeze (a frozen block; with the embedding frozen
// too, layers that run forward only): frozen units hold working params only, every tier.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/mpi_communicator.h"
#include "model_zoo/gpt2.h"
#include "model_zoo/model_spec.h"
#include "offload/swap_store.h"
#include "runtime/cpu/cpu_device.h"
#include "tests/model_zoo/tiny_llama.h"
#include "tests/mpi/zero_test_util.h"
#include "zero/engine.h"
#include "zero/memory_model.h"

namespace zt {
namespace {

using namespace zero_test;

struct Case {
  int stage;
  OffloadDevice offload;
  DType dtype;
  bool checkpoint;
  OffloadDevice params = OffloadDevice::kNone;  // offload_param (stage 3)
  // Buckets and prefetch small enough that reductions and gathers overlap the pass: 0 keeps
  // EngineOptions' defaults.
  int64_t buckets = 0;
  std::optional<LlamaConfig> llama = std::nullopt;  // the model when set; else the tiny GPT-2
  Tuning tuning = {};                               // with llama: LoRA, zt.freeze
  int64_t persistence = 5000;                       // stage3_param_persistence_threshold
};

const char* name_of(OffloadDevice d) {
  return d == OffloadDevice::kNone ? "none" : d == OffloadDevice::kCpu ? "cpu" : "nvme";
}

std::string describe(const Case& c) {
  std::string tuned;
  if (c.tuning.lora.enabled) tuned += fmt::format("lora r={} ", c.tuning.lora.r);
  if (!c.tuning.freeze.empty()) tuned += fmt::format("freeze {} ", fmt::join(c.tuning.freeze, ","));
  if (c.persistence != 5000) tuned += fmt::format("persist {} ", c.persistence);
  return fmt::format("{}{}stage {} offload {}{}{} {}{}{}",
                     c.llama ? ModelSpec{*c.llama, {}}.model_type() + " " : "", tuned, c.stage,
                     name_of(c.offload), c.params == OffloadDevice::kNone ? "" : " params ",
                     c.params == OffloadDevice::kNone ? "" : name_of(c.params), dtype_name(c.dtype),
                     c.checkpoint ? " checkpointed" : "",
                     c.buckets > 0 ? fmt::format(" buckets {}", c.buckets) : "");
}

// Between the tiny GPT-2's root unit and its blocks, so stage 3 has a persistent unit too (the
// tiny Llama's LoRA: the adapters and the tied root persistent, the frozen base sharded).
constexpr int64_t kPersistence = 5000;
static_assert(kPersistence == Case{}.persistence);

EngineOptions options(const Case& c, Model& model) {
  EngineOptions o;
  o.optimizer.type = OptimizerOptions::Type::kAdamW;
  o.policy = ZeroPolicy::for_stage(c.stage);
  o.persistence_threshold = c.persistence;
  o.precision.compute = o.precision.grad_accum = o.precision.comm = c.dtype;
  if (c.checkpoint)
    for (Layer* l : model.layers()) o.checkpoint.push_back(l->checkpointable());
  if (c.buckets > 0) {
    o.overlap_comm = true;
    o.reduce_bucket_size = c.buckets;
    o.prefetch_bucket_size = c.buckets;
    o.max_live_parameters = 3 * c.buckets;
    o.max_reuse_distance = c.buckets;
  }
  return o;
}

// The printed table's columns: device params, grads, optimizer; host params, grads, optimizer,
// workspace; nvme params, optimizer; the activation peak; the device's whole peak.
constexpr int kColumns = 11;
const char* const kHeader = "%-44s %-8s | %8s %8s %8s | %7s %7s %8s %8s | %8s %8s | %9s %9s\n";

void print_row(const Case& c, const char* which, const std::array<int64_t, kColumns>& v) {
  if (my_rank() != 0) return;
  std::printf(
      "%-44s %-8s | %8lld %8lld %8lld | %7lld %7lld %8lld %8lld | %8lld %8lld | %9lld "
      "%9lld\n",
      describe(c).c_str(), which, static_cast<long long>(v[0]), static_cast<long long>(v[1]),
      static_cast<long long>(v[2]), static_cast<long long>(v[3]), static_cast<long long>(v[4]),
      static_cast<long long>(v[5]), static_cast<long long>(v[6]), static_cast<long long>(v[7]),
      static_cast<long long>(v[8]), static_cast<long long>(v[9]), static_cast<long long>(v[10]));
}

void print_header() {
  if (my_rank() != 0) return;
  std::printf(
      "world %d, GPT-2 {2 layers, 2 heads, C=32, V=97}, B=%lld T=%lld, stage-3 "
      "persistence threshold %lld; bytes per rank\n",
      world_size(), static_cast<long long>(kB), static_cast<long long>(kT),
      static_cast<long long>(kPersistence));
  std::printf(kHeader, "case", "", "dev par", "dev grad", "dev opt", "h par", "h grad", "h opt",
              "h work", "nvme par", "nvme opt", "act peak", "dev peak");
}

// Builds the case's engine on this rank, trains one step, and compares.
void check(const Case& c, const std::string& swap_dir) {
  SCOPED_TRACE(describe(c));
  CpuDevice device;
  MpiCommunicator comm(device);
  std::optional<CpuDevice> host;
  std::optional<SwapStore> swap;
  const std::unique_ptr<Model> owned =
      c.llama ? build_model(ModelSpec{*c.llama, c.tuning}) : std::make_unique<Gpt2>(kModel);
  Model& model = *owned;
  EngineOptions eo = options(c, model);
  if (c.offload != OffloadDevice::kNone) eo.offload.optimizer.emplace(host.emplace());
  if (c.offload == OffloadDevice::kNvme || c.params == OffloadDevice::kNvme) {
    SwapStoreOptions so;
    so.nvme_path = swap_dir;
    so.rank = my_rank();
    swap.emplace(so);
  }
  if (c.offload == OffloadDevice::kNvme) eo.offload.optimizer->swap = &*swap;
  if (c.params != OffloadDevice::kNone) {
    ParamOffload& params = eo.offload.optimizer->params.emplace();
    params.buffers = 3;
    if (c.params == OffloadDevice::kNvme) params.swap = &*swap;
  }
  const StateOptions so = state_options(eo, c.offload, world_size(), c.params, 3);
  const TierBytes estimate = model_state_bytes(unit_sizes(model), so);
  ActivationOptions ao;
  ao.B = kB;
  ao.T = kT;
  ao.compute = c.dtype;
  ao.checkpoint = eo.checkpoint;
  const std::optional<int64_t> activations = activation_peak_bytes(model, ao);
  ASSERT_TRUE(activations.has_value());
  // The staging of the test's communicator and of the engine's gather duplicate of it.
  const std::optional<DevicePeak> device_peak = device_peak_bytes(
      model,
      step_replay_options(eo, so, ao,
                          2 * static_cast<int64_t>(MpiCommunicator::staging_bytes(world_size()))));
  ASSERT_TRUE(device_peak.has_value());

  Engine engine(device, comm, model, eo);
  GlobalBatch global(0, 0, world_size());
  const Batch batch = global.rows(my_rank() * kB, kB);
  engine.train_step({&batch, 1}, 1e-3f);

  std::array<int64_t, kColumns> estimated{}, tracked{};
  int column = 0;
  auto compare = [&](Tier tier, MemCategory cat, int64_t bytes) {
    estimated[column] = estimate.get(tier, cat);
    tracked[column++] = bytes;
    EXPECT_EQ(estimate.get(tier, cat), bytes) << tier_name(tier) << " " << mem_category_name(cat);
  };
  const MemoryTracker& dev = device.memory();
  for (MemCategory cat : {MemCategory::kParams, MemCategory::kGrads, MemCategory::kOptimizer})
    compare(Tier::kDevice, cat, static_cast<int64_t>(dev.current(cat)));
  const MemoryTracker* host_mem = engine.host_memory();
  for (MemCategory cat : {MemCategory::kParams, MemCategory::kGrads, MemCategory::kOptimizer,
                          MemCategory::kWorkspace})
    compare(Tier::kHost, cat, host_mem ? static_cast<int64_t>(host_mem->current(cat)) : 0);
  compare(Tier::kNvme, MemCategory::kParams, engine.nvme_bytes(MemCategory::kParams));
  compare(Tier::kNvme, MemCategory::kOptimizer, engine.nvme_bytes(MemCategory::kOptimizer));
  const int64_t peak = static_cast<int64_t>(dev.peak(MemCategory::kActivations));
  estimated[column] = *activations;
  tracked[column] = peak;
  EXPECT_NEAR(static_cast<double>(*activations), static_cast<double>(peak), 0.10 * peak);
  estimated[column + 1] = device_peak->total;
  tracked[column + 1] = static_cast<int64_t>(dev.peak_total());
  EXPECT_EQ(device_peak->total, static_cast<int64_t>(dev.peak_total())) << "device peak";
  for (int cat = 0; cat < kNumMemCategories; ++cat)
    EXPECT_EQ(device_peak->category[cat],
              static_cast<int64_t>(dev.peak(static_cast<MemCategory>(cat))))
        << "device peak of " << mem_category_name(static_cast<MemCategory>(cat));
  print_row(c, "estimate", estimated);
  print_row(c, "tracker", tracked);
}

TEST(MemoryModel, EstimateEqualsTheTrackersOnRealEngines) {
  const SharedTempDir dir("memory_model");
  print_header();
  for (DType dtype : {DType::kF32, DType::kBF16})
    for (int stage = 0; stage <= 3; ++stage)
      for (OffloadDevice offload :
           {OffloadDevice::kNone, OffloadDevice::kCpu, OffloadDevice::kNvme}) {
        if (stage == 0 && offload != OffloadDevice::kNone) continue;  // the engine refuses it
        check(Case{stage, offload, dtype, false}, dir.path());
      }
  // Stage 3's parameter tier, with the optimizer offloaded (offload_param needs it).
  for (DType dtype : {DType::kF32, DType::kBF16})
    for (auto [offload, params] : {std::pair{OffloadDevice::kCpu, OffloadDevice::kCpu},
                                   std::pair{OffloadDevice::kCpu, OffloadDevice::kNvme},
                                   std::pair{OffloadDevice::kNvme, OffloadDevice::kNvme}})
      check(Case{3, offload, dtype, false, params}, dir.path());
}

// Reductions in flight behind the backward (overlap_comm, small buckets) and stage 3's prefetch,
// reuse and max_live limits at work: the replay follows the engine's buffers through them.
TEST(MemoryModel, DevicePeakFollowsBucketsAndPrefetch) {
  const SharedTempDir dir("memory_model_buckets");
  print_header();
  for (DType dtype : {DType::kF32, DType::kBF16})
    for (int stage = 1; stage <= 3; ++stage)
      check(Case{stage, OffloadDevice::kNone, dtype, stage == 3, OffloadDevice::kNone, 6000},
            dir.path());
}

TEST(MemoryModel, ActivationsWithCheckpointingAreWithinTenPercent) {
  const SharedTempDir dir("memory_model_ckpt");
  print_header();
  for (DType dtype : {DType::kF32, DType::kBF16})
    for (int stage = 0; stage <= 3; ++stage)
      check(Case{stage, OffloadDevice::kNone, dtype, true}, dir.path());
}

// The Llama families past Llama, every stage, fp32 and bf16, with and without checkpointing.
TEST(MemoryModel, NewLlamaFamiliesEstimateEqualsTheTrackers) {
  const SharedTempDir dir("memory_model_families");
  print_header();
  for (LlamaFamily family : kNewFamilies)
    for (DType dtype : {DType::kF32, DType::kBF16})
      for (int stage = 0; stage <= 3; ++stage)
        for (bool checkpoint : {false, true}) {
          Case c{stage, OffloadDevice::kNone, dtype, checkpoint};
          c.llama = tiny_family_config(family, kModel.vocab_size, static_cast<int>(kT));
          check(c, dir.path());
        }
}

Tuning lora_all_linear() {
  Tuning t;
  t.lora.enabled = true;
  t.lora.r = 4;
  t.lora.target_modules = {"all-linear"};
  return t;
}

// LoRA on the tiny Llama: each block's layer computes with its adapters' unit and its frozen
// base unit, the root is frozen whole. bf16 (fp32 master for the adapters) through every stage
// and offload tier, with and without checkpointing; fp32 (no master: the working params are the
// adapters' master); stage 3 with the parameters offloaded and with every unit sharded.
TEST(MemoryModel, LoraEstimateEqualsTheTrackers) {
  const SharedTempDir dir("memory_model_lora");
  print_header();
  const LlamaConfig tied =
      tiny_llama_config(kModel.vocab_size, static_cast<int>(kT), true, false, false);
  auto lora = [&](int stage, OffloadDevice offload, DType dtype, bool checkpoint) {
    Case c{stage, offload, dtype, checkpoint};
    c.llama = tied;
    c.tuning = lora_all_linear();
    return c;
  };
  for (int stage = 0; stage <= 3; ++stage)
    for (OffloadDevice offload : {OffloadDevice::kNone, OffloadDevice::kCpu, OffloadDevice::kNvme})
      for (bool checkpoint : {false, true}) {
        if (stage == 0 && offload != OffloadDevice::kNone) continue;  // the engine refuses it
        check(lora(stage, offload, DType::kBF16, checkpoint), dir.path());
      }
  for (int stage = 0; stage <= 3; ++stage)
    check(lora(stage, OffloadDevice::kNone, DType::kF32, false), dir.path());
  for (auto [offload, params] : {std::pair{OffloadDevice::kCpu, OffloadDevice::kCpu},
                                 std::pair{OffloadDevice::kCpu, OffloadDevice::kNvme},
                                 std::pair{OffloadDevice::kNvme, OffloadDevice::kNvme}}) {
    Case c = lora(3, offload, DType::kBF16, false);
    c.params = params;
    check(c, dir.path());
  }
  for (bool checkpoint : {false, true}) {  // the adapters' units sharded too
    Case c = lora(3, OffloadDevice::kNone, DType::kBF16, checkpoint);
    c.persistence = 1000;
    check(c, dir.path());
  }
}

// zt.freeze: block 0 frozen whole (a frozen unit among trained ones); with the root frozen too
// (embedding, final norm, untied head), the embedding and block 0 run forward only.
TEST(MemoryModel, FrozenBlocksEstimateEqualsTheTrackers) {
  const SharedTempDir dir("memory_model_freeze");
  print_header();
  for (bool root : {false, true})
    for (int stage = 0; stage <= 3; ++stage)
      for (OffloadDevice offload : {OffloadDevice::kNone, OffloadDevice::kCpu}) {
        if (stage == 0 && offload != OffloadDevice::kNone) continue;
        Case c{stage, offload, DType::kBF16, stage == 2};
        c.llama = tiny_llama_config(kModel.vocab_size, static_cast<int>(kT), false, false, false);
        c.tuning.freeze = {"model.layers.0.*"};
        if (root)
          for (const char* pattern : {"model.embed_tokens.*", "model.norm.*", "lm_head.*"})
            c.tuning.freeze.push_back(pattern);
        c.persistence = 1000;
        check(c, dir.path());
      }
}

}  // namespace
}  // namespace zt
