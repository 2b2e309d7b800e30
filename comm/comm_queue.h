// CommQueue: one communication thread that executes a communicator's collectives in submission
// order, so collectives overlap with compute on the calling thread (ZeRO-2/3 reduce-scatter a
// unit's gradients while the next unit's backward runs; ZeRO-3 prefetches the next gather).
// Starting a collective (submit) and waiting for it (CommHandle::wait) are two calls.
// While a queue is attached to a communicator, every collective of that communicator, the
// synchronous calls included, runs on the queue's thread: the back end (MPI) is entered by one
// thread at a time, and every rank issues collectives in the order its user thread called them.
// It does not reorder, merge or split collectives, and it allocates no communication buffers.
//
// Failure: each submitted collective carries the name of the unit it is for and the queue's
// context ("step 12"), which a communicator's watchdog names when it times out
// (Communicator::set_watchdog). On an error path the queue abandons what is still pending
// instead of running it (abandon(), and a destructor or handle destructor that runs while an
// exception unwinds the stack): the ranks are out of step then, and queued collectives would
// wait for peers that never issue them. A collective already running cannot be interrupted;
// that is why launch/ ends the job (MPI_Abort) before unwinding.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "comm/communicator.h"

namespace zt {

// The completion of one submitted collective. Move-only. Destroying a handle that was not
// waited for blocks until its collective finished (the buffers it names may be freed right
// after), without throwing; the error, if any, is still seen by CommQueue::drain(). When that
// happens while an exception unwinds the stack and the collective has not finished, the queue
// abandons its pending work first (CommQueue::abandon), so the wait is for the one collective
// already running at most.
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
  CommHandle(std::shared_future<void> finished, CommQueue* queue)
      : finished_(std::move(finished)), queue_(queue) {}
  std::shared_future<void> finished_;
  CommQueue* queue_ = nullptr;  // alive while finished_ is not ready
};

class CommQueue {
 public:
  // Starts the communication thread and attaches to `comm`, which must outlive the queue and
  // have no queue attached (else kInternal). From here on every collective of `comm` runs on
  // this queue's thread.
  explicit CommQueue(Communicator& comm);
  // Runs every submitted collective to completion, stops the thread and detaches from comm.
  // While an exception unwinds the stack (more uncaught exceptions than at construction) it
  // abandons the pending ones instead and waits only for the one running.
  ~CommQueue();
  CommQueue(const CommQueue&) = delete;
  CommQueue& operator=(const CommQueue&) = delete;

  // Submit a collective: the same contracts as Communicator's call of the same name, validated
  // here (a kInput error throws at once, nothing is queued), but the call returns at once. The
  // buffers must stay valid, send unmodified and recv untouched, until the handle's wait()
  // returns. Collectives run one at a time in submission order. Once one fails, every later
  // one is not run and fails with the same error: the ranks are out of step after a failure.
  // `unit` names the unit the collective is for (copied), for a watchdog's report; may be empty.
  CommHandle all_reduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                        std::string_view unit = {});
  CommHandle reduce_scatter(const void* send, void* recv, int64_t recv_count, DType dtype,
                            ReduceOp op, std::string_view unit = {});
  CommHandle all_gather(const void* send, void* recv, int64_t send_count, DType dtype,
                        std::string_view unit = {});
  CommHandle broadcast(void* buf, int64_t count, DType dtype, int root, std::string_view unit = {});
  CommHandle submit(const CollectiveCall& call, std::string_view unit = {});

  // What the user thread is doing, e.g. "step 12" or "evaluation after step 12": copied into
  // every collective submitted from now on (a watchdog names it). Empty at first.
  void set_context(std::string context);

  // Error path: every collective submitted and not yet started fails (kSystem, "abandoned")
  // without running, and so does every later submit; the one running, if any, finishes, since
  // no back end can interrupt it. Returns at once. Idempotent; safe from any thread.
  void abandon();
  bool abandoned() const;

  // Returns when every collective submitted so far has finished; throws the first failure of
  // this queue, if any collective has failed.
  void drain();

  Communicator& communicator() const { return comm_; }
  // True on the queue's own thread.
  bool on_worker_thread() const { return std::this_thread::get_id() == worker_id_; }

 private:
  struct Task {
    CollectiveCall call;
    std::string unit;
    std::string context;
    std::promise<void> finished;
  };
  void run_worker();
  // Under mutex_: fails every pending task with the abandonment error.
  void abandon_locked();

  Communicator& comm_;
  mutable std::mutex mutex_;
  std::condition_variable work_ready_;  // a task arrived, or stopping_
  std::condition_variable idle_;        // pending_ drained and nothing running
  std::deque<Task> pending_;
  bool running_ = false;  // the worker is executing a task popped from pending_
  bool stopping_ = false;
  bool abandoned_ = false;
  std::string context_;
  std::exception_ptr failure_;  // the first error; later tasks fail with it
  const int uncaught_at_construction_;
  std::thread worker_;
  std::thread::id worker_id_;
};

}  // namespace zt
