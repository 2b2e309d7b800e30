// The whole engine on a device the host cannot address (run under mpirun -np 2 and -np 4): ZeRO
// stages 0-3 in fp32, bf16 and fp16, training steps (with overlap_comm, gradient accumulation
// and activation checkpointing in some cases), eval_loss, weights out (read_unit_params,
// model_state_bytes, save_weights) and in (write_unit_params, load_weights), on a
// ScrambledDevice (tests/mpi/scrambled_device.h) with HostStagingCommunicator over MPI, give
// the same bits as the same run on the CPU device with the plain MpiCommunicator. The scrambled
// device turns any host access to its memory into wrong values or an error, which the first
// tests here show it does (with all_gather_host, the host-memory collective the engine's scalar
// reductions use); so equality means every byte the engine moved went through Device copies,
// device kernels or all_gather_host.
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
#include <optional>
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
#include "tests/mpi/scrambled_device.h"
#include "tests/mpi/zero_test_util.h"
#include "zero/engine.h"

namespace zt {
namespace {

using namespace zero_test;

// ---- the scrambled device catches host access -----------------------------------------------

TEST(ScrambledDevice, TheHostDoesNotSeeItsValuesButCopiesAndKernelsDo) {
  ScrambledDevice device;
  const std::vector<float> values = {1.0f, -2.5f, 3.25f, 1e-3f};
  const size_t bytes = values.size() * sizeof(float);
  Buffer b = device.alloc(bytes, MemCategory::kOther);
  device.copy_from_host(b.data(), values.data(), bytes);
  EXPECT_NE(std::memcmp(b.data(), values.data(), bytes), 0) << "a host read gave the values";
  device.kernels().residual_forward(b.as<float>(), b.as<float>(), b.as<float>(), 4);  // x + x
  std::vector<float> back(values.size());
  device.copy_to_host(back.data(), b.data(), bytes);
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(back[i], 2.0f * values[i]);
  // A host write is garbage to the device.
  std::memcpy(b.data(), values.data(), bytes);
  device.copy_to_host(back.data(), b.data(), bytes);
  EXPECT_NE(std::memcmp(back.data(), values.data(), bytes), 0);
  // zero and device-to-device copies keep the scrambling consistent.
  Buffer z = device.alloc_zeroed(bytes, MemCategory::kOther);
  device.copy(b.data(), z.data(), bytes);
  device.copy_to_host(back.data(), b.data(), bytes);
  for (float x : back) EXPECT_EQ(x, 0.0f);
}

TEST(ScrambledDevice, HostMemoryHandedToTheDeviceThrows) {
  ScrambledDevice device;
  std::vector<float> host(8, 1.0f), other(8);
  Buffer b = device.alloc(8 * sizeof(float), MemCategory::kOther);
  EXPECT_THROW(device.kernels().residual_forward(host.data(), host.data(), host.data(), 8), Error);
  EXPECT_THROW(device.copy_to_host(other.data(), host.data(), 32), Error);
  EXPECT_THROW(device.copy_from_host(host.data(), other.data(), 32), Error);
  EXPECT_THROW(device.copy_to_host(b.data(), b.data(), 32), Error);      // device memory as host
  EXPECT_THROW(device.copy_to_host(other.data(), b.data(), 36), Error);  // past the end
  EXPECT_THROW(device.copy(b.data(), host.data(), 32), Error);
  EXPECT_EQ(host[0], 1.0f);  // nothing was unscrambled into host memory
}

// One process on one device (zt-bench on a GPU): SelfCommunicator's collectives move device
// memory through Device::copy (a host memcpy of a GPU pointer crashes; on this device it would
// copy no counted bytes), and all_gather_host copies host memory without touching the device.
TEST(ScrambledDevice, SelfCommunicatorCopiesThroughTheDevice) {
  ScrambledDevice device;
  SelfCommunicator comm(device);
  const float values[4] = {1.0f, -2.5f, 3.25f, 1e-30f};
  Buffer send = device.alloc(16, MemCategory::kOther);
  Buffer recv = device.alloc(16, MemCategory::kOther);
  device.copy_from_host(send.data(), values, 16);
  comm.all_reduce(send.data(), recv.data(), 4, DType::kF32, ReduceOp::kSum);
  comm.reduce_scatter(send.data(), recv.data(), 4, DType::kF32, ReduceOp::kSum);
  comm.all_gather(send.data(), recv.data(), 4, DType::kF32);
  comm.broadcast(recv.data(), 4, DType::kF32, 0);  // in place: nothing to move
  EXPECT_EQ(device.device_copies(), 3);
  float back[4] = {};
  device.copy_to_host(back, recv.data(), 16);
  EXPECT_EQ(std::memcmp(back, values, 16), 0);
  const double mine[2] = {0.5, -1.0 / 3};
  EXPECT_EQ(all_gather_doubles(comm, mine), std::vector<double>(mine, mine + 2));
  EXPECT_EQ(device.device_copies(), 3);  // the host entry left the device alone
}

// A typed operand is checked whole: its n elements of its dtype lie in one allocation.
TEST(ScrambledDevice, AnOperandRunningPastItsAllocationThrows) {
  ScrambledDevice device;
  Buffer grad = device.alloc_zeroed(8 * 2, MemCategory::kOther);  // 8 bf16 values
  EXPECT_EQ(device.kernels().sum_squares({grad.data(), DType::kBF16}, 8), 0.0);
  EXPECT_THROW(device.kernels().sum_squares({grad.data(), DType::kBF16}, 9), Error);
  EXPECT_THROW(device.kernels().sum_squares({grad.data(), DType::kF32}, 8), Error);  // 32 bytes
}

// What every engine step used to do under host staging: a device collective given host memory.
// It fails on every rank (before any message, so no rank waits); the host entry works.
TEST(ScrambledDevice, ADeviceCollectiveGivenHostMemoryFailsAndTheHostEntryWorks) {
  ScrambledDevice device;
  std::unique_ptr<Communicator> comm = make_communicator("mpi", device, 600);
  ASSERT_EQ(comm->name(), "mpi+host-staging");
  const int world = comm->world(), rank = comm->rank();
  const double mine[2] = {0.5 + rank, -1.0 / (rank + 3)};
  std::vector<double> all(2 * world);
  EXPECT_THROW(comm->all_gather(mine, all.data(), 4, DType::kF32), Error);
  const std::vector<double> gathered = all_gather_doubles(*comm, mine);
  ASSERT_EQ(gathered.size(), size_t(2 * world));
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(gathered[2 * r], 0.5 + r);
    EXPECT_EQ(gathered[2 * r + 1], -1.0 / (r + 3));
  }
}

// all_gather_host on a device the host cannot address: host memory straight to the inner
// communicator (no device copy, no staging), MPI's bits, in a CommQueue's order after the
// collectives queued before it, counted as an all_gather.
TEST(ScrambledDevice, HostStagingAllGatherHostTakesHostMemoryInQueueOrder) {
  ScrambledDevice device;
  auto host = std::make_unique<CpuDevice>();
  auto staged = std::make_unique<HostStagingCommunicator>(
      device, std::make_unique<MpiCommunicator>(*host), std::move(host));
  CpuDevice plain_device;
  MpiCommunicator plain(plain_device);
  const int world = plain.world(), rank = plain.rank();
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const int64_t count = 1001, bytes = count * static_cast<int64_t>(dtype_size(dtype));
    std::vector<unsigned char> send(bytes), expected(world * bytes), got(world * bytes, 0xee);
    for (int64_t i = 0; i < bytes; ++i) send[i] = static_cast<unsigned char>(i * 7 + rank * 31);
    plain.all_gather(send.data(), expected.data(), count, dtype);
    const int64_t copies = device.copies_to_host() + device.copies_from_host();
    staged->all_gather_host(send.data(), got.data(), count, dtype);
    EXPECT_EQ(got, expected);
    EXPECT_EQ(device.copies_to_host() + device.copies_from_host(), copies);
  }
  EXPECT_EQ(staged->staging_bytes(), 0u);
  EXPECT_EQ(staged->stats()[CollectiveKind::kAllGather].calls, 3);
  EXPECT_EQ(staged->inner().stats()[CollectiveKind::kAllGather].calls, 3);

