// zt-bench scale's pieces beside the sweep (bench_scale.cpp): a point's record, running a child
// process with its output in files, and the gnuplot plots of the points.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench.h"
#include "bench/harness.h"

namespace zt::scale {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

// One point of the sweep and what its run gave.
struct ScalePoint {
  int stage = 0;
  int ranks = 1;
  std::string precision;  // bench_precision's names
  bool checkpointing = false;
  std::string offload;  // none, cpu, nvme
  enum class Status { kOk, kFailed, kSkipped } status = Status::kOk;
  std::string note;  // skipped: why; failed: the last line of its stderr
  int exit_code = 0;
  std::vector<double> step_ms;  // every step's "ms", warm-up included
  bench::Summary ms;            // the steps after warm-up
  double tokens_per_s = 0, tokens_per_s_per_rank = 0;
  std::optional<double> mfu;  // none without a peak to compare with (cuda, no --peak-tflops)
  double final_loss = 0;
  json summary;  // the point's {"summary": ...} row

  std::string describe() const {
    return fmt::format("stage {}, {} rank{}, {}, checkpointing {}, offload {}", stage, ranks,
                       ranks > 1 ? "s" : "", precision, checkpointing ? "on" : "off", offload);
  }
  std::string label() const {  // a file name
    return fmt::format("stage{}-r{}-{}-ckpt_{}-offload_{}", stage, ranks, precision,
                       checkpointing ? "on" : "off", offload);
  }
  // The summary's figure at `key`.`sub` (a number), or 0 when it is absent or null.
  double summary_number(const char* key, const char* sub = nullptr) const {
    const auto it = summary.find(key);
    if (it == summary.end() || it->is_null()) return 0.0;
    if (sub == nullptr) return it->is_number() ? it->get<double>() : 0.0;
    const auto s = it->find(sub);
    return s != it->end() && s->is_number() ? s->get<double>() : 0.0;
  }
  double device_bytes() const { return summary_number("peak_bytes_max", "total"); }
};

inline double mib(double bytes) { return bytes / 1048576.0; }

// True when the executable `name` is on PATH.
bool on_path(const std::string& name);

// Runs argv (argv[0] a path, or a name looked up on PATH) with stdin from /dev/null and stdout
// and stderr into the two files, in directory `cwd` (empty: ours); returns its exit status
// (128 + N for a signal N, 127 when it could not be started).
int run_process(const std::vector<std::string>& argv, const fs::path& out, const fs::path& err,
                const fs::path& cwd = {});

// The line a failed run is recorded with: its last "zt-train: ..." line on stderr (the one-line
// error of launch/tool_frame.h), else the last line that is not blank or mpirun's dashes.
std::string failure_line(const fs::path& err);

// The throughput and memory plots of the ok points: <out>/NAME.dat and NAME.gp, and, with gnuplot
// on PATH, NAME.png. Returns false when gnuplot is missing (nothing drawn).
bool draw_plots(const BenchScaleOptions& o, const fs::path& out, const std::string& subtitle,
                const std::vector<ScalePoint>& points);

}  // namespace zt::scale
