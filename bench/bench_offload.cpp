// zt-bench offload, two sections. I/O: the swap store's write and read throughput against raw
// sequential O_DIRECT pwrite/pread of the same bytes in the same directory, the hardware's
// reference measured in the same run. Each repeat runs raw write, swap write, raw read, swap
// read, so both see the same machine; every read is compared with what was written (outside the
// timed region). O_DIRECT bypasses the page cache on both sides, so reads come from the disk.
// Step time: GPT-2 under ZeRO stage 2 on one rank without offload, with the optimizer
// offloaded to the host tier (EngineOptions::offload_optimizer) and to NVMe (optimizer_swap: swap
// files under --path), the same batch and steps in each row, the rows' steps alternating; the
// offloaded rows' parameters after their steps are compared bitwise with the row without
// offload's (outside the timed region).
#include <fcntl.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench.h"
#include "bench/harness.h"
#include "comm/self_communicator.h"
#include "launch/logger.h"
#include "model_zoo/gpt2.h"
#include "offload/swap_store.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/cpu/cpu_peak.h"
#include "runtime/status.h"
#include "zero/engine.h"

namespace zt {

namespace {

namespace fs = std::filesystem;
using bench::Clock;

double seconds_since(Clock::time_point t0) { return bench::ms_since(t0) / 1e3; }

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
                                                 "--path at a disk)"
                                               : ""));
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
        throw_system(fmt::format("cannot {} {} at byte {}: {}", write ? "write" : "read", path_, at,
                                 rc < 0 ? std::strerror(errno) : "no progress"));
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

void check_equal(const char* got, const char* want, int64_t bytes, const char* what) {
  if (std::memcmp(got, want, static_cast<size_t>(bytes)) != 0)
    throw_internal(
        fmt::format("zt-bench offload: the {} read back differs from what was written", what));
}

