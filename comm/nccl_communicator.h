// NcclCommunicator: collectives over GPU memory with NCCL, one GPU per rank (compiled only when
// ZT_HAVE_NCCL). Bootstrapped over MPI: rank 0 makes the unique id, MPI_Bcast carries it, every
// rank joins with ncclCommInitRankConfig on its CudaDevice's ordinal. Each communicator has its
// own stream (a duplicate too): stage 3's gathers and the gradient reductions run on two
// communicators from two threads, and on one shared stream one's collective could wait behind
// the other's while the peers issue them in the other order, which deadlocks two GPUs. Each
// collective is enqueued on that stream after the work already queued on the device's compute
// stream (an event recorded on compute, waited for on ours) and then waited for on the calling
// thread, since the
// Communicator contract is synchronous; with a CommQueue attached that thread is the queue's,
// so compute keeps running meanwhile. The compute event is recorded when the collective starts
// (on the queue's thread), not when it was submitted, so a queued collective also waits for
// compute work the user thread queued after submitting it: safe, but a prefetch can start later
// than it might. Its one allocation is a small device buffer (kHostGatherBytes, from the
// device, kCommBuffers) through which all_gather_host moves host values.
//
// Determinism: NCCL reduces in an order of its own (rings and trees chosen from the topology and
// the size; fp16 and bf16 partial sums rounded at every step), NOT the rank-order contract of
// comm/communicator.h. Its results are the same run to run for a fixed topology, world, NCCL
// version and buffer size, but they are not bitwise equal to MpiCommunicator's, all_reduce need
// not equal reduce_scatter + all_gather bit for bit, and ZeRO stages need not match bitwise on
// NCCL. kMax's treatment of NaN is NCCL's (tests/mpi/device_comm_gpu_test.cpp checks it).
//
// Watchdog: the communicator is non-blocking (ncclConfig_t::blocking = 0) so that no NCCL call
// can wait for a peer forever; every wait (init, enqueue, completion) polls cudaEventQuery and
// ncclCommGetAsyncError with short sleeps. When one does not finish within timeout_s, or NCCL
// reports an asynchronous error, the communicator is aborted (ncclCommAbort) and the call throws
// kSystem; every later call throws kSystem too. The ranks that did not stop see the timeout;
// the stopped rank sees nothing until it calls again. A watchdog installed with
// Communicator::set_watchdog reports that timeout, naming unit and step (launch/ then ends the
// job); this communicator's own deadline is what makes the GPU side give up (ncclCommAbort).
#pragma once

#include <mpi.h>
#include <nccl.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "comm/communicator.h"
#include "comm/process_group.h"
#include "runtime/device.h"

namespace zt {

class CudaDevice;

struct NcclOptions {
  // Seconds one collective may take before the communicator is aborted (zt.comm_timeout_s).
  // Generous: a slow rank (data loading, a checkpoint write) is not a failure; a rank that
  // stopped or called another collective is.
  double timeout_s = 600;
  // Seconds ncclCommInitRankConfig may take (zt.comm_init_timeout_s), its own deadline: the
  // first init on a machine (a VM, many GPUs) can take many seconds while collectives after it
  // may be bounded tightly.
  double init_timeout_s = 120;
};

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `parent` (every rank of it calls, each with its own GPU). `device` must
  // outlive this communicator. Throws kInput for a bad timeout, kSystem for CUDA, NCCL or MPI
  // errors (e.g. two ranks on one GPU) and for an init that does not finish within
  // init_timeout_s.
  NcclCommunicator(CudaDevice& device, MPI_Comm parent = MPI_COMM_WORLD, NcclOptions options = {});
  // Finalizes and destroys the NCCL communicator (aborts it when that does not finish within
  // timeout_s or it failed before; aborts at once, without finalizing, while an exception
  // unwinds the stack: an error path, where peers may never finalize). Never throws.
  ~NcclCommunicator() override;

  std::string name() const override { return "nccl"; }
  int rank() const override { return group_.rank; }
  int world() const override { return group_.world; }
  int local_rank() const override { return group_.local_rank; }
  int local_world() const override { return group_.local_world; }
  // A new NCCL communicator over the same ranks and GPU (bootstrapped over the same parent),
  // with the same timeouts.
  std::unique_ptr<Communicator> backend_duplicate() override;

  double timeout_s() const { return timeout_s_; }
  double init_timeout_s() const { return init_timeout_s_; }
  // False once a timeout or an asynchronous error aborted the communicator.
  bool healthy() const { return comm_ != nullptr; }

 protected:
  // Buffers are device memory of `device` (validated by the base class for ranges only).
  void backend_all_reduce(const void* send, void* recv, int64_t count, DType dtype,
                          ReduceOp op) override;
  void backend_reduce_scatter(const void* send, void* recv, int64_t recv_count, DType dtype,
                              ReduceOp op) override;
  void backend_all_gather(const void* send, void* recv, int64_t send_count, DType dtype) override;
  void backend_broadcast(void* buf, int64_t count, DType dtype, int root) override;
  // Host memory: each rank's block in pieces of kHostGatherBytes / world bytes, each piece
  // copied to the device buffer (on this communicator's stream), all-gathered in place there and,
  // once the
  // watchdog saw it finish, copied back into every rank's block of recv.
  void backend_all_gather_host(const void* send, void* recv, int64_t send_count,
                               DType dtype) override;

 private:
  static constexpr size_t kHostGatherBytes = 64 << 10;
  // Before an NCCL call: throws when aborted, makes the device current on this thread and
  // orders this communicator's stream after everything queued on the compute stream so far.
  void begin(const CollectiveCall& call);
  // After it: waits until the collective has finished on this communicator's stream.
  void finish(const CollectiveCall& call);
  // Polls until NCCL's state is ncclSuccess and `finished()` is true. Aborts and throws kSystem
  // when the state is an error or `deadline` (steady-clock seconds) passes first; `what`
  // describes the operation waited for ("all_reduce of 4096 bytes"), `limit` the deadline's
  // setting ("zt.comm_timeout_s = 600 s").
  void wait_until(const std::function<bool()>& finished, double deadline, std::string_view what,
                  std::string_view limit);
  // ncclCommAbort, once; the communicator is unusable afterwards.
  void abort() noexcept;
  // Frees the NCCL communicator (finalize + destroy, or abort) and the events. Never throws.
  void release() noexcept;
  // "all_reduce of 4096 bytes", for errors.
  std::string describe(const CollectiveCall& call) const;

  CudaDevice& device_;
  MPI_Comm parent_;
  double timeout_s_;
  double init_timeout_s_;
  ProcessGroup group_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;        // this communicator's own (see the header comment)
  cudaEvent_t compute_ready_ = nullptr;  // recorded on compute, waited for on stream_
  cudaEvent_t comm_done_ = nullptr;      // recorded on stream_ after the collective, polled
  Buffer host_gather_;                   // device memory, kHostGatherBytes: all_gather_host
};

}  // namespace zt
