// zt-bench comm: MpiCommunicator's collectives against the same collective of raw MPI, on the
// same buffers in the same run, as nccl-tests reports them. One harness for every collective:
// warm-up, timed loop, time = max over ranks of the mean per call (ours and MPI in rounds
// ordered ours, MPI, MPI, ours), then a fresh call whose result is checked exactly.
// Out-of-place only; no in-place or queued (CommQueue) variants.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/bench.h"
#include "bench/harness.h"
#include "comm/mpi_communicator.h"
#include "comm/process_group.h"
#include "launch/logger.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/status.h"

namespace zt {

int64_t parse_byte_size(std::string_view text) {
  int64_t unit = 1;
  std::string_view digits = text;
  if (!text.empty()) {
    switch (text.back()) {
      case 'K':
      case 'k': unit = int64_t(1) << 10; break;
      case 'M':
      case 'm': unit = int64_t(1) << 20; break;
      case 'G':
      case 'g': unit = int64_t(1) << 30; break;
      default: break;
    }
    if (unit != 1) digits.remove_suffix(1);
  }
  int64_t value = 0;
  bool ok = !digits.empty() && digits.size() < 13;
  for (char c : digits) {
    if (c < '0' || c > '9') ok = false;
    value = value * 10 + (c - '0');
  }
  if (!ok) throw_input(fmt::format("'{}' is not a byte size (e.g. 4096, 64K, 256M, 1G)", text));
  return value * unit;
}

namespace {

using bench::Clock;

// Input element i of rank r: (i + r) % 3, so every sum (<= 2 * world) and its fp32/fp16/bf16
// encoding is exact for up to 128 ranks, and both back ends must give exactly the expected bits.
float input_value(int64_t i, int rank) { return static_cast<float>((i + rank) % 3); }

void store(DType dtype, char* data, int64_t i, float v) {
  if (dtype == DType::kF32) {
    std::memcpy(data + 4 * i, &v, 4);
  } else {
    const uint16_t h = dtype == DType::kF16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
    std::memcpy(data + 2 * i, &h, 2);
  }
}

float load(DType dtype, const char* data, int64_t i) {
  if (dtype == DType::kF32) {
    float v;
    std::memcpy(&v, data + 4 * i, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, data + 2 * i, 2);
  return dtype == DType::kF16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
}

// MPI has no 16-bit float sum: the raw-MPI reference of fp16/bf16 uses these user ops (widen,
// add, round: what a user of plain MPI would write).
void mpi_sum_fp16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = fp32_to_fp16(fp16_to_fp32(a[i]) + fp16_to_fp32(b[i]));
}
void mpi_sum_bf16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = fp32_to_bf16(bf16_to_fp32(a[i]) + bf16_to_fp32(b[i]));
}

// nccl-tests' PERFORMANCE.md: busbw = algbw * factor, the factor making busbw comparable with
// the link's bandwidth whatever the rank count.
double bus_factor(CollectiveKind kind, int n) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return 2.0 * (n - 1) / n;
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllGather: return double(n - 1) / n;
    case CollectiveKind::kBroadcast: return 1.0;
  }
  return 1.0;
}

// One collective at one size, with everything the harness needs to run and check it.
struct Case {
  CollectiveKind kind;
  int64_t bytes;       // the whole buffer (nccl-tests' "size")
  int64_t count;       // elements of the whole buffer
  int64_t rank_count;  // elements per rank: count, or count / world for reduce_scatter and
                       // all_gather
  int64_t send_count;  // elements of send and recv
  int64_t recv_count;
};

// One implementation's figures at one size.
struct Measurement {
  double seconds = 0;    // max over ranks of the mean per call
  int iters = 0;         // timed calls
  bool correct = false;  // on every rank
};