// The I/O section: its figures as the JSON object's top-level keys.
nlohmann::ordered_json measure_io(const BenchOffloadOptions& o, const Logger& log,
                                  bench::Report& report) {
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
  log.rank0(
      "zt-bench offload: {:.2f} GiB per round to {} ({}, {}), {} repeats; swap store: {}, "
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
  // Each round: raw write, swap write, raw read, swap read, each read checked.
  auto gbps = [&](double seconds) { return double(o.bytes) / seconds / 1e9; };
  bench::Rounds rounds(0, o.repeats);
  rounds.add("raw write", [&](int) { return gbps(raw.write(source.data.get(), o.bytes)); });
  rounds.add("swap write", [&](int) {
    return gbps(swap_round(store, true, source.data.get(), o.bytes, o.unit_bytes));
  });
  rounds.add("raw read", [&](int) {
    std::memset(back.data.get(), 0, static_cast<size_t>(o.bytes));
    const double figure = gbps(raw.read(back.data.get(), o.bytes));
    check_equal(back.data.get(), source.data.get(), o.bytes, "raw file");
    return figure;
  });
  rounds.add("swap read", [&](int) {
    std::memset(back.data.get(), 0, static_cast<size_t>(o.bytes));
    const double figure = gbps(swap_round(store, false, back.data.get(), o.bytes, o.unit_bytes));
    check_equal(back.data.get(), source.data.get(), o.bytes, "swap store");
    return figure;
  });
  rounds.run();

  const bench::Summary raw_write = rounds.summary("raw write"),
                       raw_read = rounds.summary("raw read"),
                       swap_write = rounds.summary("swap write"),
                       swap_read = rounds.summary("swap read");
  const bench::Summary write_ratio =
      bench::paired_ratio(rounds.figures("swap write"), rounds.figures("raw write"));
  const bench::Summary read_ratio =
      bench::paired_ratio(rounds.figures("swap read"), rounds.figures("raw read"));
  report.add_reference({fmt::format("raw sequential O_DIRECT pwrite of {} MiB blocks, {}",
                                    o.raw_block >> 20, file_system_name(o.path)),
                        "GB/s", raw_write.median});
  bench::Table table("swap store against raw O_DIRECT, same bytes, same directory",
                     {"GB/s", "write (q1-q3)", "read (q1-q3)"});
  table.add_row(
      {"raw O_DIRECT", bench::quartile_cell(raw_write, 2), bench::quartile_cell(raw_read, 2)});
  table.add_row(
      {"swap store", bench::quartile_cell(swap_write, 2), bench::quartile_cell(swap_read, 2)});
  table.add_row(
      {"swap / raw", bench::quartile_cell(write_ratio, 2), bench::quartile_cell(read_ratio, 2)});
  table.add_note(
      "GB/s = 1e9 bytes per second; swap / raw per round (paired). The swap figures include "
      "computing (write) and checking (read) every block's CRC32C; every read was compared with "
      "what was written");
  report.add_table(table);

  auto series = [&](const char* name) {
    nlohmann::ordered_json j = bench::to_json(rounds.summary(name));
    j["all"] = rounds.figures(name);
    return j;
  };
  return nlohmann::ordered_json{{"path", o.path},
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
                                {"raw_write_gbps", raw_write.median},
                                {"raw_read_gbps", raw_read.median},
                                {"swap_write_gbps", swap_write.median},
                                {"swap_read_gbps", swap_read.median},
                                {"swap_write_fraction_of_raw", write_ratio.median},
                                {"swap_read_fraction_of_raw", read_ratio.median},
                                {"series",
                                 {{"raw_write", series("raw write")},
                                  {"raw_read", series("raw read")},
                                  {"swap_write", series("swap write")},
                                  {"swap_read", series("swap read")}}}};
}

// ---- Step time ----

// The share of a step's host optimizer work (the cpu row's update thread) that ran before the
// backward ended: StepTimes::host_optimizer_hidden / host_optimizer. 0 for a row without it
// (none; nvme streams its update after the backward on the engine's thread).
double hidden_share(const StepTimes& t) {
  return t.host_optimizer > 0.0 ? t.host_optimizer_hidden / t.host_optimizer : 0.0;
}

// One row of the step-time section, measured: per timed step its wall time and the engine's
// phases, the peak bytes of the device and of the host tier, and every unit's parameters after
// the last step (read outside the timed region).
struct StepRow {
  std::string offload;     // "none", "cpu", "nvme"
  int64_t nvme_bytes = 0;  // the optimizer state in swap files (nvme)
  std::vector<double> step_ms, forward_ms, backward_ms, optimizer_ms, hidden;
  int64_t skipped = 0;  // fp16 steps skipped on overflow, warmup included
  MemoryTracker device_memory;
  std::optional<MemoryTracker> host_memory;  // the host tier's, when the optimizer is offloaded
  std::vector<std::vector<float>> params;    // per unit: read_unit_params after the steps
  std::optional<bool> bitwise_equal;         // params equal the row without offload's; unset there
};

// A row's engine and what it runs on, alive for the whole section so that the rows' steps
// alternate (a neighbour's load falls on every row alike). `offload`: "none", "cpu" (the
// optimizer's master and moments on a CpuDevice, updated there) or "nvme" (in swap files under
// --path, streamed through that CpuDevice). Each row has its own device
// (its own peak memory), model and engine, built from the same seed: the rows start from the
// same parameters and train on the same batch.
class StepRun {
 public:
  StepRun(const BenchOffloadOptions& o, const Gpt2Config& config, const std::string& offload)
      : model_(config), comm_(device_) {
    EngineOptions eo;
    eo.optimizer.type = OptimizerOptions::Type::kAdamW;
    eo.optimizer.weight_decay = 0.1f;
    eo.gradient_clipping = o.gradient_clipping;
    eo.policy = ZeroPolicy::for_stage(2);
    eo.precision = bench_precision(o.precision);
    if (offload != "none") eo.offload.optimizer.emplace(host_.emplace());
    if (offload == "nvme") {
      SwapStoreOptions so;
      so.nvme_path = o.path;
      so.aio = o.aio;
      eo.offload.optimizer->swap = &swap_.emplace(so);
    }
    engine_ = std::make_unique<Engine>(device_, comm_, model_, eo);
    row_.offload = offload;
  }
  const std::string& offload() const { return row_.offload; }

  // One step on `batch`; a timed one's phases go into the row. Returns its wall time in ms.
  double step(const Batch& batch, bool timed) {
    StepResult r;
    const double wall_ms = bench::time_ms([&] { r = engine_->train_step({&batch, 1}, 1e-4f); });
    row_.skipped += r.skipped;
    if (!timed) return wall_ms;
    row_.forward_ms.push_back(r.times.forward * 1e3);
    row_.backward_ms.push_back(r.times.backward * 1e3);
    row_.optimizer_ms.push_back(r.times.optimizer * 1e3);
    row_.hidden.push_back(hidden_share(r.times));
    return wall_ms;
  }

  // The row: its step times, peak memory as the steps left it, then every unit's parameters.
  StepRow finish(const std::vector<double>& step_ms) {
    row_.step_ms = step_ms;
    row_.device_memory = device_.memory();
    if (const MemoryTracker* h = engine_->host_memory()) row_.host_memory = *h;
    row_.nvme_bytes = engine_->nvme_bytes();
    for (int u = 0; u < engine_->num_units(); ++u) {
      row_.params.emplace_back(static_cast<size_t>(model_.units()[u]->layout().numel()));
      engine_->read_unit_params(u, row_.params.back().data());
    }
    return std::move(row_);
  }

 private:
  CpuDevice device_;
  std::optional<CpuDevice> host_;  // the host tier: declared before the engine, outlives it
  std::optional<SwapStore> swap_;  // nvme: its swap files, likewise
  Gpt2 model_;
  SelfCommunicator comm_;
  std::unique_ptr<Engine> engine_;
  StepRow row_;
};

bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t u = 0; u < a.size(); ++u)
    if (a[u].size() != b[u].size() ||
        std::memcmp(a[u].data(), b[u].data(), a[u].size() * sizeof(float)) != 0)
      return false;
  return true;
}

