// Error-to-exit-code mapping, the cross-rank agreement on set-up errors, and the thread
// environment of the executables.
#include "launch/tool_frame.h"

#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "comm/process_group.h"
#include "runtime/status.h"

namespace zt {

namespace {

// Runs body, turning any error into (exit code, one-line message).
int capture(const std::function<int()>& body, std::string* message) {
  try {
    return body();
  } catch (const Error& e) {
    *message = e.kind() == ErrorKind::kInput ? e.message() : e.describe();
    return e.kind() == ErrorKind::kInput ? 2 : 1;
  } catch (const std::exception& e) {
    *message = std::string("internal error: ") + e.what();
    return 1;
  }
}

void print_error(const char* tool, int rank, const std::string& message) {
  if (rank >= 0)
    std::fprintf(stderr, "%s: rank %d: %s\n", tool, rank, message.c_str());
  else
    std::fprintf(stderr, "%s: %s\n", tool, message.c_str());
  std::fflush(stderr);
}

}  // namespace

int run_tool(const char* tool, const std::function<int()>& body, int rank) {
  std::string message;
  const int code = capture(body, &message);
  if (code != 0 && !message.empty()) print_error(tool, rank, message);
  return code;
}

int agree_on_exit_code(const char* tool, int rank, int world, const std::function<int()>& body) {
  std::string message;
  const int code = capture(body, &message);
  // The lowest failing rank speaks: MIN over ranks of (rank if failed, else world).
  int mine = code != 0 ? rank : world, first = world;
  ZT_MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (first == world) return 0;
  if (rank == first && !message.empty()) print_error(tool, world > 1 ? rank : -1, message);
  int agreed = code;
  ZT_MPI_CHECK(MPI_Bcast(&agreed, 1, MPI_INT, first, MPI_COMM_WORLD));
  return agreed;
}

void ensure_thread_environment(int argc, char** argv) {
  (void)argc;
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  ::execv("/proc/self/exe", argv);
  // execv failed (no /proc?): carry on with the default policy; only speed is affected.
}

}  // namespace zt
