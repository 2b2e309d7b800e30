// MetricsWriter, StepTraffic and the end-of-run summary (see metrics_writer.h).
#include "train/metrics_writer.h"

#include "train/monitors.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "runtime/memory_tracker.h"
#include "runtime/status.h"

namespace zt {

namespace {

// --resume continues the run's log rather than starting it again: of an existing metrics.jsonl,
// the rows up to the resumed step stay (what a straight run would have written by then) and the
// rest go, since this run redoes those steps: step rows past it, checkpoint rows of later saves,
// summaries. Rows that name no step (zt-run's restart rows) stay whatever `step`, even -1 (a
// restart from the start). Rewritten atomically (the old file stays whole if that fails); the
// run then appends. A line that is not JSON (one cut short when a run was killed) ends what is
// kept.
void keep_metrics_through(const std::filesystem::path& file, int64_t step) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return;
  const std::string text = read_file(file.string(), "the metrics log");
  AtomicFile kept(file.string());
  for (size_t at = 0; at < text.size();) {
    const size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line(text.data() + at, end - at);
    at = end + 1;
    const nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
    if (row.is_discarded() || !row.is_object()) break;
    if (row.contains("summary")) continue;
    int64_t at_step = -1;
    for (const char* key : {"step", "checkpoint", "at_step"})
      if (row.contains(key) && row[key].is_number_integer()) at_step = row[key].get<int64_t>();
    if (at_step > step) continue;
    kept.write(line);
    kept.write("\n");
  }
  kept.commit();
}

// What the engine's collectives moved per step, `moved` over `steps` steps: bytes per collective
// kind (the whole buffer, as CommStats counts them) and their "total".
nlohmann::ordered_json comm_bytes_json(const CommStats& moved, int64_t steps) {
  nlohmann::ordered_json j;
  double total = 0.0;
  for (int k = 0; k < kNumCollectiveKinds; ++k) {
    const auto kind = static_cast<CollectiveKind>(k);
    const double bytes = static_cast<double>(moved[kind].bytes) / steps;
    j[std::string(collective_kind_name(kind))] = bytes;
    total += bytes;
  }
  j["total"] = total;
  return j;
}

// The bytes this network namespace has transmitted: the tx bytes of every interface of
// /proc/net/dev but lo. The kernel's interface counters, not ZeroTrain's: they include TCP/IP
// headers and every other traffic of the node (Open MPI's daemons, ssh, ...). -1 where there is
// no /proc/net/dev.
double network_tx_bytes() {
  std::ifstream in("/proc/net/dev");
  if (!in) return -1.0;
  double tx = 0.0;
  // After two header lines (no ':'), one line per interface:
  //   "  eth0: rx_bytes packets errs drop fifo frame compressed multicast tx_bytes ..."
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::istringstream name_field(line.substr(0, colon)), fields(line.substr(colon + 1));
    std::string name;
    name_field >> name;
    if (name == "lo") continue;
    std::array<double, 9> counters{};
    for (double& c : counters) fields >> c;
    if (fields) tx += counters[8];
  }
  return tx;
}

// One column pair of the peak-memory table: a tier's bytes per category (and the total), the
// minimum and maximum over ranks.
struct Tier {
  std::string name, key;  // column title, summary key prefix
  std::vector<double> lo, hi;
};

// Collective: a tier's bytes per category, a tracker's peaks or (null: nvme) what the swap files
// hold, gathered over ranks.
Tier gather_tier(std::string name, std::string key, const MemoryTracker* mem, const Engine& engine,
                 Communicator& comm) {
  const size_t rows = kNumMemCategories + 1;
  std::vector<double> mine(rows, 0.0);
  for (int c = 0; c < kNumMemCategories; ++c) {
    const auto category = static_cast<MemCategory>(c);
    mine[c] = mem ? static_cast<double>(mem->peak(category))
                  : static_cast<double>(engine.nvme_bytes(category));
  }
  mine[kNumMemCategories] =
      mem ? static_cast<double>(mem->peak_total()) : static_cast<double>(engine.nvme_bytes());
  const std::vector<double> all = all_gather_doubles(comm, mine);
  Tier t{std::move(name), std::move(key), {all.begin(), all.begin() + rows}, {}};
  t.hi = t.lo;
  for (int r = 1; r < comm.world(); ++r)
    for (size_t c = 0; c < rows; ++c) {
      t.lo[c] = std::min(t.lo[c], all[r * rows + c]);
      t.hi[c] = std::max(t.hi[c], all[r * rows + c]);
    }
  return t;
}

