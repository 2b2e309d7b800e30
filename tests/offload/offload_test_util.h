// Helpers of the offload tests: a scratch directory on the build tree's disk (not tmpfs, so
// O_DIRECT is really used where the disk allows it), aligned buffers with a pattern, and the
// message of the zt::Error a call throws.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "runtime/status.h"

namespace zt::test {

// <build dir>/offload_test_scratch/<pid>_<test name>, made empty at construction and removed
// at destruction.
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "_" + info->name();
    for (char& c : name)
      if (c == '/') c = '_';
    path_ = std::filesystem::path(ZT_BINARY_DIR) / "offload_test_scratch" /
            (std::to_string(::getpid()) + "_" + name);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    std::filesystem::remove(path_.parent_path(), ec);  // when no other test uses it
  }
  std::string str() const { return path_.string(); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// `bytes` bytes at `misalign` bytes past a 4096-aligned address, filled with a pattern of `seed`.
class PatternBuffer {
 public:
  PatternBuffer(size_t bytes, size_t misalign, unsigned seed)
      : storage_(static_cast<char*>(std::aligned_alloc(4096, round(bytes + misalign))), &std::free),
        data_(storage_.get() + misalign), bytes_(bytes), seed_(seed) {
    fill(seed);
  }
  void fill(unsigned seed) {
    for (size_t i = 0; i < bytes_; ++i) data_[i] = value(i, seed);
  }
  void clear() { std::memset(data_, 0x5A, bytes_); }
  // The first index whose byte differs from the pattern of `seed`, or bytes() when none does.
  size_t first_mismatch(unsigned seed) const {
    for (size_t i = 0; i < bytes_; ++i)
      if (data_[i] != value(i, seed)) return i;
    return bytes_;
  }
  char* data() { return data_; }
  size_t bytes() const { return bytes_; }
  unsigned seed() const { return seed_; }

 private:
  static size_t round(size_t n) { return (n + 4095) / 4096 * 4096 + 4096; }
  static char value(size_t i, unsigned seed) {
    return static_cast<char>((i * 2654435761u + seed * 40503u + (i >> 12)) >> 7);
  }
  std::unique_ptr<char, decltype(&std::free)> storage_;
  char* data_;
  size_t bytes_;
  unsigned seed_;
};

// The zt::Error `f` throws (kind and message); a failure is recorded when it throws none.
struct Thrown {
  ErrorKind kind = ErrorKind::kInternal;
  std::string message;
};
inline Thrown thrown(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.kind(), e.message()};
  }
  ADD_FAILURE() << "no zt::Error thrown";
  return {ErrorKind::kInternal, ""};
}

}  // namespace zt::test
