// MpiCommunicator: the pipelined pairwise reduce-scatter and the MPI calls of the other
// collectives.
#include "comm/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include <fmt/format.h>

#include "comm/rank_order_reduction.h"
#include "runtime/status.h"

namespace zt {

namespace {

// One tag for every reduce-scatter message: MPI keeps messages between a pair of ranks on one
// communicator in order, and collectives run one at a time in the same order on every rank.
constexpr int kReduceScatterTag = 7101;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Element types for the calls that only move data.
MPI_Datatype mpi_element_type(DType dtype) {
  return dtype == DType::kF32 ? MPI_FLOAT : MPI_UINT16_T;
}

int checked_int(int64_t value, std::string_view what) {
  if (value > INT_MAX)
    throw_input(
        fmt::format("{}: {} elements exceed what one MPI call can count ({}); split the "
                    "buffer",
                    what, value, INT_MAX));
  return static_cast<int>(value);
}

}  // namespace

int64_t MpiCommunicator::BlockSplit::length(int p) const {
  return std::clamp<int64_t>(total - p * block, 0, block);
}

MpiCommunicator::MpiCommunicator(Device& device, MPI_Comm parent, MpiCommunicatorOptions options)
    : device_(device), chunk_bytes_(options.chunk_bytes) {
  if (chunk_bytes_ < 4 || chunk_bytes_ % 4 != 0 || chunk_bytes_ > (size_t(1) << 30))
    throw_input(
        fmt::format("MPI communicator chunk_bytes must be a multiple of 4 in [4, 1 GiB]; "
                    "got {}",
                    chunk_bytes_));
  ZT_MPI_CHECK(MPI_Comm_dup(parent, &comm_));
  try {
    ZT_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    group_ = bootstrap_process_group(comm_);
  } catch (...) {
    MPI_Comm_free(&comm_);
    throw;
  }
  const size_t peers = static_cast<size_t>(group_.world - 1);
  staging_ = device.alloc(staging_bytes(group_.world, options), MemCategory::kCommBuffers);
  recv_requests_.assign(kRecvDepth * peers, MPI_REQUEST_NULL);
  send_requests_.assign(kSendDepth * peers, MPI_REQUEST_NULL);
  contributions_.assign(group_.world, nullptr);
  gather_counts_.assign(group_.world, 0);
  gather_displs_.assign(group_.world, 0);
}

std::unique_ptr<Communicator> MpiCommunicator::backend_duplicate() {
  MpiCommunicatorOptions options;
  options.chunk_bytes = chunk_bytes_;
  return std::make_unique<MpiCommunicator>(device_, comm_, options);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);  // errors: nothing to do
}

char* MpiCommunicator::staging_slot(int64_t chunk_index, int distance) const {
  const int64_t peers = group_.world - 1;
  const int64_t slot = (chunk_index % kRecvDepth) * peers + (distance - 1);
  return staging_.as<char>() + slot * static_cast<int64_t>(chunk_bytes_);
}

void MpiCommunicator::reduce_scatter_blocks(const char* send, char* own_out,
                                            const BlockSplit& split, DType dtype, ReduceOp op) {
  const int n = group_.world, r = group_.rank, peers = n - 1;
  const int64_t size = static_cast<int64_t>(dtype_size(dtype));
  const int64_t chunk = static_cast<int64_t>(chunk_bytes_) / size;  // elements per message
  const int64_t own_length = split.length(r);
  const int64_t own_chunks = ceil_div(own_length, chunk);
  const int64_t max_chunks = ceil_div(split.length(0), chunk);  // block 0 is the longest
  // Peers in order of distance d = 1..n-1: send to r+d, receive from r-d, so no rank is
  // everyone's first target.
  auto send_peer = [&](int d) { return (r + d) % n; };
  auto recv_peer = [&](int d) { return (r - d + n) % n; };
  // Bytes of chunk k of block p.
  auto chunk_bytes_of = [&](int p, int64_t k) {
    return checked_int(std::min(chunk, split.length(p) - k * chunk) * size, "reduce_scatter");
  };

  std::fill(recv_requests_.begin(), recv_requests_.end(), MPI_REQUEST_NULL);
  std::fill(send_requests_.begin(), send_requests_.end(), MPI_REQUEST_NULL);
  auto post_receives = [&](int64_t k) {
    if (k >= own_chunks) return;
    MPI_Request* requests = &recv_requests_[(k % kRecvDepth) * peers];
    for (int d = 1; d < n; ++d)
      ZT_MPI_CHECK(MPI_Irecv(staging_slot(k, d), chunk_bytes_of(r, k), MPI_BYTE, recv_peer(d),
                             kReduceScatterTag, comm_, &requests[d - 1]));
  };
  auto post_sends = [&](int64_t k) {
    if (k >= max_chunks) return;
    MPI_Request* requests = &send_requests_[(k % kSendDepth) * peers];
    for (int d = 1; d < n; ++d) {
      const int p = send_peer(d);
      if (k * chunk >= split.length(p)) continue;  // block p has fewer chunks
      const char* data = send + (split.offset(p) + k * chunk) * size;
      ZT_MPI_CHECK(MPI_Isend(data, chunk_bytes_of(p, k), MPI_BYTE, p, kReduceScatterTag, comm_,
                             &requests[d - 1]));
    }
  };

  for (int64_t k = 0; k < kRecvDepth; ++k) post_receives(k);
  for (int64_t k = 0; k < kSendDepth; ++k) post_sends(k);
  for (int64_t k = 0; k < max_chunks; ++k) {
    if (k < own_chunks) {
      ZT_MPI_CHECK(
          MPI_Waitall(peers, &recv_requests_[(k % kRecvDepth) * peers], MPI_STATUSES_IGNORE));
      const int64_t begin = k * chunk;
      for (int p = 0; p < n; ++p)
        contributions_[p] =
            p == r ? send + (split.offset(r) + begin) * size : staging_slot(k, (r - p + n) % n);
      reduce_in_rank_order(contributions_, own_out + begin * size,
                           std::min(chunk, own_length - begin), dtype, op);
      post_receives(k + kRecvDepth);  // into the slot just reduced
    }
    ZT_MPI_CHECK(
        MPI_Waitall(peers, &send_requests_[(k % kSendDepth) * peers], MPI_STATUSES_IGNORE));
    post_sends(k + kSendDepth);
  }
}

