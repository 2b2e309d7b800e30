// zt-run's automatic restarts (--max-restarts): whether a job that ended may be relaunched, which
// hosts mpirun's stderr names as failed, how many ranks the remaining hosts take, the gradient
// accumulation that keeps the global batch at the new world size, zt-train's command line for
// the relaunch, and the restart's line and metrics.jsonl row. Pure: no process, file or
// environment access; tools/zt_run_main.cpp runs mpirun (launch/supervised_process.h), reads the
// job's config and latest checkpoint, and applies these answers. What it does not do: restart a
// program other than zt-train (zt-run refuses --max-restarts for one), or change the micro-batch.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "launch/mpirun_command.h"

namespace zt {

// How a job ended, as a restart sees it. Only kFailed is restarted.
enum class JobEnd {
  kSucceeded,  // exit 0
  kBadInput,   // exit 2 (command line, config, data, checkpoint): the same input fails again
  kPreempted,  // exit 4: zt-train stopped on SIGTERM/SIGUSR1 and saved a checkpoint
  kStopped,    // zt-run forwarded a signal to mpirun: the job was stopped on request
  kFailed,     // anything else: a rank failed, a node was lost, a collective timed out
};
JobEnd classify_job_end(int exit_code, bool signal_forwarded);
// Why a job that ended so is not restarted: "bad input (exit 2)", ...; "" for kFailed.
std::string not_restarted_because(JobEnd end, int exit_code);

// A failure mpirun reports on its stderr, on a node it names.
struct NodeFailure {
  enum class Kind { kDaemonLost, kRankSignalled };
  Kind kind = Kind::kDaemonLost;
  std::string node;  // as mpirun names it: the hostfile's name, or the host name of mpirun's own
  std::string why;   // "mpirun lost its daemon on node 10.0.0.2", "rank 1 on node a exited on
                     // signal 9 (Killed)"
};
// The failure one line of mpirun's stderr reports, if any. Open MPI 4.1 prints (its help files
// help-errmgr-base.txt [node-died] and help-orterun.txt [orterun:proc-aborted-strsignal]):
//   "  Remote daemon: [[41500,0],1] on node 10.213.241.2"
//   "mpirun noticed that process rank 1 with PID 20 on node a exited on signal 9 (Killed)."
std::optional<NodeFailure> node_failure_in(std::string_view line);

// The hosts (indices into `hosts`) that failed: every node whose daemon mpirun lost; when none
// was, the node of the first rank killed by a signal (mpirun names the first failure only; ranks
// it ends afterwards are not failures of their host). A node is matched by name; a node name
// among `local_names` (mpirun names its own machine by its host name) matches the hostfile
// entries that are also among them (this machine's host name, "localhost", its addresses).
// Sorted, without duplicates; empty when the failures name no host of the file.
std::vector<size_t> failed_hosts(std::span<const HostfileEntry> hosts,
                                 std::span<const NodeFailure> failures,
                                 std::span<const std::string> local_names);

// Ranks per host as `mpirun --map-by slot` places `ranks` on `hosts` (Open MPI 4.1's byslot
// mapper): each host's slots filled in order; past every slot (--oversubscribe), the remaining
// ranks spread evenly, the first hosts taking one more.
std::vector<int> ranks_per_host(int ranks, std::span<const HostfileEntry> hosts);

// DeepSpeed's three batch sizes: global == micro * accumulation * world.
struct BatchSizes {
  int64_t global = 0;        // train_batch_size
  int64_t micro = 0;         // train_micro_batch_size_per_gpu
  int64_t accumulation = 1;  // gradient_accumulation_steps
};
// The batch sizes on `world` ranks that keep `job`'s global batch and micro-batch (the job ran
// on `job_world` ranks): accumulation = global / (micro * world). kInput naming the sizes and
// both world sizes when that is not a whole number.
BatchSizes keep_global_batch(const BatchSizes& job, int job_world, int world);

// What zt-run reads of zt-train's command line: the config file and the --set overrides in
// their order (--config F, --config=F, -c F; --set K=V, --set=K=V).
struct TrainCommand {
  std::string config;
  std::vector<std::string> overrides;
};
// `program` is the argv after zt-run's "--". kInput when `program` is not zt-train (its file
// name) or has no --config.
TrainCommand parse_train_command(std::span<const std::string> program);

// zt-train's argv for a relaunch: with `resume`, `program` without any --resume [DIR] of its own
// and with "--resume" (the latest checkpoint under the job's checkpoint root) appended; without
// it, `program` as first launched (from step 0, or from the job's own --resume DIR). Then, when
// `batch` is given, "--set train_batch_size=G --set train_micro_batch_size_per_gpu=M --set
// gradient_accumulation_steps=A" (all three, so any two of the job's own keys agree with them).
std::vector<std::string> relaunch_program(std::span<const std::string> program, bool resume,
                                          const std::optional<BatchSizes>& batch);

// One restart, as its line and its metrics.jsonl row say it.
struct RestartPlan {
  int restart = 1;        // 1 for the first restart
  int max_restarts = 1;   // --max-restarts
  std::string reason;     // the failure mpirun named (failed_hosts' order), else "a failure"
  int exit_code = 1;      // the failed run's
  int64_t from_step = 0;  // the checkpoint's step; 0 when there was none (from the start)
  std::vector<std::string> hosts;  // where the job continues
  int world = 1;
  int64_t accumulation = 1;
};
// "restart 1/2 after <reason> (exit 205): from step 10 on host a (2 ranks,
// gradient_accumulation_steps 2)"
std::string restart_line(const RestartPlan& plan);
// {"event":"restart","restart":1,"max_restarts":2,"reason":...,"exit_code":...,"from_step":10,
//  "hosts":[...],"world_size":2,"gradient_accumulation_steps":2}
nlohmann::ordered_json restart_row(const RestartPlan& plan);

}  // namespace zt
