// zt-bench offload: the swap store's write and read throughput against raw sequential O_DIRECT
// pwrite/pread of the same bytes in the same directory, the hardware's reference measured in the
// same run. Each repeat runs raw write, swap write, raw read, swap read, so both see the same
// machine; every read is compared with what was written (outside the timed region). O_DIRECT
// bypasses the page cache on both sides, so reads come from the disk. The step-time half of
// issue 12's bench (Adam from NVMe) is not here.
#include <fcntl.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "launch/bench.h"
#include "launch/logger.h"
#include "offload/swap_store.h"
#include "runtime/status.h"

namespace zt {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string file_system_name(const std::string& path) {
  struct statfs s {};
  if (::statfs(path.c_str(), &s) != 0) return "unknown file system";
  switch (static_cast<unsigned long>(s.f_type)) {
    case 0xEF53: return "ext4";
    case 0x58465342: return "xfs";
    case 0x9123683E: return "btrfs";
    case 0x01021994: return "tmpfs";
    default: return fmt::format("file system 0x{:x}", static_cast<unsigned long>(s.f_type));
  }
}

struct AlignedBuffer {
  explicit AlignedBuffer(int64_t bytes)
      : data(static_cast<char*>(std::aligned_alloc(kAioAlignment, static_cast<size_t>(bytes))),
             &std::free) {
    if (!data) throw_system(fmt::format("cannot allocate {} bytes for the benchmark", bytes));
  }
  std::unique_ptr<char, decltype(&std::free)> data;
};

// The raw reference: one O_DIRECT file, written and read front to back with pwrite/pread of
// `block` bytes from one thread (the kernel splits each into the device's requests, so several
// are in flight at the device). Removed at destruction.
class RawFile {
 public:
  RawFile(const std::string& path, int64_t block) : path_(path), block_(block) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0644);
    if (fd_ < 0)
      throw_system(fmt::format("cannot open {} with O_DIRECT: {}{}", path, std::strerror(errno),
                               errno == EINVAL ? " (this file system refuses O_DIRECT: point "
                                                 "--path at a disk)" : ""));
  }
  ~RawFile() {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  double write(const char* src, int64_t bytes) { return run(true, const_cast<char*>(src), bytes); }
  double read(char* dst, int64_t bytes) { return run(false, dst, bytes); }

 private:
  double run(bool write, char* data, int64_t bytes) {
    const Clock::time_point t0 = Clock::now();
    for (int64_t at = 0; at < bytes;) {
      const size_t n = static_cast<size_t>(std::min(block_, bytes - at));
      const ssize_t rc = write ? ::pwrite(fd_, data + at, n, at) : ::pread(fd_, data + at, n, at);
      if (rc < 0 && errno == EINTR) continue;
      if (rc <= 0)
        throw_system(fmt::format("cannot {} {} at byte {}: {}", write ? "write" : "read", path_,
                                 at, rc < 0 ? std::strerror(errno) : "no progress"));
      at += rc;
    }
    return seconds_since(t0);
  }
  std::string path_;
  int64_t block_;
  int fd_ = -1;
};

// The swap store's side: every key written (or read) at once, then every handle waited on.
double swap_round(SwapStore& store, bool write, char* data, int64_t bytes, int64_t unit) {
  const Clock::time_point t0 = Clock::now();
  std::vector<SwapHandle> handles;
  for (int64_t at = 0, i = 0; at < bytes; at += unit, ++i) {
    const int64_t n = std::min(unit, bytes - at);
    const std::string key = fmt::format("bench{}.master", i);
    handles.push_back(write ? store.write(key, data + at, n) : store.read(key, data + at, n));
  }
  for (SwapHandle& h : handles) store.wait(h);
  return seconds_since(t0);
}

struct Series {
  std::vector<double> gbps;
  double median() const {
    std::vector<double> v = gbps;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
  double min() const { return *std::min_element(gbps.begin(), gbps.end()); }
  double max() const { return *std::max_element(gbps.begin(), gbps.end()); }
  std::string cell() const { return fmt::format("{:.2f} ({:.2f}-{:.2f})", median(), min(), max()); }
};

void check_equal(const char* got, const char* want, int64_t bytes, const char* what) {
  if (std::memcmp(got, want, static_cast<size_t>(bytes)) != 0)
    throw_internal(fmt::format("zt-bench offload: the {} read back differs from what was written",
                               what));
}

}  // namespace

