// NcclCommunicator: MPI bootstrap, the four NCCL collectives on its own stream (and the
// host-memory all-gather through a device buffer), and the watchdog that waits for them.
#include "comm/nccl_communicator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <source_location>
#include <thread>

#include <fmt/format.h>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/status.h"

namespace zt {

namespace {

[[noreturn]] void fail(int rank, std::string message,
                       std::source_location where = std::source_location::current()) {
  Error error(ErrorKind::kSystem, std::move(message), where);
  error.set_rank(rank);
  throw error;
}

// The one NCCL checking wrapper: ncclSuccess and ncclInProgress (a non-blocking communicator's
// "enqueued, not finished") pass; anything else throws kSystem naming the call and NCCL's words.
void check_nccl(ncclResult_t rc, const char* call, int rank,
                std::source_location where = std::source_location::current()) {
  if (rc == ncclSuccess || rc == ncclInProgress) return;
  const char* detail = ncclGetLastError(nullptr);
  fail(rank,
       fmt::format("{} failed: {} ({})", call, ncclGetErrorString(rc),
                   detail != nullptr && *detail != '\0' ? detail : "no further detail"),
       where);
}

#define ZT_NCCL_CHECK(call) check_nccl((call), #call, group_.rank)

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kF16: return ncclFloat16;
    case DType::kBF16: return ncclBfloat16;
  }
  throw_internal(fmt::format("no NCCL type for dtype {}", static_cast<int>(dtype)));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kMax: return ncclMax;
  }
  throw_internal(fmt::format("no NCCL op for reduce op {}", static_cast<int>(op)));
}

// What rank 0 broadcasts: its unique id, or that it could not make one (so that the other
// ranks fail too instead of waiting for an init that never comes).
struct RootId {
  int ok = 0;
  ncclUniqueId id{};
};

}  // namespace

NcclCommunicator::NcclCommunicator(CudaDevice& device, MPI_Comm parent, NcclOptions options)
    : device_(device), parent_(parent), timeout_s_(options.timeout_s),
      init_timeout_s_(options.init_timeout_s) {
  if (!(timeout_s_ > 0) || !std::isfinite(timeout_s_))
    throw_input(
        fmt::format("NCCL timeout must be a positive number of seconds "
                    "(zt.comm_timeout_s); got {}",
                    timeout_s_));
  if (!(init_timeout_s_ > 0) || !std::isfinite(init_timeout_s_))
    throw_input(
        fmt::format("NCCL init timeout must be a positive number of seconds "
                    "(zt.comm_init_timeout_s); got {}",
                    init_timeout_s_));
  // The bootstrap runs on a duplicate of parent, so that its messages cannot meet the user's.
  MPI_Comm boot = MPI_COMM_NULL;
  ZT_MPI_CHECK(MPI_Comm_dup(parent, &boot));
  RootId root_id;
  ncclResult_t id_rc = ncclSuccess;
  try {
    ZT_MPI_CHECK(MPI_Comm_set_errhandler(boot, MPI_ERRORS_RETURN));
    group_ = bootstrap_process_group(boot);
    if (group_.rank == 0) {
      id_rc = ncclGetUniqueId(&root_id.id);
      root_id.ok = id_rc == ncclSuccess ? 1 : 0;
    }
    ZT_MPI_CHECK(MPI_Bcast(&root_id, sizeof(RootId), MPI_BYTE, 0, boot));
  } catch (...) {
    MPI_Comm_free(&boot);
    throw;
  }
  ZT_MPI_CHECK(MPI_Comm_free(&boot));
  if (!root_id.ok) {
    ZT_NCCL_CHECK(id_rc);  // rank 0: the reason
    fail(group_.rank, "rank 0 could not create the NCCL unique id (see its error)");
  }

  try {
    ZT_CUDA_CHECK(cudaSetDevice(device_.ordinal()));
    ZT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    ZT_CUDA_CHECK(cudaEventCreateWithFlags(&compute_ready_, cudaEventDisableTiming));
    ZT_CUDA_CHECK(cudaEventCreateWithFlags(&comm_done_, cudaEventDisableTiming));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // every wait is ours, bounded (see the header)
    ZT_NCCL_CHECK(ncclCommInitRankConfig(&comm_, group_.world, root_id.id, group_.rank, &config));
    wait_until(
        [] { return true; }, now_s() + init_timeout_s_,
        fmt::format("communicator init (cuda:{}, {} ranks)", device_.ordinal(), group_.world),
        fmt::format("zt.comm_init_timeout_s = {:g} s", init_timeout_s_));
    host_gather_ = device_.alloc(kHostGatherBytes, MemCategory::kCommBuffers);
  } catch (...) {
    release();
    throw;
  }
}

