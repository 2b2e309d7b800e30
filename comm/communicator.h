// Communicator: the collective interface of ZeroTrain (all-reduce, reduce-scatter, all-gather,
// broadcast over one device's memory), with contracts written like nccl.h. The public calls
// validate their arguments, route through an attached CommQueue when there is one, and keep
// CommStats; back ends (MpiCommunicator, SelfCommunicator, HostStagingCommunicator,
// NcclCommunicator; chosen by comm/communicator_factory.h) implement only the protected
// backend_* entries.
// This file does no communication itself and allocates nothing. The rank-order reduction
// arithmetic the CPU back ends share is comm/rank_order_reduction.h.
//
// Determinism contract of the CPU back ends, MPI and Self, and of HostStagingCommunicator over
// them; NOT of NcclCommunicator, which reduces in NCCL's own order (comm/nccl_communicator.h).
// It is what ZeRO stages 0-3 being bitwise equal rests on: a reduction combines each element
// over ranks in rank order, (((x0 op x1) op x2) op ...), in fp32; fp16 and bf16
// inputs are widened to fp32 exactly and the fp32 result is rounded once, to nearest even
// (runtime/dtype.h). An element's result therefore depends only on the ranks' values of that
// element: all_reduce gives the same bits as reduce_scatter followed by all_gather, however a
// caller splits a buffer into calls. Pinned by tests/mpi/comm_test.cpp
// (*MatchesRankOrderReference, AllReduceEqualsReduceScatterThenAllGather) and
// tests/mpi/reduction_test.cpp.
#pragma once

#include <array>
#include <memory>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/dtype.h"

namespace zt {

enum class ReduceOp {
  kSum,
  kMax,  // NaN wins: the result is NaN when any contribution is NaN
};
std::string_view reduce_op_name(ReduceOp op);  // "sum", "max"

enum class CollectiveKind { kAllReduce, kReduceScatter, kAllGather, kBroadcast };
inline constexpr int kNumCollectiveKinds = 4;
std::string_view collective_kind_name(CollectiveKind kind);  // "all_reduce", "reduce_scatter", ...

// What one kind of collective cost on this rank. `bytes` counts the size of the whole buffer as
// nccl-tests does: all_reduce and broadcast count*size, reduce_scatter the send buffer
// (world*recv_count*size), all_gather the receive buffer (world*send_count*size). `seconds` is
// the time spent executing (on the communication thread when a CommQueue runs it), not queued.
struct CollectiveStats {
  int64_t calls = 0;
  int64_t bytes = 0;
  double seconds = 0;
};

struct CommStats {
  std::array<CollectiveStats, kNumCollectiveKinds> by_kind{};

  const CollectiveStats& operator[](CollectiveKind kind) const {
    return by_kind[static_cast<size_t>(kind)];
  }
  CollectiveStats& operator[](CollectiveKind kind) { return by_kind[static_cast<size_t>(kind)]; }
  // One line per kind that was called: "all_reduce: 12 calls, 48.0 MiB, 15.3 ms".
  std::string to_string() const;
  // Adds another communicator's counters, kind by kind.
  CommStats& operator+=(const CommStats& other) {
    for (size_t k = 0; k < by_kind.size(); ++k) {
      by_kind[k].calls += other.by_kind[k].calls;
      by_kind[k].bytes += other.by_kind[k].bytes;
      by_kind[k].seconds += other.by_kind[k].seconds;
    }
    return *this;
  }
};

// One collective call, as validated by Communicator and queued by CommQueue. For broadcast,
// send == recv == the buffer; `op` is unused by all_gather and broadcast, `root` only by broadcast.
struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  int64_t count = 0;  // elements: all_reduce/broadcast count, reduce_scatter recv_count,
                      // all_gather send_count
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  // all_gather only: send and recv are host memory on every back end (all_gather_host), not
  // the back end's device memory. Counted in CommStats as an all_gather.
  bool host_memory = false;
};

class CommQueue;
class CollectiveWatchdog;
struct CollectiveTimeout;  // comm/collective_watchdog.h
// Told about a collective that ran past its timeout (comm/collective_watchdog.h): launch/ installs
// one that prints a line and ends the job; library code never exits.
using WatchdogHandler = std::function<void(const CollectiveTimeout&)>;

// Not thread-safe by itself: one user thread calls it. With a CommQueue attached, the queue's
// thread executes every collective (also the synchronous calls below, which then submit and
// wait), so a back end is only ever entered by one thread at a time and, as long as every rank
// calls in the same order, every rank issues its collectives in the same order.
//
// Every call is collective: all ranks of the communicator call it with the same count, dtype,
// op and root. Buffers are in the memory of the back end's device (host memory for MPI and
// Self, GPU memory for NCCL and host staging), except all_gather_host's, which are host memory
// on every back end; count == 0 is a no-op on every rank (pointers may
// then be null). An error throws zt::Error (kInput for arguments, kSystem for the transport);
// after a kSystem error the communicator's ranks may be out of step and it should not be used
// again.
class Communicator {
 public:
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  virtual ~Communicator();

  virtual std::string name() const = 0;  // "mpi", "self"
  virtual int rank() const = 0;          // in [0, world)
  virtual int world() const = 0;
  virtual int local_rank() const = 0;  // among the ranks that share this machine
  virtual int local_world() const = 0;

