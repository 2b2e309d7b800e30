// Tests of runtime/formats/safetensors: writer -> reader round trip, F16/BF16 files written by
// hand, and one test per kind of corrupt file (each must be a one-line kInput error naming the
// file). The writer's all-or-nothing rename, a sparse 5 GB file read entry by entry and the
// cross-checks against Python: safetensors_writer_test.cpp; the fixture and helpers both use:
// safetensors_test_util.h. Files live in a fresh directory under temp_directory_path(), removed
// after each test.
#include "runtime/formats/safetensors.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <bit>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/status.h"
#include "safetensors_test_util.h"

namespace zt {
namespace {

using namespace safetensors_test;

TEST_F(SafetensorsTest, RoundTripKeepsNamesShapesValuesAndMetadata) {
  const std::vector<float> wte = tricky_values(6 * 4);
  const std::vector<float> bias = tricky_values(7);
  const std::vector<float> scalar = {3.5f};
  SafetensorsWriter writer;
  writer.add_f32("wte.weight", {6, 4}, wte.data());
  writer.add_f32("h.0.ln_1.bias", {7}, bias.data());
  writer.add_f32("step", {}, scalar.data());
  writer.add_f32("empty", {0, 3}, nullptr);
  writer.set_metadata("format", "pt");
  writer.set_metadata("zt.note", "line one\nline \"two\" \xc3\xa9");
  writer.set_metadata("format", "zt");  // replaces
  const std::string path = file("model.safetensors");
  writer.write(path);

  EXPECT_FALSE(fs::exists(path + ".tmp"));
  const std::string bytes = read_all(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data(), 8);
  EXPECT_EQ(header_bytes % 8, 0u) << "header padded to a multiple of 8";
  EXPECT_EQ(bytes.size(), 8 + header_bytes + (wte.size() + bias.size() + 1) * 4);

  SafetensorsReader reader = SafetensorsReader::open(path);
  ASSERT_EQ(reader.entries().size(), 4u);
  const std::vector<std::string> order = {"wte.weight", "h.0.ln_1.bias", "step", "empty"};
  const std::vector<std::vector<int64_t>> shapes = {{6, 4}, {7}, {}, {0, 3}};
  uint64_t offset = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const SafetensorsEntry& e = reader.entries()[i];
    EXPECT_EQ(e.name, order[i]) << "entries() is in file order = the order added";
    EXPECT_EQ(e.dtype, "F32");
    EXPECT_EQ(e.shape, shapes[i]);
    EXPECT_EQ(e.begin, offset) << "tensors back to back";
    offset = e.end;
    EXPECT_EQ(reader.find(order[i]), &e);
  }
  EXPECT_EQ(reader.find("missing"), nullptr);
  EXPECT_EQ(reader.find("step")->numel(), 1u);
  EXPECT_EQ(reader.find("empty")->numel(), 0u);

  std::vector<float> got(wte.size());
  reader.read_as_f32(*reader.find("wte.weight"), got.data());
  expect_bitwise_equal(got, wte);
  got.assign(bias.size(), 0.0f);
  reader.read_as_f32(*reader.find("h.0.ln_1.bias"), got.data());
  expect_bitwise_equal(got, bias);
  float step = 0.0f;
  reader.read_as_f32(*reader.find("step"), &step);
  EXPECT_EQ(step, 3.5f);
  reader.read_as_f32(*reader.find("empty"), nullptr);

  const std::map<std::string, std::string> metadata = {
      {"format", "zt"}, {"zt.note", "line one\nline \"two\" \xc3\xa9"}};
  EXPECT_EQ(reader.metadata(), metadata);

