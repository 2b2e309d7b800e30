// MpiCommunicator against the scalar rank-order reference: every collective x {fp32, fp16, bf16}
// x sizes not divisible by the world x in place and out of place, bit for bit; all_reduce equal
// to reduce_scatter + all_gather and to itself over pieces; max with NaN; broadcast from every
// root; stats; bounded staging; argument and MPI errors as zt::Error.
// Every rank calls every collective; checks use EXPECT so that no rank skips a collective.
#include <gtest/gtest.h>

#include <string>

#include "comm/mpi_communicator.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/status.h"
#include "tests/mpi/comm_test_util.h"

namespace zt {
namespace {

using testing_comm::Elements;
using testing_comm::encode;
using testing_comm::input_value;
using testing_comm::kAllDTypes;
using testing_comm::reference_bits;

// Communicator variants the reference tests run on: the default chunk, and small chunks (one
// not a multiple of any block) so that the pipeline runs through many chunks and short tails.
struct Variant {
  size_t chunk_bytes;
  std::vector<int64_t> sizes;  // all_reduce counts; reduce_scatter/all_gather per-rank counts
};
std::vector<Variant> variants() {
  return {{MpiCommunicatorOptions{}.chunk_bytes, {1, 7, 1000, 1000003}},
          {4096, {1000, 100003}},
          {12, {7, 1000}}};
}

std::string trace(std::string_view what, size_t chunk, DType dtype, int64_t count, bool in_place) {
  return fmt::format("{} chunk_bytes={} dtype={} count={} {}", what, chunk, dtype_name(dtype),
                     count, in_place ? "in place" : "out of place");
}

uint64_t seed_of(int a, int b, int c, int d) { return ((a * 131 + b) * 131 + c) * 131 + d + 1; }

TEST(MpiCommunicator, AllReduceMatchesRankOrderReference) {
  CpuDevice device;
  int v = 0;
  for (const Variant& variant : variants()) {
    MpiCommunicator comm(device, MPI_COMM_WORLD, {variant.chunk_bytes});
    for (DType dtype : kAllDTypes) {
      for (int64_t count : variant.sizes) {
        for (bool in_place : {false, true}) {
          SCOPED_TRACE(trace("all_reduce", variant.chunk_bytes, dtype, count, in_place));
          const uint64_t seed = seed_of(v, int(dtype), int(count % 1000), in_place);
          Elements send(dtype, count), recv(dtype, count);
          send.fill_input(seed, comm.rank(), 0, 0, count);
          recv.fill_bits(0x7f7f);
          Elements& result = in_place ? send : recv;
          comm.all_reduce(send.data(), result.data(), count, dtype, ReduceOp::kSum);
          int64_t wrong = 0, send_changed = 0;
          for (int64_t i = 0; i < count; ++i) {
            wrong += result.bits(i) != reference_bits(seed, comm.world(), i, dtype, ReduceOp::kSum);
            if (!in_place)
              send_changed += send.bits(i) != encode(dtype, input_value(seed, comm.rank(), i));
          }
          EXPECT_EQ(wrong, 0);
          EXPECT_EQ(send_changed, 0);
        }
      }
    }
    ++v;
  }
}

TEST(MpiCommunicator, ReduceScatterMatchesRankOrderReference) {
  CpuDevice device;
  int v = 0;
  for (const Variant& variant : variants()) {
    MpiCommunicator comm(device, MPI_COMM_WORLD, {variant.chunk_bytes});
    const int world = comm.world(), rank = comm.rank();
    for (DType dtype : kAllDTypes) {
      for (int64_t total : variant.sizes) {
        const int64_t recv_count = (total + world - 1) / world;  // 1000003 -> not a power of 2
        for (bool in_place : {false, true}) {
          SCOPED_TRACE(trace("reduce_scatter", variant.chunk_bytes, dtype, recv_count, in_place));
          const uint64_t seed = seed_of(v, int(dtype), int(total % 1000), 2 + in_place);
          Elements send(dtype, world * recv_count), recv(dtype, recv_count);
          send.fill_input(seed, rank, 0, 0, world * recv_count);
          recv.fill_bits(0x7f7f);
          char* out = in_place ? send.at(rank * recv_count) : recv.data();
          comm.reduce_scatter(send.data(), out, recv_count, dtype, ReduceOp::kSum);
          const Elements& result = in_place ? send : recv;
          const int64_t base = in_place ? rank * recv_count : 0;
          int64_t wrong = 0;
          for (int64_t j = 0; j < recv_count; ++j)
            wrong += result.bits(base + j) !=
                     reference_bits(seed, world, rank * recv_count + j, dtype, ReduceOp::kSum);
          EXPECT_EQ(wrong, 0);
          if (in_place) {  // the other blocks of send are left as they were
            int64_t changed = 0;
            for (int64_t i = 0; i < world * recv_count; ++i)
              if (i / recv_count != rank)
                changed += send.bits(i) != encode(dtype, input_value(seed, rank, i));
            EXPECT_EQ(changed, 0);
          }
        }
      }
    }
    ++v;
  }
}

TEST(MpiCommunicator, AllGatherPlacesEveryRanksBlock) {
  CpuDevice device;
  MpiCommunicator comm(device);
  const int world = comm.world(), rank = comm.rank();
  for (DType dtype : kAllDTypes) {
    for (int64_t send_count : {1, 7, 1000, 250007}) {
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(trace("all_gather", comm.chunk_bytes(), dtype, send_count, in_place));
        const uint64_t seed = seed_of(9, int(dtype), int(send_count % 1000), in_place);
        Elements send(dtype, send_count), recv(dtype, world * send_count);
        recv.fill_bits(0x7f7f);
        const char* input = send.data();
        if (in_place) {
          recv.fill_input(seed, rank, rank * send_count, 0, send_count);
          input = recv.at(rank * send_count);
        } else {
          send.fill_input(seed, rank, 0, 0, send_count);
        }
        comm.all_gather(input, recv.data(), send_count, dtype);
        int64_t wrong = 0;
        for (int q = 0; q < world; ++q)
          for (int64_t j = 0; j < send_count; ++j)
            wrong += recv.bits(q * send_count + j) != encode(dtype, input_value(seed, q, j));
        EXPECT_EQ(wrong, 0);
      }
    }
  }
}

TEST(MpiCommunicator, BroadcastFromEveryRoot) {
  CpuDevice device;
  MpiCommunicator comm(device);
  for (int root = 0; root < comm.world(); ++root) {
    for (DType dtype : kAllDTypes) {
      for (int64_t count : {1, 1000, 100003}) {
        SCOPED_TRACE(
            fmt::format("broadcast root={} dtype={} count={}", root, dtype_name(dtype), count));
        const uint64_t seed = seed_of(11, root, int(dtype), int(count % 1000));
        Elements buf(dtype, count);
        buf.fill_input(seed, comm.rank(), 0, 0, count);
        comm.broadcast(buf.data(), count, dtype, root);
        int64_t wrong = 0;
        for (int64_t j = 0; j < count; ++j)
          wrong += buf.bits(j) != encode(dtype, input_value(seed, root, j));
        EXPECT_EQ(wrong, 0);
      }
    }
  }
}

// The determinism contract: an element's result depends only on the ranks' values of it,
// whichever path all_reduce takes (gather-and-reduce for small buffers, reduce-scatter +
// all-gather otherwise) and however the buffer is cut into calls or chunks.
TEST(MpiCommunicator, AllReduceEqualsReduceScatterThenAllGather) {
  CpuDevice device;
  MpiCommunicator comm(device);
  MpiCommunicator small_chunks(device, MPI_COMM_WORLD, {4096});
  const int world = comm.world(), rank = comm.rank();
  for (const int64_t count : {int64_t(1000), int64_t(100003)}) {
    const int64_t block = (count + world - 1) / world;
    for (DType dtype : kAllDTypes) {
      SCOPED_TRACE(fmt::format("{} count={}", dtype_name(dtype), count));
      const uint64_t seed = seed_of(13, int(dtype), int(count % 1000), 0);
      Elements input(dtype, count), whole(dtype, count);
      input.fill_input(seed, rank, 0, 0, count);
      comm.all_reduce(input.data(), whole.data(), count, dtype, ReduceOp::kSum);

      // Zero-padded to world*block, reduce-scattered, then gathered.
      Elements padded(dtype, world * block), shard(dtype, block), gathered(dtype, world * block);
      padded.fill_bits(0);
      padded.fill_input(seed, rank, 0, 0, count);
      comm.reduce_scatter(padded.data(), shard.data(), block, dtype, ReduceOp::kSum);
      comm.all_gather(shard.data(), gathered.data(), block, dtype);

      // The same buffer reduced in three uneven pieces, and with another chunk size.
      Elements pieces(dtype, count), rechunked(dtype, count);
      const int64_t cuts[] = {0, 1, count / 3, count};
      for (int p = 0; p < 3; ++p)
        comm.all_reduce(input.at(cuts[p]), pieces.at(cuts[p]), cuts[p + 1] - cuts[p], dtype,
                        ReduceOp::kSum);
      small_chunks.all_reduce(input.data(), rechunked.data(), count, dtype, ReduceOp::kSum);

      int64_t differ_gathered = 0, differ_pieces = 0, differ_rechunked = 0;
      for (int64_t i = 0; i < count; ++i) {
        differ_gathered += whole.bits(i) != gathered.bits(i);
        differ_pieces += whole.bits(i) != pieces.bits(i);
        differ_rechunked += whole.bits(i) != rechunked.bits(i);
      }
      EXPECT_EQ(differ_gathered, 0);
      EXPECT_EQ(differ_pieces, 0);
      EXPECT_EQ(differ_rechunked, 0);
    }
  }
}

// With 3 or more ranks the inputs are such that another summation order gives other bits, so
// the reference tests above would catch a reduction out of rank order.
TEST(MpiCommunicator, ReferenceTellsRankOrderFromReverseOrder) {
  CpuDevice device;
  MpiCommunicator comm(device);
  if (comm.world() < 3) GTEST_SKIP() << "two values sum the same in either order";
  int64_t differ = 0;
  for (int64_t i = 0; i < 1000; ++i)
    differ += reference_bits(1, comm.world(), i, DType::kF32, ReduceOp::kSum) !=
              testing_comm::reverse_order_bits(1, comm.world(), i, DType::kF32);
  EXPECT_GT(differ, 10);
}

TEST(MpiCommunicator, MaxMatchesReferenceAndNaNWins) {
  CpuDevice device;
  MpiCommunicator comm(device, MPI_COMM_WORLD, {4096});
  const int world = comm.world(), rank = comm.rank();
  const int64_t count = 5003, nan_index = 4001;
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const uint64_t seed = seed_of(17, int(dtype), 0, 0);
    Elements input(dtype, count), result(dtype, count);
    input.fill_input(seed, rank, 0, 0, count);
    if (rank == world - 1) input.set_bits(nan_index, encode(dtype, std::nanf("")));
    comm.all_reduce(input.data(), result.data(), count, dtype, ReduceOp::kMax);
    int64_t wrong = 0;
    for (int64_t i = 0; i < count; ++i)
      if (i != nan_index)
        wrong += result.bits(i) != reference_bits(seed, world, i, dtype, ReduceOp::kMax);
    EXPECT_EQ(wrong, 0);
    EXPECT_TRUE(std::isnan(testing_comm::decode(dtype, result.bits(nan_index))));

    // reduce_scatter with max, in place.
    const int64_t recv_count = 1001;
    Elements send(dtype, world * recv_count);
    send.fill_input(seed, rank, 0, 0, world * recv_count);
    comm.reduce_scatter(send.data(), send.at(rank * recv_count), recv_count, dtype, ReduceOp::kMax);
    wrong = 0;
    for (int64_t j = 0; j < recv_count; ++j)
      wrong += send.bits(rank * recv_count + j) !=
               reference_bits(seed, world, rank * recv_count + j, dtype, ReduceOp::kMax);
    EXPECT_EQ(wrong, 0);
  }
}

