// MetricsWriter: zt-train's metrics.jsonl (rank 0) and the summary tables printed at the end of
// a run (peak memory per tier and category over ranks, communication per step, traffic between
// nodes, fp16's skipped steps). StepTraffic counts what the summary's traffic figures need while
// the loop runs.
//
// metrics.jsonl is a log written as the run goes: every row is one checked write, so a failed
// write (a full disk) ends the run in the step it happened, naming the file and the OS error;
// rows before it stay, the failed one may be cut short. On --resume the rows up to the resumed
// step are kept and the run appends. A run that zt-run restarted (ZT_RESTART) also keeps the
// rows of earlier restarts, and its first row is its own restart's.
//
// What it does not do: decide what a step row holds (the loop builds it), print progress lines,
// save checkpoints. The step rows also go to DeepSpeed's CSV and TensorBoard monitors when
// the config enables them (add_monitors).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "runtime/device.h"
#include "runtime/file_io.h"
#include "zero/engine.h"

namespace zt {

class Monitors;

// Prints one line on rank 0 (zt-train: Logger::rank0).
using LinePrinter = std::function<void(const std::string& line)>;

class MetricsWriter {
 public:
  // Rank 0 opens `file`: truncated, or with `kept_through` set its rows through that step kept
  // (the resumed step; -1 keeps only restart rows, which name no step) and the rest dropped,
  // then appended. Other ranks hold no file and write nothing.
  // `test_write_limit`: CheckedFile::set_test_write_limit (negative: none).
  MetricsWriter(const std::filesystem::path& file, int rank, std::optional<int64_t> kept_through,
                int64_t test_write_limit = -1);
  MetricsWriter(MetricsWriter&&) noexcept;
  ~MetricsWriter();
  // DeepSpeed's monitors (train/monitors.h): every row written from now on is handed to them.
  void add_monitors(std::unique_ptr<Monitors> monitors);

  void write(const nlohmann::ordered_json& row);  // one checked write (rank 0)
  void sync();                                    // fsync (rank 0)
  void close();                                   // fsync and close, checked (rank 0)

 private:
  int rank_;
  CheckedFile file_;
  std::unique_ptr<Monitors> monitors_;
};

// The row zt-run passes to a job it restarts, in the environment variable ZT_RESTART
// (launch/restart_policy.h, restart_row): written first by the relaunched run. nullopt when
// unset; kInput when it is not a JSON object with "event": "restart".
std::optional<nlohmann::ordered_json> restart_row_from_environment();

// The per-step peak bytes of a tracker, by category name.
nlohmann::ordered_json peak_bytes_json(const MemoryTracker& mem);
// wall_clock_breakdown: this rank's StepTimes in milliseconds.
nlohmann::ordered_json wall_clock_json(const StepTimes& t);

// The summary's traffic figures, over the timed steps: every step after the first, so that
// start-up traffic is left out (a run of one step: that step). comm bytes from the engine's
// counters around its train_step calls (evaluations and saves excluded); bytes between nodes,
// when the job spans several, from each node's network counters (/proc/net/dev) read by its
// first local rank before the first step, after it and after the last, summed over nodes.
class StepTraffic {
 public:
  // Collective. Nodes: world / ranks on rank 0's machine (`local_world` is this rank's count;
  // rank 0's is gathered so that every rank agrees), as zt-train --dry-run counts them.
  StepTraffic(Communicator& comm, int local_world, int local_rank, int64_t first_step);
  // Around each Engine::train_step.
  void before_step(const Engine& engine);
  void after_step(const Engine& engine, int64_t step);
  int nodes() const { return nodes_; }

  // Collective: "comm_bytes_per_step" and, with several nodes, "internode_bytes_per_step" into
  // `summary`, each with its line.
  void summarize(int64_t last_step, nlohmann::ordered_json& summary, const LinePrinter& print);

 private:
  Communicator& comm_;
  int64_t first_step_;
  int nodes_ = 1;
  bool reads_network_ = false;
  CommStats before_, first_, timed_;  // what train_step moved: the first step; the later ones
  double tx_start_ = 0.0, tx_after_first_ = 0.0;
};

// Collective: the peak-memory table (device; host tier; NVMe swap files), the traffic lines,
// fp16's skipped steps, printed with `print`; then the {"summary": ...} row written, and the
// file synced and closed.
void write_summary(MetricsWriter& metrics, Engine& engine, const Device& device, Communicator& comm,
                   StepTraffic& traffic, int64_t last_step, const LinePrinter& print);

}  // namespace zt
