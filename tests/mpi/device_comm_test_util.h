// What the device-communicator suites (device_comm_test.cpp, device_comm_gpu_test.cpp) share:
// host staging over an MpiCommunicator, one collective Case and run_case (buffers in a device's
// memory, inputs from comm_test_util.h, the caller's copies checked untouched), every case of a
// world, and the bit-for-bit comparison of a communicator against a plain MpiCommunicator.
// Helpers only; no tests here.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/host_staging_communicator.h"
#include "comm/mpi_communicator.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/device.h"
#include "tests/mpi/comm_test_util.h"

namespace zt::device_comm_test {

using testing_comm::decode;
using testing_comm::Elements;
using testing_comm::encode;
using testing_comm::input_value;
using testing_comm::kAllDTypes;
using testing_comm::reference_bits;

// HostStagingCommunicator over an MpiCommunicator on its own CpuDevice.
inline std::unique_ptr<HostStagingCommunicator> make_staged(Device& device) {
  auto host = std::make_unique<CpuDevice>();
  auto inner = std::make_unique<MpiCommunicator>(*host);
  return std::make_unique<HostStagingCommunicator>(device, std::move(inner), std::move(host));
}

// One collective of the comparison tests.
struct Case {
  CollectiveKind kind;
  DType dtype;
  int64_t count;  // as CollectiveCall::count
  bool in_place;
  ReduceOp op;
  int root;
};

inline std::string describe(const Case& c) {
  return fmt::format("{} dtype={} count={} {} op={} root={}", collective_kind_name(c.kind),
                     dtype_name(c.dtype), c.count, c.in_place ? "in place" : "out of place",
                     reduce_op_name(c.op), c.root);
}

inline uint64_t seed_of(const Case& c) {
  return (((static_cast<uint64_t>(c.kind) * 7 + static_cast<uint64_t>(c.dtype)) * 1000003 +
           static_cast<uint64_t>(c.count)) *
              2 +
          c.in_place) *
             5 +
         static_cast<uint64_t>(c.op) * 3 + static_cast<uint64_t>(c.root) + 101;
}

inline int64_t differences(const Elements& a, const Elements& b) {
  if (a.count() != b.count()) return std::max(a.count(), b.count());
  int64_t n = 0;
  for (int64_t i = 0; i < a.count(); ++i) n += a.bits(i) != b.bits(i);
  return n;
}

// Runs `c` on `comm` with its buffers in `device`'s memory, inputs from seed_of(c), and returns
// (on the host) what the collective wrote: all_reduce and broadcast the whole buffer,
// reduce_scatter this rank's block, all_gather the whole receive buffer. Checks that an
// out-of-place send is left as it was.
inline Elements run_case(Communicator& comm, Device& device, const Case& c) {
  const int world = comm.world(), rank = comm.rank();
  const uint64_t seed = seed_of(c);
  const int64_t size = static_cast<int64_t>(dtype_size(c.dtype));
  auto to_device = [&](const Elements& host) {
    Buffer b = device.alloc(static_cast<size_t>(host.count() * size), MemCategory::kOther);
    device.copy_from_host(b.data(), host.data(), static_cast<size_t>(host.count() * size));
    return b;
  };
  auto to_host = [&](const void* data, int64_t count) {
    Elements out(c.dtype, count);
    device.copy_to_host(out.data(), data, static_cast<size_t>(count * size));
    return out;
  };
  auto poisoned = [&](int64_t count) {
    Elements e(c.dtype, count);
    e.fill_bits(0x7f7f);
    return e;
  };
  const int64_t n = c.count;
  switch (c.kind) {
    case CollectiveKind::kAllReduce: {
      Elements send(c.dtype, n);
      send.fill_input(seed, rank, 0, 0, n);
      Buffer s = to_device(send);
      if (c.in_place) {
        comm.all_reduce(s.data(), s.data(), n, c.dtype, c.op);
        return to_host(s.data(), n);
      }
      Buffer r = to_device(poisoned(n));
      comm.all_reduce(s.data(), r.data(), n, c.dtype, c.op);
      EXPECT_EQ(differences(to_host(s.data(), n), send), 0) << "send changed";
      return to_host(r.data(), n);
    }
    case CollectiveKind::kReduceScatter: {
      Elements send(c.dtype, world * n);
      send.fill_input(seed, rank, 0, 0, world * n);
      Buffer s = to_device(send);
      char* own = s.as<char>() + rank * n * size;
      if (c.in_place) {
        comm.reduce_scatter(s.data(), own, n, c.dtype, c.op);
        // The other blocks of send are left as they were.
        Elements after = to_host(s.data(), world * n);
        int64_t changed = 0;
        for (int64_t i = 0; i < world * n; ++i)
          if (i / n != rank) changed += after.bits(i) != send.bits(i);
        EXPECT_EQ(changed, 0) << "blocks of other ranks changed";
        return to_host(own, n);
      }
      Buffer r = to_device(poisoned(n));
      comm.reduce_scatter(s.data(), r.data(), n, c.dtype, c.op);
      EXPECT_EQ(differences(to_host(s.data(), world * n), send), 0) << "send changed";
      return to_host(r.data(), n);
    }
    case CollectiveKind::kAllGather: {
      Elements input(c.dtype, n);
      input.fill_input(seed, rank, 0, 0, n);
      if (c.in_place) {
        Elements recv = poisoned(world * n);
        recv.fill_input(seed, rank, rank * n, 0, n);
        Buffer r = to_device(recv);
        comm.all_gather(r.as<char>() + rank * n * size, r.data(), n, c.dtype);
        return to_host(r.data(), world * n);
      }
      Buffer s = to_device(input);
      Buffer r = to_device(poisoned(world * n));
      comm.all_gather(s.data(), r.data(), n, c.dtype);
      EXPECT_EQ(differences(to_host(s.data(), n), input), 0) << "send changed";
      return to_host(r.data(), world * n);
    }
    case CollectiveKind::kBroadcast: {
      Elements buf(c.dtype, n);
      buf.fill_input(seed, rank, 0, 0, n);
      Buffer b = to_device(buf);
      comm.broadcast(b.data(), n, c.dtype, c.root);
      return to_host(b.data(), n);
    }
  }
  return Elements(c.dtype, 0);
}

// Every collective x dtype x count x in place or not (x sum and max, x every root).
inline std::vector<Case> all_cases(int world, const std::vector<int64_t>& counts) {
  std::vector<Case> cases;
  for (DType dtype : kAllDTypes) {
    for (int64_t count : counts) {
      for (bool in_place : {false, true}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
          cases.push_back({CollectiveKind::kAllReduce, dtype, count, in_place, op, 0});
          cases.push_back({CollectiveKind::kReduceScatter, dtype, count, in_place, op, 0});
        }
        cases.push_back({CollectiveKind::kAllGather, dtype, count, in_place, ReduceOp::kSum, 0});
      }
      for (int root = 0; root < world; ++root)
        cases.push_back({CollectiveKind::kBroadcast, dtype, count, true, ReduceOp::kSum, root});
    }
  }
  return cases;
}

// `staged` (buffers on `device`) against a plain MpiCommunicator on host memory, bit for bit.
inline void expect_same_bits_as_mpi(Communicator& staged, Device& device,
                                    const std::vector<int64_t>& counts) {
  CpuDevice host;
  MpiCommunicator plain(host);
  for (const Case& c : all_cases(plain.world(), counts)) {
    SCOPED_TRACE(describe(c));
    const Elements expected = run_case(plain, host, c);
    const Elements got = run_case(staged, device, c);
    EXPECT_EQ(differences(got, expected), 0);
  }
}

}  // namespace zt::device_comm_test
