// zt-bench scale: a weak-scaling sweep of real training runs. A driver process (not under
// mpirun) runs, for every point of stages x ranks x precision x activation checkpointing x
// optimizer offload, `zt-run -np R --cpu -- zt-train --config BASE --set ...` (the zt-run and
// zt-train beside this executable), and reads back the point's metrics.jsonl: the step times,
// the summary's per-rank peak bytes per tier, its communication and inter-node bytes per step,
// the last loss. It measures nothing itself but the cores' peak FMA rate, once, for MFU; it
// writes the JSON, a Markdown table and, with gnuplot, two plots.
#include "bench/bench.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "launch/logger.h"
#include "model_zoo/model_spec.h"
#include "runtime/byte_count.h"
#include "runtime/config.h"
#include "runtime/cpu/cpu_affinity.h"
#include "runtime/cpu/cpu_peak.h"
#include "runtime/status.h"
#include "train/trainer.h"

namespace zt {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

using Clock = std::chrono::steady_clock;

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
  double ms = 0;                // the median after warm-up
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

double mib(double bytes) { return bytes / 1048576.0; }

// "1m10s", "42s", "1h02m".
std::string format_duration(double seconds) {
  const auto s = static_cast<int64_t>(seconds + 0.5);
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
}

// The 1-minute load average of /proc/loadavg, or -1: the sweep's machine may be shared.
double load_average() {
  std::ifstream in("/proc/loadavg");
  double load = -1.0;
  in >> load;
  return in ? load : -1.0;
}

// The executable `name` on PATH.
bool on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0 && !fs::is_directory(candidate)) return true;
  }
  return false;
}

// Runs argv (argv[0] a path, or a name looked up on PATH) with stdin from /dev/null and stdout
// and stderr into the two files, in directory `cwd` (empty: ours); returns its exit status
// (128 + N for a signal N, 127 when it could not be started).
int run_process(const std::vector<std::string>& argv, const fs::path& out, const fs::path& err,
                const fs::path& cwd = {}) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0)
    throw_system(fmt::format("cannot start {}: fork: {}", argv[0], std::strerror(errno)));
  if (pid == 0) {  // the child: only async-signal-safe calls until exec
    const int in = ::open("/dev/null", O_RDONLY);
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || o < 0 || e < 0 || ::dup2(in, 0) < 0 || ::dup2(o, 1) < 0 || ::dup2(e, 2) < 0)
      ::_exit(127);
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(127);
    ::execvp(args[0], args.data());
    const char* message = "zt-bench scale: cannot execute the program\n";
    (void)::write(2, message, std::strlen(message));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR)
      throw_system(fmt::format("waitpid for {}: {}", argv[0], std::strerror(errno)));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The line a failed run is recorded with: its last "zt-train: ..." line on stderr (the one-line
// error of launch/tool_frame.h), else the last line that is not blank or mpirun's dashes.
std::string failure_line(const fs::path& err) {
  std::ifstream in(err);
  std::string last, last_tool;
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" -\t\r") == std::string::npos) continue;
    last = line;
    if (line.starts_with("zt-train: ")) last_tool = line;
  }
  return !last_tool.empty() ? last_tool : !last.empty() ? last : "(no output on stderr)";
}

// The rows of a metrics.jsonl: step rows (with "ms") and the summary.
void read_metrics(const fs::path& file, int warmup, ScalePoint& p) {
  std::ifstream in(file);
  if (!in) throw_system(fmt::format("{} is missing after a successful run", file.string()));
  for (std::string line; std::getline(in, line);) {
    const json row = json::parse(line, nullptr, false);
    if (row.is_discarded() || !row.is_object()) continue;
    if (row.contains("summary")) p.summary = row["summary"];
    if (row.contains("ms") && row.contains("loss")) {
      p.step_ms.push_back(row["ms"].get<double>());
      p.final_loss = row["loss"].get<double>();
    }
  }
  if (p.summary.is_null() || static_cast<int>(p.step_ms.size()) <= warmup)
    throw_system(
        fmt::format("{}: no summary or fewer than {} step rows", file.string(), warmup + 1));
  p.ms = median(std::vector<double>(p.step_ms.begin() + warmup, p.step_ms.end()));
}

