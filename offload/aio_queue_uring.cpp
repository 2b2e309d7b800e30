// The io_uring back end (liburing): one ring per worker, sized to its queue depth, submissions
// batched into one io_uring_submit.
#include <liburing.h>

#include <cerrno>
#include <cstring>
#include <sched.h>

#include "offload/aio_queue.h"
#include "runtime/status.h"

namespace zt::detail {

namespace {

class UringQueue final : public AioQueue {
 public:
  explicit UringQueue(io_uring ring) : ring_(ring) {}
  ~UringQueue() override { io_uring_queue_exit(&ring_); }  // the kernel cancels what is in flight

  void submit(std::span<BlockIo* const> ios) override {
    for (BlockIo* io : ios) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      ZT_ASSERT(sqe != nullptr, "io_uring submission queue full with {} I/Os asked", ios.size());
      if (io->write)
        io_uring_prep_write(sqe, io->fd, io->buffer, static_cast<unsigned>(io->bytes),
                            static_cast<uint64_t>(io->offset));
      else
        io_uring_prep_read(sqe, io->fd, io->buffer, static_cast<unsigned>(io->bytes),
                           static_cast<uint64_t>(io->offset));
      io_uring_sqe_set_data(sqe, io);
    }
    // Per-I/O errors come back in completions; a failure here is the ring's own.
    for (;;) {
      const int rc = io_uring_submit(&ring_);
      if (rc >= 0) return;
      if (rc == -EINTR) continue;
      if (rc == -EAGAIN || rc == -EBUSY) {
        sched_yield();
        continue;
      }
      throw_system(fmt::format("io_uring_submit: {}", std::strerror(-rc)));
    }
  }

  size_t wait(std::span<BlockIo*> done) override {
    io_uring_cqe* cqe = nullptr;
    int rc;
    while ((rc = io_uring_wait_cqe(&ring_, &cqe)) == -EINTR) {
    }
    if (rc < 0) throw_system(fmt::format("io_uring_wait_cqe: {}", std::strerror(-rc)));
    size_t n = 0;
    while (n < done.size() && io_uring_peek_cqe(&ring_, &cqe) == 0) {
      auto* io = static_cast<BlockIo*>(io_uring_cqe_get_data(cqe));
      io->result = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      done[n++] = io;
    }
    return n;
  }

 private:
  io_uring ring_;
};

}  // namespace

std::unique_ptr<AioQueue> make_uring_queue(int depth, std::string* refused) {
  io_uring ring;
  const int rc = io_uring_queue_init(static_cast<unsigned>(depth), &ring, 0);
  if (rc < 0) {
    *refused = fmt::format("io_uring_queue_init: {}", std::strerror(-rc));
    return nullptr;
  }
  return std::make_unique<UringQueue>(ring);
}

}  // namespace zt::detail
