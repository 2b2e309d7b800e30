// HostStagingCommunicator: collectives over the memory of a Device the host cannot address (a
// GPU, Device::host_accessible() false) by a communicator that works on host memory (MPI): each
// collective copies its device buffers into one host staging buffer (Device::copy_to_host), runs
// the inner communicator's collective on that staging buffer in place, and copies the result
// back (Device::copy_from_host). This lets ranks that share one GPU, which NCCL refuses, run the
// engine with device tensors. Results are the inner communicator's, bit for bit (the
// determinism contract of comm/communicator.h holds unchanged). all_gather_host, whose buffers
// are host memory already, goes straight to the inner communicator (no staging, no device
// copies). It owns the host device its staging and the inner communicator's staging come from;
// it does no arithmetic of its own.
//
// Composition with CommQueue: attach the queue to this wrapper (the engine does), never to the
// inner communicator. The wrapper's backend_* then run on the queue's thread and call the inner
// communicator's public entries from there; the inner one has no queue, so it executes on that
// same thread. Device copies therefore also run on the queue's thread.
//
// Stats: stats() counts this wrapper's calls and bytes (the same as the inner communicator's)
// and seconds including the device copies; inner().stats() has the transport alone.
// Memory: the staging buffer is host memory, tracked under MemCategory::kCommBuffers by
// host_device(), and grows to the largest collective seen (reduce_scatter's and all_gather's
// full buffer, world * count elements); it is not bounded by a chunk size.
#pragma once

#include <cstdint>
#include <memory>

#include "comm/communicator.h"
#include "runtime/device.h"

namespace zt {

class HostStagingCommunicator final : public Communicator {
 public:
  // `device` holds the buffers of every collective and must outlive this communicator.
  // `inner` works on host memory; when its own staging came from a device, pass that device as
  // `host_device` to keep it alive until after `inner` is destroyed (the staging buffer of this
  // wrapper comes from it too). Without one (nullptr) the wrapper makes a CpuDevice. Throws
  // kInternal when inner is null or has a CommQueue attached.
  HostStagingCommunicator(Device& device, std::unique_ptr<Communicator> inner,
                          std::unique_ptr<Device> host_device = nullptr);
  ~HostStagingCommunicator() override;

  std::string name() const override;  // "mpi+host-staging"
  int rank() const override { return inner_->rank(); }
  int world() const override { return inner_->world(); }
  int local_rank() const override { return inner_->local_rank(); }
  int local_world() const override { return inner_->local_world(); }
  // Host staging over a duplicate of inner (whose staging, if it came from this wrapper's host
  // device, stays valid only while this wrapper lives).
  std::unique_ptr<Communicator> backend_duplicate() override;

  Communicator& inner() const { return *inner_; }
  Device& host_device() const { return *host_device_; }
  size_t staging_bytes() const { return staging_.bytes(); }

 protected:
  void backend_all_reduce(const void* send, void* recv, int64_t count, DType dtype,
                          ReduceOp op) override;
  void backend_reduce_scatter(const void* send, void* recv, int64_t recv_count, DType dtype,
                              ReduceOp op) override;
  void backend_all_gather(const void* send, void* recv, int64_t send_count, DType dtype) override;
  void backend_broadcast(void* buf, int64_t count, DType dtype, int root) override;
  // Host memory already: straight to the inner communicator, no staging, no device copies.
  void backend_all_gather_host(const void* send, void* recv, int64_t send_count,
                               DType dtype) override {
    inner_->all_gather_host(send, recv, send_count, dtype);
  }

 private:
  // The staging buffer, at least `bytes` long (reallocated, contents lost, when shorter).
  char* staging(int64_t bytes);

  Device& device_;
  std::unique_ptr<Device> host_device_;  // declared before inner_: destroyed after it
  std::unique_ptr<Communicator> inner_;
  Buffer staging_;  // host memory from host_device_
};

}  // namespace zt