  const float one = 1.0f, mine = static_cast<float>(rank);
  Buffer x = device.alloc(4, MemCategory::kOther);
  device.copy_from_host(x.data(), &one, 4);
  std::vector<float> ranks(world);
  {
    CommQueue queue(*staged);
    CommHandle sum = queue.all_reduce(x.data(), x.data(), 1, DType::kF32, ReduceOp::kSum);
    staged->all_gather_host(&mine, ranks.data(), 1, DType::kF32);
    EXPECT_TRUE(sum.done());  // ran before the gather, on the queue's thread
    queue.drain();
  }
  for (int r = 0; r < world; ++r) EXPECT_EQ(ranks[r], static_cast<float>(r));
  float total = 0;
  device.copy_to_host(&total, x.data(), 4);
  EXPECT_EQ(total, static_cast<float>(world));
}

// NCCL's all_gather_host: host memory through its device buffer, in pieces (a block larger than
// the buffer), the same bits as MPI's all_gather. Needs a GPU per rank: skipped otherwise.
TEST(NcclCommunicator, AllGatherHostTakesHostMemoryInPieces) {
  const int local_world = bootstrap_process_group(MPI_COMM_WORLD).local_world;
  if (!nccl_built() || cuda_device_count() < local_world)
    GTEST_SKIP() << "needs NCCL and one GPU per rank; " << cuda_device_count() << " GPU(s)";
  std::unique_ptr<Device> gpu =
      make_device(DeviceKind::kCuda, bootstrap_process_group(MPI_COMM_WORLD).local_rank);
  std::unique_ptr<Communicator> nccl = make_communicator("nccl", *gpu, 120);
  CpuDevice cpu;
  MpiCommunicator plain(cpu);
  const int world = plain.world(), rank = plain.rank();
  const int64_t count = 50'000;  // 200 KB of fp32 per rank: several pieces of 64 KiB / world
  std::vector<float> send(count), expected(world * count), got(world * count, -1.0f);
  for (int64_t i = 0; i < count; ++i) send[i] = static_cast<float>(i) * 0.5f + rank;
  plain.all_gather(send.data(), expected.data(), count, DType::kF32);
  nccl->all_gather_host(send.data(), got.data(), count, DType::kF32);
  EXPECT_EQ(got, expected);
  const double mine = 1.0 + rank;
  EXPECT_EQ(all_gather_doubles(*nccl, {&mine, 1})[world - 1], double(world));
}

