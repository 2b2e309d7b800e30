// CommQueue's thread and CommHandle's waiting. The collectives themselves are the attached
// communicator's; this file only orders them and carries their completion and errors back.
#include "comm/comm_queue.h"

#include <utility>

#include "runtime/status.h"

namespace zt {

CommHandle& CommHandle::operator=(CommHandle&& other) noexcept {
  if (this != &other) {
    if (finished_.valid()) finished_.wait();
    finished_ = std::move(other.finished_);
    queue_ = std::exchange(other.queue_, nullptr);
  }
  return *this;
}

CommHandle::~CommHandle() {
  if (!finished_.valid()) return;
  // Unwinding past an unfinished collective: this rank will not follow the schedule any more,
  // so nothing queued behind it may start (it could wait for peers forever).
  if (queue_ != nullptr && std::uncaught_exceptions() > 0 && !done()) queue_->abandon();
  finished_.wait();
}

void CommHandle::wait() {
  if (finished_.valid()) finished_.get();  // shared_future::get rethrows the stored error
}

bool CommHandle::done() const {
  return !finished_.valid() ||
         finished_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

CommQueue::CommQueue(Communicator& comm)
    : comm_(comm), uncaught_at_construction_(std::uncaught_exceptions()) {
  if (comm.queue_ != nullptr)
    throw_internal(fmt::format("communicator '{}' already has a CommQueue attached", comm.name()));
  worker_ = std::thread([this] { run_worker(); });
  worker_id_ = worker_.get_id();
  comm.queue_ = this;
}

CommQueue::~CommQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (std::uncaught_exceptions() > uncaught_at_construction_) abandon_locked();
    stopping_ = true;
  }
  work_ready_.notify_one();
  worker_.join();  // the worker empties pending_ before it leaves
  comm_.queue_ = nullptr;
}

CommHandle CommQueue::all_reduce(const void* send, void* recv, int64_t count, DType dtype,
                                 ReduceOp op, std::string_view unit) {
  return submit({CollectiveKind::kAllReduce, send, recv, count, dtype, op, 0}, unit);
}

CommHandle CommQueue::reduce_scatter(const void* send, void* recv, int64_t recv_count, DType dtype,
                                     ReduceOp op, std::string_view unit) {
  return submit({CollectiveKind::kReduceScatter, send, recv, recv_count, dtype, op, 0}, unit);
}

CommHandle CommQueue::all_gather(const void* send, void* recv, int64_t send_count, DType dtype,
                                 std::string_view unit) {
  return submit({CollectiveKind::kAllGather, send, recv, send_count, dtype, ReduceOp::kSum, 0},
                unit);
}

CommHandle CommQueue::broadcast(void* buf, int64_t count, DType dtype, int root,
                                std::string_view unit) {
  return submit({CollectiveKind::kBroadcast, buf, buf, count, dtype, ReduceOp::kSum, root}, unit);
}

CommHandle CommQueue::submit(const CollectiveCall& call, std::string_view unit) {
  comm_.validate(call);
  Task task{call, std::string(unit), {}, {}};
  CommHandle handle(task.finished.get_future().share(), this);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ZT_ASSERT(!stopping_, "submit to a CommQueue that is being destroyed");
    if (abandoned_) {
      task.finished.set_exception(failure_);
      return handle;
    }
    task.context = context_;
    pending_.push_back(std::move(task));
  }
  work_ready_.notify_one();
  return handle;
}

void CommQueue::set_context(std::string context) {
  std::lock_guard<std::mutex> lock(mutex_);
  context_ = std::move(context);
}

void CommQueue::abandon() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    abandon_locked();
  }
  idle_.notify_all();
}

bool CommQueue::abandoned() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return abandoned_;
}

void CommQueue::abandon_locked() {
  if (abandoned_) return;
  abandoned_ = true;
  std::exception_ptr error;
  try {
    Error e(ErrorKind::kSystem,
            fmt::format("collective abandoned on rank {}: an earlier error ended this rank's "
                        "part in the job",
                        comm_.rank()));
    e.set_rank(comm_.rank());
    throw e;
  } catch (...) {
    error = std::current_exception();
  }
  if (!failure_) failure_ = error;
  for (Task& task : pending_) task.finished.set_exception(failure_);
  pending_.clear();
}

void CommQueue::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [this] { return pending_.empty() && !running_; });
  if (failure_) std::rethrow_exception(failure_);
}

void CommQueue::run_worker() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_ready_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
    if (pending_.empty()) return;  // stopping_ and nothing left
    Task task = std::move(pending_.front());
    pending_.pop_front();
    running_ = true;
    std::exception_ptr earlier = failure_;
    lock.unlock();

    std::exception_ptr error = earlier;
    if (!error) {
      try {
        comm_.execute(task.call, task.unit, task.context);
      } catch (...) {
        error = std::current_exception();
      }
    }

    lock.lock();
    if (error && !failure_) failure_ = error;
    running_ = false;
    if (error) {
      task.finished.set_exception(error);
    } else {
      task.finished.set_value();
    }
    if (pending_.empty()) idle_.notify_all();
  }
}

}  // namespace zt
