// runtime/byte_count: sizes as written ("6GB", "512MiB", "1.5GiB", "6e9") read exactly, every
// malformed, zero, negative and too-large one refused with a reason, and byte counts printed
// with a binary unit and the exact count. The config key that reads sizes:
// config_test.cpp (ConfigMemoryLimit).
#include "runtime/byte_count.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace zt {
namespace {

#define EXPECT_CONTAINS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

uint64_t bytes_of(const std::string& text) {
  const ParsedByteCount parsed = parse_byte_count(text);
  EXPECT_EQ(parsed.problem, "") << "\"" << text << "\"";
  return parsed.bytes;
}

std::string problem_of(const std::string& text) {
  const ParsedByteCount parsed = parse_byte_count(text);
  EXPECT_EQ(parsed.bytes, 0u) << "\"" << text << "\"";
  EXPECT_FALSE(parsed.problem.empty()) << "\"" << text << "\" was accepted";
  return parsed.problem;
}

TEST(ParseByteCount, DecimalAndBinaryUnits) {
  EXPECT_EQ(bytes_of("6GB"), 6'000'000'000u);
  EXPECT_EQ(bytes_of("6 GB"), 6'000'000'000u);
  EXPECT_EQ(bytes_of("6gb"), 6'000'000'000u);
  EXPECT_EQ(bytes_of("6GiB"), uint64_t{6} << 30);
  EXPECT_EQ(bytes_of("512MiB"), 512u << 20);
  EXPECT_EQ(bytes_of("512 mib"), 512u << 20);
  EXPECT_EQ(bytes_of("1kB"), 1'000u);
  EXPECT_EQ(bytes_of("1KB"), 1'000u);
  EXPECT_EQ(bytes_of("1KiB"), 1'024u);
  EXPECT_EQ(bytes_of("3MB"), 3'000'000u);
  EXPECT_EQ(bytes_of("2TB"), 2'000'000'000'000u);
  EXPECT_EQ(bytes_of("2TiB"), uint64_t{2} << 40);
  EXPECT_EQ(bytes_of("1PB"), 1'000'000'000'000'000u);
  EXPECT_EQ(bytes_of("1PiB"), uint64_t{1} << 50);
  EXPECT_EQ(bytes_of("100B"), 100u);
  EXPECT_EQ(bytes_of("100"), 100u);
  EXPECT_EQ(bytes_of("  4096\t"), 4096u);
}

TEST(ParseByteCount, FractionsAndExponentsAreExact) {
  EXPECT_EQ(bytes_of("1.5GiB"), 1'610'612'736u);
  EXPECT_EQ(bytes_of("0.3GB"), 300'000'000u);  // 0.3 * 1e9 in doubles is not a whole number
  EXPECT_EQ(bytes_of(".5KiB"), 512u);
  EXPECT_EQ(bytes_of("6e9"), 6'000'000'000u);
  EXPECT_EQ(bytes_of("6E9"), 6'000'000'000u);
  EXPECT_EQ(bytes_of("2.5e3 KB"), 2'500'000u);
  EXPECT_EQ(bytes_of("5e-1KiB"), 512u);
  EXPECT_EQ(bytes_of("1e+3"), 1'000u);
  EXPECT_EQ(bytes_of("0006GB"), 6'000'000'000u);
  EXPECT_EQ(bytes_of("6.000GB"), 6'000'000'000u);
  // A fraction of a byte is dropped: 1.3 * 2^30 = 1,395,864,371.2.
  EXPECT_EQ(bytes_of("1.3GiB"), 1'395'864'371u);
  EXPECT_EQ(bytes_of("1.9"), 1u);
}

TEST(ParseByteCount, TheLargestCount) {
  EXPECT_EQ(bytes_of("18446744073709551615"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(bytes_of("18446744073709551615B"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(bytes_of("16383PiB"), uint64_t{16383} << 50);
}

TEST(ParseByteCount, RefusesWithAReason) {
  EXPECT_CONTAINS(problem_of(""), "not a byte count");
  EXPECT_CONTAINS(problem_of("GB"), "not a byte count");
  EXPECT_CONTAINS(problem_of("abc"), "not a byte count");
  EXPECT_CONTAINS(problem_of("6GB extra"), "not a byte count");
  EXPECT_CONTAINS(problem_of("6 G B"), "not a byte count");
  EXPECT_CONTAINS(problem_of("1e"), "unknown unit 'e'");  // no exponent digits: a unit
  EXPECT_CONTAINS(problem_of("1e+GB"), "not a byte count");
  EXPECT_CONTAINS(problem_of("1.2.3GB"), "not a byte count");
  EXPECT_CONTAINS(problem_of("0x10"), "not a byte count");
  EXPECT_CONTAINS(problem_of("+6GB"), "not a byte count");
  EXPECT_EQ(problem_of("0"), "less than one byte (a size must be > 0)");
  EXPECT_EQ(problem_of("0GB"), "less than one byte (a size must be > 0)");
  EXPECT_EQ(problem_of("0.4"), "less than one byte (a size must be > 0)");
  EXPECT_EQ(problem_of("1e-50GB"), "less than one byte (a size must be > 0)");
  EXPECT_EQ(problem_of("-1GB"), "negative (a size must be > 0)");
  EXPECT_EQ(problem_of(" -5"), "negative (a size must be > 0)");
  EXPECT_EQ(problem_of("6 gigs"),
            "unknown unit 'gigs'; use B, kB, MB, GB, TB, PB (powers of 1000) or KiB, MiB, GiB, "
            "TiB, PiB (powers of 1024)");
  EXPECT_CONTAINS(problem_of("16EB"), "unknown unit 'EB'");
  EXPECT_EQ(problem_of("6G"),
            "the unit 'G' could mean GB (powers of 1000) or GiB (powers of 1024); write one of "
            "them");
  EXPECT_CONTAINS(problem_of("6k"), "could mean kB (powers of 1000) or KiB");
}

TEST(ParseByteCount, RefusesMoreThanSixtyFourBits) {
  const std::string too_large = "more than 2^64 - 1 = 18,446,744,073,709,551,615 bytes";
  EXPECT_EQ(problem_of("18446744073709551616"), too_large);
  EXPECT_EQ(problem_of("16384PiB"), too_large);  // 2^64
  EXPECT_EQ(problem_of("18446744073709552kB"), too_large);
  EXPECT_EQ(problem_of("1e30GB"), too_large);
  EXPECT_EQ(problem_of("1e999999"), too_large);
  // Trailing zeros are a power of ten, not digits: too large, not too long.
  EXPECT_EQ(problem_of("6000000000000000000000"), too_large);
  EXPECT_CONTAINS(problem_of("123456789012345678901"),
                  "more significant digits than a byte count needs (at most 20)");
}

TEST(FormatBytes, BinaryUnitThenTheExactCount) {
  EXPECT_EQ(format_bytes(0), "0 bytes");
  EXPECT_EQ(format_bytes(1), "1 byte");
  EXPECT_EQ(format_bytes(1023), "1023 bytes");
  EXPECT_EQ(format_bytes(1024), "1.00 KiB (1,024 bytes)");
  EXPECT_EQ(format_bytes(120'320), "117.50 KiB (120,320 bytes)");
  EXPECT_EQ(format_bytes(1'320'702'443), "1.23 GiB (1,320,702,443 bytes)");
  EXPECT_EQ(format_bytes(6'000'000'000), "5.59 GiB (6,000,000,000 bytes)");
  EXPECT_EQ(format_bytes(uint64_t{3} << 40), "3.00 TiB (3,298,534,883,328 bytes)");
  EXPECT_EQ(format_bytes(std::numeric_limits<uint64_t>::max()),
            "16.00 EiB (18,446,744,073,709,551,615 bytes)");
}

TEST(FormatBytes, GroupDigits) {
  EXPECT_EQ(group_digits(0), "0");
  EXPECT_EQ(group_digits(999), "999");
  EXPECT_EQ(group_digits(1000), "1,000");
  EXPECT_EQ(group_digits(123'456'789), "123,456,789");
}

}  // namespace
}  // namespace zt
