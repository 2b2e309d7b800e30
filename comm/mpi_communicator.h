// MpiCommunicator: the CPU back end of Communicator, over a duplicate of an MPI communicator.
// reduce_scatter is our own schedule over point-to-point messages (direct pairwise exchange,
// pipelined in chunks through bounded staging buffers, summed in rank order: the determinism
// contract of comm/communicator.h); all_reduce is that reduce-scatter followed by an in-place
// MPI all-gather (small buffers: an all-gather of the inputs, reduced locally in rank order);
// all_gather and broadcast are MPI_Allgather and MPI_Bcast. Every MPI call goes through
// ZT_MPI_CHECK. It does not initialise MPI (MpiSession does) and allocates nothing after
// construction.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "comm/process_group.h"
#include "runtime/device.h"

namespace zt {

struct MpiCommunicatorOptions {
  // Bytes of one point-to-point message of reduce_scatter's pipeline: a multiple of 4 in
  // [4, 1 GiB]. 256 KiB to 2 MiB measured alike on 2 ranks and on 4 oversubscribed ranks over
  // shared memory (CMA) at 16 and 64 MiB; smaller chunks pay per-message costs, larger ones
  // leave L2. The staging holds kRecvDepth * (world-1) chunks.
  size_t chunk_bytes = 512 << 10;
};

class MpiCommunicator final : public Communicator {
 public:
  // reduce_scatter's pipeline: chunks received ahead per peer (each needs a staging slot: one
  // is reduced while the next arrives), and chunks sent ahead per peer (straight from send, no
  // staging; a deeper send window lets a rank that is ahead carry on without waiting for its
  // peers to pull what it sent).
  static constexpr int kRecvDepth = 2;
  static constexpr int kSendDepth = 4;
  // The staging a communicator of `world` ranks allocates from its device: kRecvDepth *
  // (world-1) * chunk_bytes (the memory planner counts it).
  static size_t staging_bytes(int world, const MpiCommunicatorOptions& options = {}) {
    return static_cast<size_t>(kRecvDepth) * static_cast<size_t>(world - 1) * options.chunk_bytes;
  }
  // all_reduce of at most this many bytes (and world times that fitting the staging) gathers
  // every rank's input and reduces locally instead: latency, not bandwidth, rules there.
  static constexpr int64_t kGatherReduceMaxBytes = 16 << 10;

  // Collective over `parent` (MPI_Comm_dup). Sets MPI_ERRORS_RETURN on the duplicate and
  // allocates the staging, kRecvDepth * (world-1) * chunk_bytes, from `device` under
  // MemCategory::kCommBuffers; device must outlive this communicator and is used by no other
  // thread during construction. Throws kInput for a bad chunk_bytes, kSystem for MPI errors.
  MpiCommunicator(Device& device, MPI_Comm parent = MPI_COMM_WORLD,
                  MpiCommunicatorOptions options = {});
  // Frees the duplicate unless MPI was finalised already. Not collective in effect on errors.
  ~MpiCommunicator() override;

  std::string name() const override { return "mpi"; }
  int rank() const override { return group_.rank; }
  int world() const override { return group_.world; }
  int local_rank() const override { return group_.local_rank; }
  int local_world() const override { return group_.local_world; }
  // An MpiCommunicator over a duplicate of this one's MPI communicator, staging from the same
  // device, with the same options.
  std::unique_ptr<Communicator> backend_duplicate() override;

  // The duplicate this communicator owns (for tests and benchmarks that compare with raw MPI;
  // not to be used while a CommQueue runs collectives of this communicator).
  MPI_Comm mpi_comm() const { return comm_; }
  size_t chunk_bytes() const { return chunk_bytes_; }
  size_t staging_bytes() const { return staging_.bytes(); }

 protected:
  void backend_all_reduce(const void* send, void* recv, int64_t count, DType dtype,
                          ReduceOp op) override;
  void backend_reduce_scatter(const void* send, void* recv, int64_t recv_count, DType dtype,
                              ReduceOp op) override;
  void backend_all_gather(const void* send, void* recv, int64_t send_count, DType dtype) override;
  void backend_broadcast(void* buf, int64_t count, DType dtype, int root) override;
  // MPI works on host memory: the same as backend_all_gather.
  void backend_all_gather_host(const void* send, void* recv, int64_t send_count,
                               DType dtype) override {
    backend_all_gather(send, recv, send_count, dtype);
  }

 private:
  // A buffer of `total` elements cut into world blocks of `block` elements, the last ones
  // shorter or empty when total is not a multiple: block p = [p*block, p*block + length(p)).
  struct BlockSplit {
    int64_t block;
    int64_t total;
    int64_t offset(int p) const { return p * block; }
    int64_t length(int p) const;
  };
  // Reduces block `rank` of send over ranks into own_out (length(rank) elements; may be the
  // block's own address in send: in place). Direct pairwise exchange: this rank sends block p,
  // chunk by chunk, to rank p and receives every peer's chunks of its own block into staging;
  // each chunk is reduced in rank order as soon as all peers' copies have arrived, while the
  // next chunks' messages are already posted (kRecvDepth, kSendDepth).
  void reduce_scatter_blocks(const char* send, char* own_out, const BlockSplit& split, DType dtype,
                             ReduceOp op);
  char* staging_slot(int64_t chunk_index, int distance) const;

  Device& device_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  ProcessGroup group_;
  size_t chunk_bytes_;
  Buffer staging_;  // kRecvDepth x (world-1) x chunk_bytes_
  // Per-call scratch, sized once (world is fixed): requests and the rank-ordered pointers.
  std::vector<MPI_Request> recv_requests_;          // kRecvDepth x (world-1)
  std::vector<MPI_Request> send_requests_;          // kSendDepth x (world-1)
  std::vector<const void*> contributions_;          // world
  std::vector<int> gather_counts_, gather_displs_;  // world
};

}  // namespace zt
