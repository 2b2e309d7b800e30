// What the safetensors suites (safetensors_test.cpp, safetensors_writer_test.cpp) share: the
// SafetensorsTest fixture (a fresh directory under temp_directory_path() per test, removed after
// it; raw files written byte by byte), one class for both files, as GoogleTest requires of a
// suite; the check of a one-line kInput error naming the file; values that must survive bitwise
// (-0, inf, a denormal, a NaN with a payload) and their bitwise comparison. Helpers only; no
// tests here.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "runtime/formats/safetensors.h"
#include "runtime/status.h"

namespace zt::safetensors_test {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ =
        fs::temp_directory_path() / fmt::format("zt_safetensors_{}_{}", ::getpid(), info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  // Writes [8-byte length of header_text][header_text][buffer] with no padding of our own.
  std::string write_raw(const std::string& name, const std::string& header_text,
                        const std::string& buffer = "") const {
    return write_bytes(name, length_prefix(header_text.size()) + header_text + buffer);
  }
  std::string write_bytes(const std::string& name, const std::string& bytes) const {
    std::string path = file(name);
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    EXPECT_TRUE(out.good());
    return path;
  }
  static std::string length_prefix(uint64_t n) {
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(n >> (8 * i));
    return bytes;
  }
  template <typename T>
  static std::string as_bytes(const std::vector<T>& values) {
    return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
  }
  static std::string read_all(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  fs::path dir_;
};

// Runs `call`, expects a kInput error naming `path` on one line and containing `problem`.
template <typename Call>
inline void expect_input_error(const std::string& path, const std::string& problem, Call call) {
  try {
    call();
    ADD_FAILURE() << "no error for " << path << " (expected: " << problem << ")";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput) << e.message();
    EXPECT_NE(e.message().find(path), std::string::npos) << e.message();
    EXPECT_NE(e.message().find(problem), std::string::npos) << e.message();
    EXPECT_EQ(e.message().find('\n'), std::string::npos) << e.message();
  }
}
inline void expect_open_error(const std::string& path, const std::string& problem) {
  expect_input_error(path, problem, [&] { SafetensorsReader::open(path); });
}

inline std::vector<float> tricky_values(size_t n) {
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = static_cast<float>(i) * 0.37f - 5.0f;
  if (n >= 6) {
    values[0] = -0.0f;
    values[1] = std::numeric_limits<float>::infinity();
    values[2] = std::numeric_limits<float>::denorm_min();
    values[3] = std::bit_cast<float>(0x7fc12345u);  // NaN with a payload: must survive bitwise
    values[4] = std::numeric_limits<float>::max();
    values[5] = -std::numeric_limits<float>::min();
  }
  return values;
}

inline void expect_bitwise_equal(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i])) << "at " << i;
  }
}

}  // namespace zt::safetensors_test
