// CpuBinding: gives each rank on a machine its own CPUs, by runtime/cpu/cpu_affinity.h's rule
// (mpirun's binding kept when it already partitions the machine; otherwise contiguous blocks,
// or CPUs shared round robin when there are more ranks than CPUs), and keeps what it decided
// for the start-up line. One MPI all-gather among the ranks of this machine; no other work.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "runtime/cpu/cpu_affinity.h"

namespace zt {

struct CpuBinding {
  int local_rank = 0;
  std::vector<int> world_ranks;          // of this machine's ranks, by local rank
  std::vector<int> pool;                 // the CPUs this machine lets the job use, ascending
  std::vector<CpuPlacement> placements;  // by local rank (every rank computes them all)
  const CpuPlacement& mine() const { return placements[local_rank]; }
};

// Collective over MPI_COMM_WORLD (every rank of `group` calls it). Binds the calling thread to
// this rank's CPUs. Call it first thing after MpiSession, before any thread of ours starts:
// threads inherit the mask when they are created (OpenMP's pool at the first parallel region,
// the communication and watchdog threads), and ones that exist already keep the old mask.
// kSystem naming the rank when a rank cannot read or set its affinity (then on every rank of
// this machine, so none waits for the others).
CpuBinding bind_local_cpus(const ProcessGroup& group);

// The start-up line, e.g. "ranks on this machine: 2 (mpirun's binding kept); rank 0: 1 thread
// on CPU 0, rank 1: 1 thread on CPU 1". threads[r]: world rank r's OpenMP threads (every rank's
// cpu_threads(), all-gathered after choose_cpu_threads).
std::string describe_cpu_binding(const CpuBinding& binding, std::span<const double> threads);

}  // namespace zt
