// The whole engine with its optimizer state and parameters offloaded (run under mpirun -np 2 and
// -np 4), on a ScrambledDevice (tests/mpi/scrambled_device.h) with HostStagingCommunicator over
// MPI: ZeRO-Offload's host tier and ZeRO-Infinity's swap files for the optimizer, and stage 3's
// parameter tier, each bitwise the same run without offload with the bytes where they are said
// to be; the pipelined host updates behind the backward; the refusals. Every transfer is a real
// copy (the device is scrambled). The harness is device_engine_test_util.h's (see
// device_engine_test.cpp for the engine without offload).
// Every rank runs every case; checks use EXPECT so that no rank skips a collective.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <type_traits>
#include <string>
#include <vector>

#include "comm/comm_queue.h"
#include "comm/communicator_factory.h"
#include "comm/host_staging_communicator.h"
#include "comm/mpi_communicator.h"
#include "comm/process_group.h"
#include "comm/self_communicator.h"
#include "model_zoo/gpt2.h"
#include "offload/swap_store.h"
#include "pretrained/weights_io.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/device_factory.h"
#include "runtime/dtype.h"
#include "runtime/status.h"
#include "tests/mpi/device_engine_test_util.h"
#include "tests/mpi/scrambled_device.h"
#include "tests/mpi/zero_test_util.h"
#include "zero/engine.h"

namespace zt {
namespace {

using namespace zero_test;

// ZeRO-Offload: the master and Adam's moments on a host tier, the update run there on its
// kernels, gradients out and working parameters back through the device's copies (every
// transfer a real copy: the device is scrambled). Bitwise the run without offload, and the
// optimizer's bytes are on the host: none on the device, 12 per master element on the host
// (fp32 master, m, v; fp32 training keeps an fp32 master there too).
// Stages 1-3 in each of `dtypes` (accumulation at stage 2, overlap at stage 3), AdamW, then
// `extra`.
std::vector<Case> offload_cases(std::initializer_list<DType> dtypes, std::vector<Case> extra) {
  std::vector<Case> cases;
  for (DType dtype : dtypes)
    for (int stage = 1; stage <= 3; ++stage)
      cases.push_back({stage, dtype, stage == 2 ? 2 : 1, stage == 3, false});
  cases.insert(cases.end(), extra.begin(), extra.end());
  return cases;
}

// The case on a scrambled device of its own without offload: what an offloaded run must give.
Outcome plain_outcome(const Case& c) {
  ScrambledDevice device;
  std::unique_ptr<Communicator> comm = make_communicator("mpi", device, 600);
  return run(c, device, *comm, "plain");
}

TEST(DeviceEngine, OffloadedOptimizerGivesTheDeviceBitsAndHoldsItsStateOnTheHost) {
  // Classic Adam (L2 decay) and SGD with momentum take the offloaded path too.
  const std::vector<Case> cases =
      offload_cases({DType::kF32, DType::kBF16, DType::kF16},
                    {{2, DType::kBF16, 1, false, false, OptimizerOptions::Type::kAdam},
                     {1, DType::kF16, 1, false, false, OptimizerOptions::Type::kSgd}});
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c));
    const Outcome expected = plain_outcome(c);
    ScrambledDevice device;
    CpuDevice host;
    std::unique_ptr<Communicator> comm = make_communicator("mpi", device, 600);
    const Outcome got = run(c, device, *comm, "offload", &host);
    expect_same_outcome(got, expected);
    EXPECT_GT(expected.device_optimizer_bytes, 0u);
    EXPECT_EQ(got.device_optimizer_bytes, 0u);
    // fp32 master and Adam's m, v (SGD: the momentum).
    const size_t per_element = c.optimizer == OptimizerOptions::Type::kSgd ? 8 : 12;
    EXPECT_EQ(host.memory().peak(MemCategory::kOptimizer), per_element * got.master_elements);
    EXPECT_EQ(host.memory().current_total(), 0u) << "the engine frees its host tier";
  }
}

