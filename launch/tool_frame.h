// The shared frame of every zt-* executable: process set-up (thread environment), the one place
// where a zt::Error becomes a message and an exit code, and the job-wide abort used when one
// rank's failure would leave the others waiting in a collective.
//
// Exit codes (docs/failure.md):
//   0  success
//   1  a failure at run time: I/O (a failed write names the file and the OS error), MPI, CUDA,
//      out of device memory (zt.device_memory_limit or a GPU's), a broken invariant, a loss that
//      diverged
//   2  bad input: command line, config, data or weights file
//   3  a collective did not complete within zt.comm_timeout_s (a rank stopped, died or
//      diverged), or a rank waiting in one got SIGTERM/SIGUSR1 (not a preemption: a peer is
//      gone); reported by the watchdog of the rank that saw it
//   4  preempted: zt-train got SIGTERM or SIGUSR1, finished the step in progress, saved a
//      checkpoint and stopped, on every rank (continue with zt-train --resume)
// Under mpirun an aborted job exits with the code of the rank that called abort_job (Open MPI's
// mpirun returns the MPI_Abort code). A rank never outlives its own abort by more than
// kAbortGraceS: MPI_Abort can block when the launcher cannot be reached (a network partition),
// so the rank then ends its own process with the same code (arm_abort_deadline).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace zt {

inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitCommTimeout = 3;
inline constexpr int kExitPreempted = 4;

// Seconds a rank that called MPI_Abort may stay alive before it ends its own process.
inline constexpr double kAbortGraceS = 5.0;

// Runs body(); prints "<tool>: <message>" as one line on stderr for any error ("<tool>: rank r:
// <message>" when rank >= 0) and returns the exit code to use.
int run_tool(const char* tool, const std::function<int()>& body, int rank = -1);

// Collective over MPI_COMM_WORLD: every rank runs body() (which must not communicate), then the
// ranks agree. If any failed, the lowest failing rank prints its one line (as run_tool) and
// every rank returns that rank's exit code; otherwise all return 0. No rank is left waiting.
int agree_on_exit_code(const char* tool, int rank, int world, const std::function<int()>& body);
// The agreement of agree_on_exit_code for an outcome already known: `code` (0: this rank
// succeeded) and its one-line `message`. Collective over MPI_COMM_WORLD.
int agree_on_failure(const char* tool, int rank, int world, int code, const std::string& message);

// The command line argv[1..argc) with "FLAG VALUE" joined into "FLAG=VALUE" wherever the
// argument after FLAG does not start with '-': an option whose value is optional (zt-train's
// --resume [DIR], zt-generate's --checkpoint [DIR]) takes a separate value only when attached
// (Boost.Program_options' implicit values).
std::vector<std::string> attach_optional_value(int argc, char** argv, const std::string& flag);
// Inside a catch block: the exit code and one-line message of the exception being handled
// (zt::Error: 2 for kInput, else 1; anything else 1, "internal error: ...").
int describe_current_exception(std::string* message);

// Ends the whole job now, from any thread: prints "<tool>: rank r: <message>" on stderr and
// calls MPI_Abort(MPI_COMM_WORLD, code), which makes mpirun end every rank. Print once per
// process: the first caller prints and aborts; a caller that comes later (the watchdog thread
// while the main thread reports an error, or the other way round) prints nothing and waits for
// that abort. One process-wide atomic flag in tool_frame.cpp holds this; it is the only state.
// Call it before unwinding the stack past objects that wait for peers (the engine's CommQueue).
[[noreturn]] void abort_job(const char* tool, int rank, const std::string& message, int code);

// Starts (once per process) a detached thread that ends this process with `code` (_exit, no
// unwinding) kAbortGraceS from now, and marks the process as aborting. abort_job calls it before
// MPI_Abort; so must any other caller of MPI_Abort (MpiSession::abort in a main).
void arm_abort_deadline(int code);
// Whether this process is ending (arm_abort_deadline was called), and with which code (0: not).
// A termination signal that arrives then is the launcher ending the job, not a preemption.
int abort_code();

}  // namespace zt