// Why the engine refuses the point, or "" when it runs.
std::string refusal(const ScalePoint& p) {
  if (p.offload != "none" && p.stage == 0) return "optimizer offload needs ZeRO stage >= 1";
  if (p.offload != "none" && p.precision.ends_with("-pure"))
    return "optimizer offload needs an fp32 master (pure 16-bit has none)";
  return "";
}

// The zt-train overrides of a point.
std::vector<std::string> point_overrides(const BenchScaleOptions& o, const ScalePoint& p,
                                         int64_t accumulation, const fs::path& out_dir,
                                         const fs::path& nvme_dir) {
  std::vector<std::string> s = {
      fmt::format("zero_optimization.stage={}", p.stage),
      fmt::format("train_micro_batch_size_per_gpu={}", o.batch),
      // Weak scaling: the micro-batch per rank is fixed, the global batch grows with the ranks.
      fmt::format("train_batch_size={}", o.batch * accumulation * p.ranks),
      fmt::format("zt.seq_len={}", o.seq_len), fmt::format("zt.steps={}", o.steps),
      "zt.eval_every=0",
      "zt.val_data=",  // no evaluation at all: the sweep times training only
      "zt.save_weights=", fmt::format("zt.output_dir={}", out_dir.string()),
      fmt::format("zt.device={}", o.device),
      // bf16 / fp16 mixed (fp32 master), or pure (the 16-bit copy is the master).
      fmt::format("bf16.enabled={}", p.precision.starts_with("bf16")),
      fmt::format("fp16.enabled={}", p.precision.starts_with("fp16")),
      // Every checkpointable block, or none (number_checkpoints 0 overrides a base config's).
      p.checkpointing ? "activation_checkpointing={}"
                      : "activation_checkpointing.number_checkpoints=0",
      fmt::format("zero_optimization.offload_optimizer.device={}", p.offload)};
  if (p.precision == "bf16-pure") s.push_back("bf16.bf16_master_weights_and_grads=true");
  if (p.precision == "fp16-pure") s.push_back("fp16.fp16_master_weights_and_grads=true");
  if (p.offload == "nvme")
    s.push_back(fmt::format("zero_optimization.offload_optimizer.nvme_path={}", nvme_dir.string()));
  if (!o.model.empty()) s.push_back(fmt::format("zt.model={}", o.model));
  return s;
}

json point_json(const ScalePoint& p, const fs::path& dir) {
  static constexpr const char* kStatus[] = {"ok", "failed", "skipped"};
  json j = {{"stage", p.stage},         {"ranks", p.ranks},
            {"precision", p.precision}, {"checkpointing", p.checkpointing},
            {"offload", p.offload},     {"status", kStatus[static_cast<int>(p.status)]}};
  if (!p.note.empty()) j["note"] = p.note;
  if (p.status == ScalePoint::Status::kSkipped) return j;
  j["exit_code"] = p.exit_code;
  j["output_dir"] = dir.string();
  if (p.status != ScalePoint::Status::kOk) return j;
  auto at = [&](const char* key) { return p.summary.contains(key) ? p.summary[key] : json(); };
  j["ms_per_step"] = p.ms;
  j["step_ms"] = p.step_ms;
  j["tokens_per_s"] = p.tokens_per_s;
  j["tokens_per_s_per_rank"] = p.tokens_per_s_per_rank;
  j["mfu"] = p.mfu ? json(*p.mfu) : json();
  j["final_loss"] = p.final_loss;
  j["peak_bytes_max"] = at("peak_bytes_max");  // the device tier, per category, max over ranks
  j["host_peak_bytes_max"] = at("host_peak_bytes_max");
  j["nvme_bytes_max"] = at("nvme_bytes_max");
  j["comm_bytes_per_step"] = at("comm_bytes_per_step");
  j["internode_bytes_per_step"] = at("internode_bytes_per_step");
  return j;
}