std::string model_unit_name(int u) {
  Gpt2 model(kModel);
  return model.units()[u]->name();
}

// ZeRO-Infinity's optimizer tier: the master and the moments in swap files, streamed through
// the host a chunk at a time. Bitwise the run without offload again; the host holds no
// optimizer bytes (only staging), the swap files hold 12 bytes per master element, and they
// are gone once the store is.
TEST(DeviceEngine, NvmeOffloadedOptimizerGivesTheDeviceBitsFromSwapFiles) {
  const SharedTempDir dir("nvme_offload");
  const std::vector<Case> cases =
      offload_cases({DType::kF32, DType::kBF16},
                    {{2, DType::kF16, 1, false, false, OptimizerOptions::Type::kSgd}});
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c));
    const Outcome expected = plain_outcome(c);

    ScrambledDevice device;
    CpuDevice host;
    std::unique_ptr<Communicator> comm = make_communicator("mpi", device, 600);
    std::string rank_dir;
    {
      SwapStoreOptions so;
      so.nvme_path = dir.path();
      so.rank = my_rank();
      SwapStore store(so);
      rank_dir = store.directory();
      const Outcome got = run(c, device, *comm, "nvme", &host, &store);
      expect_same_outcome(got, expected);
      EXPECT_EQ(got.device_optimizer_bytes, 0u);
      EXPECT_EQ(host.memory().peak(MemCategory::kOptimizer), 0u);
      EXPECT_GT(host.memory().peak(MemCategory::kWorkspace), 0u);  // the staging
      // One file per unit, kind and chunk, named by them: the first block's master, chunk 0.
      EXPECT_TRUE(std::filesystem::exists(store.path_of(model_unit_name(1) + ".master.0")));
    }
    EXPECT_FALSE(std::filesystem::exists(rank_dir)) << "swap files left after a clean exit";
  }
}

// The pipelined host step: without gradient clipping (and without fp16's loss scale) nothing
// global scales a unit's gradient, so each unit's update starts on the host thread as soon as
// its last reduction of the step finished, behind the rest of the backward, and its working
// parameters go back while later units update. Still bitwise the run without offload, with
// the parameters on the device, in host memory or in swap files.
TEST(DeviceEngine, OffloadedOptimizerUpdatesBehindTheBackwardWithoutClipping) {
  const SharedTempDir dir("early_updates");
  using T = OptimizerOptions::Type;
  const std::vector<Case> cases = {{1, DType::kBF16, 1, true, false, T::kAdamW, false},
                                   {2, DType::kBF16, 2, true, false, T::kAdamW, false},
                                   {2, DType::kF32, 1, false, false, T::kSgd, false},
                                   {3, DType::kF32, 1, true, false, T::kAdamW, false},
                                   {3, DType::kBF16, 2, true, true, T::kAdam, false}};
  const int units = static_cast<int>(Gpt2(kModel).units().size());
  for (const Case& c : cases) {
    const Outcome expected = plain_outcome(c);
    for (const int params : {0, 1, 2}) {  // parameters on the device; offloaded to cpu; nvme
      if (params > 0 && c.stage != 3) continue;
      SCOPED_TRACE(describe(c) + (params == 1   ? " params on the host"
                                  : params == 2 ? " params on NVMe"
                                                : ""));
      ScrambledDevice device;
      CpuDevice host;
      std::unique_ptr<Communicator> comm = make_communicator("mpi", device, 600);
      std::optional<SwapStore> store;
      if (params == 2) {
        SwapStoreOptions so;
        so.nvme_path = dir.path();
        so.rank = my_rank();
        store.emplace(so);
      }
      const ParamOffload offload_params{store ? &*store : nullptr, 2};
      const Outcome got =
          run(c, device, *comm, "early", &host, nullptr, params > 0 ? &offload_params : nullptr);
      expect_same_outcome(got, expected);
      for (int early : got.early_updates) EXPECT_EQ(early, units);
    }
  }
  // With clipping the updates wait for the global norm: none starts in the backward.
  const Case clipped{2, DType::kBF16, 1, true, false};
  ScrambledDevice device;
  CpuDevice host;
  std::unique_ptr<Communicator> comm = make_communicator("mpi", device, 600);
  const Outcome got = run(clipped, device, *comm, "clipped", &host);
  for (int early : got.early_updates) EXPECT_EQ(early, 0);
}

