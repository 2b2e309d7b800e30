// AioQueue: the narrow interface the three async-I/O back ends implement (aio_queue_uring.cpp,
// aio_queue_libaio.cpp, aio_queue_threads.cpp): submit block I/Os, wait for completions. One
// queue per AsyncIo worker thread, used by that thread only. A back end moves bytes and reports
// results; splitting, staging, partial transfers and errors are AsyncIo's (async_io.cpp).
// Internal to offload/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace zt::detail {

// One pread/pwrite-shaped I/O. `result`: bytes moved, or -errno (set by the back end).
struct BlockIo {
  bool write = false;
  int fd = -1;
  void* buffer = nullptr;
  size_t bytes = 0;
  int64_t offset = 0;
  int64_t result = 0;
  void* owner = nullptr;  // the caller's; back ends leave it alone
};

class AioQueue {
 public:
  virtual ~AioQueue() = default;
  // Starts the I/Os (at most the queue's depth in flight at once, which the caller keeps to).
  // A submission the kernel refuses completes its I/O with result -errno; nothing throws.
  virtual void submit(std::span<BlockIo* const> ios) = 0;
  // Blocks until at least one submitted I/O completed; writes up to done.size() of them and
  // returns how many. Called only with I/Os in flight.
  virtual size_t wait(std::span<BlockIo*> done) = 0;
};

// Each returns null and sets *refused to the reason ("io_setup: Resource temporarily
// unavailable") when the kernel refuses the back end. make_thread_queue always succeeds.
std::unique_ptr<AioQueue> make_uring_queue(int depth, std::string* refused);
std::unique_ptr<AioQueue> make_libaio_queue(int depth, std::string* refused);
std::unique_ptr<AioQueue> make_thread_queue(int depth);

}  // namespace zt::detail
