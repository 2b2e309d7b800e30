// SwapStore: names stable by rank and key, round trips on every back end, O_DIRECT on this
// disk, a flipped byte and a truncated file refused naming the file (and the block), stale files
// of a SIGKILLed run removed at the next start while a live holder of the directory is refused,
// files gone after a clean exit, a full disk (the test limit) naming the file and nvme_path, and
// a key rewritten smaller is cut, not appended to.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "offload/swap_store.h"
#include "tests/offload/offload_test_util.h"

namespace zt {
namespace {

namespace fs = std::filesystem;
using test::PatternBuffer;
using test::ScratchDir;
using test::thrown;

constexpr int64_t kBlock = 64 << 10;  // small blocks keep the files small and blocks many

class SwapStoreTest : public testing::Test {
 protected:
  SwapStoreOptions options(int rank = 0) {
    SwapStoreOptions o;
    o.nvme_path = dir_.str();
    o.rank = rank;
    o.aio.block_size = kBlock;
    o.aio.queue_depth = 4;
    o.notice = [this](const std::string& line) { notices_.push_back(line); };
    return o;
  }
  // Writes `bytes` bytes of a pattern of `seed` as `key` and waits.
  static void put(SwapStore& store, const std::string& key, size_t bytes, unsigned seed) {
    PatternBuffer out(bytes, 0, seed);
    SwapHandle h = store.write(key, out.data(), static_cast<int64_t>(bytes));
    store.wait(h);
  }
  // Reads `key` back and checks it holds the pattern of `seed`.
  static void check(SwapStore& store, const std::string& key, size_t bytes, unsigned seed,
                    size_t misalign = 0) {
    PatternBuffer in(bytes, misalign, 0);
    in.clear();
    SwapHandle h = store.read(key, in.data(), static_cast<int64_t>(bytes));
    store.wait(h);
    EXPECT_EQ(in.first_mismatch(seed), bytes) << key;
  }
  static void flip_byte(const std::string& path, off_t at) {
    const int fd = ::open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0) << path;
    char b = 0;
    ASSERT_EQ(::pread(fd, &b, 1, at), 1);
    b = static_cast<char>(b ^ 0x01);
    ASSERT_EQ(::pwrite(fd, &b, 1, at), 1);
    ::fsync(fd);
    ::close(fd);
  }
  ScratchDir dir_;
  std::vector<std::string> notices_;
};

TEST_F(SwapStoreTest, RoundTripsOnEveryBackendWithStableNames) {
  const std::vector<int64_t> sizes = {0, 1, 4095, 4096, (1 << 20) + 3, 5 << 20};
  for (AioBackend backend : {AioBackend::kIoUring, AioBackend::kLibaio, AioBackend::kThreads}) {
    SwapStoreOptions o = options(3);
    o.backend = backend;
    o.aio.block_size = 1 << 20;  // the default
    std::unique_ptr<SwapStore> store;
    try {
      store = std::make_unique<SwapStore>(o);
    } catch (const Error& e) {
      ASSERT_NE(e.message().find("not in this build"), std::string::npos) << e.message();
      continue;
    }
    SCOPED_TRACE(std::string(aio_backend_name(backend)));
    EXPECT_EQ(store->directory(), dir_ / "zt_swap/rank3");
    EXPECT_EQ(store->path_of("h3.master"), dir_ / "zt_swap/rank3/h3.master.swp");
    for (size_t i = 0; i < sizes.size(); ++i) {
      const std::string key = "h" + std::to_string(i) + ".exp_avg";
      for (size_t misalign : {size_t{0}, size_t{5}}) {
        PatternBuffer out(static_cast<size_t>(sizes[i]), misalign, 20 + i);
        SwapHandle h = store->write(key, out.data(), sizes[i]);
        store->wait(h);
        // The file holds the bytes padded to 4096.
        EXPECT_EQ(static_cast<int64_t>(fs::file_size(store->path_of(key))),
                  (sizes[i] + 4095) / 4096 * 4096);
        check(*store, key, static_cast<size_t>(sizes[i]), 20 + i, misalign);
      }
    }
  }
}

TEST_F(SwapStoreTest, UsesODirectOnThisDisk) {
  struct statfs fs_info {};
  ASSERT_EQ(::statfs(dir_.str().c_str(), &fs_info), 0);
  constexpr long kTmpfsMagic = 0x01021994;
  if (fs_info.f_type == kTmpfsMagic) GTEST_SKIP() << dir_.str() << " is on tmpfs";
  SwapStore store(options());
  EXPECT_TRUE(store.direct_io());
  EXPECT_TRUE(notices_.empty());
}

TEST_F(SwapStoreTest, ManyKeysInFlightAtOnce) {
  SwapStore store(options());
  std::vector<std::unique_ptr<PatternBuffer>> out, in;
  std::vector<SwapHandle> handles;
  for (int i = 0; i < 16; ++i) {
    out.push_back(std::make_unique<PatternBuffer>(300'000 + 4096 * i, i % 2, 50 + i));
    handles.push_back(store.write("unit" + std::to_string(i) + ".master", out.back()->data(),
                                  static_cast<int64_t>(out.back()->bytes())));
  }
  for (SwapHandle& h : handles) store.wait(h);
  handles.clear();
  for (int i = 0; i < 16; ++i) {
    in.push_back(std::make_unique<PatternBuffer>(out[i]->bytes(), (i + 1) % 2, 0));
    in.back()->clear();
    handles.push_back(store.read("unit" + std::to_string(i) + ".master", in.back()->data(),
                                 static_cast<int64_t>(in.back()->bytes())));
  }
  for (int i = 0; i < 16; ++i) {
    store.wait(handles[i]);
    EXPECT_EQ(in[i]->first_mismatch(50 + i), in[i]->bytes()) << "unit " << i;
  }
}

TEST_F(SwapStoreTest, AFlippedByteIsRefusedNamingTheFileAndBlock) {
  SwapStore store(options());
  const size_t bytes = (1 << 20) + 3;
  put(store, "h3.master", bytes, 1);
  const std::string path = store.path_of("h3.master");
  flip_byte(path, 5 * kBlock + 100);  // block 5: bytes 327680-393215
  PatternBuffer in(bytes, 0, 0);
  SwapHandle h = store.read("h3.master", in.data(), static_cast<int64_t>(bytes));
  const test::Thrown e = thrown([&] { store.wait(h); });
  EXPECT_EQ(e.kind, ErrorKind::kSystem);
  EXPECT_EQ(e.message.rfind("swap file " + path +
                                ": block 5 (bytes 327680–393215) fails its "
                                "checksum (crc32c ",
                            0),
            0u)
      << e.message;
  EXPECT_NE(e.message.find("refusing to use it"), std::string::npos) << e.message;
  // The last, staged block (3 bytes, padded to 4096) is checked as well; a flip in the padding
  // is not data and is not reported.
  flip_byte(path, 5 * kBlock + 100);  // mended
  flip_byte(path, (1 << 20) + 10);
  check(store, "h3.master", bytes, 1);
  flip_byte(path, (1 << 20) + 1);
  h = store.read("h3.master", in.data(), static_cast<int64_t>(bytes));
  EXPECT_EQ(
      thrown([&] { store.wait(h); })
          .message.rfind(
              "swap file " + path + ": block 16 (bytes 1048576–1048578) fails its checksum", 0),
      0u);
}

TEST_F(SwapStoreTest, ATruncatedFileIsRefusedNamingIt) {
  SwapStore store(options());
  put(store, "h0.exp_avg_sq", 5 << 20, 2);
  const std::string path = store.path_of("h0.exp_avg_sq");
  ASSERT_EQ(::truncate(path.c_str(), 1 << 20), 0);
  PatternBuffer in(5 << 20, 0, 0);
  const test::Thrown e = thrown([&] { store.read("h0.exp_avg_sq", in.data(), 5 << 20); });
  EXPECT_EQ(e.kind, ErrorKind::kSystem);
  EXPECT_EQ(e.message, "swap file " + path +
                           " is truncated: 1048576 bytes on disk, 5242880 "
                           "written; refusing to use it");
}

TEST_F(SwapStoreTest, AKilledRunsFilesAreRemovedAtTheNextStartNotWhileItLives) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // a run that writes its swap files and is killed mid-step
    ::close(ready[0]);
    SwapStoreOptions o = options(1);
    o.notice = nullptr;
    auto* store = new SwapStore(o);  // never destroyed: the process is killed
    PatternBuffer a(200'000, 0, 7), b(70'000, 0, 8);
    SwapHandle ha = store->write("h0.master", a.data(), 200'000);
    SwapHandle hb = store->write("h0.exp_avg", b.data(), 70'000);
    store->wait(ha);
    store->wait(hb);
    PatternBuffer c(8 << 20, 0, 9);  // still being written when the kill comes, perhaps
    store->write("h1.master", c.data(), 8 << 20);
    const char one = 1;
    if (::write(ready[1], &one, 1) != 1) ::_exit(1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char got = 0;
  ASSERT_EQ(::read(ready[0], &got, 1), 1);
  ::close(ready[0]);
  const std::string rank_dir = dir_ / "zt_swap/rank1";
  EXPECT_TRUE(fs::exists(rank_dir + "/h0.master.swp"));

  // While it lives, a second job on the same nvme_path is refused, naming the directory.
  const test::Thrown busy = thrown([&] { SwapStore second(options(1)); });
  EXPECT_EQ(busy.kind, ErrorKind::kInput);
  EXPECT_EQ(busy.message.rfind("swap directory " + rank_dir +
                                   " is in use by a live process "
                                   "(pid " +
                                   std::to_string(child) + " holds ",
                               0),
            0u)
      << busy.message;
  EXPECT_TRUE(fs::exists(rank_dir + "/h0.master.swp"));  // and its files are left alone

  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_TRUE(fs::exists(rank_dir + "/h0.exp_avg.swp"));

  {
    SwapStore next(options(1));
    ASSERT_EQ(notices_.size(), 1u);
    EXPECT_EQ(notices_[0], "swap directory " + rank_dir +
                               ": removed 3 stale swap files of an "
                               "earlier run that did not exit cleanly");
    EXPECT_FALSE(fs::exists(rank_dir + "/h0.master.swp"));
    EXPECT_FALSE(fs::exists(rank_dir + "/h0.exp_avg.swp"));
    EXPECT_FALSE(fs::exists(rank_dir + "/h1.master.swp"));
    put(next, "h0.master", 5000, 9);  // a fresh file, not the old one appended to
    EXPECT_EQ(fs::file_size(rank_dir + "/h0.master.swp"), 8192u);
    check(next, "h0.master", 5000, 9);
  }
  EXPECT_FALSE(fs::exists(dir_ / "zt_swap"));
}

TEST_F(SwapStoreTest, ASecondStoreOfTheSameRankInOneProcessIsRefused) {
  SwapStore first(options(0));
  EXPECT_EQ(thrown([&] { SwapStore again(options(0)); }).kind, ErrorKind::kInput);
  SwapStore other_rank(options(1));  // another rank's directory is its own
  put(other_rank, "h1.master", 10, 1);
  put(first, "h1.master", 10, 2);
  check(other_rank, "h1.master", 10, 1);
  check(first, "h1.master", 10, 2);
}

TEST_F(SwapStoreTest, AFullDiskNamesTheFileAndTheNvmePath) {
  SwapStoreOptions o = options();
  o.test_write_limit = 3 * kBlock;
  SwapStore store(o);
  PatternBuffer out(1 << 20, 0, 4);
  SwapHandle h = store.write("h2.master", out.data(), 1 << 20);
  const test::Thrown e = thrown([&] { store.wait(h); });
  const std::string path = store.path_of("h2.master");
  EXPECT_EQ(e.kind, ErrorKind::kSystem);
  EXPECT_EQ(e.message.rfind("cannot write swap file " + path + ": block ", 0), 0u) << e.message;
  EXPECT_NE(e.message.find("No space left on device (nvme_path " + dir_.str() + " is full"),
            std::string::npos)
      << e.message;
  // What failed to be written is never read.
  EXPECT_EQ(thrown([&] { store.read("h2.master", out.data(), 1 << 20); }).message,
            "swap file " + path + ": its last write failed; it holds nothing to read");
}

TEST_F(SwapStoreTest, FilesAndDirectoriesAreGoneAfterACleanExit) {
  {
    PatternBuffer big(4 << 20, 0, 3);  // outlives the store: a write may be in flight at the end
    SwapStore store(options(2));
    put(store, "h0.master", 100'000, 1);
    put(store, "h1.master", 4096, 2);
    EXPECT_TRUE(fs::exists(dir_ / "zt_swap/rank2/h0.master.swp"));
    EXPECT_TRUE(fs::exists(dir_ / "zt_swap/rank2/.lock"));
    // A write still in flight at destruction is waited for, then removed too.
    store.write("h2.master", big.data(), 4 << 20);
  }
  EXPECT_FALSE(fs::exists(dir_ / "zt_swap"));
  EXPECT_TRUE(fs::is_directory(dir_.str()));  // nvme_path itself stays
}

TEST_F(SwapStoreTest, ARewriteReplacesTheFileNeverAppends) {
  SwapStore store(options());
  put(store, "h0.exp_avg", 5 << 20, 1);
  put(store, "h0.exp_avg", (1 << 20) + 3, 2);
  EXPECT_EQ(fs::file_size(store.path_of("h0.exp_avg")), (1u << 20) + 4096);
  check(store, "h0.exp_avg", (1 << 20) + 3, 2);
  put(store, "h0.exp_avg", 3 << 20, 3);
  EXPECT_EQ(fs::file_size(store.path_of("h0.exp_avg")), 3u << 20);
  check(store, "h0.exp_avg", 3 << 20, 3);
}

TEST_F(SwapStoreTest, BadPathsAndKeysAreRefused) {
  SwapStoreOptions o = options();
  o.nvme_path = dir_ / "missing";
  EXPECT_EQ(thrown([&] { SwapStore s(o); }).message,
            "offload nvme_path '" + o.nvme_path + "' is not an existing directory");
  SwapStore store(options());
  char byte = 0;
  EXPECT_EQ(thrown([&] { store.write("../escape", &byte, 1); }).kind, ErrorKind::kInternal);
  EXPECT_EQ(thrown([&] { store.read("never.written", &byte, 1); }).kind, ErrorKind::kInternal);
}

}  // namespace
}  // namespace zt
