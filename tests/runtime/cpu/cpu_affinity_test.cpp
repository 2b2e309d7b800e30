// place_local_rank, the rule that gives each rank on a machine its CPUs: a launcher's binding
// kept when it partitions the pool, contiguous blocks otherwise (unbound ranks, Open MPI's
// one-core binding of a lone rank, overlapping socket binding), CPUs shared round robin with
// more ranks than CPUs; and describe_cpus, which the start-up line prints.
#include <gtest/gtest.h>

#include <vector>

#include "runtime/cpu/cpu_affinity.h"
#include "runtime/status.h"

namespace zt {
namespace {

using Cpus = std::vector<int>;

CpuPlacement place(const std::vector<Cpus>& masks, const Cpus& pool, int local_rank) {
  return place_local_rank(masks, pool, local_rank);
}

TEST(CpuAffinity, LauncherBindingThatPartitionsThePoolIsKept) {
  // mpirun -np 2 on 2 cores: Open MPI binds rank 0 to CPU 0 and rank 1 to CPU 1.
  const std::vector<Cpus> masks = {{1}, {0}};
  for (int r = 0; r < 2; ++r) {
    const CpuPlacement p = place(masks, {0, 1}, r);
    EXPECT_EQ(p.kind, CpuPlacementKind::kKept);
    EXPECT_EQ(p.cpus, masks[r]);
    EXPECT_EQ(p.threads, 1);
  }
  // Two CPUs per rank (--map-by slot:PE=2) keeps both.
  const CpuPlacement wide = place({{0, 1}, {2, 3}}, {0, 1, 2, 3}, 1);
  EXPECT_EQ(wide.kind, CpuPlacementKind::kKept);
  EXPECT_EQ(wide.cpus, (Cpus{2, 3}));
  EXPECT_EQ(wide.threads, 2);
}

TEST(CpuAffinity, UnboundRanksGetContiguousBlocks) {
  const Cpus all = {0, 1, 2, 3, 4, 5, 6};
  const std::vector<Cpus> masks(3, all);
  const Cpus expected[] = {{0, 1, 2}, {3, 4}, {5, 6}};  // the first 7 % 3 ranks one larger
  for (int r = 0; r < 3; ++r) {
    const CpuPlacement p = place(masks, all, r);
    EXPECT_EQ(p.kind, CpuPlacementKind::kPartitioned);
    EXPECT_EQ(p.cpus, expected[r]);
    EXPECT_EQ(p.threads, static_cast<int>(expected[r].size()));
  }
}

TEST(CpuAffinity, BlocksFollowThePoolOrderSoACoresThreadsStayTogether) {
  // Two cores whose hardware threads are CPUs {0, 2} and {1, 3}, as in_topology_order lists them.
  const std::vector<Cpus> masks(2, Cpus{0, 1, 2, 3});
  EXPECT_EQ(place(masks, {0, 2, 1, 3}, 0).cpus, (Cpus{0, 2}));
  EXPECT_EQ(place(masks, {0, 2, 1, 3}, 1).cpus, (Cpus{1, 3}));
}

TEST(CpuAffinity, BindingThatLeavesCpusIdleOrOverlapsIsReplaced) {
  // mpirun -np 1 binds the lone rank to CPU 0 of two: it gets both.
  const CpuPlacement lone = place({{0}}, {0, 1}, 0);
  EXPECT_EQ(lone.kind, CpuPlacementKind::kPartitioned);
  EXPECT_EQ(lone.cpus, (Cpus{0, 1}));
  EXPECT_EQ(lone.threads, 2);
  // np > 2 bound to sockets: two ranks per socket share it, so the pool is cut in four.
  const std::vector<Cpus> sockets = {{0, 1, 2, 3}, {4, 5, 6, 7}, {0, 1, 2, 3}, {4, 5, 6, 7}};
  const Cpus pool = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(place(sockets, pool, 1).cpus, (Cpus{2, 3}));
  EXPECT_EQ(place(sockets, pool, 1).kind, CpuPlacementKind::kPartitioned);
}

TEST(CpuAffinity, MoreRanksThanCpusShareThemRoundRobinWithOneThreadEach) {
  // mpirun -np 4 --oversubscribe on 2 cores leaves every rank unbound.
  const std::vector<Cpus> masks(4, Cpus{0, 1});
  const int expected[] = {0, 1, 0, 1};
  for (int r = 0; r < 4; ++r) {
    const CpuPlacement p = place(masks, {0, 1}, r);
    EXPECT_EQ(p.kind, CpuPlacementKind::kShared);
    EXPECT_EQ(p.cpus, Cpus{expected[r]});
    EXPECT_EQ(p.threads, 1);
  }
}

TEST(CpuAffinity, EmptyInputIsAnInternalError) {
  EXPECT_THROW(place({{0}}, {}, 0), Error);
  EXPECT_THROW(place({{}}, {0}, 0), Error);
  EXPECT_THROW(place({{0}}, {0}, 1), Error);
}

TEST(CpuAffinity, DescribeCpusNamesRanges) {
  EXPECT_EQ(describe_cpus(Cpus{3}), "CPU 3");
  EXPECT_EQ(describe_cpus(Cpus{0, 1, 2, 3}), "CPUs 0-3");
  EXPECT_EQ(describe_cpus(Cpus{0, 2, 4, 5, 6, 7}), "CPUs 0,2,4-7");
}

}  // namespace
}  // namespace zt
