// Whole-file reads with the project's error messages, and checked writes: CheckedFile (every
// write, fsync and close checked, with errno's words in the error) and AtomicFile (written under
// a temporary name in the same directory, fsync'd, renamed over the final name, the directory
// fsync'd: a failed write never leaves a truncated file under the final name). No buffering of
// their own (every write reaches the kernel before it returns), no threads; no allocation beyond
// the returned text and the paths.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace zt {

// The bytes of the file at `path`. A file that cannot be opened is an input error naming `what`
// and the path ("cannot open <what> <path>: <reason><hint>"); a read failure a system error.
std::string read_file(const std::string& path, std::string_view what, std::string_view hint = "");

// A file open for writing. Every failure (ENOSPC, EIO, EACCES, ...) throws kSystem with one line
// naming the file and the OS error: "cannot write <path>: No space left on device". write()
// retries EINTR and short writes until every byte is written. Move-only.
class CheckedFile {
 public:
  enum class Mode { kTruncate, kAppend };
  CheckedFile() = default;
  // Creates or opens `path` (0644). kSystem naming the path when it cannot. Errors name the file
  // as `shown` when given (AtomicFile: the final name and the temporary), else as `path`.
  CheckedFile(std::string path, Mode mode, std::string shown = {});
  CheckedFile(CheckedFile&& other) noexcept;
  CheckedFile& operator=(CheckedFile&& other) noexcept;
  CheckedFile(const CheckedFile&) = delete;
  CheckedFile& operator=(const CheckedFile&) = delete;
  // Closes without checking (call close() to see the error).
  ~CheckedFile();

  void write(const void* data, size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  void sync();   // fsync: the bytes written so far are on the device
  void close();  // checked; the file is closed afterwards even when it throws

  const std::string& path() const { return path_; }
  int64_t bytes_written() const { return written_; }

  // Tests without a small file system: once `bytes` bytes in total were written through this
  // object, a write fails with ENOSPC as on a full file system (part of the data written first,
  // as the kernel would). Negative: no limit (the default). zt-train sets it from
  // ZT_TEST_WRITE_LIMIT only.
  void set_test_write_limit(int64_t bytes) { limit_ = bytes; }

 private:
  [[noreturn]] void fail(std::string_view step, int error) const;
  std::string path_;
  std::string shown_;
  int fd_ = -1;
  int64_t written_ = 0;
  int64_t limit_ = -1;
};

// A file that appears under its final name complete or not at all. Writes go to `path + ".tmp"`
// (same directory, so the rename is atomic); commit() fsyncs, closes, renames it over `path` and
// fsyncs the directory. Destroyed without commit() (an error, an exception), the temporary is
// removed and `path` is untouched. Errors are CheckedFile's, naming the final path.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_.path(); }
  void set_test_write_limit(int64_t bytes) { temp_.set_test_write_limit(bytes); }

 private:
  std::string path_;
  CheckedFile temp_;
  bool committed_ = false;
};

// fsync of the directory holding `path`, so that a rename or creation in it is durable. File
// systems that cannot fsync a directory (EINVAL) are accepted; any other error throws kSystem.
void sync_parent_directory(const std::string& path);

}  // namespace zt