// Mixed precision's embedding gradient in 16 bits: the activation table's embedding_backward
// adds the batch's contributions into the rows of its tokens and rounds each once, on the
// device, with the token ids in device memory (a host loop over them read garbage here, or
// crashed). dwte and dwpe are Operands stored in the dtype; the result is the CPU device's
// table's, bit for bit, and rows of tokens absent from the batch keep their bits.
TEST(ScrambledDevice, EmbeddingBackwardRoundsTheTokenRowsOnTheDevice) {
  const int64_t B = 2, T = 5, C = 24, V = 11;
  const std::vector<int32_t> tokens = {3, 7, 3, 0, 10, 7, 7, 1, 2, 3};  // repeats on purpose
  std::vector<float> dout(B * T * C), dwte(V * C), dwpe(T * C);
  for (size_t i = 0; i < dout.size(); ++i) dout[i] = 0.37f * float(i % 13) - 1.1f + 1e-4f * i;
  for (size_t i = 0; i < dwte.size(); ++i) dwte[i] = 1e-3f * float(i) + 0.3f;
  for (size_t i = 0; i < dwpe.size(); ++i) dwpe[i] = -2e-3f * float(i);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    auto narrow = [&](const std::vector<float>& x) {
      std::vector<uint16_t> h(x.size());
      for (size_t i = 0; i < x.size(); ++i)
        h[i] = dtype == DType::kF16 ? fp32_to_fp16(x[i]) : fp32_to_bf16(x[i]);
      return h;
    };
    const std::vector<uint16_t> dwte16 = narrow(dwte), dwpe16 = narrow(dwpe);
    const size_t wte_bytes = dwte16.size() * 2, wpe_bytes = dwpe16.size() * 2;

    CpuDevice cpu;
    std::vector<uint16_t> ewte = dwte16, ewpe = dwpe16;
    cpu.kernels_for(dtype).embedding_backward({ewte.data(), dtype}, {ewpe.data(), dtype},
                                              dout.data(), tokens.data(), B, T, C, nullptr);

    ScrambledDevice device;
    auto upload = [&](const void* src, size_t bytes) {
      Buffer b = device.alloc(bytes, MemCategory::kOther);
      device.copy_from_host(b.data(), src, bytes);
      return b;
    };
    Buffer d_tokens = upload(tokens.data(), tokens.size() * 4);
    Buffer d_dout = upload(dout.data(), dout.size() * 4);
    Buffer d_wte = upload(dwte16.data(), wte_bytes);
    Buffer d_wpe = upload(dwpe16.data(), wpe_bytes);
    device.kernels_for(dtype).embedding_backward({d_wte.data(), dtype}, {d_wpe.data(), dtype},
                                                 d_dout.as<float>(), d_tokens.as<int32_t>(), B, T,
                                                 C, nullptr);
    std::vector<uint16_t> gwte(dwte16.size()), gwpe(dwpe16.size());
    device.copy_to_host(gwte.data(), d_wte.data(), wte_bytes);
    device.copy_to_host(gwpe.data(), d_wpe.data(), wpe_bytes);
    EXPECT_EQ(std::memcmp(gwte.data(), ewte.data(), wte_bytes), 0);
    EXPECT_EQ(std::memcmp(gwpe.data(), ewpe.data(), wpe_bytes), 0);
    // The batch's rows moved; rows of tokens absent from the batch (4, 5, 6, 8, 9) kept their bits.
    EXPECT_NE(std::memcmp(gwte.data() + 3 * C, dwte16.data() + 3 * C, C * 2), 0);
    for (int64_t v : {4, 5, 6, 8, 9})
      EXPECT_EQ(std::memcmp(gwte.data() + v * C, dwte16.data() + v * C, C * 2), 0) << "row " << v;
  }
}