TEST(MpiCommunicator, ZeroCountIsANoOpOnEveryRank) {
  CpuDevice device;
  MpiCommunicator comm(device);
  float untouched = 3.0f;
  comm.all_reduce(nullptr, nullptr, 0, DType::kF32, ReduceOp::kSum);
  comm.reduce_scatter(&untouched, &untouched, 0, DType::kF16, ReduceOp::kSum);
  comm.all_gather(nullptr, nullptr, 0, DType::kBF16);
  comm.broadcast(&untouched, 0, DType::kF32, 0);
  EXPECT_EQ(untouched, 3.0f);
  EXPECT_EQ(comm.stats()[CollectiveKind::kAllReduce].calls, 1);
  EXPECT_EQ(comm.stats()[CollectiveKind::kAllGather].bytes, 0);
}

TEST(MpiCommunicator, StatsCountCallsAndBytes) {
  CpuDevice device;
  MpiCommunicator comm(device);
  const int world = comm.world();
  std::vector<float> a(64 * world), b(64 * world);
  comm.all_reduce(a.data(), b.data(), 10, DType::kF32, ReduceOp::kSum);
  comm.all_reduce(a.data(), a.data(), 6, DType::kF16, ReduceOp::kSum);
  comm.reduce_scatter(a.data(), b.data(), 5, DType::kF32, ReduceOp::kSum);
  comm.all_gather(a.data(), b.data(), 3, DType::kBF16);
  comm.broadcast(a.data(), 4, DType::kF32, world - 1);
  const CommStats& s = comm.stats();
  EXPECT_EQ(s[CollectiveKind::kAllReduce].calls, 2);
  EXPECT_EQ(s[CollectiveKind::kAllReduce].bytes, 10 * 4 + 6 * 2);
  EXPECT_EQ(s[CollectiveKind::kReduceScatter].calls, 1);
  EXPECT_EQ(s[CollectiveKind::kReduceScatter].bytes, 5 * 4 * world);
  EXPECT_EQ(s[CollectiveKind::kAllGather].bytes, 3 * 2 * world);
  EXPECT_EQ(s[CollectiveKind::kBroadcast].bytes, 16);
  EXPECT_GE(s[CollectiveKind::kAllReduce].seconds, 0.0);
  EXPECT_NE(s.to_string().find("all_reduce: 2 calls"), std::string::npos) << s.to_string();
  comm.reset_stats();
  EXPECT_EQ(comm.stats()[CollectiveKind::kAllReduce].calls, 0);
}

