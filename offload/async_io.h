// AsyncIo: asynchronous block I/O on file descriptors, the engine under the NVMe swap store.
// A request (read or write of `bytes` at `offset` of one fd, to or from host memory) is split
// into blocks of AioOptions::block_size; worker threads keep up to queue_depth blocks in flight
// each, on one of three back ends, chosen at run time in this order of preference by trying to
// initialise each: io_uring (liburing), libaio (the kernel's native AIO), a thread pool of
// pread/pwrite. ZT_AIO_BACKEND=io_uring|libaio|threads forces one (tests, benchmarks).
//
// Alignment: a block goes straight to or from the caller's memory when its address and length
// are multiples of kAioAlignment (what O_DIRECT needs); otherwise through an aligned staging
// buffer of the worker's in-flight slot (one block_size buffer per slot, allocated on first use),
// its length rounded up to kAioAlignment (a read fills the padding from the file, a write pads
// with zeros). So an unaligned request, or the tail of an odd-sized one, costs one memcpy.
//
// Errors: every failed block (EIO, ENOSPC, a short transfer that makes no progress, a read that
// meets the end of the file) fails its request with one kSystem line naming the file, the block,
// its bytes and the OS error: "cannot write swap file /x/h3.master.swp: block 4 (bytes
// 4194304–5242879): No space left on device". A partial transfer is continued where it stopped.
// Once a request failed, its blocks not yet submitted are dropped; the ones in flight finish.
// Nothing here opens, sizes or names files (offload/swap_store.h does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace zt {

// DeepSpeed's `aio` block, its key names and defaults (use_gds is refused by the config).
struct AioOptions {
  int64_t block_size = 1 << 20;  // bytes per submitted I/O; a positive multiple of 4096
  int queue_depth = 8;           // blocks in flight per worker thread
  int intra_op_parallelism = 1;  // worker threads, each with its own queue (old: thread_count)
  bool single_submit = false;    // submit blocks one call each instead of in batches
  bool overlap_events = true;    // submit as soon as any block completes; false: refill only
                                 // once the whole batch in flight completed
};

// O_DIRECT's alignment of buffer addresses, lengths and file offsets on the disks we meet
// (4096-byte physical sectors; 512 would do on some).
inline constexpr int64_t kAioAlignment = 4096;

enum class AioBackend { kIoUring, kLibaio, kThreads };
std::string_view aio_backend_name(AioBackend backend);  // "io_uring", "libaio", "threads"
// "io_uring" etc. -> the back end; kInput naming `what` otherwise.
AioBackend parse_aio_backend(std::string_view name, std::string_view what);

// The back end a process uses unless told otherwise: ZT_AIO_BACKEND when set, else the first
// of io_uring, libaio, threads whose initialisation succeeds here. Probed once per process;
// `describe` is the line to log once ("async I/O: libaio (io_uring: io_uring_queue_init: Operation
// not permitted)").
struct AioBackendChoice {
  AioBackend backend;
  std::string describe;
};
const AioBackendChoice& default_aio_backend();

// Hooks a request runs around each block, on the worker thread that handles the block. `data`
// and `bytes` are the block's own bytes (padding excluded), in the buffer the I/O uses.
class BlockHooks {
 public:
  virtual ~BlockHooks() = default;
  // Before block `index` of a write is submitted. Returns 0, or an errno the block then fails
  // with as if the kernel had returned it (a simulated full disk).
  virtual int before_write(int64_t index, const void* data, size_t bytes) { return 0; }
  // After block `index` of a read arrived, before it is copied out of a staging buffer. Throws
  // (a zt::Error) to fail the request.
  virtual void after_read(int64_t index, const void* data, size_t bytes) {}
};

namespace detail {
struct AioRequest;
class AioEngine;
}  // namespace detail

// A request in flight. Copyable; wait on it through AsyncIo::wait.
class AioHandle {
 public:
  AioHandle() = default;
  bool valid() const { return request_ != nullptr; }
  bool done() const;  // finished (successfully or not); never blocks

 private:
  friend class AsyncIo;
  explicit AioHandle(std::shared_ptr<detail::AioRequest> request) : request_(std::move(request)) {}
  std::shared_ptr<detail::AioRequest> request_;
};

struct AioRequestSpec {
  enum class Op { kRead, kWrite };
  Op op = Op::kRead;
  int fd = -1;
  void* data = nullptr;  // host memory; valid and untouched by the caller until wait returns
  int64_t bytes = 0;
  int64_t offset = 0;                 // a multiple of kAioAlignment
  std::string what;                   // the file as errors name it: "swap file /x/h3.master.swp"
  std::string full_hint;              // appended to an ENOSPC error ("; the NVMe path /x is full")
  std::shared_ptr<BlockHooks> hooks;  // may be null
};

class AsyncIo {
 public:
  // kInput naming the option when an option is out of range; kSystem when the back end cannot
  // be initialised (a forced one that the kernel refuses names the back end and the reason).
  explicit AsyncIo(const AioOptions& options, std::optional<AioBackend> backend = std::nullopt);
  // Waits for every request submitted, then stops the workers. Errors are not reported here.
  ~AsyncIo();
  AsyncIo(const AsyncIo&) = delete;
  AsyncIo& operator=(const AsyncIo&) = delete;

  // Queues the request and returns at once (a request of 0 bytes is done at once).
  AioHandle submit(AioRequestSpec spec);
  // Blocks until the request finished; throws its error (a kSystem line, or what a hook threw).
  // Waiting again on a finished request returns (or throws) the same again.
  void wait(const AioHandle& handle);

  AioBackend backend() const { return backend_; }
  const AioOptions& options() const { return options_; }

 private:
  AioOptions options_;
  AioBackend backend_;
  std::unique_ptr<detail::AioEngine> engine_;  // the request queue and the workers
};

}  // namespace zt
