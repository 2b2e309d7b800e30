// SelfCommunicator: copies, on the device (device memory) or with memcpy (host memory).
#include "comm/self_communicator.h"

#include <cstring>

namespace zt {

void SelfCommunicator::copy_unless_in_place(const void* send, void* recv, int64_t count,
                                            DType dtype) {
  if (send != recv) device_.copy(recv, send, static_cast<size_t>(count) * dtype_size(dtype));
}

void SelfCommunicator::backend_all_reduce(const void* send, void* recv, int64_t count, DType dtype,
                                          ReduceOp op) {
  copy_unless_in_place(send, recv, count, dtype);
}

void SelfCommunicator::backend_reduce_scatter(const void* send, void* recv, int64_t recv_count,
                                              DType dtype, ReduceOp op) {
  copy_unless_in_place(send, recv, recv_count, dtype);
}

void SelfCommunicator::backend_all_gather(const void* send, void* recv, int64_t send_count,
                                          DType dtype) {
  copy_unless_in_place(send, recv, send_count, dtype);
}

void SelfCommunicator::backend_all_gather_host(const void* send, void* recv, int64_t send_count,
                                               DType dtype) {
  if (send != recv) std::memcpy(recv, send, static_cast<size_t>(send_count) * dtype_size(dtype));
}

}  // namespace zt