TEST(MpiCommunicator, StagingIsBoundedAndTrackedAsCommBuffers) {
  CpuDevice device;
  const size_t chunk = 64 << 10;
  {
    MpiCommunicator comm(device, MPI_COMM_WORLD, {chunk});
    const size_t expected = MpiCommunicator::kRecvDepth * (comm.world() - 1) * chunk;
    EXPECT_EQ(comm.staging_bytes(), expected);
    EXPECT_EQ(device.memory().current(MemCategory::kCommBuffers), expected);
    // An all-reduce 40x the staging allocates nothing more.
    std::vector<float> buf(expected * 10, 1.0f);
    comm.all_reduce(buf.data(), buf.data(), static_cast<int64_t>(buf.size()), DType::kF32,
                    ReduceOp::kSum);
    EXPECT_EQ(buf[buf.size() - 1], static_cast<float>(comm.world()));
    EXPECT_EQ(device.memory().peak(MemCategory::kCommBuffers), expected);
  }
  EXPECT_EQ(device.memory().current(MemCategory::kCommBuffers), 0u);
}

TEST(MpiCommunicator, BadArgumentsThrowInputErrors) {
  CpuDevice device;
  MpiCommunicator comm(device);
  const int world = comm.world(), rank = comm.rank();
  std::vector<float> buf(8 * world);
  auto expect_input = [](auto&& call, std::string_view needle) {
    try {
      call();
      ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInput) << e.describe();
      EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
    }
  };
  expect_input([&] { comm.broadcast(buf.data(), 1, DType::kF32, world); }, "root");
  expect_input([&] { comm.broadcast(buf.data(), 1, DType::kF32, -1); }, "root");
  expect_input([&] { comm.all_reduce(buf.data(), buf.data(), -1, DType::kF32, ReduceOp::kSum); },
               "count");
  expect_input([&] { comm.all_reduce(buf.data(), buf.data() + 1, 4, DType::kF32, ReduceOp::kSum); },
               "overlap");
  // reduce_scatter in place must write block `rank`; block rank+1 (mod world) is not in place.
  const int other = (rank + 1) % world;
  if (world > 1)
    expect_input(
        [&] {
          comm.reduce_scatter(buf.data(), buf.data() + other * 2, 2, DType::kF32, ReduceOp::kSum);
        },
        "in place");
  expect_input([&] { comm.all_gather(buf.data() + 1, buf.data(), 2, DType::kF32); }, "in place");
  expect_input([&] { comm.all_reduce(nullptr, buf.data(), 4, DType::kF32, ReduceOp::kSum); },
               "null");
  expect_input([&] { MpiCommunicator bad(device, MPI_COMM_WORLD, {6}); }, "chunk_bytes");
}

