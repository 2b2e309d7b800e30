// SwapStore: one rank's NVMe swap files, written and read asynchronously (offload/async_io.h)
// with a CRC32C per block checked on every read. The NVMe tier under the shard stores; it knows
// keys and bytes, not units, shards or devices (src and dst are host memory).
//
// Files. `<nvme_path>/zt_swap/rank<R>/<key>.swp`, one per key (the caller's "h3.master",
// "h3.exp_avg": unit and kind), so names are the same in every run and never carry a pid or
// an address. A file holds the key's bytes padded with zeros to a multiple of 4096; it is opened
// O_DIRECT (no page cache) and, at each write that changes its size, sized with fallocate so a
// full disk shows before any data is written and the writes do not extend the file.
// Where the file system refuses O_DIRECT (tmpfs before Linux 6.6) the store uses buffered I/O and
// says so once through `notice`.
//
// Checksums. A CRC32C of every block (AioOptions::block_size bytes, the last one shorter) is
// computed on the worker thread just before the block is written and kept in memory; every
// block read is checked before it reaches the caller's memory. They are not written to disk: a
// swap file is only ever read by the process that wrote it (stale files are removed at start-up,
// below), so a copy on disk would have no reader. A mismatch fails the read with
// "swap file <path>: block <k> (bytes <a>–<b>) fails its checksum (...); refusing to use it";
// a file shorter than what was written with "swap file <path> is truncated: ...".
//
// Lifetime. The constructor takes an exclusive flock on `<rank dir>/.lock`; when another live
// process (another job on the same nvme_path, or a second store of this rank) holds it, it fails
// naming the directory and the holder's pid. With the lock taken, any *.swp file left there is
// stale (a run that was killed) and is removed, with one notice saying how many: a swap file is
// never appended to or reused across runs. The destructor (a clean exit) waits for every request,
// removes the files, the lock and the rank directory, and zt_swap/ when it is empty.
//
// Errors are one line naming the file: I/O errors with the block and the OS error (async_io.h),
// ENOSPC also naming nvme_path. Not thread-safe: one thread drives a store.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "offload/async_io.h"

namespace zt {

struct SwapStoreOptions {
  std::string nvme_path;  // offload_optimizer.nvme_path / offload_param.nvme_path; must exist
  int rank = 0;
  AioOptions aio;
  std::optional<AioBackend> backend;  // unset: default_aio_backend() (ZT_AIO_BACKEND or probe)
  // Tests without a small file system: once this many bytes in total were written through the
  // store, a block fails with ENOSPC as on a full disk. Negative: no limit (the default).
  int64_t test_write_limit = -1;
  // One line per event worth a log line (stale files removed, buffered I/O instead of O_DIRECT).
  // Unset: silent. The back end chosen is default_aio_backend().describe, logged by the caller.
  std::function<void(const std::string&)> notice;
};

// A write or read in flight; wait on it through SwapStore::wait.
class SwapHandle {
 public:
  SwapHandle() = default;
  bool valid() const { return io_.valid(); }
  bool done() const { return io_.done(); }

 private:
  friend class SwapStore;
  SwapHandle(AioHandle io, std::string key) : io_(std::move(io)), key_(std::move(key)) {}
  AioHandle io_;
  std::string key_;
};

class SwapStore {
 public:
  // Creates the rank directory, takes its lock and removes stale swap files. kInput when
  // nvme_path does not exist or the directory is locked by a live process; kSystem when the
  // directory cannot be made.
  explicit SwapStore(SwapStoreOptions options);
  // Waits for every request, then removes the swap files, the lock and the rank directory.
  // Errors are not reported here (call close() to see them).
  ~SwapStore();
  SwapStore(const SwapStore&) = delete;
  SwapStore& operator=(const SwapStore&) = delete;

  // Starts writing `bytes` bytes of `src` as `key` (replacing what the key held); `src` stays
  // untouched until wait returns. Keys are [A-Za-z0-9._-]+. At most one request per key at once:
  // wait on a key's handle before the next write or read of that key.
  SwapHandle write(std::string_view key, const void* src, int64_t bytes);
  // Starts reading `key` into `dst`; `bytes` must be what its last write wrote. kSystem at once
  // when the file is shorter than that (truncated); checksum failures show in wait().
  SwapHandle read(std::string_view key, void* dst, int64_t bytes);
  // Blocks until the request finished; throws its error. After a failed write the key holds
  // nothing readable until written again.
  void wait(SwapHandle& handle);

  // Waits for every request and removes everything the destructor would, reporting the first
  // error. The store is closed afterwards (further calls are internal errors).
  void close();

  const std::string& directory() const { return directory_; }  // <nvme_path>/zt_swap/rank<R>
  std::string path_of(std::string_view key) const;
  bool direct_io() const { return direct_io_; }
  AioBackend backend() const { return io_->backend(); }

 private:
  enum class EntryState { kEmpty, kWriting, kWritten, kReading, kFailed };
  struct Entry {
    std::string path;
    int fd = -1;
    int64_t bytes = 0;       // what the last write wrote
    int64_t file_bytes = 0;  // the file's size as this store made it (bytes padded to 4096)
    EntryState state = EntryState::kEmpty;
    std::vector<uint32_t> checksums;  // one per block of the last write
  };

  Entry& entry_for_write(std::string_view key);
  void take_lock();
  void remove_stale_files();
  void probe_direct_io();
  std::string full_hint() const;

  SwapStoreOptions options_;
  std::string swap_root_;  // <nvme_path>/zt_swap
  std::string directory_;  // <nvme_path>/zt_swap/rank<R>
  std::string lock_path_;
  int lock_fd_ = -1;
  bool direct_io_ = true;
  bool closed_ = false;
  std::atomic<int64_t> written_{0};  // bytes handed to writes, for test_write_limit
  std::map<std::string, Entry, std::less<>> entries_;
  std::unique_ptr<AsyncIo> io_;  // last: destroyed first, so no I/O outlives a descriptor
};

}  // namespace zt
