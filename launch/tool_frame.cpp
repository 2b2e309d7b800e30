// Error-to-exit-code mapping, the cross-rank agreement on set-up errors, the job-wide abort and
// the thread environment of the executables.
#include "launch/tool_frame.h"

#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>

#include "comm/process_group.h"
#include "runtime/status.h"

namespace zt {

namespace {

// Runs body, turning any error into (exit code, one-line message).
int capture(const std::function<int()>& body, std::string* message) {
  try {
    return body();
  } catch (...) {
    return describe_current_exception(message);
  }
}

// Set by the first abort_job of this process.
std::atomic<bool> g_aborting{false};
// Set by the first arm_abort_deadline: the exit code this process ends with.
std::atomic<int> g_abort_code{0};

void print_error(const char* tool, int rank, const std::string& message) {
  if (rank >= 0)
    std::fprintf(stderr, "%s: rank %d: %s\n", tool, rank, message.c_str());
  else
    std::fprintf(stderr, "%s: %s\n", tool, message.c_str());
  std::fflush(stderr);
}

}  // namespace

std::vector<std::string> attach_optional_value(int argc, char** argv, const std::string& flag) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == flag && !args[i + 1].starts_with("-")) {
      args[i] += "=" + args[i + 1];
      args.erase(args.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    }
  return args;
}

int describe_current_exception(std::string* message) {
  try {
    throw;
  } catch (const Error& e) {
    // The rank goes in front of the line (print_error), not inside it.
    *message = e.kind() == ErrorKind::kInput
                   ? e.message()
                   : fmt::format("{} ({}:{})", e.message(), e.file(), e.line());
    return e.kind() == ErrorKind::kInput ? kExitBadInput : kExitFailure;
  } catch (const std::exception& e) {
    *message = std::string("internal error: ") + e.what();
    return kExitFailure;
  } catch (...) {
    *message = "internal error: an exception of unknown type";
    return kExitFailure;
  }
}

void arm_abort_deadline(int code) {
  const int exit_code = code != 0 ? code : kExitFailure;
  int none = 0;
  if (!g_abort_code.compare_exchange_strong(none, exit_code)) return;  // armed already
  // MPI_Abort asks the launcher to end every rank; when the launcher cannot be reached (its
  // daemon is behind a network partition) the call can block for good, and nothing else would
  // end this process. The thread holds nothing: _exit skips destructors and atexit handlers.
  std::thread([exit_code] {
    std::this_thread::sleep_for(std::chrono::duration<double>(kAbortGraceS));
    std::fprintf(stderr, "zt: MPI_Abort did not end this process within %.0f s; exiting %d\n",
                 kAbortGraceS, exit_code);
    std::fflush(stderr);
    std::_Exit(exit_code);
  }).detach();
}

int abort_code() { return g_abort_code.load(); }

void abort_job(const char* tool, int rank, const std::string& message, int code) {
  if (!g_aborting.exchange(true)) {
    print_error(tool, rank, message);
    arm_abort_deadline(code);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // MPI_Abort does not return; if it did, this process still ends
  }
  // Another thread is aborting this process: wait for it rather than unwind or print.
  for (;;) ::pause();
}

int run_tool(const char* tool, const std::function<int()>& body, int rank) {
  std::string message;
  const int code = capture(body, &message);
  if (code != 0 && !message.empty()) print_error(tool, rank, message);
  return code;
}

int agree_on_exit_code(const char* tool, int rank, int world, const std::function<int()>& body) {
  std::string message;
  const int code = capture(body, &message);
  return agree_on_failure(tool, rank, world, code, message);
}

int agree_on_failure(const char* tool, int rank, int world, int code, const std::string& message) {
  // The lowest failing rank speaks: MIN over ranks of (rank if failed, else world).
  int mine = code != 0 ? rank : world, first = world;
  ZT_MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (first == world) return 0;
  if (rank == first && !message.empty()) print_error(tool, world > 1 ? rank : -1, message);
  int agreed = code;
  ZT_MPI_CHECK(MPI_Bcast(&agreed, 1, MPI_INT, first, MPI_COMM_WORLD));
  return agreed;
}

}  // namespace zt