TEST(DeviceEngine, NvmeOffloadedStateBytesAreTheFormula) {
  const SharedTempDir dir("nvme_bytes");
  ScrambledDevice device;
  CpuDevice host;
  std::unique_ptr<Communicator> comm = make_communicator("mpi", device, 600);
  SwapStoreOptions so;
  so.nvme_path = dir.path();
  so.rank = my_rank();
  SwapStore store(so);
  Gpt2 model(kModel);
  EngineOptions eo = options(Case{2, DType::kBF16, 1, false, false}, model);
  eo.offload.optimizer.emplace(host, &store);
  Engine engine(device, *comm, model, eo);
  int64_t master = 0;
  for (Unit* unit : model.units())
    master += ShardLayout(unit->layout().numel(), world_size(), my_rank()).shard;
  std::vector<GlobalBatch> globals;
  engine.train_step(micro_batches(globals, 0, 1), 1e-3f);
  EXPECT_EQ(engine.nvme_bytes(), 12 * master);
  EXPECT_EQ(device.memory().current(MemCategory::kOptimizer), 0u);
  EXPECT_EQ(host.memory().current(MemCategory::kOptimizer), 0u);
}

TEST(DeviceEngine, OffloadedOptimizerStateSitsOnTheHostWhileTheEngineLives) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const Case c{2, dtype, 1, false, false};
    SCOPED_TRACE(describe(c));
    ScrambledDevice device;
    CpuDevice host;
    std::unique_ptr<Communicator> comm = make_communicator("mpi", device, 600);
    Gpt2 model(kModel);
    EngineOptions eo = options(c, model);
    eo.offload.optimizer.emplace(host);
    Engine engine(device, *comm, model, eo);
    size_t master = 0;
    for (Unit* unit : model.units())
      master +=
          static_cast<size_t>(ShardLayout(unit->layout().numel(), world_size(), my_rank()).shard);
    std::vector<GlobalBatch> globals;
    engine.train_step(micro_batches(globals, 0, 1), 1e-3f);
    EXPECT_EQ(device.memory().current(MemCategory::kOptimizer), 0u);
    EXPECT_EQ(host.memory().current(MemCategory::kOptimizer), 12 * master);
    ASSERT_NE(engine.host_memory(), nullptr);
    EXPECT_EQ(engine.host_memory(), &host.memory());
  }
}

