// HostStagingCommunicator: device -> host staging -> inner collective (in place) -> device.
#include "comm/host_staging_communicator.h"

#include <fmt/format.h>

#include "runtime/cpu/cpu_device.h"
#include "runtime/status.h"

namespace zt {

HostStagingCommunicator::HostStagingCommunicator(Device& device,
                                                 std::unique_ptr<Communicator> inner,
                                                 std::unique_ptr<Device> host_device)
    : device_(device),
      host_device_(host_device ? std::move(host_device) : std::make_unique<CpuDevice>()),
      inner_(std::move(inner)) {
  ZT_ASSERT(inner_ != nullptr, "HostStagingCommunicator needs an inner communicator");
  ZT_ASSERT(inner_->queue() == nullptr,
            "attach the CommQueue to the HostStagingCommunicator, not to its inner '{}'",
            inner_->name());
  ZT_ASSERT(host_device_->host_accessible(), "host staging device '{}' is not host memory",
            host_device_->name());
}

std::unique_ptr<Communicator> HostStagingCommunicator::backend_duplicate() {
  return std::make_unique<HostStagingCommunicator>(device_, inner_->duplicate());
}

HostStagingCommunicator::~HostStagingCommunicator() = default;

std::string HostStagingCommunicator::name() const { return inner_->name() + "+host-staging"; }

char* HostStagingCommunicator::staging(int64_t bytes) {
  if (staging_.bytes() < static_cast<size_t>(bytes)) {
    staging_.reset();  // free first: the tracked peak is the new size, not old + new
    staging_ = host_device_->alloc(static_cast<size_t>(bytes), MemCategory::kCommBuffers);
  }
  return staging_.as<char>();
}

void HostStagingCommunicator::backend_all_reduce(const void* send, void* recv, int64_t count,
                                                 DType dtype, ReduceOp op) {
  const int64_t bytes = count * static_cast<int64_t>(dtype_size(dtype));
  char* host = staging(bytes);
  device_.copy_to_host(host, send, bytes);
  inner_->all_reduce(host, host, count, dtype, op);
  device_.copy_from_host(recv, host, bytes);
}

void HostStagingCommunicator::backend_reduce_scatter(const void* send, void* recv,
                                                     int64_t recv_count, DType dtype, ReduceOp op) {
  const int64_t block = recv_count * static_cast<int64_t>(dtype_size(dtype));  // bytes
  char* host = staging(world() * block);
  device_.copy_to_host(host, send, world() * block);
  char* own = host + rank() * block;  // in place: block `rank` of the staged send
  inner_->reduce_scatter(host, own, recv_count, dtype, op);
  device_.copy_from_host(recv, own, block);
}

void HostStagingCommunicator::backend_all_gather(const void* send, void* recv, int64_t send_count,
                                                 DType dtype) {
  const int64_t block = send_count * static_cast<int64_t>(dtype_size(dtype));  // bytes
  char* host = staging(world() * block);
  char* own = host + rank() * block;  // in place: this rank's block of the staged recv
  device_.copy_to_host(own, send, block);
  inner_->all_gather(own, host, send_count, dtype);
  // When the caller was in place, this rewrites its own block with the same bytes.
  device_.copy_from_host(recv, host, world() * block);
}

void HostStagingCommunicator::backend_broadcast(void* buf, int64_t count, DType dtype, int root) {
  const int64_t bytes = count * static_cast<int64_t>(dtype_size(dtype));
  char* host = staging(bytes);
  if (rank() == root) device_.copy_to_host(host, buf, bytes);
  inner_->broadcast(host, count, dtype, root);
  if (rank() != root) device_.copy_from_host(buf, host, bytes);
}

}  // namespace zt
