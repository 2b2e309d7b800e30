// Communicators for device memory on a GPU: HostStagingCommunicator (same bits as
// MpiCommunicator on a real GPU), and NcclCommunicator against the rank-order reference within
// tolerance, run to run, with kMax's NaN, under a CommQueue and with its watchdog (skipped with
// the reason when this machine cannot give every rank its own GPU). Without a GPU:
// device_comm_test.cpp; the helpers both use: device_comm_test_util.h.
// Every rank calls every collective; checks use EXPECT so that no rank skips a collective, and
// every skip depends only on facts all ranks share.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm_queue.h"
#include "comm/communicator_factory.h"
#include "comm/host_staging_communicator.h"
#include "comm/mpi_communicator.h"
#include "comm/process_group.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/device_factory.h"
#include "runtime/status.h"
#include "tests/mpi/comm_test_util.h"
#include "tests/mpi/device_comm_test_util.h"
#include "tests/mpi/scrambled_device.h"

#if ZT_HAVE_NCCL
#include <cuda_runtime_api.h>

#include <chrono>
#include <thread>

#include "comm/nccl_communicator.h"
#include "runtime/cuda/cuda_device.h"
#endif

namespace zt {
namespace {

using namespace device_comm_test;

// ---- on a GPU ------------------------------------------------------------------------------

// Why this machine cannot give every rank its own GPU for NCCL; empty when it can. The same on
// every rank of one machine (these tests run on one).
std::string nccl_skip_reason() {
  if (!nccl_built()) return "this build has no NCCL";
  const int gpus = cuda_device_count();
  if (gpus == 0) return cuda_unavailable_reason();
  const int local_world = bootstrap_process_group(MPI_COMM_WORLD).local_world;
  if (local_world > gpus)
    return fmt::format("{} ranks share {} GPU(s); NCCL needs one per rank", local_world, gpus);
  return {};
}

std::unique_ptr<Device> rank_gpu() {
  return make_device(DeviceKind::kCuda, bootstrap_process_group(MPI_COMM_WORLD).local_rank);
}

#define ZT_SKIP_WITHOUT_NCCL_GPU()                       \
  do {                                                   \
    const std::string zt_reason_ = nccl_skip_reason();   \
    if (!zt_reason_.empty()) GTEST_SKIP() << zt_reason_; \
  } while (0)

TEST(HostStagingCommunicator, SameBitsAsMpiCommunicatorOnAGpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << cuda_unavailable_reason();
  // Ranks may share a GPU here: that is what host staging is for.
  std::unique_ptr<Device> device = make_device(
      DeviceKind::kCuda, bootstrap_process_group(MPI_COMM_WORLD).local_rank % cuda_device_count());
  ASSERT_FALSE(device->host_accessible());
  std::unique_ptr<Communicator> comm = make_communicator("mpi", *device, 600);
  EXPECT_EQ(comm->name(), "mpi+host-staging");
  expect_same_bits_as_mpi(*comm, *device, {1, 1000, 100003});
}

// fp32 tolerance of a sum in an unknown order: every partial sum may be rounded once to the
// dtype (NCCL adds fp16/bf16 in 16 bits), so world roundings of at most eps * sum|x|.
bool sum_within_tolerance(uint64_t seed, int world, int64_t index, DType dtype, float got) {
  double exact = 0, magnitude = 0;
  for (int q = 0; q < world; ++q) {
    const double x = decode(dtype, encode(dtype, input_value(seed, q, index)));
    exact += x;
    magnitude += std::fabs(x);
  }
  const double eps = dtype == DType::kF32 ? 0x1p-23 : dtype == DType::kF16 ? 0x1p-10 : 0x1p-7;
  return std::fabs(got - exact) <= world * eps * magnitude + 0x1p-24;
}

TEST(NcclCommunicator, CollectivesMatchRankOrderReferenceWithinTolerance) {
  ZT_SKIP_WITHOUT_NCCL_GPU();
  std::unique_ptr<Device> device = rank_gpu();
  std::unique_ptr<Communicator> comm = make_communicator("nccl", *device, 120);
  ASSERT_EQ(comm->name(), "nccl");
  const int world = comm->world(), rank = comm->rank();
  for (const Case& c : all_cases(world, {1, 7, 1000, 1000003})) {
    SCOPED_TRACE(describe(c));
    const uint64_t seed = seed_of(c);
    const Elements got = run_case(*comm, *device, c);
    int64_t wrong = 0;
    switch (c.kind) {
      case CollectiveKind::kAllReduce:
      case CollectiveKind::kReduceScatter: {
        const int64_t first = c.kind == CollectiveKind::kReduceScatter ? rank * c.count : 0;
        for (int64_t j = 0; j < got.count(); ++j) {
          // max is exact in any order; sum within tolerance of the exact sum.
          if (c.op == ReduceOp::kMax) {
            wrong += got.bits(j) != reference_bits(seed, world, first + j, c.dtype, c.op);
          } else {
            wrong += !sum_within_tolerance(seed, world, first + j, c.dtype,
                                           decode(c.dtype, got.bits(j)));
          }
        }
        break;
      }
      case CollectiveKind::kAllGather:
        for (int q = 0; q < world; ++q)
          for (int64_t j = 0; j < c.count; ++j)
            wrong += got.bits(q * c.count + j) != encode(c.dtype, input_value(seed, q, j));
        break;
      case CollectiveKind::kBroadcast:
        for (int64_t j = 0; j < c.count; ++j)
          wrong += got.bits(j) != encode(c.dtype, input_value(seed, c.root, j));
        break;
    }
    EXPECT_EQ(wrong, 0);
  }
}

// The determinism NCCL gives (comm/nccl_communicator.h): the same call twice, the same bits.
TEST(NcclCommunicator, SameBitsRunToRun) {
  ZT_SKIP_WITHOUT_NCCL_GPU();
  std::unique_ptr<Device> device = rank_gpu();
  std::unique_ptr<Communicator> comm = make_communicator("nccl", *device, 120);
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Case c{CollectiveKind::kAllReduce, dtype, 1000003, false, ReduceOp::kSum, 0};
    const Elements first = run_case(*comm, *device, c);
    const Elements second = run_case(*comm, *device, c);
    EXPECT_EQ(differences(first, second), 0);
  }
}

// Our contract: max with a NaN contribution is NaN. NCCL's max is its own; this pins that it
// agrees (if it fails, the engine's overflow check must not rely on max over NCCL).
TEST(NcclCommunicator, MaxWithANaNIsNaN) {
  ZT_SKIP_WITHOUT_NCCL_GPU();
  std::unique_ptr<Device> device = rank_gpu();
  std::unique_ptr<Communicator> comm = make_communicator("nccl", *device, 120);
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Elements x(dtype, 4);
    x.fill_input(3, comm->rank(), 0, 0, 4);
    if (comm->rank() == comm->world() - 1) x.set_bits(2, encode(dtype, std::nanf("")));
    const int64_t bytes = 4 * static_cast<int64_t>(dtype_size(dtype));
    Buffer b = device->alloc(bytes, MemCategory::kOther);
    device->copy_from_host(b.data(), x.data(), bytes);
    comm->all_reduce(b.data(), b.data(), 4, dtype, ReduceOp::kMax);
    device->copy_to_host(x.data(), b.data(), bytes);
    EXPECT_TRUE(std::isnan(decode(dtype, x.bits(2))));
  }
}

