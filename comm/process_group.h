// The MPI process: MpiSession (MPI_Init_thread / MPI_Finalize / MPI_Abort, RAII), the
// ProcessGroup bootstrap (rank, world, and the ranks sharing this machine), and check_mpi, the
// one wrapper that turns an MPI error code into a zt::Error. No collectives of ZeroTrain live
// here (see MpiCommunicator). A binary started without mpirun is a world of 1.
#pragma once

#include <mpi.h>

#include <source_location>
#include <string_view>

namespace zt {

// Throws zt::Error (kSystem) when rc != MPI_SUCCESS: "<call> failed: <MPI_Error_string>", with
// the world rank filled in when MPI is initialised. Needs MPI_ERRORS_RETURN on the
// communicator the call used (MPI's default handler aborts before returning).
void check_mpi(int rc, std::string_view call,
               std::source_location where = std::source_location::current());

}  // namespace zt

// ZT_MPI_CHECK(MPI_Bcast(buf, n, MPI_FLOAT, root, comm)): the call text goes into the message.
#define ZT_MPI_CHECK(call) ::zt::check_mpi((call), #call)

namespace zt {

struct ProcessGroup {
  int rank = 0;  // in [0, world)
  int world = 1;
  int local_rank = 0;  // among the ranks of `comm` on this machine (MPI_COMM_TYPE_SHARED)
  int local_world = 1;
};

// Collective over comm: every rank of comm calls it. comm must return errors
// (MPI_ERRORS_RETURN); MpiSession sets that on MPI_COMM_WORLD.
ProcessGroup bootstrap_process_group(MPI_Comm comm);

// Initialises MPI with MPI_Init_thread(MPI_THREAD_MULTIPLE) and finalises it on destruction.
// One per process, created by launch/ (or a test main) before any communicator and destroyed
// after the last one. Throws kSystem when MPI is already initialised or provides less than
// MPI_THREAD_SERIALIZED (a CommQueue calls MPI from its own thread). Sets MPI_ERRORS_RETURN on
// MPI_COMM_WORLD so every MPI error reaches check_mpi.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  // MPI_COMM_WORLD's group.
  const ProcessGroup& group() const { return group_; }
  // The thread level MPI provided: MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE.
  int thread_level() const { return thread_level_; }
  // MPI_Abort on MPI_COMM_WORLD: ends every rank with `code`. For launch/, when one rank's error
  // would otherwise leave the others waiting in a collective.
  [[noreturn]] void abort(int code) const;

 private:
  ProcessGroup group_;
  int thread_level_ = 0;
};

}  // namespace zt
