// Tests of runtime/formats/safetensors: writer -> reader round trip, F16/BF16 files written by
// hand, one test per kind of corrupt file (each must be a one-line kInput error naming the file),
// the writer's all-or-nothing rename, a sparse 5 GB file read entry by entry, and cross-checks
// against Python (the safetensors package when installed; else a stdlib-only parser). Files live in
// a fresh directory under temp_directory_path(), removed after each test.
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

namespace zt {
namespace {

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
void expect_input_error(const std::string& path, const std::string& problem, Call call) {
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
void expect_open_error(const std::string& path, const std::string& problem) {
  expect_input_error(path, problem, [&] { SafetensorsReader::open(path); });
}

std::vector<float> tricky_values(size_t n) {
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

void expect_bitwise_equal(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i])) << "at " << i;
  }
}

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

// ---- the writer ----------------------------------------------------------------------------

TEST_F(SafetensorsTest, WriterLeavesNothingWhenTheDirectoryIsMissing) {
  const std::vector<float> values = {1, 2};
  SafetensorsWriter writer;
  writer.add_f32("w", {2}, values.data());
  const std::string path = file("no/such/dir/model.safetensors");
  try {
    writer.write(path);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kSystem);
    EXPECT_NE(e.message().find(path), std::string::npos) << e.message();
  }
  EXPECT_FALSE(fs::exists(file("no")));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 0);
}

TEST_F(SafetensorsTest, WriterRemovesTheTempFileWhenRenameFails) {
  const std::vector<float> values = {1, 2};
  SafetensorsWriter writer;
  writer.add_f32("w", {2}, values.data());
  const std::string path = file("occupied");
  fs::create_directories(path + "/child");  // rename over a non-empty directory fails
  EXPECT_THROW(writer.write(path), Error);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_TRUE(fs::is_directory(path + "/child"));
}

TEST_F(SafetensorsTest, WriterFailingMidWayKeepsTheOldFile) {
  const std::string path = file("keep.safetensors");
  const std::vector<float> old_values = {1, 2, 3};
  SafetensorsWriter old_writer;
  old_writer.add_f32("old", {3}, old_values.data());
  old_writer.write(path);

  // Cap the size of files this process may write, so write() fails with EFBIG part way.
  const std::vector<float> big(1 << 16, 0.5f);
  SafetensorsWriter writer;
  writer.add_f32("big", {1 << 16}, big.data());
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto* saved_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit capped = saved;
  capped.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &capped), 0);
  bool threw_system = false;
  try {
    writer.write(path);
  } catch (const Error& e) {
    threw_system = e.kind() == ErrorKind::kSystem && e.message().find(path) != std::string::npos;
  }
  ::setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, saved_handler);
  EXPECT_TRUE(threw_system);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  SafetensorsReader reader = SafetensorsReader::open(path);
  ASSERT_EQ(reader.entries().size(), 1u);
  EXPECT_EQ(reader.entries()[0].name, "old");
}

TEST_F(SafetensorsTest, WriterRejectsBadTensors) {
  const float x = 1.0f;
  SafetensorsWriter writer;
  writer.add_f32("a", {1}, &x);
  auto expect_internal = [](auto call) {
    try {
      call();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInternal) << e.message();
    }
  };
  expect_internal([&] { writer.add_f32("a", {1}, &x); });
  expect_internal([&] { writer.add_f32("__metadata__", {1}, &x); });
  expect_internal([&] { writer.add_f32("neg", {2, -1}, &x); });
  expect_internal([&] { writer.add_f32("bad\xff", {1}, &x); });
  expect_internal([&] { writer.add_f32("null", {3}, nullptr); });
}

