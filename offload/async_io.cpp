// AsyncIo: the request queue, the worker threads (one AioQueue each) and the back-end choice.
// A worker takes blocks from the front request, stages them when they are not aligned, runs the
// request's hooks, keeps up to queue_depth in flight, continues partial transfers and turns every
// failure into the request's error.
#include "offload/async_io.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "offload/aio_queue.h"
#include "runtime/status.h"

namespace zt {

namespace detail {

struct AioRequest {
  AioRequestSpec spec;
  int64_t block_size = 0;
  int64_t num_blocks = 0;
  int64_t next_block = 0;           // under AioEngine::mutex_
  std::atomic<bool> failed{false};  // once set, blocks not yet taken are dropped
  std::mutex mutex;                 // guards the completion fields below
  std::condition_variable finished_cv;
  int64_t finished = 0;  // blocks done, failed or dropped
  bool done = false;
  std::exception_ptr error;  // the first error

  void finish(int64_t blocks, std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mutex);
    if (e && !error) {
      error = e;
      failed = true;
    }
    finished += blocks;
    if (finished == num_blocks) {
      done = true;
      finished_cv.notify_all();
    }
  }
};

class AioEngine;

// One worker thread and its queue. Slots are the I/Os it may have in flight.
class AioWorker {
 public:
  AioWorker(AioEngine& engine, const AioOptions& options, std::unique_ptr<AioQueue> queue)
      : engine_(engine), options_(options), queue_(std::move(queue)),
        slots_(static_cast<size_t>(options.queue_depth)) {
    for (Slot& s : slots_) free_.push_back(&s);
    thread_ = std::thread([this] { run(); });
  }
  ~AioWorker() { thread_.join(); }  // the engine stopped it first

 private:
  struct Slot {
    BlockIo io;
    std::shared_ptr<AioRequest> request;
    int64_t block = 0;
    size_t bytes = 0;      // the block's own bytes (io.bytes may add padding)
    char* user = nullptr;  // the block in the caller's memory
    bool staged = false;
    std::unique_ptr<char, decltype(&std::free)> staging{nullptr, &std::free};
  };

  void run();
  void fill();
  void submit(std::vector<BlockIo*>& batch);  // and clears it
  void fail_queue();
  bool prepare(Slot& s, std::shared_ptr<AioRequest> r, int64_t block);
  void complete(Slot& s);
  void release(Slot& s, std::exception_ptr error);
  std::exception_ptr block_error(const AioRequest& r, int64_t block, size_t bytes,
                                 const std::string& reason, int error) const;

  AioEngine& engine_;
  const AioOptions options_;
  std::unique_ptr<AioQueue> queue_;
  std::vector<Slot> slots_;
  std::vector<Slot*> free_;
  int in_flight_ = 0;
  std::exception_ptr broken_;  // the back end failed: every later block fails with this
  std::thread thread_;
};

class AioEngine {
 public:
  AioEngine(const AioOptions& options, AioBackend backend);
  ~AioEngine() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    work_.notify_all();
    workers_.clear();  // each drains the queue and its I/Os in flight, then returns
  }

  void enqueue(std::shared_ptr<AioRequest> r) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pending_.push_back(std::move(r));
    }
    work_.notify_all();
  }

  // The next block of the front request, dropping what is left of failed requests; false when
  // nothing is queued.
  bool take(std::shared_ptr<AioRequest>* r, int64_t* block) {
    std::lock_guard<std::mutex> lock(mutex_);
    while (!pending_.empty()) {
      std::shared_ptr<AioRequest> front = pending_.front();
      if (front->failed) {
        const int64_t dropped = front->num_blocks - front->next_block;
        front->next_block = front->num_blocks;
        pending_.pop_front();
        front->finish(dropped, nullptr);
        continue;
      }
      *block = front->next_block++;
      if (front->next_block == front->num_blocks) pending_.pop_front();
      *r = std::move(front);
      return true;
    }
    return false;
  }

  // Blocks until a request is queued (true) or the engine stops with nothing queued (false).
  bool wait_for_work() {
    std::unique_lock<std::mutex> lock(mutex_);
    work_.wait(lock, [&] { return stop_ || !pending_.empty(); });
    return !pending_.empty();
  }

 private:
  std::mutex mutex_;
  std::condition_variable work_;
  std::deque<std::shared_ptr<AioRequest>> pending_;
  bool stop_ = false;
  std::vector<std::unique_ptr<AioWorker>> workers_;  // last: they use the members above
};