// The MPI-side environment of the benchmark: the communicator under test, its raw MPI_Comm and
// the reduction ops of raw MPI for the dtype.
struct Bench {
  const BenchCommOptions& options;
  MpiCommunicator& comm;
  DType dtype;
  MPI_Datatype mpi_type;
  MPI_Op mpi_sum;
  char* send;
  char* recv;
  int world() const { return comm.world(); }
  int rank() const { return comm.rank(); }
  MPI_Comm mpi_comm() const { return comm.mpi_comm(); }
};

// Inputs of this rank for the case; recv filled with a value no result has (3.5).
void prepare(const Bench& b, const Case& c) {
  const int rank = b.rank();
  if (c.kind == CollectiveKind::kBroadcast) {
    for (int64_t i = 0; i < c.count; ++i)
      store(b.dtype, b.send, i, rank == 0 ? input_value(i, 0) : 3.5f);
    return;
  }
  for (int64_t i = 0; i < c.send_count; ++i) store(b.dtype, b.send, i, input_value(i, rank));
  for (int64_t i = 0; i < c.recv_count; ++i) store(b.dtype, b.recv, i, 3.5f);
}

// True when this rank's result is exactly what the case must give.
bool verify(const Bench& b, const Case& c) {
  const int world = b.world(), rank = b.rank();
  auto summed = [&](int64_t i) {
    float s = 0;
    for (int q = 0; q < world; ++q) s += input_value(i, q);
    return s;
  };
  for (int64_t j = 0; j < c.recv_count; ++j) {
    float expected = 0, got = 0;
    switch (c.kind) {
      case CollectiveKind::kAllReduce:
        expected = summed(j);
        got = load(b.dtype, b.recv, j);
        break;
      case CollectiveKind::kReduceScatter:
        expected = summed(rank * c.rank_count + j);
        got = load(b.dtype, b.recv, j);
        break;
      case CollectiveKind::kAllGather:
        expected = input_value(j % c.rank_count, static_cast<int>(j / c.rank_count));
        got = load(b.dtype, b.recv, j);
        break;
      case CollectiveKind::kBroadcast:
        expected = input_value(j, 0);
        got = load(b.dtype, b.send, j);
        break;
    }
    if (got != expected) return false;
  }
  return true;
}

// Warm-up, then a timed loop between barriers; returns the slowest rank's mean per call. The
// first warm-up call, timed on the slowest rank, sizes the rest to `budget` seconds (at most
// options.iters calls, at least 2); every rank derives the same counts from that one figure,
// so all ranks make the same calls.
Measurement time_calls(const Bench& b, const std::function<void()>& run, double budget) {
  const BenchCommOptions& o = b.options;
  int warmup = o.warmup, iters = o.iters;
  if (warmup > 0 && budget > 0) {
    ZT_MPI_CHECK(MPI_Barrier(b.mpi_comm()));
    const auto t0 = Clock::now();
    run();
    double first = std::chrono::duration<double>(Clock::now() - t0).count(), slowest = 0;
    ZT_MPI_CHECK(MPI_Allreduce(&first, &slowest, 1, MPI_DOUBLE, MPI_MAX, b.mpi_comm()));
    const double fit = budget / std::max(slowest, 1e-9);
    warmup = static_cast<int>(std::clamp(fit / 4, 0.0, double(o.warmup - 1)));
    iters = static_cast<int>(std::clamp(fit, std::min(2.0, double(o.iters)), double(o.iters)));
  }
  for (int i = 0; i < warmup; ++i) run();
  ZT_MPI_CHECK(MPI_Barrier(b.mpi_comm()));
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) run();
  double mean = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
  double slowest = 0;
  ZT_MPI_CHECK(MPI_Allreduce(&mean, &slowest, 1, MPI_DOUBLE, MPI_MAX, b.mpi_comm()));
  return {slowest, iters, false};
}

// Fresh inputs, one call, and its result checked on every rank.
bool check(const Bench& b, const Case& c, const std::function<void()>& run) {
  prepare(b, c);
  run();
  int ok = verify(b, c) ? 1 : 0, all_ok = 0;
  ZT_MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, b.mpi_comm()));
  return all_ok == 1;
}

