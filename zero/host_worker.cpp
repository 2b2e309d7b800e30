// HostWorker: a FIFO of tasks and the thread that runs them.
#include "zero/host_worker.h"

#include <algorithm>

#include "runtime/status.h"

namespace zt {

HostWorker::HostWorker() : worker_([this] { run_worker(); }) {}

HostWorker::~HostWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  worker_.join();
}

HostWorker::Ticket HostWorker::submit(std::function<void()> task) {
  Ticket ticket;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ticket = first_ + tasks_.size();
    Task t;
    t.run = std::move(task);
    tasks_.push_back(std::move(t));
  }
  work_ready_.notify_one();
  return ticket;
}

void HostWorker::run_worker() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_ready_.wait(lock, [&] { return stopping_ || next_run_ < first_ + tasks_.size(); });
    if (next_run_ == first_ + tasks_.size()) return;  // stopping, nothing left to run
    Task& task = tasks_[next_run_ - first_];          // deque references survive push_back
    const std::function<void()> run = std::move(task.run);
    lock.unlock();
    const Clock::time_point start = Clock::now();
    std::exception_ptr error;
    try {
      run();
    } catch (...) {
      error = std::current_exception();
    }
    const Clock::time_point end = Clock::now();
    lock.lock();
    Task& finished = tasks_[next_run_ - first_];
    finished.start = start;
    finished.end = end;
    finished.error = error;
    finished.finished = true;
    ++next_run_;
    task_done_.notify_all();
  }
}

bool HostWorker::done(Ticket ticket) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return ticket < next_run_;
}

void HostWorker::wait(Ticket ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  ZT_ASSERT(ticket >= first_ && ticket < first_ + tasks_.size(), "host task {} unknown", ticket);
  task_done_.wait(lock, [&] { return ticket < next_run_; });
  if (std::exception_ptr error = tasks_[ticket - first_].error) std::rethrow_exception(error);
}

void HostWorker::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  task_done_.wait(lock, [&] { return next_run_ == first_ + tasks_.size(); });
}

double HostWorker::busy_seconds() const { return busy_seconds_before(Clock::time_point::max()); }

double HostWorker::busy_seconds_before(Clock::time_point point) const {
  std::lock_guard<std::mutex> lock(mutex_);
  double seconds = 0.0;
  for (const Task& t : tasks_) {
    if (!t.finished || t.start >= point) continue;
    seconds += std::chrono::duration<double>(std::min(t.end, point) - t.start).count();
  }
  return seconds;
}

void HostWorker::reset_times() {
  std::lock_guard<std::mutex> lock(mutex_);
  ZT_ASSERT(next_run_ == first_ + tasks_.size(), "reset_times with {} host tasks unfinished",
            first_ + tasks_.size() - next_run_);
  first_ += tasks_.size();
  tasks_.clear();
}

}  // namespace zt