double mib(size_t bytes) { return static_cast<double>(bytes) / 1048576.0; }

// Peak bytes per category and in total; all 0 without a tracker (no host tier).
nlohmann::ordered_json peak_bytes_json(const MemoryTracker* m) {
  nlohmann::ordered_json j;
  for (int c = 0; c < kNumMemCategories; ++c) {
    const auto cat = static_cast<MemCategory>(c);
    j[std::string(mem_category_name(cat))] = m ? m->peak(cat) : 0;
  }
  j["total"] = m ? m->peak_total() : 0;
  return j;
}

constexpr const char* kHiddenRule =
    "per step, the host optimizer thread's time before the backward ended over its whole time "
    "(StepTimes::host_optimizer_hidden / host_optimizer), the median of the timed steps";

double median_of(const std::vector<double>& v) { return bench::summarize(v).median; }

// The step-time rows: phases, the paired ratio to the row without offload, peak memory per tier.
bench::Table step_table(const BenchOffloadOptions& o, const std::vector<StepRow>& rows) {
  bench::Table table(
      "GPT-2 steps under ZeRO stage 2, optimizer not offloaded, offloaded to the host, to NVMe",
      {"offload", "ms/step (q1-q3)", "x none (q1-q3)", "forward ms", "backward ms", "optimizer ms",
       "hidden", "device params MiB", "grads", "optim", "activ", "comm", "work", "total",
       "host optim MiB", "grads", "work", "total"});
  const auto m = [](size_t bytes) { return fmt::format("{:.1f}", mib(bytes)); };
  for (const StepRow& r : rows) {
    const MemoryTracker& d = r.device_memory;
    const MemoryTracker none;
    const MemoryTracker& h = r.host_memory ? *r.host_memory : none;
    table.add_row(
        {r.offload, bench::quartile_cell(bench::summarize(r.step_ms)),
         bench::quartile_cell(bench::paired_ratio(r.step_ms, rows[0].step_ms), 3),
         fmt::format("{:.1f}", median_of(r.forward_ms)),
         fmt::format("{:.1f}", median_of(r.backward_ms)),
         fmt::format("{:.1f}", median_of(r.optimizer_ms)),
         fmt::format("{:.0f}%", 100.0 * median_of(r.hidden)), m(d.peak(MemCategory::kParams)),
         m(d.peak(MemCategory::kGrads)), m(d.peak(MemCategory::kOptimizer)),
         m(d.peak(MemCategory::kActivations)), m(d.peak(MemCategory::kCommBuffers)),
         m(d.peak(MemCategory::kWorkspace)), m(d.peak_total()), m(h.peak(MemCategory::kOptimizer)),
         m(h.peak(MemCategory::kGrads)), m(h.peak(MemCategory::kWorkspace)), m(h.peak_total())});
  }
  for (const StepRow& r : rows) {
    if (r.skipped > 0)
      table.add_note(fmt::format("{}: {} of {} steps skipped on fp16 overflow", r.offload,
                                 r.skipped, o.warmup + o.steps));
    if (r.nvme_bytes > 0)
      table.add_note(fmt::format("{}: {:.1f} MiB of optimizer state in swap files under {} ({})",
                                 r.offload, mib(static_cast<size_t>(r.nvme_bytes)), o.path,
                                 default_aio_backend().describe));
    if (r.bitwise_equal)
      table.add_note(fmt::format(
          "{}: parameters after {} step(s) bitwise equal to no offload: {} (read_unit_params of "
          "all {} units)",
          r.offload, o.warmup + o.steps, *r.bitwise_equal ? "yes" : "NO", r.params.size()));
  }
  table.add_note(fmt::format(
      "ms/step: the step's wall time, median (quartiles); x none: per round over the row "
      "without offload; forward, backward and optimizer ms: medians of the engine's StepTimes "
      "(optimizer: from the backward's end, gradient norm, clipping, the update or what of it "
      "is left, the copies back and the parameter refresh). hidden: {}. gradient_clipping {}: "
      "{}. On the CPU back end the host tier and the device are the same cores and the same "
      "memory: offload cannot make a step faster here; it moves the optimizer's bytes off the "
      "device.",
      kHiddenRule, o.gradient_clipping,
      o.gradient_clipping > 0.0f
          ? "the cpu row's updates wait for the global norm, after the backward"
          : "the cpu row's updates start as each unit's gradient is reduced, in the backward"));
  return table;
}