  // Moving the reader keeps it usable.
  SafetensorsReader moved = std::move(reader);
  got.assign(bias.size(), 0.0f);
  moved.read_as_f32(*moved.find("h.0.ln_1.bias"), got.data());
  expect_bitwise_equal(got, bias);
}

TEST_F(SafetensorsTest, WriteReplacesAnExistingFile) {
  const std::string path = file("w.safetensors");
  const std::vector<float> first = {1, 2, 3};
  const std::vector<float> second = {4, 5};
  SafetensorsWriter a;
  a.add_f32("x", {3}, first.data());
  a.write(path);
  SafetensorsWriter b;
  b.add_f32("y", {2}, second.data());
  b.write(path);
  SafetensorsReader reader = SafetensorsReader::open(path);
  ASSERT_EQ(reader.entries().size(), 1u);
  EXPECT_EQ(reader.entries()[0].name, "y");
  EXPECT_TRUE(reader.metadata().empty());
}

TEST_F(SafetensorsTest, ReadsF16AndBF16WrittenByHand) {
  // Values exactly representable in both formats, so conversion back must be exact.
  const std::vector<float> values = {0.0f, -0.0f, 1.0f, -2.5f, 0.125f, 1024.0f, -96.0f};
  // A long F16 tensor crosses the reader's 2^18-element staging chunk.
  const size_t long_count = (size_t{1} << 18) + 1000;
  std::vector<float> long_values(long_count);
  for (size_t i = 0; i < long_count; ++i) long_values[i] = static_cast<float>(i % 2048) - 1024.0f;

  std::vector<uint16_t> f16, bf16, long_f16;
  for (float v : values) f16.push_back(fp32_to_fp16(v));
  for (float v : values) bf16.push_back(fp32_to_bf16(v));
  for (float v : long_values) long_f16.push_back(fp32_to_fp16(v));
  const uint64_t n = values.size() * 2;
  const uint64_t long_bytes = long_count * 2;
  // Entries out of offset order in the header, and a header padded with spaces.
  std::string header =
      fmt::format(R"({{"b": {{"dtype": "BF16", "shape": [{}], "data_offsets": [{}, {}]}},)"
                  R"( "__metadata__": {{"source": "hand"}},)"
                  R"( "h": {{"dtype": "F16", "shape": [1, {}], "data_offsets": [0, {}]}},)"
                  R"( "long": {{"dtype": "F16", "shape": [{}], "data_offsets": [{}, {}]}}}})",
                  values.size(), n, 2 * n, values.size(), n, long_count, 2 * n, 2 * n + long_bytes);
  header.append(13, ' ');
  const std::string path =
      write_raw("half.safetensors", header, as_bytes(f16) + as_bytes(bf16) + as_bytes(long_f16));

  SafetensorsReader reader = SafetensorsReader::open(path);
  ASSERT_EQ(reader.entries().size(), 3u);
  EXPECT_EQ(reader.entries()[0].name, "b");
  EXPECT_EQ(reader.entries()[1].name, "h");
  EXPECT_EQ(reader.metadata().at("source"), "hand");
  EXPECT_EQ(reader.find("h")->shape,
            (std::vector<int64_t>{1, static_cast<int64_t>(values.size())}));
  std::vector<float> got(values.size());
  reader.read_as_f32(*reader.find("h"), got.data());
  expect_bitwise_equal(got, values);
  got.assign(values.size(), 7.0f);
  reader.read_as_f32(*reader.find("b"), got.data());
  expect_bitwise_equal(got, values);
  std::vector<float> long_got(long_count);
  reader.read_as_f32(*reader.find("long"), long_got.data());
  expect_bitwise_equal(long_got, long_values);
}

// ---- corrupt files: each is a one-line kInput error naming the file -------------------------

TEST_F(SafetensorsTest, MissingFile) { expect_open_error(file("nope.safetensors"), "cannot open"); }

TEST_F(SafetensorsTest, NotARegularFile) { expect_open_error(dir_.string(), "not a regular file"); }

TEST_F(SafetensorsTest, ShorterThanEightBytes) {
  expect_open_error(write_bytes("short.safetensors", "abcde"), "shorter than the 8-byte");
  expect_open_error(write_bytes("zero.safetensors", ""), "shorter than the 8-byte");
}

TEST_F(SafetensorsTest, HeaderLengthPastEndOfFile) {
  expect_open_error(write_bytes("past.safetensors", length_prefix(100) + "{}"),
                    "runs past the end");
  expect_open_error(write_bytes("huge.safetensors", length_prefix(~uint64_t{0}) + "{}"),
                    "runs past the end");
}

TEST_F(SafetensorsTest, HeaderLengthAboveLimit) {
  // A sparse file just over 100 MiB + 8 whose length field asks for all of it.
  const uint64_t header_bytes = (uint64_t{100} << 20) + 1;
  const std::string path = write_bytes("big_header.safetensors", length_prefix(header_bytes));
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(8 + header_bytes)), 0);
  expect_open_error(path, "above the");
}

TEST_F(SafetensorsTest, InvalidJson) {
  expect_open_error(write_raw("json.safetensors", R"({"a": {"dtype": "F32",)"), "not valid JSON");
  expect_open_error(write_raw("text.safetensors", "hello world"), "does not start with '{'");
  expect_open_error(write_raw("utf8.safetensors", "{\"\xff\": 1}"), "not valid JSON");
  expect_open_error(write_raw("dup.safetensors",
                              R"({"a": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]},)"
                              R"( "a": {"dtype": "F32", "shape": [], "data_offsets": [4, 8]}})",
                              std::string(8, '\0')),
                    "repeats the key \"a\"");
}