std::unique_ptr<Communicator> NcclCommunicator::backend_duplicate() {
  NcclOptions options;
  options.timeout_s = timeout_s_;
  options.init_timeout_s = init_timeout_s_;
  return std::make_unique<NcclCommunicator>(device_, parent_, options);
}

NcclCommunicator::~NcclCommunicator() {
  // On an error path (an exception unwinding the stack) the peers may never finalize with us:
  // abort at once instead of waiting up to timeout_s in ncclCommFinalize.
  if (std::uncaught_exceptions() > 0) abort();
  release();
}

void NcclCommunicator::release() noexcept {
  if (comm_ != nullptr) {
    cudaSetDevice(device_.ordinal());  // errors: nothing to do in a destructor
    // Finalize flushes what was issued (nothing: every call waited) and may need the peers;
    // when it does not finish in time, abort.
    bool clean = false;
    const ncclResult_t rc = ncclCommFinalize(comm_);
    if (rc == ncclSuccess || rc == ncclInProgress) {
      const double deadline = now_s() + timeout_s_;
      ncclResult_t state = ncclInProgress;
      while (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state == ncclInProgress &&
             now_s() < deadline)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      clean = state == ncclSuccess;
    }
    if (clean) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
    comm_ = nullptr;
  }
  if (compute_ready_ != nullptr) cudaEventDestroy(compute_ready_);
  if (comm_done_ != nullptr) cudaEventDestroy(comm_done_);
  compute_ready_ = comm_done_ = nullptr;
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  stream_ = nullptr;
}

void NcclCommunicator::abort() noexcept {
  if (comm_ == nullptr) return;
  ncclCommAbort(comm_);  // errors: we are reporting a failure already
  comm_ = nullptr;
}

std::string NcclCommunicator::describe(const CollectiveCall& call) const {
  return fmt::format("{} of {} bytes", collective_kind_name(call.kind),
                     collective_bytes(call, group_.world));
}

void NcclCommunicator::wait_until(const std::function<bool()>& finished, double deadline,
                                  std::string_view what, std::string_view limit) {
  // Spin (yielding) for the first polls, which is where small collectives finish, then sleep.
  constexpr int kSpinPolls = 1000;
  for (int polls = 0;; ++polls) {
    ncclResult_t state = ncclSuccess;
    ZT_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state));
    if (state != ncclSuccess && state != ncclInProgress) {
      const char* detail = ncclGetLastError(comm_);
      abort();
      fail(group_.rank,
           fmt::format("NCCL {} on rank {} failed: {} ({}); communicator aborted", what,
                       group_.rank, ncclGetErrorString(state),
                       detail != nullptr && *detail != '\0' ? detail : "no further detail"));
    }
    if (state == ncclSuccess && finished()) return;
    if (now_s() > deadline) {
      abort();
      fail(group_.rank,
           fmt::format("NCCL {} on rank {} did not complete within {} (a rank stopped or "
                       "diverged); communicator aborted",
                       what, group_.rank, limit));
    }
    if (polls < kSpinPolls) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
}

void NcclCommunicator::begin(const CollectiveCall& call) {
  if (comm_ == nullptr)
    fail(group_.rank, fmt::format("NCCL {} on rank {}: the communicator was aborted by an "
                                  "earlier failure and cannot be used again",
                                  describe(call), group_.rank));
  ZT_CUDA_CHECK(cudaSetDevice(device_.ordinal()));  // this may be a CommQueue's thread
  ZT_CUDA_CHECK(cudaEventRecord(compute_ready_, device_.compute_stream()));
  ZT_CUDA_CHECK(cudaStreamWaitEvent(stream_, compute_ready_, 0));
}