TEST(MpiCommunicator, MpiErrorsBecomeSystemErrorsNamingTheCall) {
  CpuDevice device;
  MpiCommunicator comm(device);
  float x = 0;
  try {
    ZT_MPI_CHECK(MPI_Bcast(&x, 1, MPI_FLOAT, comm.world() + 3, comm.mpi_comm()));
    ADD_FAILURE() << "MPI_Bcast with a bad root returned MPI_SUCCESS";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kSystem);
    EXPECT_NE(e.message().find("MPI_Bcast(&x, 1, MPI_FLOAT"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("root"), std::string::npos) << e.message();
    EXPECT_EQ(e.rank(), comm.rank());
  }
  // The communicator still works afterwards (the bad call failed locally on every rank).
  comm.all_reduce(&x, &x, 1, DType::kF32, ReduceOp::kSum);
  EXPECT_EQ(x, 0.0f);
}

TEST(ProcessGroup, LocalRanksCoverTheMachine) {
  CpuDevice device;
  MpiCommunicator comm(device);
  EXPECT_GE(comm.local_world(), 1);
  EXPECT_LT(comm.local_rank(), comm.local_world());
  // All ranks of these tests run on one machine.
  EXPECT_EQ(comm.local_world(), comm.world());
  EXPECT_EQ(comm.local_rank(), comm.rank());
  ProcessGroup world_group = bootstrap_process_group(MPI_COMM_WORLD);
  EXPECT_EQ(world_group.rank, comm.rank());
  EXPECT_EQ(world_group.world, comm.world());
}

}  // namespace
}  // namespace zt
