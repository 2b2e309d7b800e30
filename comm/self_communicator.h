// SelfCommunicator: the world of one process (rank 0 of 1), for single-process runs and tests.
// Every collective is a copy from send to recv through its Device (Device::copy, so the buffers
// may be a GPU's), and nothing when in place; all_gather_host copies host memory with memcpy.
// No MPI, no threads, no allocation.
#pragma once

#include "comm/communicator.h"
#include "runtime/device.h"

namespace zt {

class SelfCommunicator final : public Communicator {
 public:
  // `device` holds the buffers of every collective and must outlive this communicator.
  explicit SelfCommunicator(Device& device) : device_(device) {}
  std::string name() const override { return "self"; }
  int rank() const override { return 0; }
  int world() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_world() const override { return 1; }
  std::unique_ptr<Communicator> backend_duplicate() override {
    return std::make_unique<SelfCommunicator>(device_);
  }

 protected:
  // With one rank the reduction of a single contribution is that contribution, bit for bit.
  void backend_all_reduce(const void* send, void* recv, int64_t count, DType dtype,
                          ReduceOp op) override;
  void backend_reduce_scatter(const void* send, void* recv, int64_t recv_count, DType dtype,
                              ReduceOp op) override;
  void backend_all_gather(const void* send, void* recv, int64_t send_count, DType dtype) override;
  void backend_all_gather_host(const void* send, void* recv, int64_t send_count,
                               DType dtype) override;
  void backend_broadcast(void* buf, int64_t count, DType dtype, int root) override {}

 private:
  void copy_unless_in_place(const void* send, void* recv, int64_t count, DType dtype);

  Device& device_;
};

}  // namespace zt
