// Byte counts read exactly in decimal (a significand of at most 20 digits and a power of ten,
// then one 128-bit product and quotient) and printed in binary units with the exact count.
#include "runtime/byte_count.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace zt {

namespace {

using Wide = unsigned __int128;

struct ByteUnit {
  std::string_view name;  // lower case
  uint64_t bytes;
};
constexpr ByteUnit kByteUnits[] = {
    {"b", 1},
    {"kb", 1'000},
    {"mb", 1'000'000},
    {"gb", 1'000'000'000},
    {"tb", 1'000'000'000'000},
    {"pb", 1'000'000'000'000'000},
    {"kib", uint64_t{1} << 10},
    {"mib", uint64_t{1} << 20},
    {"gib", uint64_t{1} << 30},
    {"tib", uint64_t{1} << 40},
    {"pib", uint64_t{1} << 50},
};
constexpr std::string_view kUnitList =
    "use B, kB, MB, GB, TB, PB (powers of 1000) or KiB, MiB, GiB, TiB, PiB (powers of 1024)";

// The significand stays below 10^20 < 2^67 (2^64 - 1 has 20 digits), so significand * unit <
// 2^117 and 10^k for the k that can still leave a whole byte (k <= 35) fit in 128 bits.
constexpr int kMaxDigits = 20;
constexpr int64_t kMaxPower = 38;  // 10^38 < 2^128

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_space(char c) { return c == ' ' || c == '\t'; }
bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

Wide power_of_ten(int64_t k) {
  Wide p = 1;
  for (int64_t i = 0; i < k; ++i) p *= 10;
  return p;
}

ParsedByteCount problem(std::string why) { return ParsedByteCount{0, std::move(why)}; }

}  // namespace

ParsedByteCount parse_byte_count(std::string_view text) {
  const std::string malformed =
      "not a byte count; write a number and an optional unit, e.g. 6000000000, \"6GB\" or "
      "\"1.5GiB\"";
  size_t i = 0;
  const size_t n = text.size();
  auto skip_spaces = [&] {
    while (i < n && is_space(text[i])) ++i;
  };
  skip_spaces();
  if (i < n && text[i] == '-') return problem("negative (a size must be > 0)");

  // The number is significand * 10^exponent: digits after the point lower the exponent, and
  // zeros that end the digits so far are held back (`zeros`) so that 6000000000000000000000
  // reads as 6 * 10^21 (too large) rather than as too many digits.
  Wide significand = 0;
  int digits = 0;  // in significand
  int64_t zeros = 0, exponent = 0;
  bool any_digit = false, point = false;
  for (; i < n && (is_digit(text[i]) || (text[i] == '.' && !point)); ++i) {
    if (text[i] == '.') {
      point = true;
      continue;
    }
    any_digit = true;
    if (point) --exponent;
    const int d = text[i] - '0';
    if (d == 0) {
      if (significand != 0) ++zeros;
      continue;
    }
    if (digits + zeros + 1 > kMaxDigits)
      return problem(
          fmt::format("more significant digits than a byte count needs (at most {})", kMaxDigits));
    for (int64_t z = 0; z < zeros; ++z) significand *= 10;
    significand = significand * 10 + static_cast<unsigned>(d);
    digits += static_cast<int>(zeros) + 1;
    zeros = 0;
  }
  if (!any_digit) return problem(malformed);
  exponent += zeros;
  // An exponent is 'e', an optional sign and digits; an 'E' without them starts a unit ("16EB").
  const size_t sign = i + 1 < n && (text[i + 1] == '+' || text[i + 1] == '-') ? 1 : 0;
  if (i < n && (text[i] == 'e' || text[i] == 'E') && i + 1 + sign < n &&
      is_digit(text[i + 1 + sign])) {
    const bool negative = sign == 1 && text[i + 1] == '-';
    i += 1 + sign;
    int64_t e = 0;
    for (; i < n && is_digit(text[i]); ++i) e = std::min<int64_t>(e * 10 + (text[i] - '0'), 1000);
    exponent += negative ? -e : e;
  }
  skip_spaces();
  const size_t unit_start = i;
  while (i < n && is_letter(text[i])) ++i;
  const std::string_view unit_text = text.substr(unit_start, i - unit_start);
  skip_spaces();
  if (i != n) return problem(malformed);

  uint64_t unit = 1;
  if (!unit_text.empty()) {
    std::string name;
    for (char c : unit_text) name += lower(c);
    const ByteUnit* found = nullptr;
    for (const ByteUnit& u : kByteUnits)
      if (u.name == name) found = &u;
    const bool bare_prefix =
        name.size() == 1 && std::string_view("kmgtp").find(name[0]) != std::string_view::npos;
    if (!found && bare_prefix) {
      const char p = static_cast<char>(name[0] - 'a' + 'A');
      return problem(
          fmt::format("the unit '{}' could mean {}B (powers of 1000) or {}iB (powers "
                      "of 1024); write one of them",
                      unit_text, p == 'K' ? 'k' : p, p));
    }
    if (!found) return problem(fmt::format("unknown unit '{}'; {}", unit_text, kUnitList));
    unit = found->bytes;
  }

  const std::string too_large = fmt::format("more than 2^64 - 1 = {} bytes",
                                            group_digits(std::numeric_limits<uint64_t>::max()));
  constexpr Wide kMax = std::numeric_limits<uint64_t>::max();
  Wide bytes = 0;
  if (significand != 0 && exponent >= 0) {
    if (exponent > kMaxPower) return problem(too_large);
    bytes = significand * unit;
    for (int64_t k = 0; k < exponent && bytes <= kMax; ++k) bytes *= 10;
  } else if (significand != 0 && -exponent <= kMaxPower) {
    bytes = significand * unit / power_of_ten(-exponent);  // a fraction of a byte dropped
  }
  if (bytes > kMax) return problem(too_large);
  if (bytes == 0) return problem("less than one byte (a size must be > 0)");
  return ParsedByteCount{static_cast<uint64_t>(bytes), {}};
}

std::string group_digits(uint64_t n) {
  std::string plain = std::to_string(n), grouped;
  for (size_t i = 0; i < plain.size(); ++i) {
    if (i > 0 && (plain.size() - i) % 3 == 0) grouped += ',';
    grouped += plain[i];
  }
  return grouped;
}

std::string format_bytes(uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} byte{}", bytes, bytes == 1 ? "" : "s");
  constexpr std::string_view kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  double figure = static_cast<double>(bytes) / 1024;
  while (u + 1 < 6 && figure >= 1024) {
    figure /= 1024;
    ++u;
  }
  return fmt::format("{:.2f} {} ({} bytes)", figure, kUnits[u], group_digits(bytes));
}

}  // namespace zt