// ZeRO-Infinity's parameter tier (stage 3): every unit's working-parameter shard lives off the
// device (persistence_threshold is 0, so every unit is sharded), on the host tier or in swap
// files through a pool of host buffers, copied in for each gather and written by the offloaded
// optimizer. Bitwise the run without any offload; the device holds no parameter bytes, the
// host tier holds the shards (cpu) or the pool (nvme: buffers x the largest shard rounded up to
// 4 KiB, plus 4 KiB each for alignment) and the swap files the shards.
TEST(DeviceEngine, OffloadedParametersGiveTheDeviceBitsFromHostOrSwapFiles) {
  const SharedTempDir dir("param_offload");
  const std::vector<Case> cases = {{3, DType::kF32, 1, true, false},
                                   {3, DType::kBF16, 2, false, true},
                                   {3, DType::kF16, 1, true, false}};
  Gpt2 model(kModel);
  for (const Case& c : cases) {
    const Outcome expected = plain_outcome(c);
    EXPECT_GT(expected.device_param_bytes, 0u);
    size_t shards = 0, largest = 0;
    for (Unit* unit : model.units()) {
      const size_t bytes =
          static_cast<size_t>(ShardLayout(unit->layout().numel(), world_size(), my_rank()).shard) *
          dtype_size(c.dtype);
      shards += bytes;
      largest = std::max(largest, bytes);
    }
    // Host memory; swap files with room for every shard; swap files with one buffer (every
    // gather reads its shard, no prefetch), both with the optimizer state on NVMe too.
    for (const int buffers : {0, 5, 1}) {
      SCOPED_TRACE(describe(c) + (buffers == 0
                                      ? " params on the host"
                                      : fmt::format(" params on NVMe, {} buffers", buffers)));
      ScrambledDevice device;
      CpuDevice host;
      std::unique_ptr<Communicator> comm = make_communicator("mpi", device, 600);
      SwapStoreOptions so;
      so.nvme_path = dir.path();
      so.rank = my_rank();
      std::optional<SwapStore> store;
      if (buffers > 0) store.emplace(so);
      SwapStore* swap = store ? &*store : nullptr;
      const ParamOffload params{swap, std::max(buffers, 1)};
      const Outcome got = run(c, device, *comm, "param_offload", &host, swap, &params);
      expect_same_outcome(got, expected);
      EXPECT_EQ(got.device_param_bytes, 0u);
      EXPECT_EQ(got.device_optimizer_bytes, 0u);
      if (buffers == 0) {
        EXPECT_EQ(got.host_param_bytes, shards);
        EXPECT_EQ(got.nvme_param_bytes, 0);
      } else {
        EXPECT_EQ(got.host_param_bytes,
                  static_cast<size_t>(buffers) * ((largest + 4095) / 4096 * 4096 + 4096));
        EXPECT_EQ(got.nvme_param_bytes, static_cast<int64_t>(shards));
        EXPECT_TRUE(std::filesystem::exists(store->path_of(model_unit_name(1) + ".params")));
      }
    }
  }
}

TEST(DeviceEngine, OffloadedParametersAreRefusedWithoutStage3OrTheOptimizerOffloaded) {
  ScrambledDevice device;
  CpuDevice host;
  std::unique_ptr<Communicator> comm = make_communicator("mpi", device, 600);
  Gpt2 model(kModel);
  EngineOptions eo = options(Case{2, DType::kBF16, 1, false, false}, model);
  eo.offload.optimizer.emplace(host);
  eo.offload.optimizer->params.emplace();
  EXPECT_THROW(Engine(device, *comm, model, eo), Error);
  // Without the optimizer offloaded the parameters' tier cannot be written: an OffloadPlan holds
  // it only inside an OptimizerOffload, which needs the host tier (zero/offload_plan.h).
  static_assert(std::is_same_v<decltype(OffloadPlan::optimizer), std::optional<OptimizerOffload>>);
  static_assert(std::is_same_v<decltype(OptimizerOffload::params), std::optional<ParamOffload>>);
  static_assert(!std::is_default_constructible_v<OptimizerOffload>);
}

TEST(DeviceEngine, OffloadedOptimizerIsRefusedAtStageZeroAndUnderPure16Bit) {
  ScrambledDevice device;
  CpuDevice host;
  std::unique_ptr<Communicator> comm = make_communicator("mpi", device, 600);
  Gpt2 model(kModel);
  EngineOptions eo = options(Case{0, DType::kF32, 1, false, false}, model);
  eo.offload.optimizer.emplace(host);
  EXPECT_THROW(Engine(device, *comm, model, eo), Error);
  eo = options(Case{2, DType::kBF16, 1, false, false}, model);
  eo.precision.master_weights = false;
  eo.offload.optimizer.emplace(host);
  EXPECT_THROW(Engine(device, *comm, model, eo), Error);
}

}  // namespace
}  // namespace zt
