// CheckedFile and AtomicFile: a failed write (ENOSPC from /dev/full, or the test write limit)
// throws one line naming the file and the OS error; short writes are completed; an atomic write
// that fails leaves nothing under the final name (and an older file there untouched), one that
// succeeds leaves exactly the bytes and no temporary.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "runtime/file_io.h"
#include "runtime/status.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

class FileIoTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::temp_directory_path() / ("zt_file_io_test_" + std::to_string(::getpid()) + "_" +
                                     testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  static std::string contents(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  // The message of the kSystem error `f` throws, or "" (a failure is recorded) if none.
  static std::string system_error(const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kSystem);
      return e.message();
    }
    ADD_FAILURE() << "no error";
    return "";
  }
  fs::path dir_;
};

TEST_F(FileIoTest, WriteToAFullDeviceNamesTheFileAndTheOsError) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  CheckedFile full("/dev/full", CheckedFile::Mode::kAppend);
  const std::string message = system_error([&] { full.write("a row\n"); });
  EXPECT_EQ(message, "cannot write /dev/full: No space left on device");
}

TEST_F(FileIoTest, OpenFailureNamesTheFile) {
  const std::string path = file("no/such/dir/metrics.jsonl");
  const std::string message =
      system_error([&] { CheckedFile f(path, CheckedFile::Mode::kTruncate); });
  EXPECT_EQ(message, "cannot open " + path + ": No such file or directory");
}

TEST_F(FileIoTest, WriteLimitFailsWithEnospcAfterWritingWhatFits) {
  const std::string path = file("metrics.jsonl");
  CheckedFile f(path, CheckedFile::Mode::kTruncate);
  f.set_test_write_limit(10);
  f.write("0123");
  const std::string message = system_error([&] { f.write("456789abcdef"); });
  EXPECT_EQ(message, "cannot write " + path + ": No space left on device");
  EXPECT_EQ(f.bytes_written(), 10);
  f.close();
  EXPECT_EQ(contents(path), "0123456789");
}

TEST_F(FileIoTest, AppendKeepsWhatWasThere) {
  const std::string path = file("log");
  {
    CheckedFile f(path, CheckedFile::Mode::kTruncate);
    f.write("one\n");
    f.close();
  }
  CheckedFile f(path, CheckedFile::Mode::kAppend);
  f.write("two\n");
  f.sync();
  f.close();
  EXPECT_EQ(contents(path), "one\ntwo\n");
}

TEST_F(FileIoTest, AtomicWriteThatFailsLeavesNoFileUnderTheFinalName) {
  const std::string path = file("weights.safetensors");
  {
    AtomicFile f(path);
    f.set_test_write_limit(100);
    const std::string big(1000, 'x');
    const std::string message = system_error([&] { f.write(big); });
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find("No space left on device"), std::string::npos) << message;
    EXPECT_FALSE(fs::exists(path));
  }  // not committed: the temporary goes
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST_F(FileIoTest, AtomicWriteThatFailsKeepsTheOldFile) {
  const std::string path = file("weights.safetensors");
  {
    AtomicFile old(path);
    old.write("old contents");
    old.commit();
  }
  try {
    AtomicFile f(path);
    f.set_test_write_limit(3);
    f.write("new contents, longer");
    f.commit();
    ADD_FAILURE() << "no error";
  } catch (const Error&) {
  }
  EXPECT_EQ(contents(path), "old contents");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST_F(FileIoTest, AtomicWriteThatSucceedsLeavesExactlyTheBytes) {
  const std::string path = file("out.bin");
  AtomicFile f(path);
  EXPECT_EQ(f.temp_path(), path + ".tmp");
  f.write("abc");
  f.write(std::string(100000, 'y'));
  EXPECT_FALSE(fs::exists(path));  // nothing under the final name before commit
  f.commit();
  EXPECT_EQ(contents(path), "abc" + std::string(100000, 'y'));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

}  // namespace
}  // namespace zt