TEST(NcclCommunicator, GroupStatsAndCommQueue) {
  ZT_SKIP_WITHOUT_NCCL_GPU();
  std::unique_ptr<Device> device = rank_gpu();
  std::unique_ptr<Communicator> comm = make_communicator("nccl", *device, 120);
  const ProcessGroup group = bootstrap_process_group(MPI_COMM_WORLD);
  EXPECT_EQ(comm->rank(), group.rank);
  EXPECT_EQ(comm->world(), group.world);
  EXPECT_EQ(comm->local_rank(), group.local_rank);
  EXPECT_EQ(comm->local_world(), group.local_world);

  // Synchronous results first, then the same calls in flight together through a queue.
  const DType dtype = DType::kF32;
  const int64_t count = 262147;
  const int64_t bytes = count * 4;
  std::vector<Elements> inputs, expected;
  std::vector<Buffer> buffers;
  for (int k = 0; k < 3; ++k) {
    inputs.emplace_back(dtype, count);
    inputs.back().fill_input(700 + k, group.rank, 0, 0, count);
    buffers.push_back(device->alloc(bytes, MemCategory::kOther));
    device->copy_from_host(buffers.back().data(), inputs.back().data(), bytes);
    comm->all_reduce(buffers.back().data(), buffers.back().data(), count, dtype, ReduceOp::kSum);
    expected.emplace_back(dtype, count);
    device->copy_to_host(expected.back().data(), buffers.back().data(), bytes);
    device->copy_from_host(buffers.back().data(), inputs.back().data(), bytes);
  }
  EXPECT_EQ(comm->stats()[CollectiveKind::kAllReduce].calls, 3);
  EXPECT_EQ(comm->stats()[CollectiveKind::kAllReduce].bytes, 3 * bytes);
  {
    CommQueue queue(*comm);
    std::vector<CommHandle> handles;
    for (Buffer& b : buffers)
      handles.push_back(queue.all_reduce(b.data(), b.data(), count, dtype, ReduceOp::kSum));
    for (CommHandle& h : handles) h.wait();
  }
  for (int k = 0; k < 3; ++k) {
    Elements got(dtype, count);
    device->copy_to_host(got.data(), buffers[k].data(), bytes);
    EXPECT_EQ(differences(got, expected[k]), 0) << "all_reduce " << k;
  }
}