// Ours and raw MPI in the harness's alternating rounds (ours, MPI, MPI, ours; each round half
// of the time budget), each figure the mean of its two rounds, so that neither gains from going
// first or from drift during the measurement; then both results are checked.
std::pair<Measurement, Measurement> measure(const Bench& b, const Case& c,
                                            const std::function<void()>& our_call,
                                            const std::function<void()>& mpi_call) {
  const double half = b.options.budget_seconds / 2;
  prepare(b, c);
  int our_iters = 0, mpi_iters = 0;
  bench::Rounds rounds(0, 2, bench::Rounds::Order::kAlternate);
  rounds.add("ours", [&](int) {
    const Measurement m = time_calls(b, our_call, half);
    our_iters += m.iters;
    return m.seconds;
  });
  rounds.add("mpi", [&](int) {
    const Measurement m = time_calls(b, mpi_call, half);
    mpi_iters += m.iters;
    return m.seconds;
  });
  rounds.run();
  const auto mean = [](const std::vector<double>& v) { return (v[0] + v[1]) / 2; };
  const Measurement ours{mean(rounds.figures("ours")), our_iters, check(b, c, our_call)};
  const Measurement mpi{mean(rounds.figures("mpi")), mpi_iters, check(b, c, mpi_call)};
  return {ours, mpi};
}

// Ours and raw MPI's call for a case.
std::function<void()> ours(const Bench& b, const Case& c) {
  switch (c.kind) {
    case CollectiveKind::kAllReduce:
      return [&b, c] { b.comm.all_reduce(b.send, b.recv, c.count, b.dtype, ReduceOp::kSum); };
    case CollectiveKind::kReduceScatter:
      return
          [&b, c] { b.comm.reduce_scatter(b.send, b.recv, c.rank_count, b.dtype, ReduceOp::kSum); };
    case CollectiveKind::kAllGather:
      return [&b, c] { b.comm.all_gather(b.send, b.recv, c.rank_count, b.dtype); };
    case CollectiveKind::kBroadcast:
      return [&b, c] { b.comm.broadcast(b.send, c.count, b.dtype, 0); };
  }
  return {};
}

std::function<void()> raw_mpi(const Bench& b, const Case& c) {
  const int n = static_cast<int>(c.rank_count);
  switch (c.kind) {
    case CollectiveKind::kAllReduce:
      return [&b, n] {
        ZT_MPI_CHECK(MPI_Allreduce(b.send, b.recv, n, b.mpi_type, b.mpi_sum, b.mpi_comm()));
      };
    case CollectiveKind::kReduceScatter:
      return [&b, n] {
        ZT_MPI_CHECK(
            MPI_Reduce_scatter_block(b.send, b.recv, n, b.mpi_type, b.mpi_sum, b.mpi_comm()));
      };
    case CollectiveKind::kAllGather:
      return [&b, n] {
        ZT_MPI_CHECK(MPI_Allgather(b.send, n, b.mpi_type, b.recv, n, b.mpi_type, b.mpi_comm()));
      };
    case CollectiveKind::kBroadcast:
      return [&b, n] { ZT_MPI_CHECK(MPI_Bcast(b.send, n, b.mpi_type, 0, b.mpi_comm())); };
  }
  return {};
}

// The case for `bytes` of the whole buffer, rounded down to whole elements per rank; nullopt
// when that leaves nothing.
std::optional<Case> make_case(CollectiveKind kind, int64_t bytes, DType dtype, int world) {
  const int64_t size = static_cast<int64_t>(dtype_size(dtype));
  const bool per_rank_blocks =
      kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kAllGather;
  const int64_t divisor = per_rank_blocks ? size * world : size;
  const int64_t rank_count = bytes / divisor;
  if (rank_count == 0) return std::nullopt;
  Case c{kind, 0, 0, rank_count, rank_count, rank_count};
  c.count = per_rank_blocks ? rank_count * world : rank_count;
  c.bytes = c.count * size;
  if (kind == CollectiveKind::kReduceScatter) c.send_count = c.count;
  if (kind == CollectiveKind::kAllGather) c.recv_count = c.count;
  return c;
}