int bench_offload(const BenchOffloadOptions& o) {
  Logger log;
  if (!fs::is_directory(o.path)) throw_input(fmt::format("--path {} is not a directory", o.path));
  const std::string scratch =
      (fs::path(o.path) / fmt::format("zt_bench_offload_{}", ::getpid())).string();
  fs::create_directories(scratch);
  struct RemoveScratch {
    std::string dir;
    ~RemoveScratch() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } remove_scratch{scratch};

  std::optional<AioBackend> backend;
  if (!o.backend.empty()) backend = parse_aio_backend(o.backend, "--backend");
  SwapStoreOptions so;
  so.nvme_path = scratch;
  so.aio = o.aio;
  so.backend = backend;
  so.notice = [&log](const std::string& line) { log.rank0("{}", line); };
  SwapStore store(so);
  RawFile raw((fs::path(scratch) / "raw.bin").string(), o.raw_block);
  log.rank0("{}", backend ? fmt::format("async I/O: {} (--backend)", o.backend)
                          : default_aio_backend().describe);
  log.rank0("zt-bench offload: {:.2f} GiB per round to {} ({}, {}), {} repeats; swap store: {}, "
            "block {} KiB, queue depth {}, {} worker(s), keys of {} MiB, CRC32C per block; raw: "
            "pwrite/pread of {} MiB O_DIRECT blocks from one thread",
            double(o.bytes) / double(int64_t(1) << 30), o.path, file_system_name(o.path),
            store.direct_io() ? "O_DIRECT" : "buffered: no O_DIRECT here", o.repeats,
            aio_backend_name(store.backend()), o.aio.block_size >> 10, o.aio.queue_depth,
            o.aio.intra_op_parallelism, o.unit_bytes >> 20, o.raw_block >> 20);

  AlignedBuffer source(o.bytes), back(o.bytes);
  for (int64_t i = 0; i < o.bytes; i += 8) {
    const uint64_t v = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
    std::memcpy(source.data.get() + i, &v, static_cast<size_t>(std::min<int64_t>(8, o.bytes - i)));
  }
  Series raw_write, raw_read, swap_write, swap_read;
  auto gbps = [&](double seconds) { return double(o.bytes) / seconds / 1e9; };
  for (int r = 0; r < o.repeats; ++r) {
    raw_write.gbps.push_back(gbps(raw.write(source.data.get(), o.bytes)));
    swap_write.gbps.push_back(
        gbps(swap_round(store, true, source.data.get(), o.bytes, o.unit_bytes)));
    std::memset(back.data.get(), 0, static_cast<size_t>(o.bytes));
    raw_read.gbps.push_back(gbps(raw.read(back.data.get(), o.bytes)));
    check_equal(back.data.get(), source.data.get(), o.bytes, "raw file");
    std::memset(back.data.get(), 0, static_cast<size_t>(o.bytes));
    swap_read.gbps.push_back(
        gbps(swap_round(store, false, back.data.get(), o.bytes, o.unit_bytes)));
    check_equal(back.data.get(), source.data.get(), o.bytes, "swap store");
  }

  log.rank0("{:<14} {:>26} {:>26}", "GB/s", "write median (min-max)", "read median (min-max)");
  log.rank0("{:<14} {:>26} {:>26}", "raw O_DIRECT", raw_write.cell(), raw_read.cell());
  log.rank0("{:<14} {:>26} {:>26}", "swap store", swap_write.cell(), swap_read.cell());
  const double write_ratio = swap_write.median() / raw_write.median();
  const double read_ratio = swap_read.median() / raw_read.median();
  log.rank0("{:<14} {:>25.0f}% {:>25.0f}%", "swap / raw", 100 * write_ratio, 100 * read_ratio);
  log.rank0("GB/s = 1e9 bytes per second; the swap figures include computing (write) and checking "
            "(read) every block's CRC32C; every read was compared with what was written");

  if (!o.json_path.empty()) {
    std::ofstream out(o.json_path);
    if (!out) throw_input(fmt::format("cannot write --json file {}", o.json_path));
    auto series = [](const Series& s) {
      return nlohmann::ordered_json{{"median", s.median()}, {"min", s.min()}, {"max", s.max()},
                                    {"all", s.gbps}};
    };
    out << nlohmann::ordered_json{
               {"bench", "offload"},
               {"path", o.path},
               {"file_system", file_system_name(o.path)},
               {"direct_io", store.direct_io()},
               {"backend", aio_backend_name(store.backend())},
               {"bytes", o.bytes},
               {"repeats", o.repeats},
               {"block_size", o.aio.block_size},
               {"queue_depth", o.aio.queue_depth},
               {"intra_op_parallelism", o.aio.intra_op_parallelism},
               {"unit_bytes", o.unit_bytes},
               {"raw_block", o.raw_block},
               {"raw_write_gbps", raw_write.median()},
               {"raw_read_gbps", raw_read.median()},
               {"swap_write_gbps", swap_write.median()},
               {"swap_read_gbps", swap_read.median()},
               {"swap_write_fraction_of_raw", write_ratio},
               {"swap_read_fraction_of_raw", read_ratio},
               {"series", {{"raw_write", series(raw_write)}, {"raw_read", series(raw_read)},
                           {"swap_write", series(swap_write)}, {"swap_read", series(swap_read)}}}}
               .dump(2)
        << "\n";
  }
  return 0;
}

}  // namespace zt