#if ZT_HAVE_NCCL
void expect_timeout(const std::function<void()>& call, const std::string& collective) {
  try {
    call();
    ADD_FAILURE() << "no error; expected the watchdog to abort";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kSystem) << e.describe();
    for (const std::string& needle :
         {collective, std::string("did not complete within"), std::string("communicator aborted")})
      EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
  }
}

// One rank: the compute stream is held by a host function for 3 s, so the collective, ordered
// after it, cannot finish within the 1 s timeout. The init has its own deadline
// (zt.comm_init_timeout_s), generous: a first NCCL init can take seconds (a VM), and timing it
// out is not what this test is about. In place with one rank NCCL leaves nothing on
// the comm stream, so nothing of the aborted communicator runs once the hold ends. (With more
// ranks an aborted collective's kernel would stay queued behind the hold; see the next test.)
TEST(NcclCommunicator, WatchdogAbortsACollectiveHeldBehindCompute) {
  ZT_SKIP_WITHOUT_NCCL_GPU();
  std::unique_ptr<Device> device = rank_gpu();
  auto& cuda = dynamic_cast<CudaDevice&>(*device);
  NcclCommunicator comm(cuda, MPI_COMM_WORLD, NcclOptions{.timeout_s = 1.0, .init_timeout_s = 120});
  EXPECT_EQ(comm.init_timeout_s(), 120.0);
  if (comm.world() != 1) GTEST_SKIP() << "one rank only (ctest mpi_device_comm.np1)";
  Buffer b = device->alloc_zeroed(4096, MemCategory::kOther);
  ASSERT_EQ(cudaLaunchHostFunc(
                cuda.compute_stream(),
                [](void*) { std::this_thread::sleep_for(std::chrono::seconds(3)); }, nullptr),
            cudaSuccess);
  expect_timeout([&] { comm.all_reduce(b.data(), b.data(), 1024, DType::kF32, ReduceOp::kSum); },
                 "all_reduce of 4096 bytes");
  EXPECT_FALSE(comm.healthy());
  try {  // every later call fails at once
    comm.broadcast(b.data(), 1, DType::kF32, 0);
    ADD_FAILURE() << "an aborted communicator ran a collective";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kSystem);
    EXPECT_NE(e.message().find("aborted"), std::string::npos) << e.message();
  }
  ASSERT_EQ(cudaStreamSynchronize(cuda.compute_stream()), cudaSuccess);
}

// Several ranks: rank 0 does not call the all-reduce (a stopped or diverged rank); the others'
// watchdogs abort after 3 s with the collective named. Rank 0's communicator, out of step,
// aborts itself on destruction.
TEST(NcclCommunicator, WatchdogAbortsWhenARankDoesNotCall) {
  ZT_SKIP_WITHOUT_NCCL_GPU();
  std::unique_ptr<Device> device = rank_gpu();
  auto& cuda = dynamic_cast<CudaDevice&>(*device);
  {
    NcclCommunicator comm(cuda, MPI_COMM_WORLD,
                          NcclOptions{.timeout_s = 3.0, .init_timeout_s = 120});
    if (comm.world() < 2) GTEST_SKIP() << "needs two ranks or more";
    Buffer b = device->alloc_zeroed(4096, MemCategory::kOther);
    if (comm.rank() != 0) {
      expect_timeout(
          [&] { comm.all_reduce(b.data(), b.data(), 1024, DType::kF32, ReduceOp::kSum); },
          "all_reduce of 4096 bytes");
      EXPECT_FALSE(comm.healthy());
    }
  }
  ZT_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}
#endif

}  // namespace
}  // namespace zt
