// Which CPUs a rank runs on when several ranks share a machine: the rule (place_local_rank, pure
// arithmetic on CPU lists) and the Linux calls it needs (sched_getaffinity, sched_setaffinity,
// the sysfs topology). No communication: launch/ gathers every local rank's mask, calls the rule
// and applies the result (launch/cpu_binding.h). CPUs are logical CPU ids, as the kernel numbers
// them (a core's hardware threads are separate CPUs).
#pragma once

#include <span>
#include <string>
#include <vector>

namespace zt {

enum class CpuPlacementKind {
  kKept,         // the launcher's binding: every CPU of the pool bound to exactly one rank
  kPartitioned,  // the pool cut into contiguous blocks, one per local rank
  kShared,       // more local ranks than CPUs: one CPU each, round robin, so ranks share CPUs
};

struct CpuPlacement {
  std::vector<int> cpus;  // the CPUs this rank's threads may run on, ascending
  int threads = 1;        // the OpenMP threads that fit: cpus.size(), 1 when kShared
  CpuPlacementKind kind = CpuPlacementKind::kKept;
};

// The CPUs of local rank `local_rank`. masks[r] is local rank r's affinity mask at start
// (ascending; what mpirun bound it to, or every CPU when it did not bind); pool is every CPU
// this machine lets the job use, a core's hardware threads adjacent (in_topology_order).
// The launcher's binding is kept only when it is a partition of the pool (masks pairwise
// disjoint, together the pool): Open MPI binds each rank to one core by default for np <= 2,
// which is right for one thread per rank but would leave a multi-threaded rank on one core of
// many (np = 1 on this 2-core machine runs on CPU 0 only). Otherwise the pool is cut into
// contiguous blocks, the first pool.size() % ranks ranks one CPU larger; with more ranks than
// CPUs, rank r gets pool[r % pool.size()]. masks and pool must be non-empty, else kInternal.
// Pinned by tests/runtime/cpu/cpu_affinity_test.cpp.
CpuPlacement place_local_rank(std::span<const std::vector<int>> masks, std::span<const int> pool,
                              int local_rank);

// "CPU 3", "CPUs 0-3", "CPUs 0,2,4-7".
std::string describe_cpus(std::span<const int> cpus);

// The calling thread's affinity mask, ascending. kSystem when the kernel refuses.
std::vector<int> this_thread_cpus();

// Sets the calling thread's affinity mask to `cpus`; threads it creates later inherit it
// (OpenMP's pool among them, created at the first parallel region); threads that exist already
// keep theirs. kSystem naming the CPUs when the kernel refuses.
void bind_this_thread(std::span<const int> cpus);

// Every CPU the calling thread may be given, ascending: what the kernel grants a mask of all
// CPUs (the online CPUs of its cpuset). Widens the calling thread's mask to that set as a side
// effect: call it before bind_this_thread. kSystem when the kernel refuses.
std::vector<int> grantable_cpus();

// `cpus` with a core's hardware threads adjacent (ordered by the sysfs package and core ids,
// then CPU id; by CPU id where sysfs has no topology), so that a contiguous block of the result
// holds whole cores: Linux often numbers a core's second hardware thread apart from its first.
std::vector<int> in_topology_order(std::vector<int> cpus);

}  // namespace zt