namespace {

std::unique_ptr<AioQueue> make_queue(AioBackend backend, int depth, std::string* refused) {
  switch (backend) {
    case AioBackend::kIoUring:
#if ZT_HAVE_LIBURING
      return make_uring_queue(depth, refused);
#else
      *refused = "not in this build (liburing was not found when it was configured)";
      return nullptr;
#endif
    case AioBackend::kLibaio:
#if ZT_HAVE_LIBAIO
      return make_libaio_queue(depth, refused);
#else
      *refused = "not in this build (libaio was not found when it was configured)";
      return nullptr;
#endif
    case AioBackend::kThreads: return make_thread_queue(depth);
  }
  return nullptr;
}

}  // namespace

AioEngine::AioEngine(const AioOptions& options, AioBackend backend) {
  // Every queue first: a refusal then throws before any worker thread exists.
  std::vector<std::unique_ptr<AioQueue>> queues;
  for (int i = 0; i < options.intra_op_parallelism; ++i) {
    std::string refused;
    queues.push_back(make_queue(backend, options.queue_depth, &refused));
    if (!queues.back())
      throw_system(
          fmt::format("async I/O back end {}: {}; choose another with ZT_AIO_BACKEND "
                      "(io_uring, libaio, threads)",
                      aio_backend_name(backend), refused));
  }
  for (std::unique_ptr<AioQueue>& queue : queues)
    workers_.push_back(std::make_unique<AioWorker>(*this, options, std::move(queue)));
}

void AioWorker::run() {
  std::vector<BlockIo*> done(slots_.size());
  for (;;) {
    fill();
    if (in_flight_ == 0) {
      if (!engine_.wait_for_work()) return;
      continue;
    }
    size_t n = 0;
    try {
      n = queue_->wait(done);
    } catch (...) {
      fail_queue();
      continue;
    }
    for (size_t i = 0; i < n; ++i) complete(*static_cast<Slot*>(done[i]->owner));
  }
}

void AioWorker::fill() {
  // overlap_events off: a new batch only once the last one completed entirely.
  if (!options_.overlap_events && in_flight_ > 0) return;
  std::vector<BlockIo*> batch;
  while (!free_.empty()) {
    std::shared_ptr<AioRequest> r;
    int64_t block = 0;
    if (!engine_.take(&r, &block)) break;
    if (broken_) {
      r->finish(1, broken_);
      continue;
    }
    Slot& s = *free_.back();
    if (!prepare(s, std::move(r), block)) continue;
    free_.pop_back();
    ++in_flight_;
    batch.push_back(&s.io);
    if (options_.single_submit) submit(batch);
  }
  submit(batch);
}

void AioWorker::submit(std::vector<BlockIo*>& batch) {
  if (batch.empty()) return;
  if (broken_) {
    for (BlockIo* io : batch) release(*static_cast<Slot*>(io->owner), broken_);
  } else {
    try {
      queue_->submit(batch);
    } catch (...) {
      fail_queue();  // releases the batch's slots too
    }
  }
  batch.clear();
}

void AioWorker::fail_queue() {
  // The back end itself failed (not one I/O): destroying the queue cancels or waits for what
  // is in flight, after which every request this worker holds fails with the error.
  broken_ = std::current_exception();
  queue_.reset();
  for (Slot& s : slots_)
    if (s.request) release(s, broken_);
}