CollectiveKind parse_op(const std::string& name) {
  for (int k = 0; k < kNumCollectiveKinds; ++k)
    if (collective_kind_name(static_cast<CollectiveKind>(k)) == name)
      return static_cast<CollectiveKind>(k);
  throw_input(
      fmt::format("unknown collective '{}': expected all_reduce, reduce_scatter, "
                  "all_gather or broadcast",
                  name));
}

// One collective over the sizes: a table row and a JSON row per size; `all_correct` cleared
// when one of our results is wrong.
bench::Table sweep(const Bench& b, CollectiveKind kind, nlohmann::ordered_json& rows,
                   bool& all_correct) {
  const BenchCommOptions& o = b.options;
  const int world = b.comm.world();
  const std::string_view name = collective_kind_name(kind);
  bench::Table table(
      fmt::format("{} (busbw factor {:.3f}; MPI: {})", name, bus_factor(kind, world),
                  kind == CollectiveKind::kAllReduce       ? "MPI_Allreduce"
                  : kind == CollectiveKind::kReduceScatter ? "MPI_Reduce_scatter_block"
                  : kind == CollectiveKind::kAllGather     ? "MPI_Allgather"
                                                           : "MPI_Bcast"),
      {"bytes", "count", "time (us)", "algbw", "busbw", "MPI (us)", "MPI busbw", "ours/MPI",
       "check"});
  for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
    const std::optional<Case> c = make_case(kind, bytes, b.dtype, world);
    if (!c) continue;
    const auto [our, mpi] = measure(b, *c, ours(b, *c), raw_mpi(b, *c));
    const double algbw = c->bytes / our.seconds / 1e9, mpi_algbw = c->bytes / mpi.seconds / 1e9;
    const double busbw = algbw * bus_factor(kind, world);
    const double mpi_busbw = mpi_algbw * bus_factor(kind, world);
    const char* check = our.correct && mpi.correct ? "ok" : !our.correct ? "WRONG" : "MPI?";
    all_correct = all_correct && our.correct;
    table.add_row({std::to_string(c->bytes), std::to_string(c->count),
                   fmt::format("{:.1f}", our.seconds * 1e6), fmt::format("{:.2f}", algbw),
                   fmt::format("{:.2f}", busbw), fmt::format("{:.1f}", mpi.seconds * 1e6),
                   fmt::format("{:.2f}", mpi_busbw), fmt::format("{:.2f}", busbw / mpi_busbw),
                   check});
    rows.push_back({{"op", name},
                    {"bytes", c->bytes},
                    {"count", c->count},
                    {"ranks", world},
                    {"dtype", o.dtype},
                    {"time_us", our.seconds * 1e6},
                    {"iters", our.iters},
                    {"algbw_gbps", algbw},
                    {"busbw_gbps", busbw},
                    {"mpi_time_us", mpi.seconds * 1e6},
                    {"mpi_iters", mpi.iters},
                    {"mpi_busbw_gbps", mpi_busbw},
                    {"ratio", busbw / mpi_busbw},
                    {"correct", our.correct},
                    {"mpi_correct", mpi.correct}});
  }
  table.add_note(
      "time: max over ranks of the mean per call, averaged over rounds timed as ours, MPI, MPI, "
      "ours; busbw = algbw x factor (nccl-tests PERFORMANCE.md); MPI = the same collective of "
      "raw MPI on the same buffers (the reference); out of place; GB/s");
  return table;
}

