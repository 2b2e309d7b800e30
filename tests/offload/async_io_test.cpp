// AsyncIo on each back end this build and kernel have (io_uring, libaio, threads, each forced):
// round trips of awkward sizes through aligned (straight) and unaligned (staged) memory on an
// O_DIRECT file, many requests in flight across two workers, single_submit and overlap_events
// off, and every failure as one error naming the file and the block: a read past the end, a
// bad descriptor, a write hook's ENOSPC with the hint, out-of-range options.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <vector>

#include "offload/async_io.h"
#include "tests/offload/offload_test_util.h"

namespace zt {
namespace {

using test::PatternBuffer;
using test::ScratchDir;
using test::thrown;

class AsyncIoTest : public testing::TestWithParam<AioBackend> {
 protected:
  // The engine on the test's back end; skips when this build has not got it. A back end that
  // is built but refused by the kernel fails the test (this machine's kernel takes all three).
  std::unique_ptr<AsyncIo> make(AioOptions options = {}) {
    try {
      return std::make_unique<AsyncIo>(options, GetParam());
    } catch (const Error& e) {
      if (e.message().find("not in this build") != std::string::npos) {
        skipped_ = true;
        return nullptr;
      }
      throw;
    }
  }
  int open_direct(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EINVAL) fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    EXPECT_GE(fd, 0) << path;
    fds_.push_back(fd);
    return fd;
  }
  void TearDown() override {
    for (int fd : fds_) ::close(fd);
  }
  AioRequestSpec spec(AioRequestSpec::Op op, int fd, void* data, int64_t bytes,
                      int64_t offset = 0) {
    AioRequestSpec s;
    s.op = op;
    s.fd = fd;
    s.data = data;
    s.bytes = bytes;
    s.offset = offset;
    s.what = "test file " + file_;
    return s;
  }
  ScratchDir dir_;
  std::string file_ = dir_ / "blocks.bin";
  std::vector<int> fds_;
  bool skipped_ = false;
};

#define MAKE_OR_SKIP(io, ...)  \
  auto io = make(__VA_ARGS__); \
  if (skipped_) GTEST_SKIP() << aio_backend_name(GetParam()) << " not in this build"

TEST_P(AsyncIoTest, RoundTripsAwkwardSizesAlignedAndUnaligned) {
  MAKE_OR_SKIP(io);
  EXPECT_EQ(io->backend(), GetParam());
  const int fd = open_direct(file_);
  for (size_t misalign : {size_t{0}, size_t{1}, size_t{100}}) {
    for (int64_t bytes : {int64_t{0}, int64_t{1}, int64_t{4095}, int64_t{4096},
                          int64_t{(1 << 20) + 3}, int64_t{5 << 20}}) {
      PatternBuffer out(static_cast<size_t>(bytes), misalign, 3 + static_cast<unsigned>(bytes));
      io->wait(io->submit(spec(AioRequestSpec::Op::kWrite, fd, out.data(), bytes)));
      PatternBuffer in(static_cast<size_t>(bytes), misalign, 0);
      in.clear();
      io->wait(io->submit(spec(AioRequestSpec::Op::kRead, fd, in.data(), bytes)));
      EXPECT_EQ(in.first_mismatch(out.seed()), in.bytes())
          << bytes << " bytes at misalignment " << misalign;
    }
  }
}

TEST_P(AsyncIoTest, ManyRequestsInFlightOnTwoWorkers) {
  AioOptions o;
  o.block_size = 64 << 10;
  o.queue_depth = 4;
  o.intra_op_parallelism = 2;
  MAKE_OR_SKIP(io, o);
  const int fd = open_direct(file_);
  constexpr int kRequests = 24;
  constexpr int64_t kStride = 256 << 10;
  std::vector<std::unique_ptr<PatternBuffer>> bufs;
  std::vector<AioHandle> handles;
  for (int i = 0; i < kRequests; ++i) {
    // Sizes up to the stride, some with an unaligned tail; every other buffer unaligned.
    const int64_t bytes = kStride - (i % 3) * 4096 - (i % 5 == 0 ? 17 : 0);
    bufs.push_back(std::make_unique<PatternBuffer>(bytes, (i % 2) * 8, 100 + i));
    handles.push_back(
        io->submit(spec(AioRequestSpec::Op::kWrite, fd, bufs.back()->data(), bytes, i * kStride)));
  }
  for (AioHandle& h : handles) io->wait(h);
  handles.clear();
  std::vector<std::unique_ptr<PatternBuffer>> back;
  for (int i = 0; i < kRequests; ++i) {
    back.push_back(std::make_unique<PatternBuffer>(bufs[i]->bytes(), (i % 2) * 8, 0));
    back.back()->clear();
    handles.push_back(io->submit(
        spec(AioRequestSpec::Op::kRead, fd, back.back()->data(), bufs[i]->bytes(), i * kStride)));
  }
  for (int i = kRequests - 1; i >= 0; --i) {  // waited out of order
    io->wait(handles[i]);
    EXPECT_TRUE(handles[i].done());
    EXPECT_EQ(back[i]->first_mismatch(100 + i), back[i]->bytes()) << "request " << i;
  }
}

TEST_P(AsyncIoTest, SingleSubmitAndNoOverlapStillRoundTrip) {
  AioOptions o;
  o.block_size = 64 << 10;
  o.single_submit = true;
  o.overlap_events = false;
  MAKE_OR_SKIP(io, o);
  const int fd = open_direct(file_);
  PatternBuffer out((1 << 20) + 4096, 0, 9), in((1 << 20) + 4096, 0, 0);
  io->wait(io->submit(spec(AioRequestSpec::Op::kWrite, fd, out.data(), out.bytes())));
  io->wait(io->submit(spec(AioRequestSpec::Op::kRead, fd, in.data(), in.bytes())));
  EXPECT_EQ(in.first_mismatch(9), in.bytes());
}

TEST_P(AsyncIoTest, ReadPastTheEndNamesTheFileAndBlock) {
  AioOptions o;
  o.block_size = 64 << 10;
  MAKE_OR_SKIP(io, o);
  const int fd = open_direct(file_);
  PatternBuffer out(100 << 10, 0, 1), in(256 << 10, 0, 0);
  io->wait(io->submit(spec(AioRequestSpec::Op::kWrite, fd, out.data(), out.bytes())));
  const AioHandle h = io->submit(spec(AioRequestSpec::Op::kRead, fd, in.data(), in.bytes()));
  const test::Thrown e = thrown([&] { io->wait(h); });
  EXPECT_EQ(e.kind, ErrorKind::kSystem);
  // The file holds 100 KiB + padding to 104 KiB: block 1 stops at byte 106496; blocks 2, 3 are
  // past the end. The first error reported is the first one met (which block depends on
  // completion order), each naming the file and its block.
  EXPECT_NE(e.message.find("cannot read test file " + file_ + ": block "), std::string::npos)
      << e.message;
  EXPECT_NE(e.message.find("the file ends at byte"), std::string::npos) << e.message;
  EXPECT_TRUE(h.done());
  thrown([&] { io->wait(h); });  // the same error again
}

TEST_P(AsyncIoTest, BadDescriptorNamesTheOsError) {
  MAKE_OR_SKIP(io);
  const int fd = open_direct(file_);
  ::close(fd);
  fds_.clear();
  PatternBuffer out(8192, 0, 1);
  const test::Thrown e =
      thrown([&] { io->wait(io->submit(spec(AioRequestSpec::Op::kWrite, fd, out.data(), 8192))); });
  EXPECT_EQ(e.message,
            "cannot write test file " + file_ + ": block 0 (bytes 0–8191): Bad file descriptor");
}

// A write hook that fails block 2 with ENOSPC, as the swap store's test limit does.
class FullAtBlock2 final : public BlockHooks {
 public:
  int before_write(int64_t index, const void*, size_t) override { return index == 2 ? ENOSPC : 0; }
};

TEST_P(AsyncIoTest, HookErrnoFailsTheRequestWithTheFullHint) {
  AioOptions o;
  o.block_size = 64 << 10;
  o.queue_depth = 1;  // blocks in order, so block 2 is the one that fails
  MAKE_OR_SKIP(io, o);
  const int fd = open_direct(file_);
  PatternBuffer out(6 * (64 << 10), 0, 1);
  AioRequestSpec s = spec(AioRequestSpec::Op::kWrite, fd, out.data(), out.bytes());
  s.full_hint = " (the disk is full)";
  s.hooks = std::make_shared<FullAtBlock2>();
  const AioHandle h = io->submit(std::move(s));
  EXPECT_EQ(thrown([&] { io->wait(h); }).message,
            "cannot write test file " + file_ +
                ": block 2 (bytes 131072–196607): No space left on device (the disk is full)");
  // The engine goes on serving requests after a failed one.
  PatternBuffer in(64 << 10, 0, 0);
  io->wait(io->submit(spec(AioRequestSpec::Op::kRead, fd, in.data(), in.bytes())));
  EXPECT_EQ(in.first_mismatch(1), in.bytes());
}

INSTANTIATE_TEST_SUITE_P(Backends, AsyncIoTest,
                         testing::Values(AioBackend::kIoUring, AioBackend::kLibaio,
                                         AioBackend::kThreads),
                         [](const testing::TestParamInfo<AioBackend>& info) {
                           return std::string(aio_backend_name(info.param));
                         });

TEST(AsyncIoOptions, OutOfRangeOptionsNameTheKey) {
  AioOptions o;
  o.block_size = 1000;
  EXPECT_EQ(thrown([&] { AsyncIo io(o, AioBackend::kThreads); }).message,
            "aio.block_size must be a positive multiple of 4096; got 1000");
  o = {};
  o.queue_depth = 0;
  EXPECT_EQ(thrown([&] { AsyncIo io(o, AioBackend::kThreads); }).kind, ErrorKind::kInput);
  o = {};
  o.intra_op_parallelism = 0;
  EXPECT_EQ(thrown([&] { AsyncIo io(o, AioBackend::kThreads); }).kind, ErrorKind::kInput);
  EXPECT_EQ(thrown([] { parse_aio_backend("gds", "ZT_AIO_BACKEND"); }).message,
            "ZT_AIO_BACKEND must be io_uring, libaio or threads; got 'gds'");
}

TEST(AsyncIoOptions, TheDefaultChoiceIsDescribedOnce) {
  const AioBackendChoice& a = default_aio_backend();
  const AioBackendChoice& b = default_aio_backend();
  EXPECT_EQ(&a, &b);
  EXPECT_EQ(a.describe.rfind("async I/O: " + std::string(aio_backend_name(a.backend)), 0), 0u)
      << a.describe;
}

}  // namespace
}  // namespace zt