// The table "peak memory per rank (MiB)", its min/max columns per tier, and the summary's
// <key>_min / <key>_max objects.
void summarize_memory(const std::vector<Tier>& tiers, nlohmann::ordered_json& summary,
                      const LinePrinter& print) {
  std::string header = fmt::format("peak memory per rank (MiB): {:>12}", "category");
  for (const Tier& t : tiers) header += fmt::format(" {:>10} {:>10}", t.name + " min", "max");
  print(header);
  std::vector<nlohmann::ordered_json> low(tiers.size()), high(tiers.size());
  for (size_t c = 0; c < kNumMemCategories + 1u; ++c) {
    const std::string name = c < static_cast<size_t>(kNumMemCategories)
                                 ? std::string(mem_category_name(static_cast<MemCategory>(c)))
                                 : "total";
    std::string line = fmt::format("                            {:>12}", name);
    for (size_t i = 0; i < tiers.size(); ++i) {
      line += fmt::format(" {:>10.1f} {:>10.1f}", tiers[i].lo[c] / 1048576.0,
                          tiers[i].hi[c] / 1048576.0);
      low[i][name] = tiers[i].lo[c];
      high[i][name] = tiers[i].hi[c];
    }
    print(line);
  }
  for (size_t i = 0; i < tiers.size(); ++i) {
    summary[tiers[i].key + "_min"] = low[i];
    summary[tiers[i].key + "_max"] = high[i];
  }
}

}  // namespace

MetricsWriter::MetricsWriter(const std::filesystem::path& file, int rank,
                             std::optional<int64_t> kept_through, int64_t test_write_limit)
    : rank_(rank) {
  if (rank != 0) return;
  if (kept_through) keep_metrics_through(file, *kept_through);
  file_ = CheckedFile(file.string(),
                      kept_through ? CheckedFile::Mode::kAppend : CheckedFile::Mode::kTruncate);
  file_.set_test_write_limit(test_write_limit);
}

MetricsWriter::MetricsWriter(MetricsWriter&&) noexcept = default;
MetricsWriter::~MetricsWriter() = default;

void MetricsWriter::add_monitors(std::unique_ptr<Monitors> monitors) {
  monitors_ = std::move(monitors);
}

void MetricsWriter::write(const nlohmann::ordered_json& row) {
  if (rank_ != 0) return;
  file_.write(row.dump() + "\n");
  if (monitors_) monitors_->write(row);
}

void MetricsWriter::sync() {
  if (rank_ == 0) file_.sync();
}

void MetricsWriter::close() {
  if (rank_ != 0) return;
  file_.sync();
  file_.close();
  if (monitors_) monitors_->close();
}

std::optional<nlohmann::ordered_json> restart_row_from_environment() {
  const char* text = std::getenv("ZT_RESTART");
  if (text == nullptr) return std::nullopt;
  nlohmann::ordered_json row =
      nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!row.is_object() || row.value("event", "") != "restart")
    throw_input(
        fmt::format("ZT_RESTART must be the JSON row of a restart (zt-run sets it, "
                    "{{\"event\": \"restart\", ...}}); got '{}'",
                    text));
  return row;
}

nlohmann::ordered_json peak_bytes_json(const MemoryTracker& mem) {
  nlohmann::ordered_json j;
  for (int c = 0; c < kNumMemCategories; ++c) {
    auto cat = static_cast<MemCategory>(c);
    j[std::string(mem_category_name(cat))] = mem.peak(cat);
  }
  return j;
}

// forward/backward/optimizer are the training thread's phases; reduce/gather the communication
// threads' busy time, which overlaps them.
nlohmann::ordered_json wall_clock_json(const StepTimes& t) {
  return {{"forward", 1e3 * t.forward},
          {"backward", 1e3 * t.backward},
          {"optimizer", 1e3 * t.optimizer},
          {"reduce", 1e3 * t.reduce},
          {"gather", 1e3 * t.gather}};
}

StepTraffic::StepTraffic(Communicator& comm, int local_world, int local_rank, int64_t first_step)
    : comm_(comm), first_step_(first_step) {
  const std::vector<double> local_worlds =
      all_gather_doubles(comm, std::array{static_cast<double>(local_world)});
  nodes_ = std::max(1, comm.world() / std::max(1, static_cast<int>(local_worlds[0])));
  reads_network_ = nodes_ > 1 && local_rank == 0;
  tx_start_ = tx_after_first_ = reads_network_ ? network_tx_bytes() : 0.0;
}