// ---- the engine -----------------------------------------------------------------------------

struct Case {
  int stage;
  DType dtype;  // compute, gradient storage and reduction dtype; fp32 master when 16-bit
  int accumulation;
  bool overlap;
  bool checkpoint;
  OptimizerOptions::Type optimizer = OptimizerOptions::Type::kAdamW;
  bool clip = true;  // gradient_clipping 0.5 (small enough to clip), else off
};

std::string describe(const Case& c) {
  const char* optimizer = c.optimizer == OptimizerOptions::Type::kAdam  ? " Adam"
                          : c.optimizer == OptimizerOptions::Type::kSgd ? " SGD"
                                                                        : "";
  return fmt::format("stage {} {} accumulation {}{}{}{}{}", c.stage, dtype_name(c.dtype),
                     c.accumulation, c.overlap ? " overlap_comm" : "",
                     c.checkpoint ? " checkpointed" : "", optimizer, c.clip ? "" : " no clipping");
}

EngineOptions options(const Case& c, Model& model) {
  EngineOptions o;
  o.optimizer.type = c.optimizer;
  o.optimizer.weight_decay = 0.1f;
  o.optimizer.momentum = 0.9f;  // SGD
  o.gradient_clipping = c.clip ? 0.5f : 0.0f;
  o.policy = ZeroPolicy::for_stage(c.stage);
  o.overlap_comm = c.overlap;
  o.reduce_bucket_size = 10'000;
  o.prefetch_bucket_size = 20'000;
  o.persistence_threshold = 0;
  o.precision.compute = o.precision.grad_accum = o.precision.comm = c.dtype;
  o.precision.fp16.initial_scale_power = 10;
  if (c.checkpoint)
    for (Layer* l : model.layers()) o.checkpoint.push_back(l->checkpointable());
  return o;
}