// The stream writer takes the header first and the bytes in pieces of any size (here across
// tensor boundaries and with an empty tensor between): the file is SafetensorsWriter's, byte for
// byte. Too many bytes, or commit() before all of them, are internal errors that leave no file.
TEST_F(SafetensorsTest, StreamWriterWritesTheWritersBytesInAnyPieces) {
  const std::vector<float> a = tricky_values(37);
  const std::vector<uint16_t> b = {1, 2, 3, 0x7fc0, 0x8000};
  SafetensorsWriter whole;
  whole.set_metadata("format", "pt");
  whole.add_f32("a", {37}, a.data());
  whole.add_f32("empty", {0, 3}, nullptr);
  whole.add("b", DType::kBF16, {5}, b.data());
  whole.write(file("whole.safetensors"));

  const std::string data = as_bytes(a) + as_bytes(b);
  SafetensorsStreamWriter stream(
      file("stream.safetensors"),
      {{"a", DType::kF32, {37}}, {"empty", DType::kF32, {0, 3}}, {"b", DType::kBF16, {5}}},
      {{"format", "pt"}});
  EXPECT_EQ(stream.next_tensor(), 0u);
  stream.write(data.data(), 100);  // inside "a"
  EXPECT_EQ(stream.next_tensor(), 0u);
  stream.write(data.data() + 100, 50);  // past "a" and "empty", into "b"
  EXPECT_EQ(stream.next_tensor(), 2u);
  stream.write(data.data() + 150, data.size() - 150);
  EXPECT_EQ(stream.next_tensor(), 3u);
  EXPECT_FALSE(fs::exists(file("stream.safetensors")));  // not before commit
  stream.commit();
  EXPECT_EQ(read_all(file("stream.safetensors")), read_all(file("whole.safetensors")));
  EXPECT_EQ(stream.file_bytes(), fs::file_size(file("stream.safetensors")));

  auto expect_internal = [](auto call) {
    try {
      call();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInternal) << e.message();
    }
  };
  expect_internal([&] {
    SafetensorsStreamWriter s(file("over.safetensors"), {{"a", DType::kF32, {2}}});
    s.write(data.data(), 12);
  });
  expect_internal([&] {
    SafetensorsStreamWriter s(file("short.safetensors"), {{"a", DType::kF32, {2}}});
    s.write(data.data(), 4);
    s.commit();
  });
  expect_internal([&] {
    SafetensorsStreamWriter s(file("twice.safetensors"),
                              {{"a", DType::kF32, {2}}, {"a", DType::kF32, {1}}});
  });
  for (const char* name : {"over", "short", "twice"}) {
    EXPECT_FALSE(fs::exists(file(std::string(name) + ".safetensors"))) << name;
    EXPECT_FALSE(fs::exists(file(std::string(name) + ".safetensors.tmp"))) << name;
  }
}

// ---- large files ---------------------------------------------------------------------------

TEST_F(SafetensorsTest, SparseFileOver4GBIsReadEntryByEntry) {
  // 1.25e9 fp32 (5 GB, never written: a hole) then a small tail entry past the 32-bit range.
  const uint64_t big_count = 1'250'000'000;
  const uint64_t big_bytes = big_count * 4;
  const std::vector<float> tail = {1.5f, -2.0f, 3.25f, 8.0f};
  std::string header =
      fmt::format(R"({{"big": {{"dtype": "F32", "shape": [{}], "data_offsets": [0, {}]}},)"
                  R"( "tail": {{"dtype": "F32", "shape": [4], "data_offsets": [{}, {}]}}}})",
                  big_count, big_bytes, big_bytes, big_bytes + 16);
  header.append((8 - header.size() % 8) % 8, ' ');
  const std::string path = write_raw("sparse.safetensors", header);
  const off_t tail_at = static_cast<off_t>(8 + header.size() + big_bytes);
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  const ssize_t put = ::pwrite(fd, tail.data(), 16, tail_at);
  ::close(fd);
  if (put != 16) GTEST_SKIP() << "this file system cannot hold a sparse 5 GB file";

  SafetensorsReader reader = SafetensorsReader::open(path);
  std::vector<float> got(4);
  reader.read_as_f32(*reader.find("tail"), got.data());
  expect_bitwise_equal(got, tail);
  EXPECT_EQ(reader.find("big")->numel(), big_count);
}

// ---- cross-checks with Python ----------------------------------------------------------------

bool shell_ok(const std::string& command) { return std::system(command.c_str()) == 0; }

