// The placement rule and the affinity calls (Linux).
#include "runtime/cpu/cpu_affinity.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include "runtime/status.h"

namespace zt {

CpuPlacement place_local_rank(std::span<const std::vector<int>> masks, std::span<const int> pool,
                              int local_rank) {
  const int ranks = static_cast<int>(masks.size());
  ZT_ASSERT(local_rank >= 0 && local_rank < ranks, "local_rank={} ranks={}", local_rank, ranks);
  ZT_ASSERT(!pool.empty(), "the CPU pool is empty");
  const std::set<int> in_pool(pool.begin(), pool.end());
  std::map<int, int> ranks_on;  // CPU -> local ranks whose mask holds it
  bool inside_pool = true;
  for (const std::vector<int>& mask : masks) {
    ZT_ASSERT(!mask.empty(), "a local rank has an empty affinity mask");
    for (int cpu : mask) {
      ++ranks_on[cpu];
      inside_pool = inside_pool && in_pool.count(cpu) > 0;
    }
  }
  const bool disjoint = std::all_of(ranks_on.begin(), ranks_on.end(),
                                    [](const auto& entry) { return entry.second == 1; });
  if (inside_pool && disjoint && ranks_on.size() == in_pool.size()) {
    const std::vector<int>& mine = masks[local_rank];
    return {mine, static_cast<int>(mine.size()), CpuPlacementKind::kKept};
  }
  const int n = static_cast<int>(pool.size());
  if (ranks > n) return {{pool[local_rank % n]}, 1, CpuPlacementKind::kShared};
  const int base = n / ranks, extra = n % ranks;
  const int begin = local_rank * base + std::min(local_rank, extra);
  const int size = base + (local_rank < extra ? 1 : 0);
  std::vector<int> cpus(pool.begin() + begin, pool.begin() + begin + size);
  std::sort(cpus.begin(), cpus.end());
  return {std::move(cpus), size, CpuPlacementKind::kPartitioned};
}

std::string describe_cpus(std::span<const int> cpus) {
  std::string ranges;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!ranges.empty()) ranges += ",";
    ranges += j == i ? fmt::format("{}", cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
    i = j + 1;
  }
  return fmt::format("{} {}", cpus.size() == 1 ? "CPU" : "CPUs", ranges);
}

namespace {

std::vector<int> cpus_of(const cpu_set_t& set) {
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

// -1 when the file is absent (no sysfs topology: the CPU id alone orders it).
int read_topology_id(int cpu, const char* name) {
  std::ifstream file(fmt::format("/sys/devices/system/cpu/cpu{}/topology/{}", cpu, name));
  int id = -1;
  if (!(file >> id)) return -1;
  return id;
}

}  // namespace

std::vector<int> this_thread_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0)
    throw_system(fmt::format("sched_getaffinity failed: {}", std::strerror(errno)));
  return cpus_of(set);
}

void bind_this_thread(std::span<const int> cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) {
    ZT_ASSERT(cpu >= 0 && cpu < CPU_SETSIZE, "cpu={}", cpu);
    CPU_SET(cpu, &set);
  }
  if (sched_setaffinity(0, sizeof set, &set) != 0)
    throw_system(fmt::format("sched_setaffinity to {} failed: {}", describe_cpus(cpus),
                             std::strerror(errno)));
}

std::vector<int> grantable_cpus() {
  // The kernel intersects a requested mask with the online CPUs of the thread's cpuset, so
  // asking for every CPU and reading back what was granted finds that set.
  cpu_set_t all;
  CPU_ZERO(&all);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) CPU_SET(cpu, &all);
  if (sched_setaffinity(0, sizeof all, &all) != 0)
    throw_system(fmt::format("sched_setaffinity to every CPU failed: {}", std::strerror(errno)));
  return this_thread_cpus();
}

std::vector<int> in_topology_order(std::vector<int> cpus) {
  std::map<int, std::tuple<int, int, int>> key;  // CPU -> (package, core, CPU)
  for (int cpu : cpus)
    key[cpu] = {read_topology_id(cpu, "physical_package_id"), read_topology_id(cpu, "core_id"),
                cpu};
  std::sort(cpus.begin(), cpus.end(), [&](int a, int b) { return key[a] < key[b]; });
  return cpus;
}

}  // namespace zt
