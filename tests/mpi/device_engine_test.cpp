// The whole engine on a device the host cannot address (run under mpirun -np 2 and -np 4): ZeRO
// stages 0-3 in fp32, bf16 and fp16, training steps (with overlap_comm, gradient accumulation
// and activation checkpointing in some cases), eval_loss, weights out (read_unit_params,
// model_state_bytes, save_weights) and in (write_unit_params, load_weights), on a
// ScrambledDevice (tests/mpi/scrambled_device.h) with HostStagingCommunicator over MPI, give
// the same bits as the same run on the CPU device with the plain MpiCommunicator. The scrambled
// device turns any host access to its memory into wrong values or an error, which the first
// tests here show it does (with all_gather_host, the host-memory collective the engine's scalar
// reductions use); so equality means every byte the engine moved went through Device copies,
// device kernels or all_gather_host. The engine with its optimizer and parameters offloaded is
// device_engine_offload_test.cpp's; the harness both use, device_engine_test_util.h's.
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
#include "tests/mpi/device_engine_test_util.h"
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

}  // namespace
}  // namespace zt