int run_bench(const BenchCommOptions& o, const ProcessGroup& group) {
  const DType dtype = parse_dtype(o.dtype);
  std::vector<CollectiveKind> kinds;
  for (const std::string& name : o.ops) kinds.push_back(parse_op(name));
  if (kinds.empty())
    kinds = {CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter, CollectiveKind::kAllGather,
             CollectiveKind::kBroadcast};

  CpuDevice device;
  MpiCommunicatorOptions comm_options;
  if (o.chunk_bytes != 0) comm_options.chunk_bytes = o.chunk_bytes;
  MpiCommunicator comm(device, MPI_COMM_WORLD, comm_options);
  const int world = comm.world();
  Logger log(group.rank, group.world);

  MPI_Op sum_op = MPI_SUM;
  if (dtype != DType::kF32)
    ZT_MPI_CHECK(MPI_Op_create(dtype == DType::kF16 ? mpi_sum_fp16 : mpi_sum_bf16, 1, &sum_op));
  Buffer send = device.alloc(static_cast<size_t>(o.max_bytes), MemCategory::kOther);
  Buffer recv = device.alloc(static_cast<size_t>(o.max_bytes), MemCategory::kOther);
  std::memset(send.data(), 0, send.bytes());  // fault the pages in before any timing
  std::memset(recv.data(), 0, recv.bytes());
  const Bench b{o,
                comm,
                dtype,
                dtype == DType::kF32 ? MPI_FLOAT : MPI_UINT16_T,
                sum_op,
                send.as<char>(),
                recv.as<char>()};

  log.rank0(
      "zt-bench comm: {} ranks ({} per node), {}, 2 rounds of {} calls after {} warm-up "
      "(fewer when slow: {:g} s of calls per size); reduce_scatter chunk {} KiB, staging "
      "{} KiB",
      world, comm.local_world(), o.dtype, o.iters, o.warmup, o.budget_seconds,
      comm.chunk_bytes() >> 10, comm.staging_bytes() >> 10);
  bench::Report report("comm", log);
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  bool all_correct = true;
  for (CollectiveKind kind : kinds) {
    bench::Table table = sweep(b, kind, rows, all_correct);
    report.add_table(table);
  }
  if (sum_op != MPI_SUM) ZT_MPI_CHECK(MPI_Op_free(&sum_op));
  std::string stats = comm.stats().to_string();
  if (!stats.empty()) stats.pop_back();  // the logger ends the line
  log.rank0("comm buffers: peak {} KiB (staging); our collectives in this run:\n{}",
            device.memory().peak(MemCategory::kCommBuffers) >> 10, stats);
  nlohmann::ordered_json& j = report.json();
  j["ranks"] = world;
  j["local_ranks"] = comm.local_world();
  j["dtype"] = o.dtype;
  j["iters"] = o.iters;
  j["warmup"] = o.warmup;
  j["chunk_bytes"] = comm.chunk_bytes();
  j["staging_bytes"] = comm.staging_bytes();
  j["rows"] = rows;
  report.write(o.json_path, o.markdown_path);
  if (!all_correct) log.rank0("zt-bench comm: WRONG results (see the check column)");
  return all_correct ? 0 : 1;
}

}  // namespace

int bench_comm(const BenchCommOptions& o) {
  if (o.min_bytes <= 0 || o.max_bytes < o.min_bytes)
    throw_input(fmt::format("--min-bytes must be > 0 and <= --max-bytes; got {} and {}",
                            o.min_bytes, o.max_bytes));
  if (o.iters <= 0 || o.warmup < 0 || o.budget_seconds < 0)
    throw_input("--iters must be > 0, --warmup and --budget >= 0");
  MpiSession session(nullptr, nullptr);
  try {
    return run_bench(o, session.group());
  } catch (const Error& e) {
    // Input errors are the same on every rank: let every rank return. Anything else may have
    // left the other ranks inside a collective: end the whole job.
    if (e.kind() == ErrorKind::kInput || session.group().world == 1) throw;
    Error copy = e;
    copy.set_rank(session.group().rank);
    std::fprintf(stderr, "zt-bench: %s\n", copy.describe().c_str());
    session.abort(1);
  }
}

}  // namespace zt