// The step-time section: its rows printed, and as the JSON object's "step". `ok` is set false
// when an offloaded row's parameters differ from the row without offload.
nlohmann::ordered_json measure_step_time(const BenchOffloadOptions& o, const Logger& log,
                                         bench::Report& report, bool& ok) {
  const Gpt2Config config = gpt2_zoo_config(o.model);
  const int64_t B = o.batch, T = o.seq_len;
  const RandomBatch tokens(config.vocab_size, B, T);
  const Batch batch = tokens.batch();
  int64_t params = 0;
  {
    Gpt2 model(config);
    for (Unit* unit : model.units()) params += unit->layout().numel();
  }
  log.rank0("");
  log.rank0(
      "step time: {} ({:.1f}M parameters), ZeRO stage 2 on 1 rank (SelfCommunicator), "
      "B={} T={}, {}, AdamW; {} timed steps after {} warmup per row, the rows' steps "
      "alternating",
      o.model, double(params) / 1e6, B, T, o.precision, o.steps, o.warmup);
  log.rank0("CPU: {} ({}); {} threads (omp_get_max_threads)", cpu_model_name(), cpu_simd_features(),
            cpu_threads());

  std::vector<std::unique_ptr<StepRun>> runs;
  bench::Rounds rounds(o.warmup, o.steps);
  for (const char* offload : {"none", "cpu", "nvme"}) {
    runs.push_back(std::make_unique<StepRun>(o, config, offload));
    rounds.add(offload, [&o, &batch, run = runs.back().get()](int round) {
      return run->step(batch, round >= o.warmup);
    });
  }
  rounds.run();
  std::vector<StepRow> rows;
  for (auto& run : runs) rows.push_back(run->finish(rounds.figures(run->offload())));
  runs.clear();
  for (size_t i = 1; i < rows.size(); ++i) {
    rows[i].bitwise_equal = same_bits(rows[i].params, rows[0].params);
    ok = ok && *rows[i].bitwise_equal;
  }
  report.add_table(step_table(o, rows));

  nlohmann::ordered_json j = {{"model", o.model},
                              {"parameters", params},
                              {"batch", B},
                              {"seq_len", T},
                              {"precision", o.precision},
                              {"gradient_clipping", o.gradient_clipping},
                              {"stage", 2},
                              {"ranks", 1},
                              {"steps", o.steps},
                              {"warmup", o.warmup},
                              {"threads", cpu_threads()},
                              {"hidden_share_rule", kHiddenRule},
                              {"rows", nlohmann::ordered_json::array()}};
  for (const StepRow& r : rows) {
    const MemoryTracker* host = r.host_memory ? &*r.host_memory : nullptr;
    j["rows"].push_back(
        {{"offload", r.offload},
         {"ms", median_of(r.step_ms)},
         {"ms_quartiles", bench::to_json(bench::summarize(r.step_ms))},
         {"ratio_to_none", bench::to_json(bench::paired_ratio(r.step_ms, rows[0].step_ms))},
         {"forward_ms", median_of(r.forward_ms)},
         {"backward_ms", median_of(r.backward_ms)},
         {"optimizer_ms", median_of(r.optimizer_ms)},
         {"hidden_share", median_of(r.hidden)},
         {"device_peak_bytes", peak_bytes_json(&r.device_memory)},
         {"host_peak_bytes", peak_bytes_json(host)},
         {"nvme_bytes", r.nvme_bytes},
         // null in the row without offload: the reference
         {"bitwise_equal",
          r.bitwise_equal ? nlohmann::ordered_json(*r.bitwise_equal) : nlohmann::ordered_json()},
         {"skipped_steps", r.skipped},
         {"step_ms", r.step_ms},
         {"optimizer_ms_per_step", r.optimizer_ms},
         {"backward_ms_per_step", r.backward_ms}});
  }
  return j;
}

}  // namespace

int bench_offload(const BenchOffloadOptions& o) {
  Logger log;
  bench::Report report("offload", log);
  if (o.io) report.json().update(measure_io(o, log, report));
  bool ok = true;
  if (o.step) report.json()["step"] = measure_step_time(o, log, report, ok);
  report.write(o.json_path, o.markdown_path);
  if (!ok)
    log.warn(
        "the offloaded run's parameters differ from the run without offload: these step "
        "times measure a wrong configuration");
  return ok ? 0 : 1;
}

}  // namespace zt
