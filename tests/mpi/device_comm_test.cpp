// Communicators for device memory: HostStagingCommunicator (same bits as MpiCommunicator, on a
// test device whose memory the host must not touch and on a real GPU when there is one),
// make_communicator's choice and refusals, and NcclCommunicator against the rank-order reference
// within tolerance, run to run, under a CommQueue and with its watchdog (GPU only: skipped with
// the reason when this machine cannot give every rank its own GPU).
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

using testing_comm::decode;
using testing_comm::Elements;
using testing_comm::encode;
using testing_comm::input_value;
using testing_comm::kAllDTypes;
using testing_comm::reference_bits;

// HostStagingCommunicator over an MpiCommunicator on its own CpuDevice.
std::unique_ptr<HostStagingCommunicator> make_staged(Device& device) {
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

std::string describe(const Case& c) {
  return fmt::format("{} dtype={} count={} {} op={} root={}", collective_kind_name(c.kind),
                     dtype_name(c.dtype), c.count, c.in_place ? "in place" : "out of place",
                     reduce_op_name(c.op), c.root);
}

uint64_t seed_of(const Case& c) {
  return (((static_cast<uint64_t>(c.kind) * 7 + static_cast<uint64_t>(c.dtype)) * 1000003 +
           static_cast<uint64_t>(c.count)) *
              2 +
          c.in_place) *
             5 +
         static_cast<uint64_t>(c.op) * 3 + static_cast<uint64_t>(c.root) + 101;
}

int64_t differences(const Elements& a, const Elements& b) {
  if (a.count() != b.count()) return std::max(a.count(), b.count());
  int64_t n = 0;
  for (int64_t i = 0; i < a.count(); ++i) n += a.bits(i) != b.bits(i);
  return n;
}

// Runs `c` on `comm` with its buffers in `device`'s memory, inputs from seed_of(c), and returns
// (on the host) what the collective wrote: all_reduce and broadcast the whole buffer,
// reduce_scatter this rank's block, all_gather the whole receive buffer. Checks that an
// out-of-place send is left as it was.
Elements run_case(Communicator& comm, Device& device, const Case& c) {
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
std::vector<Case> all_cases(int world, const std::vector<int64_t>& counts) {
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
void expect_same_bits_as_mpi(Communicator& staged, Device& device,
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
