// The libaio back end (the kernel's native AIO, io_setup/io_submit/io_getevents): one context
// per worker, one iocb per I/O in flight.
#include <libaio.h>

#include <cerrno>
#include <cstring>
#include <sched.h>
#include <vector>

#include "offload/aio_queue.h"
#include "runtime/status.h"

namespace zt::detail {

namespace {

class LibaioQueue final : public AioQueue {
 public:
  LibaioQueue(io_context_t context, int depth)
      : context_(context), iocbs_(static_cast<size_t>(depth)), events_(static_cast<size_t>(depth)) {
    for (iocb& cb : iocbs_) free_.push_back(&cb);
  }
  ~LibaioQueue() override { io_destroy(context_); }  // waits for what is in flight

  void submit(std::span<BlockIo* const> ios) override {
    std::vector<iocb*> batch;
    batch.reserve(ios.size());
    for (BlockIo* io : ios) {
      ZT_ASSERT(!free_.empty(), "libaio queue full with {} I/Os asked", ios.size());
      iocb* cb = free_.back();
      free_.pop_back();
      if (io->write)
        io_prep_pwrite(cb, io->fd, io->buffer, io->bytes, io->offset);
      else
        io_prep_pread(cb, io->fd, io->buffer, io->bytes, io->offset);
      cb->data = io;
      batch.push_back(cb);
    }
    // io_submit queues a prefix of the batch, or fails the first iocb (-EINVAL for a misaligned
    // O_DIRECT buffer, -EBADF, ...): that one completes with the error, the rest is retried.
    size_t at = 0;
    while (at < batch.size()) {
      const int rc = io_submit(context_, static_cast<long>(batch.size() - at), batch.data() + at);
      if (rc > 0) {
        at += static_cast<size_t>(rc);
      } else if (rc == -EINTR || rc == -EAGAIN || rc == 0) {
        sched_yield();
      } else {
        auto* io = static_cast<BlockIo*>(batch[at]->data);
        io->result = rc;
        free_.push_back(batch[at]);
        refused_.push_back(io);
        ++at;
      }
    }
  }

  size_t wait(std::span<BlockIo*> done) override {
    size_t n = 0;
    while (n < done.size() && !refused_.empty()) {
      done[n++] = refused_.back();
      refused_.pop_back();
    }
    if (n > 0) return n;
    const long want = static_cast<long>(std::min(done.size(), events_.size()));
    int rc;
    while ((rc = io_getevents(context_, 1, want, events_.data(), nullptr)) == -EINTR) {
    }
    if (rc < 0) throw_system(fmt::format("io_getevents: {}", std::strerror(-rc)));
    for (int i = 0; i < rc; ++i) {
      auto* io = static_cast<BlockIo*>(events_[i].data);
      // res is the byte count or -errno in an unsigned field.
      io->result = static_cast<long>(events_[i].res);
      free_.push_back(events_[i].obj);
      done[n++] = io;
    }
    return n;
  }

 private:
  io_context_t context_;
  std::vector<iocb> iocbs_;
  std::vector<iocb*> free_;
  std::vector<io_event> events_;
  std::vector<BlockIo*> refused_;  // failed at submission, reported by the next wait
};

}  // namespace

std::unique_ptr<AioQueue> make_libaio_queue(int depth, std::string* refused) {
  io_context_t context = nullptr;
  const int rc = io_setup(depth, &context);
  if (rc < 0) {
    *refused = fmt::format("io_setup: {}", std::strerror(-rc));
    return nullptr;
  }
  return std::make_unique<LibaioQueue>(context, depth);
}

}  // namespace zt::detail