bool AioWorker::prepare(Slot& s, std::shared_ptr<AioRequest> r, int64_t block) {
  const AioRequestSpec& spec = r->spec;
  const int64_t start = block * r->block_size;
  const size_t bytes = static_cast<size_t>(std::min(r->block_size, spec.bytes - start));
  char* user = static_cast<char*>(spec.data) + start;
  const bool staged =
      reinterpret_cast<uintptr_t>(user) % kAioAlignment != 0 || bytes % kAioAlignment != 0;
  const size_t io_bytes = (bytes + kAioAlignment - 1) / kAioAlignment * kAioAlignment;
  const bool write = spec.op == AioRequestSpec::Op::kWrite;
  char* buffer = user;
  if (staged) {
    if (!s.staging) {
      s.staging.reset(static_cast<char*>(
          std::aligned_alloc(kAioAlignment, static_cast<size_t>(options_.block_size))));
      if (!s.staging) {
        r->finish(1, block_error(*r, block, bytes,
                                 fmt::format("cannot allocate a {}-byte staging buffer",
                                             options_.block_size),
                                 ENOMEM));
        return false;
      }
    }
    buffer = s.staging.get();
    if (write) {
      std::memcpy(buffer, user, bytes);
      std::memset(buffer + bytes, 0, io_bytes - bytes);
    }
  }
  if (write && spec.hooks) {
    int error = 0;
    try {
      error = spec.hooks->before_write(block, buffer, bytes);
    } catch (...) {
      r->finish(1, std::current_exception());
      return false;
    }
    if (error != 0) {
      r->finish(1, block_error(*r, block, bytes, std::strerror(error), error));
      return false;
    }
  }
  s.io = BlockIo{write, spec.fd, buffer, io_bytes, spec.offset + start, 0, &s};
  s.request = std::move(r);
  s.block = block;
  s.bytes = bytes;
  s.user = user;
  s.staged = staged;
  return true;
}

void AioWorker::complete(Slot& s) {
  const AioRequest& r = *s.request;
  const int64_t result = s.io.result;
  if (result < 0) {
    const int error = static_cast<int>(-result);
    release(s, block_error(r, s.block, s.bytes, std::strerror(error), error));
    return;
  }
  if (result == 0) {
    release(s, block_error(r, s.block, s.bytes,
                           s.io.write ? "the device took no bytes"
                                      : fmt::format("the file ends at byte {}", s.io.offset),
                           0));
    return;
  }
  if (static_cast<size_t>(result) < s.io.bytes) {  // partial: continue where it stopped
    s.io.buffer = static_cast<char*>(s.io.buffer) + result;
    s.io.offset += result;
    s.io.bytes -= static_cast<size_t>(result);
    s.io.result = 0;
    std::vector<BlockIo*> rest = {&s.io};
    submit(rest);
    return;
  }
  std::exception_ptr error;
  if (!s.io.write) {
    const char* data = s.staged ? s.staging.get() : s.user;
    try {
      if (r.spec.hooks) r.spec.hooks->after_read(s.block, data, s.bytes);
      if (s.staged) std::memcpy(s.user, data, s.bytes);  // only what passed the hook
    } catch (...) {
      error = std::current_exception();
    }
  }
  release(s, error);
}

void AioWorker::release(Slot& s, std::exception_ptr error) {
  std::shared_ptr<AioRequest> r = std::move(s.request);
  s.request.reset();
  free_.push_back(&s);
  --in_flight_;
  r->finish(1, error);
}

std::exception_ptr AioWorker::block_error(const AioRequest& r, int64_t block, size_t bytes,
                                          const std::string& reason, int error) const {
  const int64_t first = r.spec.offset + block * r.block_size;
  const int64_t last = first + static_cast<int64_t>(bytes) - 1;
  return std::make_exception_ptr(
      Error(ErrorKind::kSystem,
            fmt::format("cannot {} {}: block {} (bytes {}–{}): {}{}",
                        r.spec.op == AioRequestSpec::Op::kWrite ? "write" : "read", r.spec.what,
                        block, first, last, reason, error == ENOSPC ? r.spec.full_hint : "")));
}

}  // namespace detail

// ---- back-end choice ----------------------------------------------------------------------

