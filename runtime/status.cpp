// zt::Error construction and formatting.
#include "runtime/status.h"

#include <cstring>

namespace zt {

namespace {
// Call sites are printed relative to the source tree: "runtime/status.cpp", not an absolute path.
const char* short_path(const char* path) {
  for (const char* layer : {"runtime/", "comm/", "zero/", "offload/", "model_zoo/", "pretrained/",
                            "launch/", "train/", "bench/", "tools/", "tests/"}) {
    if (const char* p = std::strstr(path, layer)) return p;
  }
  return path;
}
}  // namespace

Error::Error(ErrorKind kind, std::string message, std::source_location where)
    : std::runtime_error(message), kind_(kind), message_(std::move(message)),
      file_(short_path(where.file_name())), line_(static_cast<int>(where.line())) {}

std::string Error::describe() const {
  std::string prefix = rank_ >= 0 ? fmt::format("rank {}: ", rank_) : std::string();
  return fmt::format("{}{} ({}:{})", prefix, message_, file_, line_);
}

void throw_input(std::string message, std::source_location where) {
  throw Error(ErrorKind::kInput, std::move(message), where);
}
void throw_system(std::string message, std::source_location where) {
  throw Error(ErrorKind::kSystem, std::move(message), where);
}
void throw_internal(std::string message, std::source_location where) {
  throw Error(ErrorKind::kInternal, std::move(message), where);
}
void throw_out_of_memory(std::string message, std::source_location where) {
  throw Error(ErrorKind::kOutOfMemory, std::move(message), where);
}

}  // namespace zt
