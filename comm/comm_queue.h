// CommQueue: one communication thread that executes a communicator's collectives in submission
// order, so collectives overlap with compute on the calling thread (ZeRO-2/3 reduce-scatter a
// unit's gradients while the next unit's backward runs; ZeRO-3 prefetches the next gather).
// Starting a collective (submit) and waiting for it (CommHandle::wait) are two calls.
// While a queue is attached to a communicator, every collective of that communicator, the
// synchronous calls included, runs on the queue's thread: the back end (MPI) is entered by one
// thread at a time, and every rank issues collectives in the order its user thread called them.
// It does not reorder, merge or split collectives, and it allocates no communication buffers.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/communicator.h"

namespace zt {

// The completion of one submitted collective. Move-only. Destroying a handle that was not
// waited for blocks until its collective finished (the buffers it names may be freed right
// after), without throwing; the error, if any, is still seen by CommQueue::drain().
class CommHandle {
 public:
  CommHandle() = default;  // an empty handle: wait() returns at once, done() is true
  CommHandle(CommHandle&&) noexcept = default;
  CommHandle& operator=(CommHandle&& other) noexcept;
  ~CommHandle();

  // Returns when the collective has finished on this rank (its recv holds the result, its send
  // may be reused); rethrows the zt::Error it failed with. May be called again (same outcome).
  void wait();
  // True when wait() would return at once.
  bool done() const;

 private:
  friend class CommQueue;
  explicit CommHandle(std::shared_future<void> finished) : finished_(std::move(finished)) {}
  std::shared_future<void> finished_;
};

class CommQueue {
 public:
  // Starts the communication thread and attaches to `comm`, which must outlive the queue and
  // have no queue attached (else kInternal). From here on every collective of `comm` runs on
  // this queue's thread.
  explicit CommQueue(Communicator& comm);
  // Runs every submitted collective to completion, stops the thread and detaches from comm.
  ~CommQueue();
  CommQueue(const CommQueue&) = delete;
  CommQueue& operator=(const CommQueue&) = delete;

  // Submit a collective: the same contracts as Communicator's call of the same name, validated
  // here (a kInput error throws at once, nothing is queued), but the call returns at once. The
  // buffers must stay valid, send unmodified and recv untouched, until the handle's wait()
  // returns. Collectives run one at a time in submission order. Once one fails, every later
  // one is not run and fails with the same error: the ranks are out of step after a failure.
  CommHandle all_reduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op);
  CommHandle reduce_scatter(const void* send, void* recv, int64_t recv_count, DType dtype,
                            ReduceOp op);
  CommHandle all_gather(const void* send, void* recv, int64_t send_count, DType dtype);
  CommHandle broadcast(void* buf, int64_t count, DType dtype, int root);
  CommHandle submit(const CollectiveCall& call);

  // Returns when every collective submitted so far has finished; throws the first failure of
  // this queue, if any collective has failed.
  void drain();

  Communicator& communicator() const { return comm_; }
  // True on the queue's own thread.
  bool on_worker_thread() const { return std::this_thread::get_id() == worker_id_; }

 private:
  struct Task {
    CollectiveCall call;
    std::promise<void> finished;
  };
  void run_worker();

  Communicator& comm_;
  std::mutex mutex_;
  std::condition_variable work_ready_;  // a task arrived, or stopping_
  std::condition_variable idle_;        // pending_ drained and nothing running
  std::deque<Task> pending_;
  bool running_ = false;   // the worker is executing a task popped from pending_
  bool stopping_ = false;
  std::exception_ptr failure_;  // the first error; later tasks fail with it
  std::thread worker_;
  std::thread::id worker_id_;
};

}  // namespace zt