  // A new communicator over the same ranks whose collectives never meet this one's (MPI:
  // MPI_Comm_dup; NCCL: a new NCCL communicator), so two threads may each run collectives on
  // one of the two at the same time; each keeps its own order. The engine gathers parameters
  // on a duplicate so a stage-3 prefetch never waits behind a gradient reduction. It must not
  // outlive this communicator. The duplicate has this one's watchdog (timeout and handler).
  // Collective.
  std::unique_ptr<Communicator> duplicate();

  // recv[i] = op over ranks of send[i], i in [0, count), the same bits on every rank.
  // send and recv hold count elements. In place when send == recv; any other overlap is an
  // error. Returns when recv holds the result and send may be reused.
  void all_reduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op);

  // send holds world*recv_count elements, block p = [p*recv_count, (p+1)*recv_count); recv
  // (recv_count elements) receives block `rank` reduced over ranks. In place when
  // recv == (char*)send + rank*recv_count*dtype_size; any other overlap is an error.
  // Returns when recv holds the result and send may be reused.
  void reduce_scatter(const void* send, void* recv, int64_t recv_count, DType dtype, ReduceOp op);

  // recv holds world*send_count elements; block r = rank r's send (send_count elements).
  // In place when send == (char*)recv + rank*send_count*dtype_size; any other overlap is an
  // error. Returns when recv holds every block and send may be reused.
  void all_gather(const void* send, void* recv, int64_t send_count, DType dtype);

  // all_gather with send and recv in HOST memory, whatever memory the back end's collectives
  // use otherwise (MPI, Self: directly; host staging: its inner host communicator; NCCL: through
  // a small device buffer of its own). For small host values every rank needs (losses, norm
  // partials, memory figures); the same contract, ordering (through an attached CommQueue) and
  // stats (as all_gather) as all_gather.
  void all_gather_host(const void* send, void* recv, int64_t send_count, DType dtype);

  // Copies root's buf (count elements) into buf on every rank. root in [0, world), else kInput.
  // Returns when buf holds root's data (on root: when buf may be modified).
  void broadcast(void* buf, int64_t count, DType dtype, int root);

  // Counters of the collectives this communicator executed. Read them while no collective of
  // an attached CommQueue is in flight (after wait() or CommQueue::drain()).
  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = CommStats{}; }

  // The attached queue, or nullptr.
  CommQueue* queue() const { return queue_; }

  // Watches every collective this communicator executes from now on, on every back end: one
  // running longer than timeout_s (zt.comm_timeout_s) is reported once to `handler`, from a
  // watchdog thread (MPI cannot cancel a collective, so the stuck thread cannot report it
  // itself). The report names the collective, the unit it was submitted for and the
  // CommQueue's context (CommQueue::submit, set_context). Call before a CommQueue is attached
  // (else kInternal); a second call replaces the watchdog. kInput for a timeout that is not a
  // positive finite number. NcclCommunicator keeps its own deadline as well, which aborts the
  // NCCL communicator (ncclCommAbort); its timeout is then reported through the same handler.
  void set_watchdog(double timeout_s, WatchdogHandler handler);
  bool watched() const { return watchdog_ != nullptr; }

 protected:
  // The back end's half of duplicate(): a communicator over a new, independent channel.
  virtual std::unique_ptr<Communicator> backend_duplicate() = 0;

  Communicator();  // defined where CollectiveWatchdog is complete

  // Back-end entries. Arguments are validated (count > 0, pointers non-null, buffers either
  // exactly in place or disjoint, root in range); the same contracts as the public calls.
  virtual void backend_all_reduce(const void* send, void* recv, int64_t count, DType dtype,
                                  ReduceOp op) = 0;
  virtual void backend_reduce_scatter(const void* send, void* recv, int64_t recv_count, DType dtype,
                                      ReduceOp op) = 0;
  virtual void backend_all_gather(const void* send, void* recv, int64_t send_count,
                                  DType dtype) = 0;
  virtual void backend_broadcast(void* buf, int64_t count, DType dtype, int root) = 0;
  // all_gather_host: send and recv are host memory (every back end must say how it moves them).
  virtual void backend_all_gather_host(const void* send, void* recv, int64_t send_count,
                                       DType dtype) = 0;

 private:
  friend class CommQueue;
  // Throws kInput naming the collective when `call` breaks its contract.
  void validate(const CollectiveCall& call) const;
  // Runs a validated call on the calling thread: the back end, timed into stats_, watched by
  // the watchdog when one is set (unit and context name it in a timeout report).
  void execute(const CollectiveCall& call, std::string_view unit = {},
               std::string_view context = {});
  // The back end's entry for a validated call with count > 0.
  void run_backend(const CollectiveCall& call);
  // validate, then execute here or (queue attached, called from another thread) via the queue.
  void submit_and_wait(const CollectiveCall& call);

  CommStats stats_;
  CommQueue* queue_ = nullptr;  // set and cleared by CommQueue's constructor and destructor
  std::unique_ptr<CollectiveWatchdog> watchdog_;
  double watchdog_timeout_s_ = 0;  // what set_watchdog was given, for duplicate()
  WatchdogHandler watchdog_handler_;
};

// Every rank's `values` (the same count on each), rank after rank: values travel as fp32 word
// pairs through all_gather_host, which copies bits and never does arithmetic; host memory on
// every back end, a GPU's included. Collective.
std::vector<double> all_gather_doubles(Communicator& comm, std::span<const double> values);

// Bytes a call counts in CollectiveStats (see there).
int64_t collective_bytes(const CollectiveCall& call, int world);

}  // namespace zt