void MpiCommunicator::backend_reduce_scatter(const void* send, void* recv, int64_t recv_count,
                                             DType dtype, ReduceOp op) {
  const int n = group_.world;
  const char* send_bytes = static_cast<const char*>(send);
  if (n == 1) {
    if (send != recv) std::memcpy(recv, send, recv_count * dtype_size(dtype));
    return;
  }
  reduce_scatter_blocks(send_bytes, static_cast<char*>(recv), {recv_count, n * recv_count}, dtype,
                        op);
}

void MpiCommunicator::backend_all_reduce(const void* send, void* recv, int64_t count, DType dtype,
                                         ReduceOp op) {
  const int n = group_.world, r = group_.rank;
  const int64_t size = static_cast<int64_t>(dtype_size(dtype));
  char* out = static_cast<char*>(recv);
  if (n == 1) {
    if (send != recv) std::memcpy(recv, send, count * size);
    return;
  }
  if (count * size <= kGatherReduceMaxBytes && n * count * size <= int64_t(staging_.bytes())) {
    // Small buffers: one all-gather of every rank's input into the staging, then each rank
    // reduces all of it in rank order itself: one collective instead of two, and the same
    // arithmetic, so the same bits as the reduce-scatter path.
    const int bytes = static_cast<int>(count * size);
    char* gathered = staging_.as<char>();
    ZT_MPI_CHECK(MPI_Allgather(send, bytes, MPI_BYTE, gathered, bytes, MPI_BYTE, comm_));
    for (int p = 0; p < n; ++p) contributions_[p] = gathered + int64_t(p) * bytes;
    reduce_in_rank_order(contributions_, recv, count, dtype, op);
    return;
  }
  // Blocks of ceil(count/world) elements; the last ones are shorter or empty when count is not
  // a multiple of world (reduce_scatter_blocks and all-gather-v take uneven blocks directly, so
  // no padded copy of the buffer is made). In place, block p of the input is read from recv
  // and only block `rank` of recv is written before the gather.
  const BlockSplit split{ceil_div(count, n), count};
  char* own_out = split.length(r) > 0 ? out + split.offset(r) * size : out;
  reduce_scatter_blocks(static_cast<const char*>(send), own_out, split, dtype, op);

  const MPI_Datatype type = mpi_element_type(dtype);
  if (count % n == 0) {
    ZT_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv,
                               checked_int(split.block, "all_reduce"), type, comm_));
  } else {
    checked_int(count, "all_reduce");
    for (int p = 0; p < n; ++p) {
      gather_counts_[p] = static_cast<int>(split.length(p));
      gather_displs_[p] = static_cast<int>(std::min(split.offset(p), count));
    }
    ZT_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, gather_counts_.data(),
                                gather_displs_.data(), type, comm_));
  }
}

void MpiCommunicator::backend_all_gather(const void* send, void* recv, int64_t send_count,
                                         DType dtype) {
  const int n = group_.world, r = group_.rank;
  const int64_t size = static_cast<int64_t>(dtype_size(dtype));
  char* out = static_cast<char*>(recv);
  const bool in_place = send == out + r * send_count * size;
  if (n == 1) {
    if (!in_place) std::memcpy(recv, send, send_count * size);
    return;
  }
  const int count = checked_int(send_count, "all_gather");
  const MPI_Datatype type = mpi_element_type(dtype);
  if (in_place) {
    ZT_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, count, type, comm_));
  } else {
    ZT_MPI_CHECK(MPI_Allgather(send, count, type, recv, count, type, comm_));
  }
}

void MpiCommunicator::backend_broadcast(void* buf, int64_t count, DType dtype, int root) {
  if (group_.world == 1) return;
  const int64_t size = static_cast<int64_t>(dtype_size(dtype));
  const MPI_Datatype type = mpi_element_type(dtype);
  char* data = static_cast<char*>(buf);
  for (int64_t begin = 0; begin < count; begin += INT_MAX) {  // MPI counts are int
    const int piece = static_cast<int>(std::min<int64_t>(INT_MAX, count - begin));
    ZT_MPI_CHECK(MPI_Bcast(data + begin * size, piece, type, root, comm_));
  }
}

}  // namespace zt
