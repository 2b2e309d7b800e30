// zt::Error: the one exception type of the library. Carries the call site, the rank (filled in
// by launch/ when known) and a message a user can act on. Library code throws it and never
// exits; launch/ maps ErrorKind to exit codes (kInput -> 2, anything else -> 1).
#pragma once

#include <fmt/format.h>
#include <source_location>
#include <stdexcept>
#include <string>

namespace zt {

enum class ErrorKind {
  kInput,     // bad user input: config, command line, data file, checkpoint. Exit code 2.
  kSystem,    // the OS or a library refused: I/O, allocation, MPI, BLAS.
  kInternal,  // a broken invariant inside ZeroTrain.
  // A device has no room for an allocation: its zt.device_memory_limit or its own memory
  // (Device::alloc, runtime/device.h). Exit code 1, like kSystem.
  kOutOfMemory,
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message,
        std::source_location where = std::source_location::current());

  ErrorKind kind() const { return kind_; }
  const std::string& message() const { return message_; }
  const char* file() const { return file_; }
  int line() const { return line_; }
  int rank() const { return rank_; }
  void set_rank(int rank) { rank_ = rank; }
  // "rank 1: message (runtime/data/token_data.cpp:42)", the form launch/ prints.
  std::string describe() const;

 private:
  ErrorKind kind_;
  std::string message_;
  const char* file_;
  int line_;
  int rank_ = -1;
};

// Throw helpers; the call site is captured automatically.
[[noreturn]] void throw_input(std::string message,
                              std::source_location where = std::source_location::current());
[[noreturn]] void throw_system(std::string message,
                               std::source_location where = std::source_location::current());
[[noreturn]] void throw_internal(std::string message,
                                 std::source_location where = std::source_location::current());
[[noreturn]] void throw_out_of_memory(std::string message,
                                      std::source_location where = std::source_location::current());

}  // namespace zt

// Invariant check for internal errors: ZT_ASSERT(n % world == 0, "n={} world={}", n, world).
#define ZT_ASSERT(cond, ...)                                                                     \
  do {                                                                                           \
    if (!(cond))                                                                                 \
      ::zt::throw_internal(std::string("check failed: " #cond ": ") + fmt::format(__VA_ARGS__)); \
  } while (0)
