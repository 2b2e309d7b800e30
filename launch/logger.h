// Logger: rank-aware console output. log.rank0(...) prints on rank 0 only, log.all(...) on
// every rank with a "[rank r]" prefix; warnings go to stderr. No global state: launch/ builds
// one per process and passes it by reference.
#pragma once

#include <cstdio>
#include <string>

#include <fmt/format.h>

namespace zt {

class Logger {
 public:
  explicit Logger(int rank = 0, int world = 1) : rank_(rank), world_(world) {}

  template <typename... Args>
  void rank0(fmt::format_string<Args...> f, Args&&... args) const {
    if (rank_ == 0) emit(stdout, fmt::format(f, std::forward<Args>(args)...));
  }
  template <typename... Args>
  void all(fmt::format_string<Args...> f, Args&&... args) const {
    std::string prefix = world_ > 1 ? fmt::format("[rank {}] ", rank_) : std::string();
    emit(stdout, prefix + fmt::format(f, std::forward<Args>(args)...));
  }
  template <typename... Args>
  void warn(fmt::format_string<Args...> f, Args&&... args) const {
    if (rank_ == 0) emit(stderr, "warning: " + fmt::format(f, std::forward<Args>(args)...));
  }
  int rank() const { return rank_; }

 private:
  static void emit(FILE* out, const std::string& line) {
    std::fputs(line.c_str(), out);
    std::fputc('\n', out);
    std::fflush(out);
  }
  int rank_;
  int world_;
};

}  // namespace zt