void StepTraffic::before_step(const Engine& engine) { before_ = engine.comm_stats(); }

void StepTraffic::after_step(const Engine& engine, int64_t step) {
  // A world of 1 calls the same collectives, whose buffers CommStats counts, but they move
  // nothing between ranks: its figures stay 0.
  CommStats& traffic = step == first_step_ ? first_ : timed_;
  const CommStats after = engine.comm_stats();
  for (int k = 0; k < kNumCollectiveKinds && comm_.world() > 1; ++k)
    traffic.by_kind[k].bytes += after.by_kind[k].bytes - before_.by_kind[k].bytes;
  if (reads_network_ && step == first_step_) tx_after_first_ = network_tx_bytes();
}

void StepTraffic::summarize(int64_t last_step, nlohmann::ordered_json& summary,
                            const LinePrinter& print) {
  const int64_t timed_steps = std::max<int64_t>(1, last_step - first_step_);
  const bool one_step = last_step == first_step_;
  summary["comm_bytes_per_step"] = comm_bytes_json(one_step ? first_ : timed_, timed_steps);
  const nlohmann::ordered_json& c = summary["comm_bytes_per_step"];
  std::string kinds;
  for (const auto& [kind, bytes] : c.items())
    if (kind != "total" && bytes.get<double>() > 0)
      kinds += fmt::format(" | {} {:.2f} MiB", kind, bytes.get<double>() / 1048576.0);
  print(fmt::format("communication per step (rank 0, {} timed step{}): {:.2f} MiB{}", timed_steps,
                    timed_steps > 1 ? "s" : "", c["total"].get<double>() / 1048576.0, kinds));
  if (nodes_ <= 1) return;
  // Every rank contributes (0 unless it read its node's counters; -1 where it could not).
  const double tx_end = reads_network_ ? network_tx_bytes() : 0.0;
  const double mine = !reads_network_               ? 0.0
                      : tx_start_ < 0 || tx_end < 0 ? -1.0
                      : one_step                    ? tx_end - tx_start_
                                                    : tx_end - tx_after_first_;
  const std::vector<double> sent = all_gather_doubles(comm_, std::array{mine});
  double sum = 0.0;
  bool known = true;
  for (double s : sent) {
    known = known && s >= 0;
    sum += std::max(0.0, s);
  }
  if (!known) {
    summary["internode_bytes_per_step"] = nullptr;
    return;
  }
  summary["internode_bytes_per_step"] = sum / timed_steps;
  print(
      fmt::format("between the {} nodes per step (their interfaces' tx counters, TCP/IP "
                  "headers and other traffic included): {:.2f} MiB",
                  nodes_, sum / timed_steps / 1048576.0));
}

void write_summary(MetricsWriter& metrics, Engine& engine, const Device& device, Communicator& comm,
                   StepTraffic& traffic, int64_t last_step, const LinePrinter& print) {
  // Every rank's peak bytes per category, gathered, shown as min/max over ranks, a column pair
  // per tier where bytes live (the device; with an offloaded optimizer the host tier; with NVMe
  // the swap files of the optimizer state and the parameters, in their categories).
  std::vector<Tier> tiers;
  tiers.push_back(gather_tier("device", "peak_bytes", &device.memory(), engine, comm));
  if (const MemoryTracker* host = engine.host_memory())
    tiers.push_back(gather_tier("host", "host_peak_bytes", host, engine, comm));
  if (engine.nvme_bytes() > 0)
    tiers.push_back(gather_tier("nvme", "nvme_bytes", nullptr, engine, comm));
  nlohmann::ordered_json summary = {{"ranks", comm.world()},
                                    {"precision", precision_name(engine.options().precision)}};
  summarize_memory(tiers, summary, print);
  traffic.summarize(last_step, summary, print);
  if (const LossScaler* scaler = engine.loss_scaler()) {
    summary["loss_scale"] = scaler->scale();
    summary["skipped_steps"] = scaler->counters().skipped_steps;
    print(fmt::format("fp16: {} of {} steps skipped on overflow; final loss scale {}",
                      scaler->counters().skipped_steps, last_step, scaler->scale()));
  }
  metrics.write(nlohmann::ordered_json{{"summary", summary}});
  metrics.close();
}

}  // namespace zt