void NcclCommunicator::finish(const CollectiveCall& call) {
  const double deadline = now_s() + timeout_s_;
  const std::string what = describe(call);
  const std::string limit = fmt::format("zt.comm_timeout_s = {:g} s", timeout_s_);
  // Non-blocking: the call above may still be enqueueing; our stream holds the
  // collective once NCCL's state is ncclSuccess.
  wait_until([] { return true; }, deadline, what, limit);
  ZT_CUDA_CHECK(cudaEventRecord(comm_done_, stream_));
  wait_until(
      [this] {
        const cudaError_t status = cudaEventQuery(comm_done_);
        if (status == cudaErrorNotReady) return false;
        if (status != cudaSuccess)
          throw_cuda_error("cudaEventQuery(comm_done_)", status, __FILE__, __LINE__);
        return true;
      },
      deadline, what, limit);
}

void NcclCommunicator::backend_all_reduce(const void* send, void* recv, int64_t count, DType dtype,
                                          ReduceOp op) {
  const CollectiveCall call{CollectiveKind::kAllReduce, send, recv, count, dtype, op, 0};
  begin(call);
  ZT_NCCL_CHECK(ncclAllReduce(send, recv, static_cast<size_t>(count), nccl_type(dtype), nccl_op(op),
                              comm_, stream_));
  finish(call);
}

// NCCL's in-place rules are ours: recv == send + rank*recv_count (reduce_scatter),
// send == recv + rank*send_count (all_gather).
void NcclCommunicator::backend_reduce_scatter(const void* send, void* recv, int64_t recv_count,
                                              DType dtype, ReduceOp op) {
  const CollectiveCall call{CollectiveKind::kReduceScatter, send, recv, recv_count, dtype, op, 0};
  begin(call);
  ZT_NCCL_CHECK(ncclReduceScatter(send, recv, static_cast<size_t>(recv_count), nccl_type(dtype),
                                  nccl_op(op), comm_, stream_));
  finish(call);
}

void NcclCommunicator::backend_all_gather(const void* send, void* recv, int64_t send_count,
                                          DType dtype) {
  const CollectiveCall call{
      CollectiveKind::kAllGather, send, recv, send_count, dtype, ReduceOp::kSum, 0};
  begin(call);
  ZT_NCCL_CHECK(
      ncclAllGather(send, recv, static_cast<size_t>(send_count), nccl_type(dtype), comm_, stream_));
  finish(call);
}

void NcclCommunicator::backend_all_gather_host(const void* send, void* recv, int64_t send_count,
                                               DType dtype) {
  CollectiveCall call{CollectiveKind::kAllGather, send, recv, send_count, dtype, ReduceOp::kSum, 0};
  call.host_memory = true;
  const int n = group_.world, r = group_.rank;
  const int64_t size = static_cast<int64_t>(dtype_size(dtype));
  const int64_t piece = static_cast<int64_t>(host_gather_.bytes()) / (n * size);  // elements
  ZT_ASSERT(piece > 0, "all_gather_host: {} ranks do not fit a {}-byte buffer", n,
            host_gather_.bytes());
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  char* gathered = host_gather_.as<char>();
  cudaStream_t stream = stream_;
  // In place (send == recv + rank*block) is safe: a piece of send is read before the same
  // piece of recv is written, and later pieces are not written yet.
  for (int64_t first = 0; first < send_count; first += piece) {
    const int64_t count = std::min(piece, send_count - first);
    const size_t bytes = static_cast<size_t>(count * size);
    begin(call);
    ZT_CUDA_CHECK(cudaMemcpyAsync(gathered + r * bytes, in + first * size, bytes,
                                  cudaMemcpyHostToDevice, stream));
    ZT_NCCL_CHECK(ncclAllGather(gathered + r * bytes, gathered, static_cast<size_t>(count),
                                nccl_type(dtype), comm_, stream));
    finish(call);  // the watchdog's wait: the copy below then waits for nothing unfinished
    ZT_CUDA_CHECK(cudaMemcpy2DAsync(out + first * size, static_cast<size_t>(send_count * size),
                                    gathered, bytes, bytes, static_cast<size_t>(n),
                                    cudaMemcpyDeviceToHost, stream));
    ZT_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
}

void NcclCommunicator::backend_broadcast(void* buf, int64_t count, DType dtype, int root) {
  const CollectiveCall call{
      CollectiveKind::kBroadcast, buf, buf, count, dtype, ReduceOp::kSum, root};
  begin(call);
  ZT_NCCL_CHECK(
      ncclBroadcast(buf, buf, static_cast<size_t>(count), nccl_type(dtype), root, comm_, stream_));
  finish(call);
}

}  // namespace zt