// What a run leaves on the host, everything the engine exposes.
struct Outcome {
  std::vector<double> losses, grad_norms, loss_scales, skipped;  // per train_step
  double eval = 0;
  std::vector<std::vector<float>> params;       // read_unit_params after training
  std::vector<std::vector<std::byte>> state;    // model_state_bytes, this rank's
  std::vector<std::vector<float>> after_write;  // write_unit_params, one step, read back
  std::vector<std::vector<float>> after_load;   // save_weights, a step, load_weights, read
  std::string file;                             // rank 0: the saved safetensors bytes
  size_t device_optimizer_bytes = 0;            // the device's kOptimizer bytes after training
  size_t device_param_bytes = 0;                // ... and its kParams bytes
  size_t host_param_bytes = 0;                  // the host tier's kParams bytes (offload_param)
  int64_t nvme_param_bytes = 0;                 // Engine::nvme_bytes(kParams)
  std::vector<int> early_updates;               // per train_step (offload_optimizer)
  size_t master_elements = 0;                   // this rank's master() elements, all units
};

std::vector<Batch> micro_batches(std::vector<GlobalBatch>& globals, int step, int accumulation) {
  globals.clear();
  for (int m = 0; m < accumulation; ++m) globals.emplace_back(step, m, world_size());
  std::vector<Batch> micro;
  for (auto& g : globals) micro.push_back(g.rows(my_rank() * kB, kB));
  return micro;
}

// A file name every rank agrees on and no concurrent job shares: rank 0's pid.
std::string shared_temp_path(const std::string& tag) {
  int pid = static_cast<int>(getpid());
  MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return (std::filesystem::temp_directory_path() /
          fmt::format("zt_device_engine_{}_{}.safetensors", pid, tag))
      .string();
}

