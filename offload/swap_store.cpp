// SwapStore: the rank directory and its lock, stale-file removal, the O_DIRECT probe, one file
// per key, and the checksum hooks that run on AsyncIo's workers.
#include "offload/swap_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "offload/crc32c.h"
#include "runtime/status.h"

namespace zt {

namespace {

namespace fs = std::filesystem;

constexpr const char* kSuffix = ".swp";
constexpr const char* kProbeName = ".direct_io_probe";

int64_t padded(int64_t bytes) {
  return (bytes + kAioAlignment - 1) / kAioAlignment * kAioAlignment;
}

std::string os_error(int error) { return std::strerror(error); }

void check_key(std::string_view key) {
  bool ok = !key.empty() && key != "." && key != "..";
  for (char c : key)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-')
      ok = false;
  if (!ok) throw_internal(fmt::format("swap key '{}' is not a file name of [A-Za-z0-9._-]", key));
}

// Computes each block's checksum just before it is written; counts bytes for the test limit.
class WriteHooks final : public BlockHooks {
 public:
  WriteHooks(uint32_t* checksums, std::atomic<int64_t>* written, int64_t limit)
      : checksums_(checksums), written_(written), limit_(limit) {}
  int before_write(int64_t index, const void* data, size_t bytes) override {
    if (limit_ >= 0) {
      const int64_t before = written_->fetch_add(static_cast<int64_t>(bytes));
      if (before + static_cast<int64_t>(bytes) > limit_) return ENOSPC;
    }
    checksums_[index] = crc32c(data, bytes);
    return 0;
  }

 private:
  uint32_t* checksums_;
  std::atomic<int64_t>* written_;
  int64_t limit_;
};

// Checks each block read against the checksum written with it, before it is used.
class ReadHooks final : public BlockHooks {
 public:
  ReadHooks(const uint32_t* checksums, std::string path, int64_t block_size)
      : checksums_(checksums), path_(std::move(path)), block_size_(block_size) {}
  void after_read(int64_t index, const void* data, size_t bytes) override {
    const uint32_t read = crc32c(data, bytes);
    if (read == checksums_[index]) return;
    const int64_t first = index * block_size_;
    throw_system(fmt::format(
        "swap file {}: block {} (bytes {}–{}) fails its checksum (crc32c "
        "{:08x} written, {:08x} read: the file changed on disk); refusing to "
        "use it",
        path_, index, first, first + static_cast<int64_t>(bytes) - 1, checksums_[index], read));
  }