// Writes a file with our writer and an F16 file with Python, then has each side read the other's.
TEST_F(SafetensorsTest, PythonSafetensorsPackageCrossCheck) {
  if (!shell_ok("python3 -c 'import safetensors, numpy' >/dev/null 2>&1")) {
    GTEST_SKIP() << "python3 with safetensors and numpy not installed";
  }
  const std::vector<float> values = tricky_values(12);
  SafetensorsWriter writer;
  writer.add_f32("w", {3, 4}, values.data());
  writer.set_metadata("format", "pt");
  const std::string ours = file("ours.safetensors");
  writer.write(ours);
  const std::string theirs = file("theirs.safetensors");
  const std::string script = file("check.py");
  std::ofstream(script) << R"(import sys, numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file
ours, theirs = sys.argv[1], sys.argv[2]
with safe_open(ours, framework="np") as f:
    assert f.metadata() == {"format": "pt"}, f.metadata()
    w = f.get_tensor("w")
    assert w.dtype == np.float32 and w.shape == (3, 4), (w.dtype, w.shape)
    expected = np.arange(12, dtype=np.float32) * np.float32(0.37) - np.float32(5.0)
    expected[0:6] = [-0.0, np.inf, np.finfo(np.float32).smallest_subnormal, np.nan,
                     np.finfo(np.float32).max, -np.finfo(np.float32).tiny]
    bits = w.view(np.uint32).reshape(-1)
    assert bits[3] == 0x7fc12345, hex(bits[3])
    keep = np.arange(12) != 3
    assert (bits[keep] == expected.view(np.uint32)[keep]).all()
save_file({"h": np.array([[1.0, -2.5], [0.125, 1024.0]], dtype=np.float16),
           "f": np.array([7.0], dtype=np.float32)}, theirs, metadata={"by": "python"})
)";
  ASSERT_TRUE(shell_ok(fmt::format("python3 '{}' '{}' '{}'", script, ours, theirs)));
  SafetensorsReader reader = SafetensorsReader::open(theirs);
  EXPECT_EQ(reader.metadata().at("by"), "python");
  ASSERT_NE(reader.find("h"), nullptr);
  EXPECT_EQ(reader.find("h")->dtype, "F16");
  EXPECT_EQ(reader.find("h")->shape, (std::vector<int64_t>{2, 2}));
  std::vector<float> got(4);
  reader.read_as_f32(*reader.find("h"), got.data());
  EXPECT_EQ(got, (std::vector<float>{1.0f, -2.5f, 0.125f, 1024.0f}));
  float f = 0.0f;
  reader.read_as_f32(*reader.find("f"), &f);
  EXPECT_EQ(f, 7.0f);
}

// Without the package: a stdlib-only Python parser written from the format description checks
// our file's layout, and writes an F16 file (struct's 'e' is IEEE half) for us to read.
TEST_F(SafetensorsTest, PythonStdlibCrossCheck) {
  if (!shell_ok("python3 -c 'import json, struct' >/dev/null 2>&1")) {
    GTEST_SKIP() << "python3 not installed";
  }
  const std::vector<float> a = {1.0f, -2.0f, 0.5f, 3.0f, 4.0f, 5.0f};
  const std::vector<float> b = {9.0f};
  SafetensorsWriter writer;
  writer.add_f32("a", {2, 3}, a.data());
  writer.add_f32("b", {}, b.data());
  writer.set_metadata("k", "v");
  const std::string ours = file("ours.safetensors");
  writer.write(ours);
  const std::string theirs = file("theirs.safetensors");
  const std::string script = file("check.py");
  std::ofstream(script) << R"(import json, struct, sys
ours, theirs = sys.argv[1], sys.argv[2]
data = open(ours, "rb").read()
(n,) = struct.unpack("<Q", data[:8])
assert n % 8 == 0 and data[8 + n - 1:8 + n] in (b"}", b" "), n
header = json.loads(data[8:8 + n].decode("utf-8"))
assert list(header) == ["__metadata__", "a", "b"], list(header)
assert header["__metadata__"] == {"k": "v"}
buf = data[8 + n:]
a, b = header["a"], header["b"]
assert a == {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, a
assert b == {"dtype": "F32", "shape": [], "data_offsets": [24, 28]}, b
assert len(buf) == 28
assert struct.unpack("<6f", buf[0:24]) == (1.0, -2.0, 0.5, 3.0, 4.0, 5.0)
assert struct.unpack("<f", buf[24:28]) == (9.0,)
payload = struct.pack("<3e", 1.5, -0.25, 2048.0)
head = json.dumps({"x": {"dtype": "F16", "shape": [3], "data_offsets": [0, 6]}}).encode()
head += b" " * (-len(head) % 8)
open(theirs, "wb").write(struct.pack("<Q", len(head)) + head + payload)
)";
  ASSERT_TRUE(shell_ok(fmt::format("python3 '{}' '{}' '{}'", script, ours, theirs)));
  SafetensorsReader reader = SafetensorsReader::open(theirs);
  std::vector<float> got(3);
  reader.read_as_f32(*reader.find("x"), got.data());
  EXPECT_EQ(got, (std::vector<float>{1.5f, -0.25f, 2048.0f}));
}

}  // namespace
}  // namespace zt