// The plots' lines: one per stage and combination of the other axes, ok points by ranks.
struct PlotLine {
  std::string title;
  int stage = 0, combination = 0;
  std::vector<const ScalePoint*> points;
};

std::vector<PlotLine> plot_lines(const BenchScaleOptions& o,
                                 const std::vector<ScalePoint>& points) {
  // The title names only the axes the sweep varies besides the stage.
  const bool many_precisions = o.precisions.size() > 1, many_ckpt = o.checkpointing.size() > 1,
             many_offload = o.offload.size() > 1;
  std::map<std::tuple<std::string, bool, std::string>, int> combinations;
  std::map<std::pair<int, int>, PlotLine> lines;  // (combination, stage)
  for (const ScalePoint& p : points) {
    if (p.status != ScalePoint::Status::kOk) continue;
    const auto key = std::make_tuple(p.precision, p.checkpointing, p.offload);
    const int c = combinations.emplace(key, static_cast<int>(combinations.size())).first->second;
    PlotLine& line = lines[{c, p.stage}];
    if (line.points.empty()) {
      line.stage = p.stage;
      line.combination = c;
      line.title = fmt::format("stage {}", p.stage);
      if (many_precisions) line.title += ", " + p.precision;
      if (many_ckpt) line.title += p.checkpointing ? ", ckpt on" : ", ckpt off";
      if (many_offload) line.title += ", offload " + p.offload;
    }
    line.points.push_back(&p);
  }
  std::vector<PlotLine> out;
  for (auto& [key, line] : lines) {
    std::sort(line.points.begin(), line.points.end(),
              [](const ScalePoint* a, const ScalePoint* b) { return a->ranks < b->ranks; });
    out.push_back(std::move(line));
  }
  return out;
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out.flush()) throw_system(fmt::format("cannot write {}", path.string()));
}

// <out>/NAME.dat (one block per line: ranks, value) and NAME.gp, and, with gnuplot on PATH,
// NAME.png. Returns false when gnuplot is missing.
bool plot(const fs::path& out, const std::string& name, const std::string& title,
          const std::string& ylabel, const std::vector<PlotLine>& lines,
          const std::vector<int>& ranks, double (*value)(const ScalePoint&)) {
  std::string dat;
  for (const PlotLine& line : lines) {
    dat += fmt::format("# {}\n", line.title);
    for (const ScalePoint* p : line.points) dat += fmt::format("{} {:.6g}\n", p->ranks, value(*p));
    dat += "\n\n";  // gnuplot's index separator
  }
  write_file(out / (name + ".dat"), dat);
  std::string xtics;
  for (int r : ranks) xtics += fmt::format("{}\"{}\" {}", xtics.empty() ? "" : ", ", r, r);
  const int max_ranks = *std::max_element(ranks.begin(), ranks.end());
  const int min_ranks = *std::min_element(ranks.begin(), ranks.end());
  std::string gp = fmt::format(
      "# zt-bench scale: {} (gnuplot {}.gp, in this directory)\n"
      "set terminal pngcairo size 960,{} font 'sans,11'\n"
      "set output '{}.png'\n"
      "set title \"{}\"\n"
      "set xlabel 'ranks (log_2 scale)'\n"
      "set ylabel '{}'\n"
      "set logscale x 2\n"
      "set xrange [{}:{}]\n"
      "set xtics ({})\n"
      "set yrange [0:*]\n"
      "set grid\n"
      "set key below\n",
      name, name, 560 + 20 * static_cast<int>((lines.size() + 2) / 3), name, title, ylabel,
      min_ranks / 1.25, max_ranks * 1.25, xtics);
  // A colour per stage; a dash type and point shape per combination of the other axes.
  static constexpr const char* kStageColour[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"};
  static constexpr int kPointType[] = {7, 5, 9, 11, 13, 15};
  std::string plots;
  for (size_t i = 0; i < lines.size(); ++i)
    plots += fmt::format(
        "{}'{}.dat' index {} using 1:2 with linespoints lw 2 pt {} ps 1.3 "
        "lc rgb '{}' dt {} title \"{}\"",
        i == 0 ? "plot " : ", \\\n     ", name, i, kPointType[lines[i].combination % 6],
        kStageColour[lines[i].stage % 4], lines[i].combination + 1, lines[i].title);
  gp += plots.empty() ? "set label 'no point succeeded' at graph 0.4, 0.5\nplot NaN notitle\n"
                      : plots + "\n";
  write_file(out / (name + ".gp"), gp);
  if (!on_path("gnuplot")) return false;
  const int code = run_process({"gnuplot", name + ".gp"}, out / (name + ".gnuplot.out"),
                               out / (name + ".gnuplot.err"), out);
  if (code != 0)
    throw_system(fmt::format("gnuplot {} failed (exit {}): {}", (out / (name + ".gp")).string(),
                             code, failure_line(out / (name + ".gnuplot.err"))));
  fs::remove(out / (name + ".gnuplot.out"));
  fs::remove(out / (name + ".gnuplot.err"));
  return true;
}

}  // namespace