// offload_param in a run: the parameters on the host tier, or with `swap` in its swap files
// through `buffers` host buffers.
// `offload`: the host tier of an offloaded optimizer, or null; `swap`: its NVMe store, or null;
// `params`: offload_param too (with `offload`).
Outcome run(const Case& c, Device& device, Communicator& comm, const std::string& tag,
            Device* offload = nullptr, SwapStore* swap = nullptr,
            const ParamOffload* params = nullptr) {
  Gpt2 model(kModel);
  EngineOptions eo = options(c, model);
  if (offload) eo.offload.optimizer.emplace(*offload, swap);
  if (params) eo.offload.optimizer->params = *params;
  Engine engine(device, comm, model, eo);
  Outcome out;
  std::vector<GlobalBatch> globals;
  auto step = [&](int s) {
    const StepResult r = engine.train_step(micro_batches(globals, s, c.accumulation), 1e-3f);
    out.losses.push_back(r.loss);
    out.grad_norms.push_back(r.grad_norm);
    out.loss_scales.push_back(r.loss_scale);
    out.skipped.push_back(r.skipped ? 1.0 : 0.0);
    out.early_updates.push_back(r.early_updates);
  };
  auto read_all = [&] {
    std::vector<std::vector<float>> units;
    for (int u = 0; u < engine.num_units(); ++u) {
      units.emplace_back(model.units()[u]->layout().numel());
      engine.read_unit_params(u, units.back().data());  // collective under stage 3
    }
    return units;
  };
  for (int s = 0; s < 3; ++s) step(s);
  out.device_optimizer_bytes = device.memory().current(MemCategory::kOptimizer);
  out.device_param_bytes = device.memory().current(MemCategory::kParams);
  if (offload) out.host_param_bytes = offload->memory().current(MemCategory::kParams);
  out.nvme_param_bytes = engine.nvme_bytes(MemCategory::kParams);
  for (Unit* unit : model.units()) {
    const ShardLayout shard(unit->layout().numel(), world_size(), my_rank());
    out.master_elements += static_cast<size_t>(c.stage >= 1 ? shard.shard : shard.padded);
  }
  const GlobalBatch eval_batch(77, 0, world_size());
  out.eval = engine.eval_loss(eval_batch.rows(my_rank() * kB, kB));
  out.params = read_all();
  for (int u = 0; u < engine.num_units(); ++u) out.state.push_back(engine.model_state_bytes(u));

  // Weights in: values derived from the trained ones (the same on every rank), then a step.
  for (int u = 0; u < engine.num_units(); ++u) {
    std::vector<float> v = out.params[u];
    for (size_t i = 0; i < v.size(); ++i) v[i] = 0.5f * v[i] + 1e-3f * float(i % 7);
    engine.write_unit_params(u, v.data());
  }
  step(3);
  out.after_write = read_all();

  // Weights out to a file and back in, after a step that moved them.
  const std::string path = shared_temp_path(tag);
  save_weights(engine, path);
  MPI_Barrier(MPI_COMM_WORLD);  // rank 0 wrote it; every rank reads it
  step(4);
  load_weights(engine, path);
  out.after_load = read_all();
  MPI_Barrier(MPI_COMM_WORLD);
  if (my_rank() == 0) {
    std::ifstream in(path, std::ios::binary);
    out.file.assign(std::istreambuf_iterator<char>(in), {});
    std::remove(path.c_str());
  }
  return out;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <class T>
void expect_units_equal(const std::vector<std::vector<T>>& got,
                        const std::vector<std::vector<T>>& expected, const char* what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (size_t u = 0; u < got.size(); ++u)
    EXPECT_TRUE(same_bits(got[u], expected[u])) << what << ", unit " << u;
}

// What every run records: the steps' losses, norms and scales, the eval loss, the parameters.
void expect_same_training(const Outcome& got, const Outcome& expected) {
  EXPECT_TRUE(same_bits(got.losses, expected.losses)) << "losses";
  EXPECT_TRUE(same_bits(got.grad_norms, expected.grad_norms)) << "grad norms";
  EXPECT_TRUE(same_bits(got.loss_scales, expected.loss_scales)) << "loss scales";
  EXPECT_EQ(std::memcmp(&got.eval, &expected.eval, sizeof(double)), 0)
      << "eval loss " << got.eval << " vs " << expected.eval;
  expect_units_equal(got.params, expected.params, "read_unit_params");
}

void expect_same_outcome(const Outcome& got, const Outcome& expected) {
  expect_same_training(got, expected);
  EXPECT_TRUE(same_bits(got.skipped, expected.skipped)) << "skipped steps";
  expect_units_equal(got.state, expected.state, "model_state_bytes");
  expect_units_equal(got.after_write, expected.after_write, "after write_unit_params");
  expect_units_equal(got.after_load, expected.after_load, "after load_weights");
  EXPECT_TRUE(got.file == expected.file) << "saved weights files differ";
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16})
    for (int stage = 0; stage <= 3; ++stage)
      cases.push_back({stage, dtype, stage % 2 == 1 ? 2 : 1, (stage + int(dtype)) % 2 == 0,
                       stage == 3 && dtype != DType::kF32});
  return cases;
}

// One process alone (SelfCommunicator, each rank on its own): the engine's loss and norm
// reductions (host values, all_gather_host), the token ids (DeviceBatch) and the weights'
// reads on a device the host cannot address give the CPU device's bits, in every stage and
// dtype, checkpointed or not. What zt-bench train runs on one GPU.
Outcome run_alone(const Case& c, Device& device) {
  Gpt2 model(kModel);
  SelfCommunicator comm(device);
  Engine engine(device, comm, model, options(c, model));
  Outcome out;
  for (int s = 0; s < 3; ++s) {
    const GlobalBatch global(s, 0, 1);
    const Batch batch = global.rows(0, kB);
    const StepResult r = engine.train_step({&batch, 1}, 1e-3f);
    out.losses.push_back(r.loss);
    out.grad_norms.push_back(r.grad_norm);
    out.loss_scales.push_back(r.loss_scale);
  }
  const GlobalBatch eval_batch(77, 0, 1);
  out.eval = engine.eval_loss(eval_batch.rows(0, kB));
  for (int u = 0; u < engine.num_units(); ++u) {
    out.params.emplace_back(model.units()[u]->layout().numel());
    engine.read_unit_params(u, out.params.back().data());
  }
  return out;
}