 private:
  const uint32_t* checksums_;
  std::string path_;
  int64_t block_size_;
};

}  // namespace

SwapStore::SwapStore(SwapStoreOptions options) : options_(std::move(options)) {
  ZT_ASSERT(options_.rank >= 0, "rank {}", options_.rank);
  std::error_code ec;
  if (options_.nvme_path.empty() || !fs::is_directory(options_.nvme_path, ec))
    throw_input(
        fmt::format("offload nvme_path '{}' is not an existing directory", options_.nvme_path));
  swap_root_ = (fs::path(options_.nvme_path) / "zt_swap").string();
  directory_ = (fs::path(swap_root_) / fmt::format("rank{}", options_.rank)).string();
  lock_path_ = (fs::path(directory_) / ".lock").string();
  // Another rank's clean exit may remove zt_swap/ between our creating it and rank<R>/ in it
  // (ENOENT): create again.
  for (int attempt = 0; attempt < 3; ++attempt) {
    fs::create_directories(directory_, ec);
    if (ec != std::errc::no_such_file_or_directory) break;
  }
  if (ec)
    throw_system(fmt::format("cannot create swap directory {}: {}", directory_, ec.message()));
  take_lock();
  try {
    remove_stale_files();
    probe_direct_io();
    io_ = std::make_unique<AsyncIo>(options_.aio, options_.backend);
  } catch (...) {
    ::close(lock_fd_);
    throw;
  }
}

SwapStore::~SwapStore() {
  try {
    close();
  } catch (const Error&) {
    // Reported by close() to a caller who asks; a destructor must not throw.
  }
}

void SwapStore::take_lock() {
  // The lock file is removed at a clean exit, so a lock taken on a file that was unlinked (and
  // perhaps recreated by another process) since we opened it is no lock: check and retry.
  for (;;) {
    const int fd = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
      throw_system(fmt::format("cannot open swap lock {}: {}", lock_path_, os_error(errno)));
    int rc;
    while ((rc = ::flock(fd, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {
    }
    if (rc != 0) {
      const int error = errno;
      char holder[32] = {};
      const ssize_t n = ::pread(fd, holder, sizeof holder - 1, 0);
      ::close(fd);
      if (error == EWOULDBLOCK)
        throw_input(fmt::format(
            "swap directory {} is in use by a live process (pid {} holds {}): two jobs, or two "
            "swap stores of rank {}, share nvme_path {}; give each job its own nvme_path",
            directory_, n > 0 ? std::string(holder, static_cast<size_t>(n)) : "unknown", lock_path_,
            options_.rank, options_.nvme_path));
      throw_system(fmt::format("cannot lock {}: {}", lock_path_, os_error(error)));
    }
    struct stat by_fd {
    }, by_path{};
    if (::fstat(fd, &by_fd) == 0 && ::stat(lock_path_.c_str(), &by_path) == 0 &&
        by_fd.st_ino == by_path.st_ino && by_fd.st_dev == by_path.st_dev) {
      const std::string pid = std::to_string(::getpid());
      if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
        const int error = errno;
        ::close(fd);
        throw_system(fmt::format("cannot write swap lock {}: {}", lock_path_, os_error(error)));
      }
      lock_fd_ = fd;
      return;
    }
    ::close(fd);  // lost a race with a store that was removing its directory: open it again
    std::error_code ec;
    fs::create_directories(directory_, ec);
  }
}

void SwapStore::remove_stale_files() {
  int removed = 0;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(directory_, ec)) {
    const std::string name = e.path().filename().string();
    const bool stale =
        name == kProbeName || (name.size() > 4 && name.compare(name.size() - 4, 4, kSuffix) == 0);
    if (!stale) continue;
    if (::unlink(e.path().c_str()) != 0)
      throw_system(
          fmt::format("cannot remove stale swap file {}: {}", e.path().string(), os_error(errno)));
    if (name != kProbeName) ++removed;
  }
  if (ec) throw_system(fmt::format("cannot list swap directory {}: {}", directory_, ec.message()));
  if (removed > 0 && options_.notice)
    options_.notice(
        fmt::format("swap directory {}: removed {} stale swap file{} of an earlier "
                    "run that did not exit cleanly",
                    directory_, removed, removed == 1 ? "" : "s"));
}

void SwapStore::probe_direct_io() {
  const std::string probe = (fs::path(directory_) / kProbeName).string();
  int fd = ::open(probe.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
  int error = fd < 0 ? errno : 0;
  if (fd >= 0) {
    // Some file systems accept the flag and refuse the I/O: try one aligned write.
    void* block = std::aligned_alloc(kAioAlignment, kAioAlignment);
    std::memset(block, 0, kAioAlignment);
    if (::pwrite(fd, block, kAioAlignment, 0) != kAioAlignment) error = errno != 0 ? errno : EIO;
    std::free(block);
    ::close(fd);
  }
  ::unlink(probe.c_str());
  if (error == 0) return;
  if (error != EINVAL && error != EOPNOTSUPP)
    throw_system(fmt::format("cannot write in swap directory {}: {}{}", directory_, os_error(error),
                             error == ENOSPC ? full_hint() : ""));
  direct_io_ = false;
  if (options_.notice)
    options_.notice(
        fmt::format("warning: swap directory {} does not support O_DIRECT ({}; tmpfs "
                    "before Linux 6.6 does not): swap files use buffered I/O through "
                    "the page cache",
                    directory_, os_error(error)));
}

std::string SwapStore::full_hint() const {
  return fmt::format(
      " (nvme_path {} is full: free space there or point the offload nvme_path "
      "at a larger disk)",
      options_.nvme_path);
}

std::string SwapStore::path_of(std::string_view key) const {
  return (fs::path(directory_) / (std::string(key) + kSuffix)).string();
}

SwapStore::Entry& SwapStore::entry_for_write(std::string_view key) {
  check_key(key);
  auto it = entries_.find(key);
  if (it != entries_.end()) return it->second;
  Entry e;
  e.path = path_of(key);
  // O_TRUNC: the file is new (stale ones were removed), and never appended to.
  const int flags = O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | (direct_io_ ? O_DIRECT : 0);
  e.fd = ::open(e.path.c_str(), flags, 0644);
  if (e.fd < 0) {
    const int error = errno;
    throw_system(fmt::format("cannot create swap file {}: {}{}", e.path, os_error(error),
                             error == ENOSPC ? full_hint() : ""));
  }
  return entries_.emplace(std::string(key), std::move(e)).first->second;
}

SwapHandle SwapStore::write(std::string_view key, const void* src, int64_t bytes) {
  ZT_ASSERT(!closed_, "write of swap key '{}' after close", key);
  ZT_ASSERT(bytes >= 0 && (src != nullptr || bytes == 0), "swap key '{}': {} bytes", key, bytes);
  Entry& e = entry_for_write(key);
  ZT_ASSERT(e.state != EntryState::kWriting && e.state != EntryState::kReading,
            "swap key '{}' written while a request on it is in flight", key);
  const int64_t file_bytes = padded(bytes);
  if (file_bytes != e.file_bytes) {
    // Growing: reserve the blocks now, so a full disk shows here and no write extends the file
    // (extending O_DIRECT writes are serialised by ext4). Shrinking: cut the old tail off.
    int rc = 0;
    if (file_bytes > e.file_bytes) {
      // fallocate, not posix_fallocate: where the file system cannot reserve, glibc's
      // emulation would write every byte once more.
      rc = ::fallocate(e.fd, 0, 0, file_bytes) == 0 ? 0 : errno;
      if (rc == EOPNOTSUPP) rc = ::ftruncate(e.fd, file_bytes) == 0 ? 0 : errno;
    } else {
      rc = ::ftruncate(e.fd, file_bytes) == 0 ? 0 : errno;
    }
    if (rc != 0) {
      e.state = EntryState::kFailed;
      throw_system(fmt::format("cannot write swap file {}: reserving {} bytes: {}{}", e.path,
                               file_bytes, os_error(rc), rc == ENOSPC ? full_hint() : ""));
    }
    e.file_bytes = file_bytes;
  }
  const int64_t block_size = options_.aio.block_size;
  e.bytes = bytes;
  e.checksums.assign(static_cast<size_t>((bytes + block_size - 1) / block_size), 0);
  e.state = EntryState::kWriting;
  AioRequestSpec spec;
  spec.op = AioRequestSpec::Op::kWrite;
  spec.fd = e.fd;
  spec.data = const_cast<void*>(src);  // a write only reads it
  spec.bytes = bytes;
  spec.what = "swap file " + e.path;
  spec.full_hint = full_hint();
  spec.hooks =
      std::make_shared<WriteHooks>(e.checksums.data(), &written_, options_.test_write_limit);
  return SwapHandle(io_->submit(std::move(spec)), std::string(key));
}

SwapHandle SwapStore::read(std::string_view key, void* dst, int64_t bytes) {
  ZT_ASSERT(!closed_, "read of swap key '{}' after close", key);
  auto it = entries_.find(key);
  ZT_ASSERT(it != entries_.end() && it->second.state != EntryState::kEmpty,
            "swap key '{}' read before it was written", key);
  Entry& e = it->second;
  if (e.state == EntryState::kFailed)
    throw_system(
        fmt::format("swap file {}: its last write failed; it holds nothing to read", e.path));
  ZT_ASSERT(e.state == EntryState::kWritten,
            "swap key '{}' read while a request on it is in "
            "flight",
            key);
  ZT_ASSERT(bytes == e.bytes, "swap key '{}': {} bytes asked, {} written", key, bytes, e.bytes);
  struct stat st {};
  if (::fstat(e.fd, &st) != 0)
    throw_system(fmt::format("cannot stat swap file {}: {}", e.path, os_error(errno)));
  if (st.st_size < e.file_bytes)
    throw_system(
        fmt::format("swap file {} is truncated: {} bytes on disk, {} written; refusing "
                    "to use it",
                    e.path, static_cast<int64_t>(st.st_size), e.file_bytes));
  e.state = EntryState::kReading;
  AioRequestSpec spec;
  spec.op = AioRequestSpec::Op::kRead;
  spec.fd = e.fd;
  spec.data = dst;
  spec.bytes = bytes;
  spec.what = "swap file " + e.path;
  spec.hooks = std::make_shared<ReadHooks>(e.checksums.data(), e.path, options_.aio.block_size);
  return SwapHandle(io_->submit(std::move(spec)), std::string(key));
}

void SwapStore::wait(SwapHandle& handle) {
  ZT_ASSERT(handle.valid(), "wait on an empty SwapHandle");
  auto it = entries_.find(handle.key_);
  ZT_ASSERT(it != entries_.end(), "swap key '{}' unknown", handle.key_);
  Entry& e = it->second;
  try {
    io_->wait(handle.io_);
  } catch (...) {
    // A failed write leaves the file unusable; a failed read leaves it as it was (the next read
    // fails the same way, or succeeds if the cause was transient).
    if (e.state == EntryState::kWriting) e.state = EntryState::kFailed;
    if (e.state == EntryState::kReading) e.state = EntryState::kWritten;
    throw;
  }
  if (e.state == EntryState::kWriting || e.state == EntryState::kReading)
    e.state = EntryState::kWritten;
}

void SwapStore::close() {
  if (closed_) return;
  closed_ = true;
  io_.reset();  // waits for every request in flight
  std::string first_error;
  auto note = [&](const std::string& what, int error) {
    if (first_error.empty()) first_error = fmt::format("{}: {}", what, os_error(error));
  };
  for (auto& [key, e] : entries_) {
    if (::close(e.fd) != 0 && errno != EINTR) note("cannot close swap file " + e.path, errno);
    if (::unlink(e.path.c_str()) != 0 && errno != ENOENT)
      note("cannot remove swap file " + e.path, errno);
  }
  entries_.clear();
  if (::unlink(lock_path_.c_str()) != 0 && errno != ENOENT)
    note("cannot remove swap lock " + lock_path_, errno);
  if (::rmdir(directory_.c_str()) != 0 && errno != ENOENT && errno != ENOTEMPTY)
    note("cannot remove swap directory " + directory_, errno);
  ::rmdir(swap_root_.c_str());  // other ranks' directories may still be there: that is fine
  ::close(lock_fd_);            // releases the lock, after the files are gone
  lock_fd_ = -1;
  if (!first_error.empty()) throw_system(first_error);
}

}  // namespace zt
