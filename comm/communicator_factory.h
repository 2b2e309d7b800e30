// make_communicator: the run-time choice of communication back end for a device, the one place
// above comm's back ends that knows which exist. "mpi" is MpiCommunicator on host memory, wrapped
// in a HostStagingCommunicator when the device's memory is not host memory (a GPU); "nccl" is
// NcclCommunicator (builds with NCCL, one GPU per rank); "auto" picks nccl when it can and mpi
// otherwise. It does not pick the device (runtime/device_factory.h does) and creates no queue.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "runtime/device.h"

namespace zt {

enum class CommBackend { kAuto, kMpi, kNccl };
// "auto", "mpi" or "nccl"; anything else throws kInput naming `what` (e.g. "configs/x.json:
// zt.comm_backend").
CommBackend parse_comm_backend(const std::string& name, const std::string& what);

// True when this build has the NCCL communicator (ZT_HAVE_NCCL).
bool nccl_built();

// A communicator over MPI_COMM_WORLD for collectives on `device`'s memory. Collective: every rank
// calls it with the same backend (the choice is agreed over MPI_COMM_WORLD, so ranks never end
// up on different back ends). `device` must outlive the communicator.
//   "mpi":  MpiCommunicator; its staging comes from `device` when that is host memory, else
//           HostStagingCommunicator over an MpiCommunicator on the host.
//   "nccl": NcclCommunicator; kInput naming the reason when NCCL was not built, the device is
//           not a GPU, or two ranks of a machine would share a GPU (local_world >
//           cuda_device_count()), on any rank.
//   "auto": nccl when every rank could have it, else mpi.
// comm_timeout_s (zt.comm_timeout_s) bounds how long an NCCL collective may take before the
// communicator is aborted, comm_init_timeout_s (zt.comm_init_timeout_s) how long its
// initialisation may take; both must be > 0 (kInput). Every back end's collectives are watched
// against it once zt-train calls Communicator::set_watchdog with it (MPI has no deadline of its
// own: the watchdog is all there is).
// Unknown backend: kInput.
std::unique_ptr<Communicator> make_communicator(const std::string& backend, Device& device,
                                                double comm_timeout_s,
                                                double comm_init_timeout_s = 120.0);

}  // namespace zt