TEST(DeviceEngine, SelfCommunicatorOnTheScrambledDeviceGivesTheCpuBits) {
  for (Case c : {Case{0, DType::kF32, 1, false, false}, Case{1, DType::kBF16, 1, false, true},
                 Case{2, DType::kF16, 1, true, false}, Case{3, DType::kF32, 1, false, true}}) {
    SCOPED_TRACE(describe(c));
    CpuDevice cpu;
    const Outcome expected = run_alone(c, cpu);
    ScrambledDevice device;
    const Outcome got = run_alone(c, device);
    expect_same_training(got, expected);
    EXPECT_GT(device.kernel_calls(), 0);
    EXPECT_GT(device.copies_from_host(), 0);  // the token ids went to the device
    EXPECT_TRUE(std::isfinite(expected.losses.back()));
  }
}

TEST(DeviceEngine, ScrambledDeviceWithHostStagingGivesTheCpuBits) {
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(describe(c));
    CpuDevice cpu;
    MpiCommunicator plain(cpu);
    const Outcome expected = run(c, cpu, plain, "cpu");

    ScrambledDevice device;
    std::unique_ptr<Communicator> staged = make_communicator("mpi", device, 600);
    ASSERT_EQ(staged->name(), "mpi+host-staging");
    const Outcome got = run(c, device, *staged, "scrambled");
    expect_same_outcome(got, expected);
    // The run really was on the device: its kernels ran and data crossed both ways.
    EXPECT_GT(device.kernel_calls(), 0);
    EXPECT_GT(device.copies_to_host(), 0);
    EXPECT_GT(device.copies_from_host(), 0);
    if (my_rank() == 0) {
      EXPECT_GT(expected.file.size(), 0u);
    }
    // Sanity of the comparison itself: training moved the parameters.
    EXPECT_FALSE(same_bits(expected.params[0], expected.after_write[0]));
  }
}

// Rows packing documents with some targets ignored: the engine copies the positions to the
// device beside the token ids (DeviceBatch), and the pass gives the CPU device's loss and
// gradients bit for bit. Its kActivations peak exceeds the CPU device's by exactly that copy,
// three arrays of B*T int32 (the CPU device reads the host's).
TEST(DeviceEngine, PackedDocumentsOnTheScrambledDeviceGiveTheCpuBits) {
  GlobalBatch global(5, 0, world_size());
  std::vector<int32_t> positions(global.inputs.size());
  for (size_t i = 0; i < positions.size(); ++i) {
    const int64_t t = int64_t(i) % kT;  // documents of 5, 1 and 10 tokens per row
    positions[i] = int32_t(t < 5 ? t : t == 5 ? 0 : t - 6);
  }
  for (size_t i = 3; i < global.targets.size(); i += 7) global.targets[i] = kIgnoreTarget;
  Batch batch = global.rows(my_rank() * kB, kB);
  batch.positions = positions.data() + my_rank() * kB * kT;
  struct Result {
    double loss = 0, eval = 0;
    std::vector<std::vector<float>> grads;
    size_t activation_peak = 0;
  };
  auto run_on = [&](Device& device, Communicator& comm) {
    Gpt2 model(kModel);
    Engine engine(device, comm, model, EngineOptions{});
    Result r;
    r.loss = engine.compute_gradients(batch);
    for (int u = 0; u < engine.num_units(); ++u) r.grads.push_back(engine.unit_grads(u));
    r.eval = engine.eval_loss(batch);
    r.activation_peak = device.memory().peak(MemCategory::kActivations);
    return r;
  };
  CpuDevice cpu;
  MpiCommunicator plain(cpu);
  const Result expected = run_on(cpu, plain);
  ScrambledDevice device;
  std::unique_ptr<Communicator> staged = make_communicator("mpi", device, 600);
  const Result got = run_on(device, *staged);
  EXPECT_EQ(std::memcmp(&got.loss, &expected.loss, sizeof(double)), 0);
  EXPECT_EQ(std::memcmp(&got.eval, &expected.eval, sizeof(double)), 0);
  expect_units_equal(got.grads, expected.grads, "unit_grads");
  EXPECT_EQ(got.activation_peak, expected.activation_peak + 3 * kB * kT * sizeof(int32_t));
}

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
