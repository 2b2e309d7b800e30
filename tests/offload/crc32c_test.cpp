// CRC32C: the published check values (RFC 3720's iSCSI vectors, "123456789"), the hardware
// instruction against the table on every length up to 1 KiB and every start offset mod 8, and
// continuation (crc of a then b == crc of ab).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "offload/crc32c.h"

namespace zt {
namespace {

TEST(Crc32c, PublishedCheckValues) {
  const std::string digits = "123456789";
  std::vector<unsigned char> zeros(32, 0x00), ones(32, 0xFF), up(32), down(32);
  for (int i = 0; i < 32; ++i) {
    up[i] = static_cast<unsigned char>(i);
    down[i] = static_cast<unsigned char>(31 - i);
  }
  using Fn = uint32_t (*)(const void*, size_t, uint32_t);
  std::vector<Fn> impls = {&crc32c_table, &crc32c};
  if (crc32c_hardware_available()) impls.push_back(&crc32c_hardware);
  for (Fn f : impls) {
    EXPECT_EQ(f(digits.data(), digits.size(), 0), 0xE3069283u);
    EXPECT_EQ(f(zeros.data(), 32, 0), 0x8A9136AAu);
    EXPECT_EQ(f(ones.data(), 32, 0), 0x62A8AB43u);
    EXPECT_EQ(f(up.data(), 32, 0), 0x46DD794Eu);
    EXPECT_EQ(f(down.data(), 32, 0), 0x113FDB5Cu);
    EXPECT_EQ(f(nullptr, 0, 0), 0u);
  }
}

TEST(Crc32c, HardwareMatchesTableAtEveryLengthAndOffset) {
  if (!crc32c_hardware_available()) GTEST_SKIP() << "this CPU has no SSE4.2";
  std::mt19937 rng(7);
  std::vector<unsigned char> data(1024 + 8);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  for (size_t start = 0; start < 8; ++start)
    for (size_t n = 0; n <= 1024; ++n)
      ASSERT_EQ(crc32c_hardware(data.data() + start, n, 0), crc32c_table(data.data() + start, n, 0))
          << "start " << start << ", " << n << " bytes";
}

TEST(Crc32c, ContinuesFromAPreviousValue) {
  std::mt19937 rng(11);
  std::vector<unsigned char> data(5000);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  const uint32_t whole = crc32c(data.data(), data.size());
  for (size_t cut : {size_t{0}, size_t{1}, size_t{7}, size_t{4096}, data.size()}) {
    EXPECT_EQ(crc32c(data.data() + cut, data.size() - cut, crc32c(data.data(), cut)), whole);
    EXPECT_EQ(crc32c_table(data.data() + cut, data.size() - cut, crc32c_table(data.data(), cut)),
              whole);
  }
  data[1234] ^= 0x10;
  EXPECT_NE(crc32c(data.data(), data.size()), whole);
}

}  // namespace
}  // namespace zt
