// How a CPU job chooses the paths of its 16-bit GEMMs (runtime/cpu/cpu_gemm_paths.h) before its
// first step, the same on every rank: the model's products are found by one evaluation forward
// with the device's tables recording (each forward product implies its dinput and dweight);
// rank 0 decides (the checkpoint's paths on a resume, else the cache's measurements, else it
// measures and adds to the cache), broadcasts the table, and every rank installs it into its
// CpuDevice. zt.cpu_gemm, or ZT_CPU_GEMM, pins the rule. What it does not do: time anything
// itself (the GemmTimer does), or write checkpoints (the trainer adds the table to each save's
// trainer_state; set_up_job_gemm_paths writes its metrics.jsonl row).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "runtime/config.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/cpu/cpu_gemm_paths.h"
#include "train/metrics_writer.h"
#include "zero/checkpoint/reader.h"
#include "zero/engine.h"

namespace zt {

// zt.cpu_gemm / ZT_CPU_GEMM:
//   auto      the cache's choice for each key, measuring the keys it lacks (the default);
//   measure   every key measured again, the cache updated;
//   flags     the feature-flag rule (fallback_gemm_path), nothing measured;
//   native, packed, widened   that path for every product (kInput where one cannot run it).
struct GemmSetting {
  enum class Mode { kAuto, kMeasure, kFlags, kFixed };
  Mode mode = Mode::kAuto;
  GemmPath fixed = GemmPath::kPacked;  // kFixed's path
  std::string source = "zt.cpu_gemm";  // where the setting came from, for messages
  std::string value = "auto";
};
// `configured` (zt.cpu_gemm), unless ZT_CPU_GEMM is set: it wins. kInput naming the one read.
GemmSetting gemm_setting(const std::string& configured);

// What rank 0 decides for `keys`.
struct GemmDecision {
  GemmPaths paths;
  std::vector<GemmMeasurement> shown;     // each key's rates, cached or measured, where known
  std::vector<GemmMeasurement> measured;  // measured now: for the cache
  std::vector<std::string> notes;         // one line each
};
// A pure decision given the cache's measurements and a timer (only kAuto's missing keys and
// kMeasure's keys are timed). `checkpoint`: the resumed run's table; under kAuto and kMeasure
// its path is kept for every key it has (a note names those this machine would choose
// otherwise, and any it cannot run here).
GemmDecision decide_gemm_paths(std::span<const GemmKey> keys, const GemmSetting& setting,
                               const GemmAbilities& abilities,
                               const std::vector<GemmMeasurement>& cached,
                               const GemmPaths* checkpoint, GemmTimer& timer);

// Rank 0's table on every rank: `decide` runs on rank 0 only and its result is broadcast. An
// error in it (kInput) is thrown on every rank with rank 0's message. Collective.
GemmPaths agree_gemm_paths(Communicator& comm, const std::function<GemmPaths()>& decide);

// The set-up's outcome: the table installed on every rank, and rank 0's lines for the log.
struct GemmChoice {
  std::shared_ptr<const GemmPaths> paths;
  std::vector<std::string> lines;
};

// The whole choice for a job on `device` (the engine's, a CpuDevice): the recording forward on a
// micro-batch of B x T tokens (every rank: stage 3 gathers), rank 0's decision through the
// cache file and `timer`, the broadcast, the install. fp32 compute: nothing to choose (sgemm).
GemmChoice choose_cpu_gemm(CpuDevice& device, Engine& engine, Communicator& comm,
                           const GemmSetting& setting, int64_t B, int64_t T,
                           const std::optional<GemmPaths>& checkpoint, GemmTimer& timer);

// zt-train's set-up: on a CpuDevice (nothing elsewhere), choose_cpu_gemm for `config`'s
// zt.cpu_gemm and micro-batch, `resume`'s table kept (null: a fresh run), the WallClockGemmTimer;
// the table's row (cpu_gemm, cpu_gemm_hash) opens what the run writes to `metrics`. A pinned
// path that cannot run here is thrown on every rank alike, so it is agreed on like a set-up
// error (one line from the lowest rank, exit 2, no abort). Returns the agreed exit code.
int set_up_job_gemm_paths(Device& device, Engine& engine, Communicator& comm, const Config& config,
                          const CheckpointReader* resume, MetricsWriter& metrics,
                          GemmChoice& choice);

// The table a checkpoint's trainer_state recorded ("cpu_gemm"), if any; kInput naming `where`
// when it is not a table.
std::optional<GemmPaths> checkpoint_gemm_paths(const nlohmann::json& trainer_state,
                                               const std::string& where);

}  // namespace zt