std::string_view aio_backend_name(AioBackend backend) {
  switch (backend) {
    case AioBackend::kIoUring: return "io_uring";
    case AioBackend::kLibaio: return "libaio";
    case AioBackend::kThreads: return "threads";
  }
  return "?";
}

AioBackend parse_aio_backend(std::string_view name, std::string_view what) {
  for (AioBackend b : {AioBackend::kIoUring, AioBackend::kLibaio, AioBackend::kThreads})
    if (name == aio_backend_name(b)) return b;
  throw_input(fmt::format("{} must be io_uring, libaio or threads; got '{}'", what, name));
}

const AioBackendChoice& default_aio_backend() {
  static const AioBackendChoice choice = [] {
    if (const char* forced = std::getenv("ZT_AIO_BACKEND"); forced && *forced) {
      const AioBackend b = parse_aio_backend(forced, "ZT_AIO_BACKEND");
      return AioBackendChoice{b,
                              fmt::format("async I/O: {} (ZT_AIO_BACKEND)", aio_backend_name(b))};
    }
    std::string refusals;
    for (AioBackend b : {AioBackend::kIoUring, AioBackend::kLibaio}) {
      std::string refused;
      if (detail::make_queue(b, 1, &refused))
        return AioBackendChoice{b, fmt::format("async I/O: {}{}", aio_backend_name(b),
                                               refusals.empty() ? "" : " (" + refusals + ")")};
      refusals +=
          fmt::format("{}{}: {}", refusals.empty() ? "" : "; ", aio_backend_name(b), refused);
    }
    return AioBackendChoice{AioBackend::kThreads,
                            fmt::format("async I/O: threads with pread/pwrite ({})", refusals)};
  }();
  return choice;
}

// ---- AsyncIo ------------------------------------------------------------------------------

bool AioHandle::done() const {
  if (!request_) return true;
  std::lock_guard<std::mutex> lock(request_->mutex);
  return request_->done;
}

AsyncIo::AsyncIo(const AioOptions& options, std::optional<AioBackend> backend)
    : options_(options), backend_(backend ? *backend : default_aio_backend().backend) {
  if (options.block_size <= 0 || options.block_size % kAioAlignment != 0)
    throw_input(fmt::format("aio.block_size must be a positive multiple of {}; got {}",
                            kAioAlignment, options.block_size));
  if (options.queue_depth < 1 || options.queue_depth > 1024)
    throw_input(fmt::format("aio.queue_depth must be 1 to 1024; got {}", options.queue_depth));
  if (options.intra_op_parallelism < 1 || options.intra_op_parallelism > 64)
    throw_input(fmt::format("aio.intra_op_parallelism must be 1 to 64; got {}",
                            options.intra_op_parallelism));
  engine_ = std::make_unique<detail::AioEngine>(options_, backend_);
}

AsyncIo::~AsyncIo() = default;

AioHandle AsyncIo::submit(AioRequestSpec spec) {
  ZT_ASSERT(spec.bytes >= 0 && spec.offset % kAioAlignment == 0 && spec.fd >= 0,
            "bad request for {}: {} bytes at offset {}, fd {}", spec.what, spec.bytes, spec.offset,
            spec.fd);
  auto r = std::make_shared<detail::AioRequest>();
  r->block_size = options_.block_size;
  r->num_blocks = (spec.bytes + options_.block_size - 1) / options_.block_size;
  r->spec = std::move(spec);
  if (r->num_blocks == 0) {
    r->done = true;
    return AioHandle(std::move(r));
  }
  engine_->enqueue(r);
  return AioHandle(std::move(r));
}

void AsyncIo::wait(const AioHandle& handle) {
  ZT_ASSERT(handle.valid(), "wait on an empty AioHandle");
  detail::AioRequest& r = *handle.request_;
  std::unique_lock<std::mutex> lock(r.mutex);
  r.finished_cv.wait(lock, [&] { return r.done; });
  if (r.error) std::rethrow_exception(r.error);
}

}  // namespace zt
