// Tests of runtime/formats/safetensors' writer and of large and foreign files: the writer's
// all-or-nothing rename (nothing left behind, the old file kept when it fails mid-way), bad
// tensors refused, the stream writer's bytes in any pieces, a sparse 5 GB file read entry by
// entry, and cross-checks against Python (the safetensors package when installed; else a
// stdlib-only parser). Round trips and corrupt files: safetensors_test.cpp; the fixture and
// helpers both use: safetensors_test_util.h.
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
