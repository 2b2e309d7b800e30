// MPI start-up and shut-down, the process-group bootstrap and the MPI error wrapper.
#include "comm/process_group.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "runtime/status.h"

namespace zt {

void check_mpi(int rc, std::string_view call, std::source_location where) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) {
    length = std::snprintf(text, sizeof text, "MPI error code %d", rc);
  }
  Error error(ErrorKind::kSystem,
              fmt::format("{} failed: {}", call, std::string_view(text, length)), where);
  int initialized = 0, finalized = 0, world_rank = -1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized && MPI_Comm_rank(MPI_COMM_WORLD, &world_rank) == MPI_SUCCESS)
    error.set_rank(world_rank);
  throw error;
}

ProcessGroup bootstrap_process_group(MPI_Comm comm) {
  ProcessGroup group;
  ZT_MPI_CHECK(MPI_Comm_rank(comm, &group.rank));
  ZT_MPI_CHECK(MPI_Comm_size(comm, &group.world));
  MPI_Comm local = MPI_COMM_NULL;
  ZT_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, group.rank, MPI_INFO_NULL, &local));
  const int rank_rc = MPI_Comm_rank(local, &group.local_rank);
  const int size_rc = MPI_Comm_size(local, &group.local_world);
  ZT_MPI_CHECK(MPI_Comm_free(&local));
  ZT_MPI_CHECK(rank_rc);
  ZT_MPI_CHECK(size_rc);
  return group;
}

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialized = 0;
  ZT_MPI_CHECK(MPI_Initialized(&initialized));
  if (initialized) throw_system("MPI is already initialised: create one MpiSession per process");
  ZT_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &thread_level_));
  if (thread_level_ < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    throw_system(
        fmt::format("MPI provides thread level {} but ZeroTrain needs at least "
                    "MPI_THREAD_SERIALIZED ({}): use an MPI built with thread support",
                    thread_level_, MPI_THREAD_SERIALIZED));
  }
  try {
    ZT_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    group_ = bootstrap_process_group(MPI_COMM_WORLD);
  } catch (...) {
    MPI_Finalize();
    throw;
  }
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void MpiSession::abort(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();  // MPI_Abort does not return; this keeps [[noreturn]] honest if it did
}

}  // namespace zt
