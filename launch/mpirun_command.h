// The mpirun command line of zt-run: zt-run's own arguments and what the machine is (root or
// not, Open MPI's slots, a GPU or not, which variables the caller's environment sets) go in, the
// argv of mpirun comes out. Pure: no file, process or environment access here; zt_run_main.cpp
// gathers the facts and execs the result. Process management stays Open MPI's: a hostfile is
// passed through and read only to count its slots.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace zt {

// zt-run -np N [--hostfile F] [--cpu] [--max-restarts N] [--min-nodes N] [--dry-run]
//        -- PROGRAM [ARGS...]
struct RunRequest {
  int ranks = 0;         // -np N, N >= 1
  std::string hostfile;  // --hostfile F; empty: this machine only
  int max_restarts = 0;  // --max-restarts N >= 0: relaunches after a failure (restart_policy.h)
  int min_nodes = 1;     // --min-nodes N >= 1: the fewest hosts a restart may continue on
  bool cpu = false;      // --cpu: ranks run on CPUs (no GPU each), may oversubscribe
  bool dry_run = false;  // --dry-run: print the line, run nothing
  bool help = false;     // --help
  std::vector<std::string> program;  // everything after "--": the program and its arguments
};

// Parses zt-run's arguments (argv without argv[0]). kInput naming the problem for an unknown
// option, a missing or non-positive -np, a missing "--" or nothing after it. Nothing is checked
// against the file system here (the hostfile's existence is zt_run_main's).
RunRequest parse_run_request(std::span<const std::string> args);

// zt-run's --help text.
std::string run_usage();

// What the machine zt-run starts on is.
struct LaunchHost {
  bool root = false;  // euid 0: Open MPI refuses root without --allow-run-as-root
  int slots = 1;      // what Open MPI counts: the hostfile's slots, else this machine's cores
  bool gpu_visible = false;  // a CUDA device is visible (and CUDA_VISIBLE_DEVICES does not hide it)
  std::vector<std::string> environment;  // names of the variables set in the caller's environment
};

// One host line of a hostfile: the host as written, its slots as Open MPI counts them, and the
// line itself (without its comment), so that a hostfile of some of the hosts can be written.
struct HostfileEntry {
  std::string host;
  int slots = 1;
  std::string line;
};

// The host lines of a hostfile, in order. Slots as Open MPI counts them: slots=N, else
// max_slots=N, else the node's cores (Open MPI discovers them on the node; here
// `cores_per_node`, this machine's, stands in). kInput naming the line when a count is not a
// positive integer, or when the file lists no host.
std::vector<HostfileEntry> parse_hostfile(std::string_view text, int cores_per_node,
                                          std::string_view path);
// The slots of all of parse_hostfile's entries.
int hostfile_slots(std::string_view text, int cores_per_node, std::string_view path);

// The variables every rank needs, forwarded with -x NAME (remote nodes do not inherit mpirun's
// environment; local ranks do, and -x is harmless for them): PATH and LD_LIBRARY_PATH (the same
// binaries and libraries on every node), and every OMP_*, OPENBLAS_*, ZT_*, NCCL_* and
// CUDA_VISIBLE_DEVICES that is set. True for those names.
bool forwarded_to_ranks(std::string_view name);

// Open MPI's TCP keepalive for the connections between mpirun and its daemons on other nodes
// (the out-of-band channel): idle seconds before the first probe, seconds between probes, and
// unanswered probes before the connection, and so the node, is declared lost. mpirun then ends
// the job and names the node ("ORTE has lost communication with a remote daemon"), and a daemon
// that lost mpirun ends its ranks. 5 + 2 * 3 = 11 s of silence: shorter than any collective
// timeout worth setting (zt.comm_timeout_s), so mpirun learns of a lost node before a rank's
// MPI_Abort queues a message to it (TCP suspends keepalive while data waits to be sent).
struct DaemonKeepalive {
  std::string_view name;  // the MCA parameter
  int value;
};
std::span<const DaemonKeepalive> daemon_keepalive();

// mpirun's argv (argv[0] = "mpirun"):
//   mpirun -np N [--hostfile F] [--allow-run-as-root] [--oversubscribe]
//          --map-by slot --bind-to none [--mca oob_tcp_keepalive_* V]... [-x NAME]...
//          PROGRAM ARGS...
// The keepalive parameters (daemon_keepalive) with a hostfile only, each unless the caller's
// environment sets OMPI_MCA_<name>.
// --allow-run-as-root when host.root. --oversubscribe when the ranks run on CPUs (request.cpu,
// or no GPU visible) and N > host.slots: one rank per core is a choice, not a need, there.
// --map-by slot fills each node's slots in order, so a node's ranks are consecutive world ranks
// (what a hierarchical collective over ProcessGroup::local_rank builds on). --bind-to none:
// zt-train binds each rank to its own CPUs itself, per node, after MPI_Init (launch/
// cpu_binding.h), from the ranks it finds on the node; a launcher binding would have to know
// every node's ranks and cores, and Open MPI's core binding fails once oversubscribed.
// No OpenMP wait policy is imposed: a rank's threads are its one pool (oneDNN runs on them), so
// libgomp's default (a worker spins briefly after a parallel region, then sleeps) costs no other
// pool its cores; an OMP_WAIT_POLICY the caller set is forwarded like any OMP_* variable.
// OMP_NUM_THREADS is not set: each rank takes as many threads as it has CPUs (zt.num_threads or
// the caller's OMP_NUM_THREADS override that, and are forwarded).
std::vector<std::string> mpirun_argv(const RunRequest& request, const LaunchHost& host);

// The argv as one line a shell reads back to the same argv: words outside
// [A-Za-z0-9_./=:,+@%-] single-quoted.
std::string shell_line(std::span<const std::string> argv);

}  // namespace zt
