// HostWorker: one thread that runs tasks in submission order: the offloaded optimizer's CPU
// Adam on one unit's shard after another, while the engine's thread goes on with the backward
// and moves gradients and parameters between the device and the host. submit returns at once;
// wait(ticket) blocks until that task finished and rethrows what it threw. The destructor runs
// what was submitted, then joins. Tasks touch host memory only: no device call, no tracked
// allocation (MemoryTracker and the devices are the engine thread's). Each task's start and end
// are kept, so a caller can tell how much of the work ran before a point in time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace zt {

class HostWorker {
 public:
  using Clock = std::chrono::steady_clock;
  using Ticket = size_t;

  HostWorker();
  ~HostWorker();
  HostWorker(const HostWorker&) = delete;
  HostWorker& operator=(const HostWorker&) = delete;

  Ticket submit(std::function<void()> task);
  // True when the task has finished (successfully or not).
  bool done(Ticket ticket) const;
  // Blocks until the task finished; rethrows its exception.
  void wait(Ticket ticket);
  // Waits for every task submitted so far, without rethrowing (error paths).
  void drain();

  // Seconds spent running tasks (submitted since the last reset, finished), and the part of
  // them that ran before `point`.
  double busy_seconds() const;
  double busy_seconds_before(Clock::time_point point) const;
  // Forgets finished tasks' times (they must all have finished).
  void reset_times();

 private:
  struct Task {
    std::function<void()> run;
    bool finished = false;
    std::exception_ptr error;
    Clock::time_point start, end;
  };
  void run_worker();

  mutable std::mutex mutex_;
  std::condition_variable work_ready_, task_done_;
  std::deque<Task> tasks_;  // ticket t is tasks_[t - first_]
  Ticket first_ = 0;        // the ticket of tasks_.front()
  Ticket next_run_ = 0;     // the next ticket the worker runs
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace zt
