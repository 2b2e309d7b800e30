// Communicators for device memory without a GPU: HostStagingCommunicator (same bits as
// MpiCommunicator, on a test device whose memory the host must not touch; under a CommQueue;
// grouped, its stats and its staging on the host) and make_communicator's choice and refusals.
// On a GPU (host staging there, NCCL): device_comm_gpu_test.cpp; the helpers both use:
// device_comm_test_util.h.
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

namespace zt {
namespace {

using namespace device_comm_test;

TEST(HostStagingCommunicator, SameBitsAsMpiCommunicatorForEveryCollective) {
  ScrambledDevice device;
  auto staged = make_staged(device);
  expect_same_bits_as_mpi(*staged, device, {1, 7, 1000, 100003});
  // Every collective went through the host: one copy in and one out at least (broadcast's
  // root copies only in, the others only out).
  EXPECT_GT(device.copies_to_host(), 0);
  EXPECT_GT(device.copies_from_host(), 0);
}

TEST(HostStagingCommunicator, ComposesWithACommQueue) {
  ScrambledDevice device;
  auto staged = make_staged(device);
  CpuDevice host;
  MpiCommunicator plain(host);
  const int world = plain.world(), rank = plain.rank();
  const int64_t count = 30011;
  const DType dtype = DType::kBF16;
  const int64_t bytes = count * static_cast<int64_t>(dtype_size(dtype));

  // Expected: three all-reduces of different inputs on the plain communicator.
  std::vector<Elements> inputs, expected;
  for (int k = 0; k < 3; ++k) {
    inputs.emplace_back(dtype, count);
    inputs.back().fill_input(500 + k, rank, 0, 0, count);
    expected.emplace_back(dtype, count);
    plain.all_reduce(inputs.back().data(), expected.back().data(), count, dtype, ReduceOp::kSum);
  }
  Elements shard_expected(dtype, count / world);
  plain.reduce_scatter(inputs[0].data(), shard_expected.data(), count / world, dtype,
                       ReduceOp::kSum);

  std::vector<Buffer> buffers;
  for (const Elements& in : inputs) {
    buffers.push_back(device.alloc(bytes, MemCategory::kOther));
    device.copy_from_host(buffers.back().data(), in.data(), bytes);
  }
  Buffer rs_send = device.alloc(bytes, MemCategory::kOther);
  Buffer shard = device.alloc(bytes, MemCategory::kOther);
  device.copy_from_host(rs_send.data(), inputs[0].data(), bytes);
  {
    CommQueue queue(*staged);
    std::vector<CommHandle> handles;
    for (Buffer& b : buffers)  // in place, all in flight at once
      handles.push_back(queue.all_reduce(b.data(), b.data(), count, dtype, ReduceOp::kSum));
    // A synchronous call while the queue runs goes through the queue, after the others.
    staged->reduce_scatter(rs_send.data(), shard.data(), count / world, dtype, ReduceOp::kSum);
    EXPECT_TRUE(handles[0].done());
    for (CommHandle& h : handles) h.wait();
    queue.drain();
  }
  for (int k = 0; k < 3; ++k) {
    Elements got(dtype, count);
    device.copy_to_host(got.data(), buffers[k].data(), bytes);
    EXPECT_EQ(differences(got, expected[k]), 0) << "all_reduce " << k;
  }
  Elements got_shard(dtype, count / world);
  device.copy_to_host(got_shard.data(), shard.data(), got_shard.count() * dtype_size(dtype));
  EXPECT_EQ(differences(got_shard, shard_expected), 0);
}

TEST(HostStagingCommunicator, GroupFromTheInnerOneStatsAndStagingOnTheHost) {
  ScrambledDevice device;
  auto staged = make_staged(device);
  const int world = staged->inner().world();
  EXPECT_EQ(staged->name(), "mpi+host-staging");
  EXPECT_EQ(staged->rank(), staged->inner().rank());
  EXPECT_EQ(world, staged->inner().world());
  EXPECT_EQ(staged->local_rank(), staged->inner().local_rank());
  EXPECT_EQ(staged->local_world(), staged->inner().local_world());

  Buffer buf = device.alloc_zeroed(64 * world * 4, MemCategory::kOther);
  staged->all_reduce(buf.data(), buf.data(), 10, DType::kF32, ReduceOp::kSum);
  staged->all_gather(buf.data(), buf.as<char>() + 64 * world * 2, 3, DType::kF16);
  const CommStats& s = staged->stats();
  EXPECT_EQ(s[CollectiveKind::kAllReduce].calls, 1);
  EXPECT_EQ(s[CollectiveKind::kAllReduce].bytes, 40);
  EXPECT_EQ(s[CollectiveKind::kAllGather].bytes, 3 * 2 * world);
  const CommStats& inner = staged->inner().stats();
  EXPECT_EQ(inner[CollectiveKind::kAllReduce].bytes, 40);
  EXPECT_EQ(inner[CollectiveKind::kAllGather].bytes, 3 * 2 * world);
  // The staging is host memory of the host device, sized by the largest call; none of it on
  // the device.
  EXPECT_GE(staged->staging_bytes(), 40u);
  EXPECT_GE(staged->host_device().memory().current(MemCategory::kCommBuffers),
            staged->staging_bytes());
  EXPECT_EQ(device.memory().current(MemCategory::kCommBuffers), 0u);
}

// ---- make_communicator ---------------------------------------------------------------------

void expect_input_error(const std::function<void()>& call, std::vector<std::string> needles) {
  try {
    call();
    ADD_FAILURE() << "no error; expected a kInput error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput) << e.describe();
    for (const std::string& needle : needles)
      EXPECT_NE(e.message().find(needle), std::string::npos)
          << "'" << needle << "' not in: " << e.message();
  }
}

TEST(CommunicatorFactory, MpiForACpuDevice) {
  CpuDevice device;
  const ProcessGroup group = bootstrap_process_group(MPI_COMM_WORLD);
  for (const std::string backend : {"mpi", "auto"}) {
    SCOPED_TRACE(backend);
    std::unique_ptr<Communicator> comm = make_communicator(backend, device, 600);
    EXPECT_EQ(comm->name(), "mpi");
    EXPECT_EQ(comm->rank(), group.rank);
    EXPECT_EQ(comm->world(), group.world);
    float x = 1.0f;
    comm->all_reduce(&x, &x, 1, DType::kF32, ReduceOp::kSum);
    EXPECT_EQ(x, static_cast<float>(group.world));
  }
}

TEST(CommunicatorFactory, HostStagingForMemoryTheHostCannotAddress) {
  ScrambledDevice device;
  for (const std::string backend : {"mpi", "auto"}) {
    SCOPED_TRACE(backend);
    // auto: the test device is not a CUDA device, so NCCL is out even on a GPU machine.
    std::unique_ptr<Communicator> comm = make_communicator(backend, device, 600);
    EXPECT_EQ(comm->name(), "mpi+host-staging");
    const float one = 1.0f;
    Buffer x = device.alloc(4, MemCategory::kOther);
    device.copy_from_host(x.data(), &one, 4);
    comm->all_reduce(x.data(), x.data(), 1, DType::kF32, ReduceOp::kSum);
    float result = 0;
    device.copy_to_host(&result, x.data(), 4);
    EXPECT_EQ(result, static_cast<float>(comm->world()));
  }
}

TEST(CommunicatorFactory, RefusesNcclWithoutAGpuNamingTheReason) {
  CpuDevice cpu;
  expect_input_error([&] { make_communicator("nccl", cpu, 600); },
                     {"nccl", nccl_built() ? "needs a GPU device" : "no NCCL"});
  ScrambledDevice scrambled;
  expect_input_error([&] { make_communicator("nccl", scrambled, 600); },
                     {"nccl", nccl_built() ? "needs a CUDA device" : "no NCCL"});
}

TEST(CommunicatorFactory, BadArgumentsAreInputErrors) {
  CpuDevice device;
  expect_input_error([&] { make_communicator("gloo", device, 600); },
                     {"unknown communication back end 'gloo'", "auto, mpi or nccl"});
  for (double timeout : {0.0, -1.0, std::nan("")}) {
    expect_input_error([&] { make_communicator("mpi", device, timeout); }, {"comm_timeout_s"});
    expect_input_error([&] { make_communicator("mpi", device, 600, timeout); },
                       {"comm_init_timeout_s"});
  }
  EXPECT_EQ(parse_comm_backend("auto", "x"), CommBackend::kAuto);
  EXPECT_EQ(parse_comm_backend("nccl", "x"), CommBackend::kNccl);
  expect_input_error([] { parse_comm_backend("NCCL", "configs/x.json: zt.comm_backend"); },
                     {"configs/x.json: zt.comm_backend", "'NCCL'"});
}

TEST(CommunicatorFactory, NcclBuiltMatchesTheBuild) {
#if ZT_HAVE_NCCL
  EXPECT_TRUE(nccl_built());
#else
  EXPECT_FALSE(nccl_built());
#endif
}

}  // namespace
}  // namespace zt