int bench_scale(const BenchScaleOptions& o_given) {
  BenchScaleOptions o = o_given;
  Logger log;
  // The base config as every point starts from it (world 1 here): the model, batch and sequence
  // length it gives where the options do not, and its errors before any run.
  std::vector<std::string> base;
  if (!o.model.empty()) {
    try {
      zoo_model_spec(o.model);
    } catch (const Error& e) {
      throw_input(fmt::format("--model: {}", e.what()));
    }
    base.push_back("zt.model=" + o.model);
  }
  if (o.batch > 0) base.push_back(fmt::format("train_micro_batch_size_per_gpu={}", o.batch));
  if (o.seq_len > 0) base.push_back(fmt::format("zt.seq_len={}", o.seq_len));
  base.push_back("train_batch_size=auto");
  const Config config = load_config(o.config, base, 1);
  const ModelSpec model_config = resolve_model(config);
  if (o.batch <= 0) o.batch = static_cast<int>(config.train_micro_batch_size_per_gpu);
  if (o.seq_len <= 0) o.seq_len = config.zt.seq_len;
  const std::string model_name =
      config.zt.model.has_object ? std::string("the config's model") : config.zt.model.zoo_name;
  const int64_t accumulation = config.gradient_accumulation_steps;
  const std::unique_ptr<Model> shapes = build_model(model_config);  // tables only
  // PaLM's model FLOPs: forward + backward (2x forward), recomputation not counted.
  const double flops_per_token = 3.0 * shapes->forward_flops_per_token(o.seq_len);
  const int64_t tokens_per_rank_step = int64_t(o.batch) * o.seq_len * accumulation;

  // The peak: on the CPU the cores' fp32 FMA rate over every CPU this process may use, measured
  // once before the first run, so MFU is against the whole machine whatever the ranks; on a
  // GPU --peak-tflops per rank.
  const bool gpu = o.device == "cuda";
  const int cpus = static_cast<int>(this_thread_cpus().size());
  PeakFma peak;
  double peak_flops_per_rank = 0;
  if (!gpu) {
    peak = measure_peak_fma(10, 0.1, cpus);  // best of 10 x 100 ms: the machine may be shared
  } else {
    peak_flops_per_rank = o.peak_tflops * 1e12;
  }
  const double load_at_start = load_average();
  auto peak_flops = [&](int ranks) {
    return gpu ? peak_flops_per_rank * ranks : peak.gflops * 1e9;
  };

  std::error_code ec;
  const fs::path out = o.out_dir;
  fs::create_directories(out / "points", ec);
  if (ec)
    throw_input(
        fmt::format("--out: cannot create {}: {}", (out / "points").string(), ec.message()));
  const fs::path json_path = o.json_path.empty() ? out / "scale.json" : fs::path(o.json_path);
  const fs::path bin = fs::read_symlink("/proc/self/exe", ec).parent_path();
  if (ec) throw_system(fmt::format("cannot read /proc/self/exe: {}", ec.message()));
  const fs::path zt_run = bin / "zt-run", zt_train = bin / "zt-train";
  for (const fs::path& tool : {zt_run, zt_train})
    if (::access(tool.c_str(), X_OK) != 0)
      throw_input(
          fmt::format("{} is missing: zt-bench scale runs the zt-run and zt-train beside "
                      "it",
                      tool.string()));
  const fs::path nvme_root = fs::path(o.path) / fmt::format("zt_bench_scale_{}", ::getpid());

  std::vector<ScalePoint> points;
  for (const std::string& precision : o.precisions)
    for (bool checkpointing : o.checkpointing)
      for (const std::string& offload : o.offload)
        for (int stage : o.stages)
          for (int ranks : o.ranks) {
            ScalePoint p;
            p.stage = stage;
            p.ranks = ranks;
            p.precision = precision;
            p.checkpointing = checkpointing;
            p.offload = offload;
            points.push_back(p);
          }
  const int to_run = static_cast<int>(std::count_if(
      points.begin(), points.end(), [](const ScalePoint& p) { return refusal(p).empty(); }));

  log.rank0(
      "zt-bench scale: {} ({:.2f}M parameters), B={} T={} per rank (weak scaling), {} "
      "steps ({} untimed), {} points ({} to run) from {}",
      model_name, shapes->forward_flops_per_token(0) / 2e6, o.batch, o.seq_len, o.steps, o.warmup,
      points.size(), to_run, o.config);
  if (gpu)
    log.rank0("device: cuda, MFU against --peak-tflops {} per rank", o.peak_tflops);
  else
    log.rank0(
        "CPU: {} ({}); peak fp32 FMA {:.1f} GFLOP/s on {} CPUs ({} loop, best of 10 x "
        "100 ms, load average {:.2f}): MFU is against this whole machine, whatever the ranks",
        cpu_model_name(), cpu_simd_features(), peak.gflops, peak.threads, peak.isa, load_at_start);
  if (!gpu && load_at_start > 0.5 * cpus)
    log.warn(
        "the machine was busy while the peak was measured (load average {:.2f} on {} "
        "CPUs): the peak may read low and MFU high; compare points within this run",
        load_at_start, cpus);

  const auto start = Clock::now();
  int done = 0, failed = 0;
  for (size_t k = 0; k < points.size(); ++k) {
    ScalePoint& p = points[k];
    const std::string head = fmt::format("[{}/{}] {}", k + 1, points.size(), p.describe());
    if (std::string why = refusal(p); !why.empty()) {
      p.status = ScalePoint::Status::kSkipped;
      p.note = why;
      std::cerr << fmt::format("{}: skipped ({})\n", head, why);
      continue;
    }
    const fs::path dir = out / "points" / p.label();
    const fs::path nvme_dir = nvme_root / p.label();
    fs::remove_all(dir, ec);
    fs::create_directories(dir, ec);
    if (ec) throw_system(fmt::format("cannot create {}: {}", dir.string(), ec.message()));
    if (p.offload == "nvme") {  // zt-train wants an existing directory
      fs::create_directories(nvme_dir, ec);
      if (ec)
        throw_input(fmt::format("--path: cannot create {}: {}", nvme_dir.string(), ec.message()));
    }
    // zt-run -np R --cpu [--hostfile F] -- zt-train --config BASE --set ... (zt-run adds
    // --allow-run-as-root and --oversubscribe where needed). Rank 0 writes the metrics into
    // `dir`: with a hostfile, rank 0 runs here only when this machine is its first host.
    std::vector<std::string> argv = {zt_run.string(), "-np", std::to_string(p.ranks)};
    if (!gpu) argv.push_back("--cpu");
    if (!o.hostfile.empty()) {
      argv.push_back("--hostfile");
      argv.push_back(o.hostfile);
    }
    argv.insert(argv.end(), {"--", zt_train.string(), "--config", o.config});
    for (const std::string& s : point_overrides(o, p, accumulation, dir, nvme_dir)) {
      argv.push_back("--set");
      argv.push_back(s);
    }
    p.exit_code = run_process(argv, dir / "stdout.log", dir / "stderr.log");
    fs::remove_all(nvme_dir, ec);
    if (p.exit_code == 0) {
      try {
        read_metrics(dir / "metrics.jsonl", o.warmup, p);
      } catch (const Error& e) {
        p.exit_code = -1;
        p.note = e.what();
      }
    } else {
      p.note = failure_line(dir / "stderr.log");
    }
    ++done;
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    const std::string eta = fmt::format("{} elapsed, about {} left", format_duration(elapsed),
                                        format_duration(elapsed / done * (to_run - done)));
    if (p.exit_code != 0) {
      p.status = ScalePoint::Status::kFailed;
      ++failed;
      std::cerr << fmt::format("{}: FAILED (exit {}): {} | {}\n", head, p.exit_code, p.note, eta);
      continue;
    }
    p.tokens_per_s_per_rank = static_cast<double>(tokens_per_rank_step) / (p.ms / 1e3);
    p.tokens_per_s = p.tokens_per_s_per_rank * p.ranks;
    const double peak_now = peak_flops(p.ranks);
    if (peak_now > 0) p.mfu = flops_per_token * p.tokens_per_s / peak_now;
    std::cerr << fmt::format("{}: {:.0f} ms/step, {} tok/s | {}\n", head, p.ms,
                             group_digits(static_cast<uint64_t>(p.tokens_per_s + 0.5)), eta);
  }
  fs::remove_all(nvme_root, ec);

  // The JSON: options, machine, peak, one object per point.
  json options = {{"config", o.config},
                  {"model", model_name},
                  {"batch", o.batch},
                  {"seq_len", o.seq_len},
                  {"gradient_accumulation_steps", accumulation},
                  {"steps", o.steps},
                  {"warmup", o.warmup},
                  {"stages", o.stages},
                  {"ranks", o.ranks},
                  {"precision", o.precisions},
                  {"checkpointing", o.checkpointing},
                  {"offload", o.offload},
                  {"hostfile", o.hostfile},
                  {"path", o.path},
                  {"device", o.device}};
  json machine = {{"cpu", cpu_model_name()},
                  {"cpu_simd", cpu_simd_features()},
                  {"cpus", cpus},
                  {"load_average_at_start", load_at_start},
                  {"load_average_at_end", load_average()}};
  json peak_json =
      gpu ? json{{"kind", "--peak-tflops per rank"}, {"tflops_per_rank", o.peak_tflops}}
          : json{{"kind", "cpu fp32 FMA, all CPUs"},
                 {"gflops", peak.gflops},
                 {"isa", peak.isa},
                 {"threads", peak.threads}};
  json j = {{"bench", "scale"},
            {"options", options},
            {"machine", machine},
            {"peak", peak_json},
            {"flops_per_token", flops_per_token},
            {"points", json::array()}};
  for (const ScalePoint& p : points)
    j["points"].push_back(point_json(p, out / "points" / p.label()));
  write_file(json_path, j.dump(2) + "\n");

  // The Markdown table.
  const bool internode = std::any_of(points.begin(), points.end(), [](const ScalePoint& p) {
    return p.summary.is_object() && p.summary.contains("internode_bytes_per_step");
  });
  std::string md = fmt::format(
      "# zt-bench scale: {}, B={} T={} per rank, {} steps ({} untimed)\n\n"
      "{}; MFU: model FLOPs (3 x forward, recomputation not counted: {:.3g}/token) x tokens/s "
      "over {}. Memory: per rank, the max over ranks of each tier's peak (device, host: the "
      "offloaded optimizer's tier, nvme: swap files). comm: the engine's collectives per step "
      "(whole buffers, as nccl-tests counts them) on rank 0.{}\n\n",
      model_name, o.batch, o.seq_len, o.steps, o.warmup,
      gpu ? std::string("cuda") : fmt::format("CPU: {} ({} CPUs)", cpu_model_name(), cpus),
      flops_per_token,
      gpu ? fmt::format("{} TFLOP/s per rank (--peak-tflops)", o.peak_tflops)
          : fmt::format("the measured fp32 FMA peak of all {} CPUs, {:.1f} GFLOP/s", peak.threads,
                        peak.gflops),
      internode ? " inter-node: bytes the nodes' interfaces sent per step (TCP/IP headers and "
                  "other traffic included)."
                : "");
  md +=
      "| stage | ranks | precision | ckpt | offload | ms/step | tok/s total | tok/s per rank | "
      "device MiB/rank | host MiB | nvme MiB | comm MiB/step |";
  md += internode ? " inter-node MiB/step | MFU % |\n" : " MFU % |\n";
  md += "|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|";
  md += internode ? "---:|---:|\n" : "---:|\n";
  for (const ScalePoint& p : points) {
    md += fmt::format("| {} | {} | {} | {} | {} |", p.stage, p.ranks, p.precision,
                      p.checkpointing ? "on" : "off", p.offload);
    if (p.status != ScalePoint::Status::kOk) {
      const int columns = internode ? 9 : 8;
      std::string note;  // a '|' would end the cell
      for (char c : p.note) note += c == '|' ? std::string("\\|") : std::string(1, c);
      md += fmt::format(" {}: {} |",
                        p.status == ScalePoint::Status::kSkipped ? "skipped" : "failed", note);
      for (int c = 1; c < columns; ++c) md += " |";
      md += "\n";
      continue;
    }
    // A tier the point does not use (no offload: host, nvme) is "-".
    auto tier_mib = [&](const char* key) {
      return p.summary.contains(key) ? fmt::format("{:.1f}", mib(p.summary_number(key, "total")))
                                     : std::string("-");
    };
    md += fmt::format(" {:.1f} | {} | {} | {:.1f} | {} | {} | {:.2f} |", p.ms,
                      group_digits(static_cast<uint64_t>(p.tokens_per_s + 0.5)),
                      group_digits(static_cast<uint64_t>(p.tokens_per_s_per_rank + 0.5)),
                      mib(p.device_bytes()), tier_mib("host_peak_bytes_max"),
                      tier_mib("nvme_bytes_max"),
                      mib(p.summary_number("comm_bytes_per_step", "total")));
    if (internode) {
      const auto it = p.summary.find("internode_bytes_per_step");
      md += it == p.summary.end() || it->is_null()
                ? " - |"
                : fmt::format(" {:.2f} |", mib(it->get<double>()));
    }
    md += p.mfu ? fmt::format(" {:.2f} |\n", 100.0 * *p.mfu) : std::string(" - |\n");
  }
  write_file(out / "scale.md", md);
  std::cout << md;

  // The plots.
  const std::vector<PlotLine> lines = plot_lines(o, points);
  const std::string subtitle =
      fmt::format("{}, B={} T={} per rank", model_name, o.batch, o.seq_len);
  const bool drawn = plot(
      out, "throughput", "zt-bench scale: tokens/s, all ranks (" + subtitle + ")",
      "tokens/s (all ranks)", lines, o.ranks, [](const ScalePoint& p) { return p.tokens_per_s; });
  plot(out, "memory", "zt-bench scale: device peak memory per rank (" + subtitle + ")",
       "device peak MiB per rank (max over ranks)", lines, o.ranks,
       [](const ScalePoint& p) { return mib(p.device_bytes()); });
  if (drawn)
    log.rank0("wrote {}, {}, {}/throughput.png and {}/memory.png", json_path.string(),
              (out / "scale.md").string(), out.string(), out.string());
  else
    log.rank0(
        "wrote {}, {} and the plots' .gp/.dat files in {}; the PNGs were not drawn because "
        "gnuplot is missing (install gnuplot-nox)",
        json_path.string(), (out / "scale.md").string(), out.string());
  if (failed > 0) {
    log.warn("{} of {} points failed (see {} and each point's stderr.log)", failed, done,
             json_path.string());
    return 1;
  }
  return 0;
}

}  // namespace zt
