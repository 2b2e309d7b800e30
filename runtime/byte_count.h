// Byte counts as people write and read them: parse_byte_count reads "6GB", "6 GB", "512MiB",
// "1.5GiB", "6e9" (zt.device_memory_limit); format_bytes writes "1.23 GiB (1,320,702,443 bytes)"
// (the out-of-memory error). Units as DeepSpeed and PyTorch users expect: kB, MB, GB, TB, PB are
// powers of 1000, KiB, MiB, GiB, TiB, PiB powers of 1024 (zt-bench's --min-bytes 64K follows
// nccl-tests instead, K = 1024: bench/bench.h). Pure text and integer arithmetic; no
// allocation beyond the strings, no config knowledge (runtime/config reads the key through it).
// Pinned by tests/runtime/byte_count_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace zt {

// What parse_byte_count read: `bytes` > 0 when `problem` is empty, else 0 and `problem` says why
// in words that follow the value ("has the unknown unit 'gigs'; use ...").
struct ParsedByteCount {
  uint64_t bytes = 0;
  std::string problem;
};

// A decimal number (an optional fraction and exponent: "1.5", "6e9", "2.5E+3") and an optional
// unit after it, spaces around either allowed. Units are case-insensitive ("gb", "GiB", "kB";
// "B" or none: bytes); a bare prefix ("6G") is refused as ambiguous. The value is computed
// exactly in decimal ("0.3GB" is 300,000,000 bytes) and a fraction of a byte is dropped
// ("1.3GiB" is 1,395,864,371 bytes). Zero, a sign, anything but one number and one unit, and
// more than 2^64 - 1 bytes are problems.
ParsedByteCount parse_byte_count(std::string_view text);

// "512 bytes" below 1 KiB; else two decimals in the largest binary unit that keeps the figure at
// least 1, then the exact count: "117.50 KiB (120,320 bytes)", "1.23 GiB (1,320,702,443 bytes)".
std::string format_bytes(uint64_t bytes);

// "1,320,702,443": the count with a comma between groups of three digits.
std::string group_digits(uint64_t n);

}  // namespace zt
