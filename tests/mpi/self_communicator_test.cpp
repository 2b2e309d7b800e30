// SelfCommunicator: the world of one. Each collective copies send to recv (bit for bit, NaN
// payloads included; through the device, or host memory for all_gather_host) or does nothing in
// place; arguments are validated as for every back end.
// Runs on every rank of the mpirun job, independently.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "comm/self_communicator.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/status.h"

namespace zt {
namespace {

TEST(SelfCommunicator, IsRankZeroOfOne) {
  CpuDevice device;
  SelfCommunicator comm(device);
  EXPECT_EQ(comm.name(), "self");
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.world(), 1);
  EXPECT_EQ(comm.local_rank(), 0);
  EXPECT_EQ(comm.local_world(), 1);
}

TEST(SelfCommunicator, CollectivesCopyOrLeaveInPlaceBuffersAlone) {
  CpuDevice device;
  SelfCommunicator comm(device);
  const std::vector<uint16_t> input = {0x3c00, 0x7c01 /* fp16 NaN with a payload */, 0x8001, 7};
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    std::vector<uint16_t> out(4, 0);
    comm.all_reduce(input.data(), out.data(), 4, dtype, ReduceOp::kSum);
    EXPECT_EQ(out, input);
    out.assign(4, 0);
    comm.reduce_scatter(input.data(), out.data(), 4, dtype, ReduceOp::kMax);
    EXPECT_EQ(out, input);
    out.assign(4, 0);
    comm.all_gather(input.data(), out.data(), 4, dtype);
    EXPECT_EQ(out, input);
    std::vector<uint16_t> in_place = input;
    comm.all_reduce(in_place.data(), in_place.data(), 4, dtype, ReduceOp::kSum);
    comm.reduce_scatter(in_place.data(), in_place.data(), 4, dtype, ReduceOp::kSum);
    comm.all_gather(in_place.data(), in_place.data(), 4, dtype);
    comm.broadcast(in_place.data(), 4, dtype, 0);
    EXPECT_EQ(in_place, input);
  }
  std::vector<float> f = {1.5f, -2.0f}, g(2);
  comm.all_reduce(f.data(), g.data(), 2, DType::kF32, ReduceOp::kSum);
  EXPECT_EQ(g, f);
}

// Device collectives copy through the device (Device::copy); all_gather_host copies host memory
// and counts as an all_gather.
TEST(SelfCommunicator, DeviceCopiesAndAHostMemoryAllGather) {
  CpuDevice device;
  SelfCommunicator comm(device);
  Buffer send = device.alloc(16, MemCategory::kOther), recv = device.alloc(16, MemCategory::kOther);
  const float values[4] = {1.0f, -0.0f, 3.5f, 1e-30f};
  device.copy_from_host(send.data(), values, 16);
  comm.all_gather(send.data(), recv.data(), 4, DType::kF32);
  float back[4] = {};
  device.copy_to_host(back, recv.data(), 16);
  EXPECT_EQ(std::memcmp(back, values, 16), 0);

  const double mine[2] = {0.25, -7.0};
  double all[2] = {};
  comm.all_gather_host(mine, all, 4, DType::kF32);
  EXPECT_EQ(all[0], 0.25);
  EXPECT_EQ(all[1], -7.0);
  EXPECT_EQ(all_gather_doubles(comm, mine), std::vector<double>(mine, mine + 2));
  EXPECT_EQ(comm.stats()[CollectiveKind::kAllGather].calls, 3);
  EXPECT_EQ(comm.stats()[CollectiveKind::kAllGather].bytes, 16 + 16 + 16);
}

TEST(SelfCommunicator, ValidatesArgumentsAndCountsStats) {
  CpuDevice device;
  SelfCommunicator comm(device);
  float x[4] = {};
  EXPECT_THROW(comm.broadcast(x, 1, DType::kF32, 1), Error);
  EXPECT_THROW(comm.all_reduce(x, x + 1, 2, DType::kF32, ReduceOp::kSum), Error);
  EXPECT_THROW(comm.all_gather(x, x, -1, DType::kF32), Error);
  comm.all_reduce(x, x, 4, DType::kF32, ReduceOp::kSum);
  comm.all_gather(x, x + 2, 2, DType::kBF16);
  EXPECT_EQ(comm.stats()[CollectiveKind::kAllReduce].calls, 1);
  EXPECT_EQ(comm.stats()[CollectiveKind::kAllReduce].bytes, 16);
  EXPECT_EQ(comm.stats()[CollectiveKind::kAllGather].bytes, 4);
  EXPECT_EQ(comm.stats()[CollectiveKind::kBroadcast].calls, 0);
}

}  // namespace
}  // namespace zt
