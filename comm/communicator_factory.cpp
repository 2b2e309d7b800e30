// make_communicator: back-end choice, agreed by every rank. The one #if on NCCL outside
// nccl_communicator.{h,cpp}.
#include "comm/communicator_factory.h"

#include <mpi.h>

#include <cmath>

#include <fmt/format.h>

#include "comm/host_staging_communicator.h"
#include "comm/mpi_communicator.h"
#include "comm/process_group.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/device_factory.h"
#include "runtime/status.h"

#if ZT_HAVE_NCCL
#include "comm/nccl_communicator.h"
#include "runtime/cuda/cuda_device.h"
#endif

namespace zt {

namespace {

// Why this rank cannot use NCCL, in words; empty when it can.
std::string nccl_unavailable_reason(const Device& device, int local_world) {
  if (!nccl_built())
    return "this build has no NCCL (nccl.h or libnccl was not found when it was configured)";
  if (device.host_accessible())
    return fmt::format("NCCL needs a GPU device, and the device is '{}'", device.name());
#if ZT_HAVE_NCCL
  if (dynamic_cast<const CudaDevice*>(&device) == nullptr)
    return fmt::format("NCCL needs a CUDA device, and the device is '{}'", device.name());
#endif
  const int gpus = cuda_device_count();
  if (local_world > gpus)
    return fmt::format(
        "{} ranks on this machine would share {} GPU(s), and NCCL needs one GPU "
        "per rank ({})",
        local_world, gpus, gpus == 0 ? cuda_unavailable_reason() : "use comm backend mpi");
  return {};
}

// MpiCommunicator on host memory: on `device` itself when it is host memory, else behind host
// staging with a CpuDevice of its own.
std::unique_ptr<Communicator> make_mpi(Device& device) {
  if (device.host_accessible()) return std::make_unique<MpiCommunicator>(device);
  auto host = std::make_unique<CpuDevice>();
  auto inner = std::make_unique<MpiCommunicator>(*host);
  return std::make_unique<HostStagingCommunicator>(device, std::move(inner), std::move(host));
}

std::unique_ptr<Communicator> make_nccl(Device& device, double comm_timeout_s,
                                        double comm_init_timeout_s) {
#if ZT_HAVE_NCCL
  auto* cuda = dynamic_cast<CudaDevice*>(&device);
  ZT_ASSERT(cuda != nullptr, "device '{}' is not a CudaDevice", device.name());
  return std::make_unique<NcclCommunicator>(*cuda, MPI_COMM_WORLD,
                                            NcclOptions{comm_timeout_s, comm_init_timeout_s});
#else
  throw_internal("make_nccl called in a build without NCCL");
#endif
}

}  // namespace

CommBackend parse_comm_backend(const std::string& name, const std::string& what) {
  if (name == "auto") return CommBackend::kAuto;
  if (name == "mpi") return CommBackend::kMpi;
  if (name == "nccl") return CommBackend::kNccl;
  throw_input(
      fmt::format("{}: unknown communication back end '{}'; use auto, mpi or nccl", what, name));
}

bool nccl_built() {
#if ZT_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

std::unique_ptr<Communicator> make_communicator(const std::string& backend, Device& device,
                                                double comm_timeout_s, double comm_init_timeout_s) {
  const CommBackend kind = parse_comm_backend(backend, "communication back end");
  if (!(comm_timeout_s > 0) || !std::isfinite(comm_timeout_s))
    throw_input(fmt::format("zt.comm_timeout_s must be a positive number of seconds; got {}",
                            comm_timeout_s));
  if (!(comm_init_timeout_s > 0) || !std::isfinite(comm_init_timeout_s))
    throw_input(fmt::format("zt.comm_init_timeout_s must be a positive number of seconds; got {}",
                            comm_init_timeout_s));
  if (kind == CommBackend::kMpi) return make_mpi(device);

  // nccl or auto: every rank must come to the same answer, else some would wait for the others
  // in an NCCL bootstrap while those wait in MPI.
  const ProcessGroup group = bootstrap_process_group(MPI_COMM_WORLD);
  const std::string reason = nccl_unavailable_reason(device, group.local_world);
  const int can = reason.empty() ? 1 : 0;
  int all_can = 0;
  ZT_MPI_CHECK(MPI_Allreduce(&can, &all_can, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (all_can == 1) return make_nccl(device, comm_timeout_s, comm_init_timeout_s);
  if (kind == CommBackend::kAuto) return make_mpi(device);
  Error error(ErrorKind::kInput,
              fmt::format("comm backend nccl was asked for, but {}",
                          reason.empty() ? "another rank cannot use it (see its error)" : reason));
  error.set_rank(group.rank);
  throw error;
}

}  // namespace zt
