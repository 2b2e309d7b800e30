// Binding this machine's ranks to their CPUs: gather every local rank's mask, apply the rule.
#include "launch/cpu_binding.h"

#include <sched.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <set>

#include "runtime/status.h"

namespace zt {

namespace {

constexpr int kMaskWords = CPU_SETSIZE / 64;

// What each local rank tells the others: its world rank, its mask at start and the CPUs it may
// be given, as bitsets (fixed size, so one MPI_Allgather of bytes carries them).
struct RankCpus {
  int32_t world_rank = 0;
  int32_t readable = 1;  // 0 when this rank could not read or widen its mask
  std::array<uint64_t, kMaskWords> mask{};
  std::array<uint64_t, kMaskWords> grantable{};
};

void set_bits(std::array<uint64_t, kMaskWords>& bits, const std::vector<int>& cpus) {
  for (int cpu : cpus) bits[cpu / 64] |= uint64_t{1} << (cpu % 64);
}

std::vector<int> cpus_of(const std::array<uint64_t, kMaskWords>& bits) {
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (bits[cpu / 64] >> (cpu % 64) & 1) cpus.push_back(cpu);
  return cpus;
}

}  // namespace

CpuBinding bind_local_cpus(const ProcessGroup& group) {
  RankCpus mine;
  mine.world_rank = group.rank;
  std::string read_error;
  try {
    set_bits(mine.mask, this_thread_cpus());
    set_bits(mine.grantable, grantable_cpus());
  } catch (const Error& e) {
    mine.readable = 0;
    read_error = e.message();
  }

  MPI_Comm local = MPI_COMM_NULL;
  ZT_MPI_CHECK(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, group.rank, MPI_INFO_NULL, &local));
  std::vector<RankCpus> all(group.local_world);
  const int gather_rc =
      MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, local);
  ZT_MPI_CHECK(MPI_Comm_free(&local));
  ZT_MPI_CHECK(gather_rc);

  CpuBinding binding;
  binding.local_rank = group.local_rank;
  std::vector<std::vector<int>> masks;
  std::set<int> pool;
  for (const RankCpus& r : all) {
    if (!r.readable)
      throw_system(r.world_rank == group.rank
                       ? read_error
                       : fmt::format("rank {} on this machine could not read its CPU affinity",
                                     r.world_rank));
    binding.world_ranks.push_back(r.world_rank);
    masks.push_back(cpus_of(r.mask));
    for (int cpu : cpus_of(r.grantable)) pool.insert(cpu);
  }
  binding.pool.assign(pool.begin(), pool.end());
  const std::vector<int> ordered = in_topology_order(binding.pool);
  for (int r = 0; r < group.local_world; ++r)
    binding.placements.push_back(place_local_rank(masks, ordered, r));
  bind_this_thread(binding.mine().cpus);
  return binding;
}

std::string describe_cpu_binding(const CpuBinding& binding, std::span<const double> threads) {
  const int ranks = static_cast<int>(binding.placements.size());
  std::string how;
  switch (binding.placements.front().kind) {
    case CpuPlacementKind::kKept: how = "mpirun's binding kept"; break;
    case CpuPlacementKind::kPartitioned:
      how = ranks == 1 ? fmt::format("all of {}", describe_cpus(binding.pool))
                       : fmt::format("{} split in blocks", describe_cpus(binding.pool));
      break;
    case CpuPlacementKind::kShared:
      how = fmt::format("more ranks than CPUs: {} shared round robin", describe_cpus(binding.pool));
      break;
  }
  std::string line = fmt::format("ranks on this machine: {} ({})", ranks, how);
  for (int r = 0; r < ranks; ++r) {
    const int world_rank = binding.world_ranks[r];
    const int n = static_cast<int>(threads[world_rank]);
    line += fmt::format("{} rank {}: {} thread{} on {}", r == 0 ? ";" : ",", world_rank, n,
                        n == 1 ? "" : "s", describe_cpus(binding.placements[r].cpus));
  }
  return line;
}

}  // namespace zt