TEST_F(SafetensorsTest, MalformedEntries) {
  const std::string buffer(16, '\0');
  auto check = [&](const std::string& entry_json, const std::string& problem) {
    SCOPED_TRACE(entry_json);
    const std::string path = write_raw("entry.safetensors", "{\"w\": " + entry_json + "}", buffer);
    expect_open_error(path, problem);
    expect_open_error(path, "entry \"w\"");
  };
  check(R"([1, 2])", "expected an object");
  check(R"({"shape": [4], "data_offsets": [0, 16]})", "dtype is missing");
  check(R"({"dtype": 32, "shape": [4], "data_offsets": [0, 16]})", "dtype is missing");
  check(R"({"dtype": "F32", "data_offsets": [0, 16]})", "shape is missing");
  check(R"({"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]})", "not an integer >= 0");
  check(R"({"dtype": "F32", "shape": [4.0], "data_offsets": [0, 16]})", "not an integer >= 0");
  check(R"({"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 16]})",
        "overflows");
  check(R"({"dtype": "F32", "shape": [4]})", "data_offsets is missing");
  check(R"({"dtype": "F32", "shape": [4], "data_offsets": [0]})", "data_offsets is missing");
  check(R"({"dtype": "F32", "shape": [4], "data_offsets": [0, -16]})", "data_offsets is missing");
  check(R"({"dtype": "F32", "shape": [0], "data_offsets": [8, 4]})", "begin > end");
  // Metadata must map strings to strings.
  expect_open_error(write_raw("meta.safetensors", R"({"__metadata__": {"epoch": 3}})"),
                    "value of \"epoch\" is not a string");
  expect_open_error(write_raw("meta2.safetensors", R"({"__metadata__": "x"})"),
                    "__metadata__ is not an object");
}

TEST_F(SafetensorsTest, OffsetsPastTheBuffer) {
  const std::string path = write_raw(
      "past.safetensors", R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
      std::string(20, '\0'));
  expect_open_error(path, "entry \"w\": data_offsets [8,24] end past the 20-byte buffer");
}

TEST_F(SafetensorsTest, SizeMismatchWithShape) {
  const std::string path = write_raw(
      "size.safetensors", R"({"w": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 16]}})",
      std::string(16, '\0'));
  expect_open_error(path, "entry \"w\": BF16 shape [2,3] needs 6 x 2 bytes");
}

TEST_F(SafetensorsTest, OverlappingEntries) {
  const std::string path =
      write_raw("overlap.safetensors",
                R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
                R"( "e": {"dtype": "F32", "shape": [0], "data_offsets": [8, 8]},)"
                R"( "b": {"dtype": "I8", "shape": [4], "data_offsets": [12, 16]}})",
                std::string(16, '\0'));
  expect_open_error(path, "entries \"a\" [0, 16) and \"b\" [12, 16) overlap");
  // Empty entries and gaps are fine.
  const std::string ok =
      write_raw("gap.safetensors",
                R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                R"( "e": {"dtype": "F32", "shape": [0], "data_offsets": [2, 2]},)"
                R"( "b": {"dtype": "U8", "shape": [4], "data_offsets": [8, 12]}})",
                std::string(12, '\0'));
  EXPECT_EQ(SafetensorsReader::open(ok).entries().size(), 3u);
}

TEST_F(SafetensorsTest, ReadAsF32RejectsOtherDtypes) {
  const std::string path =
      write_raw("int.safetensors",
                R"({"ids": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]},)"
                R"( "q": {"dtype": "Q4_K", "shape": [64], "data_offsets": [8, 44]}})",
                std::string(44, '\0'));
  SafetensorsReader reader = SafetensorsReader::open(path);  // unknown dtypes are kept
  EXPECT_EQ(reader.find("q")->dtype, "Q4_K");
  std::vector<float> dst(64);
  expect_input_error(path, "entry \"ids\" has dtype \"I32\"",
                     [&] { reader.read_as_f32(*reader.find("ids"), dst.data()); });
  expect_input_error(path, "entry \"q\" has dtype \"Q4_K\"",
                     [&] { reader.read_as_f32(*reader.find("q"), dst.data()); });
}

TEST_F(SafetensorsTest, FileTruncatedAfterOpen) {
  const std::vector<float> values(100, 1.0f);
  SafetensorsWriter writer;
  writer.add_f32("w", {100}, values.data());
  const std::string path = file("t.safetensors");
  writer.write(path);
  SafetensorsReader reader = SafetensorsReader::open(path);
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(fs::file_size(path) - 10)), 0);
  std::vector<float> dst(100);
  expect_input_error(path, "truncated",
                     [&] { reader.read_as_f32(reader.entries()[0], dst.data()); });
}

TEST_F(SafetensorsTest, NamesWithControlCharactersStayOnOneLine) {
  const std::string path =
      write_raw("nl.safetensors",
                "{\"bad\\nname\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 8]}}",
                std::string(8, '\0'));
  expect_open_error(path, "entry \"bad\\nname\"");
}

}  // namespace
}  // namespace zt
