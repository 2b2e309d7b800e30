// read_file, CheckedFile and AtomicFile over POSIX open/write/fsync/rename.
#include "runtime/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include "runtime/status.h"

namespace zt {

namespace {

// One write() call moves at most this much (Linux moves at most ~2 GiB per call anyway).
constexpr size_t kMaxWriteBytes = size_t{1} << 30;

}  // namespace

std::string read_file(const std::string& path, std::string_view what, std::string_view hint) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr)
    throw_input(fmt::format("cannot open {} {}: {}{}", what, path, std::strerror(errno), hint));
  std::string text;
  char chunk[1 << 16];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof chunk, f)) > 0) text.append(chunk, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) throw_system(fmt::format("error reading {} {}", what, path));
  return text;
}

// ---- CheckedFile --------------------------------------------------------------------------

CheckedFile::CheckedFile(std::string path, Mode mode, std::string shown)
    : path_(std::move(path)), shown_(shown.empty() ? path_ : std::move(shown)) {
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (mode == Mode::kAppend ? O_APPEND : O_TRUNC);
  do {
    fd_ = ::open(path_.c_str(), flags, 0644);
  } while (fd_ < 0 && errno == EINTR);
  if (fd_ < 0) fail("open", errno);
}

CheckedFile::CheckedFile(CheckedFile&& other) noexcept
    : path_(std::move(other.path_)), shown_(std::move(other.shown_)),
      fd_(std::exchange(other.fd_, -1)), written_(other.written_), limit_(other.limit_) {}

CheckedFile& CheckedFile::operator=(CheckedFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    shown_ = std::move(other.shown_);
    fd_ = std::exchange(other.fd_, -1);
    written_ = other.written_;
    limit_ = other.limit_;
  }
  return *this;
}

CheckedFile::~CheckedFile() {
  if (fd_ >= 0) ::close(fd_);  // errors: the caller did not ask (close() reports them)
}

void CheckedFile::fail(std::string_view step, int error) const {
  throw_system(fmt::format("cannot {} {}: {}", step, shown_, std::strerror(error)));
}

void CheckedFile::write(const void* data, size_t bytes) {
  if (fd_ < 0) fail("write", EBADF);
  const char* in = static_cast<const char*>(data);
  while (bytes > 0) {
    size_t piece = std::min(bytes, kMaxWriteBytes);
    if (limit_ >= 0) {
      if (written_ >= limit_) fail("write", ENOSPC);
      piece = std::min<size_t>(piece, static_cast<size_t>(limit_ - written_));
    }
    const ssize_t put = ::write(fd_, in, piece);
    if (put < 0) {
      if (errno == EINTR) continue;
      fail("write", errno);
    }
    if (put == 0) fail("write", EIO);  // no progress and no error: do not spin
    in += put;
    bytes -= static_cast<size_t>(put);
    written_ += put;
  }
}

void CheckedFile::sync() {
  if (fd_ < 0) fail("fsync", EBADF);
  if (::fsync(fd_) != 0) fail("fsync", errno);
}

void CheckedFile::close() {
  if (fd_ < 0) return;
  // Not retried on EINTR: Linux releases the descriptor whatever close() returns.
  if (::close(std::exchange(fd_, -1)) != 0 && errno != EINTR) fail("close", errno);
}

// ---- AtomicFile ---------------------------------------------------------------------------

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  try {
    temp_ = CheckedFile(path_ + ".tmp", CheckedFile::Mode::kTruncate,
                        fmt::format("{} (written as {}.tmp)", path_, path_));
  } catch (const Error&) {
    committed_ = true;  // nothing was created, and a file of that name may not be ours
    throw;
  }
}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  const std::string temp = temp_.path();
  temp_ = CheckedFile();  // closes
  ::unlink(temp.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) { temp_.write(data, bytes); }

void AtomicFile::commit() {
  ZT_ASSERT(!committed_, "{} committed twice", path_);
  temp_.sync();
  temp_.close();
  if (::rename(temp_.path().c_str(), path_.c_str()) != 0) {
    const int error = errno;
    throw_system(
        fmt::format("cannot rename {} to {}: {}", temp_.path(), path_, std::strerror(error)));
  }
  committed_ = true;
  sync_parent_directory(path_);
}

void sync_parent_directory(const std::string& path) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  const std::string name = dir.empty() ? "." : dir.string();
  const int fd = ::open(name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_system(fmt::format("cannot open directory {}: {}", name, std::strerror(errno)));
  const int rc = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (rc != 0 && error != EINVAL)
    throw_system(fmt::format("cannot fsync directory {}: {}", name, std::strerror(error)));
}

}  // namespace zt
