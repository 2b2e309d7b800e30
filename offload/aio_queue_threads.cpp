// The thread-pool back end, for kernels that refuse io_uring and libaio: `depth` threads, each
// taking the next I/O and running one pread/pwrite for it.
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "offload/aio_queue.h"

namespace zt::detail {

namespace {

class ThreadQueue final : public AioQueue {
 public:
  explicit ThreadQueue(int depth) {
    for (int i = 0; i < depth; ++i) threads_.emplace_back([this] { serve(); });
  }
  ~ThreadQueue() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    work_.notify_all();
    for (std::thread& t : threads_) t.join();  // each finishes the I/O it runs
  }

  void submit(std::span<BlockIo* const> ios) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pending_.insert(pending_.end(), ios.begin(), ios.end());
    }
    if (ios.size() == 1)
      work_.notify_one();
    else
      work_.notify_all();
  }

  size_t wait(std::span<BlockIo*> done) override {
    std::unique_lock<std::mutex> lock(mutex_);
    finished_cv_.wait(lock, [&] { return !finished_.empty(); });
    size_t n = 0;
    while (n < done.size() && !finished_.empty()) {
      done[n++] = finished_.front();
      finished_.pop_front();
    }
    return n;
  }

 private:
  void serve() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      work_.wait(lock, [&] { return stop_ || !pending_.empty(); });
      if (pending_.empty()) return;  // stopping
      BlockIo* io = pending_.front();
      pending_.pop_front();
      lock.unlock();
      ssize_t rc;
      do {
        rc = io->write ? ::pwrite(io->fd, io->buffer, io->bytes, io->offset)
                       : ::pread(io->fd, io->buffer, io->bytes, io->offset);
      } while (rc < 0 && errno == EINTR);
      io->result = rc < 0 ? -errno : rc;
      lock.lock();
      finished_.push_back(io);
      finished_cv_.notify_one();
    }
  }

  std::mutex mutex_;
  std::condition_variable work_, finished_cv_;
  std::deque<BlockIo*> pending_, finished_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

std::unique_ptr<AioQueue> make_thread_queue(int depth) {
  return std::make_unique<ThreadQueue>(depth);
}

}  // namespace zt::detail
