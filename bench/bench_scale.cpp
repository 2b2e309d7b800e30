// zt-bench scale: a weak-scaling sweep of real training runs. A driver process (not under
// mpirun) runs, for every point of stages x ranks x precision x activation checkpointing x
// optimizer offload, `zt-run -np R --cpu -- zt-train --config BASE --set ...` (the zt-run and
// zt-train beside this executable), and reads back the point's metrics.jsonl: the step times,
// the summary's per-rank peak bytes per tier, its communication and inter-node bytes per step,
// the last loss. It measures nothing itself but the cores' peak FMA rate, once, for MFU; it
// writes the JSON, a Markdown table and, with gnuplot, two plots.
#include "bench/bench.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "bench/harness.h"
#include "bench/scale_support.h"
#include "launch/logger.h"
#include "model_zoo/model_spec.h"
#include "runtime/byte_count.h"
#include "runtime/config.h"
#include "runtime/cpu/cpu_affinity.h"
#include "runtime/cpu/cpu_peak.h"
#include "runtime/file_io.h"
#include "runtime/status.h"
#include "train/trainer.h"
#include "zero/offload_plan.h"
#include "zero/zero_policy.h"

namespace zt {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using scale::failure_line;
using scale::mib;
using scale::run_process;
using scale::ScalePoint;

namespace {

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
  p.ms = bench::summarize(std::vector<double>(p.step_ms.begin() + warmup, p.step_ms.end()));
}

// Why the engine refuses the point, or "" when it runs: the engine's own offload rule
// (zero/offload_plan.h), not a copy of it.
std::string refusal(const ScalePoint& p) {
  switch (offload_problem(p.offload != "none", false, ZeroPolicy::for_stage(p.stage),
                          bench_precision(p.precision))) {
    case OffloadProblem::kNone: return "";
    case OffloadProblem::kOptimizerNeedsStage1: return "optimizer offload needs ZeRO stage >= 1";
    case OffloadProblem::kOptimizerNeedsMaster:
      return "optimizer offload needs an fp32 master (pure 16-bit has none)";
    case OffloadProblem::kParamsNeedStage3: break;  // parameters are never offloaded here
  }
  return "parameter offload needs ZeRO stage 3";
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
  j["ms_per_step"] = p.ms.median;
  j["ms_per_step_quartiles"] = bench::to_json(p.ms);
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

// What every point shares: the base config resolved once (world 1), the model's FLOPs, the peak
// MFU is taken against, the tools and directories.
struct ScaleSetup {
  BenchScaleOptions o;
  std::string model_name;
  int64_t accumulation = 1;
  double flops_per_token = 0;  // PaLM's model FLOPs: 3 x forward, recomputation not counted
  int64_t tokens_per_rank_step = 0;
  double parameters_m = 0;  // millions
  bool gpu = false;
  int cpus = 0;
  PeakFma peak;  // CPU: the cores' fp32 FMA rate over every CPU, once
  double load_at_start = 0;
  fs::path out, json_path, zt_run, zt_train, nvme_root;

  // FLOP/s MFU is against for a point of `ranks` ranks; 0: none.
  double peak_flops(int ranks) const {
    return gpu ? o.peak_tflops * 1e12 * ranks : peak.gflops * 1e9;
  }
};

ScaleSetup prepare(const BenchScaleOptions& given) {
  ScaleSetup s;
  s.o = given;
  BenchScaleOptions& o = s.o;
  // The base config as every point starts from it: the model, batch and sequence length it
  // gives where the options do not, and its errors before any run.
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
  if (o.batch <= 0) o.batch = static_cast<int>(config.train_micro_batch_size_per_gpu);
  if (o.seq_len <= 0) o.seq_len = config.zt.seq_len;
  s.model_name =
      config.zt.model.has_object ? std::string("the config's model") : config.zt.model.zoo_name;
  s.accumulation = config.gradient_accumulation_steps;
  const std::unique_ptr<Model> shapes = build_model(resolve_model(config));  // tables only
  s.flops_per_token = 3.0 * shapes->forward_flops_per_token(o.seq_len);
  s.parameters_m = shapes->forward_flops_per_token(0) / 2e6;
  s.tokens_per_rank_step = int64_t(o.batch) * o.seq_len * s.accumulation;

  // On the CPU the peak is over every CPU this process may use, measured before the first run,
  // so MFU is against the whole machine whatever the ranks; on a GPU --peak-tflops per rank.
  s.gpu = o.device == "cuda";
  s.cpus = static_cast<int>(this_thread_cpus().size());
  if (!s.gpu) s.peak = measure_peak_fma(10, 0.1, s.cpus);  // best of 10 x 100 ms: shared machine
  s.load_at_start = load_average();

  std::error_code ec;
  s.out = o.out_dir;
  fs::create_directories(s.out / "points", ec);
  if (ec)
    throw_input(
        fmt::format("--out: cannot create {}: {}", (s.out / "points").string(), ec.message()));
  s.json_path = o.json_path.empty() ? s.out / "scale.json" : fs::path(o.json_path);
  if (o.markdown_path.empty()) o.markdown_path = (s.out / "scale.md").string();
  const fs::path bin = fs::read_symlink("/proc/self/exe", ec).parent_path();
  if (ec) throw_system(fmt::format("cannot read /proc/self/exe: {}", ec.message()));
  s.zt_run = bin / "zt-run";
  s.zt_train = bin / "zt-train";
  for (const fs::path& tool : {s.zt_run, s.zt_train})
    if (::access(tool.c_str(), X_OK) != 0)
      throw_input(fmt::format(
          "{} is missing: zt-bench scale runs the zt-run and zt-train beside it", tool.string()));
  s.nvme_root = fs::path(o.path) / fmt::format("zt_bench_scale_{}", ::getpid());
  return s;
}

// Every point of stages x ranks x precisions x checkpointing x offload, in sweep order.
std::vector<ScalePoint> sweep_points(const BenchScaleOptions& o) {
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
  return points;
}

// Runs one point: `zt-run -np R --cpu [--hostfile F] -- zt-train --config BASE --set ...` (zt-run
// adds --allow-run-as-root and --oversubscribe where needed), its output in its own directory,
// then reads back its metrics. Rank 0 writes the metrics into that directory: with a hostfile,
// rank 0 runs here only when this machine is its first host.
void run_point(const ScaleSetup& s, ScalePoint& p) {
  std::error_code ec;
  const fs::path dir = s.out / "points" / p.label();
  const fs::path nvme_dir = s.nvme_root / p.label();
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) throw_system(fmt::format("cannot create {}: {}", dir.string(), ec.message()));
  if (p.offload == "nvme") {  // zt-train wants an existing directory
    fs::create_directories(nvme_dir, ec);
    if (ec)
      throw_input(fmt::format("--path: cannot create {}: {}", nvme_dir.string(), ec.message()));
  }
  std::vector<std::string> argv = {s.zt_run.string(), "-np", std::to_string(p.ranks)};
  if (!s.gpu) argv.push_back("--cpu");
  if (!s.o.hostfile.empty()) argv.insert(argv.end(), {"--hostfile", s.o.hostfile});
  argv.insert(argv.end(), {"--", s.zt_train.string(), "--config", s.o.config});
  for (const std::string& set : point_overrides(s.o, p, s.accumulation, dir, nvme_dir))
    argv.insert(argv.end(), {"--set", set});
  p.exit_code = run_process(argv, dir / "stdout.log", dir / "stderr.log");
  fs::remove_all(nvme_dir, ec);
  if (p.exit_code == 0) {
    try {
      read_metrics(dir / "metrics.jsonl", s.o.warmup, p);
    } catch (const Error& e) {
      p.exit_code = -1;
      p.note = e.what();
    }
  } else {
    p.note = failure_line(dir / "stderr.log");
  }
  if (p.exit_code != 0) {
    p.status = ScalePoint::Status::kFailed;
    return;
  }
  p.tokens_per_s_per_rank = static_cast<double>(s.tokens_per_rank_step) / (p.ms.median / 1e3);
  p.tokens_per_s = p.tokens_per_s_per_rank * p.ranks;
  if (const double peak = s.peak_flops(p.ranks); peak > 0)
    p.mfu = s.flops_per_token * p.tokens_per_s / peak;
}

// Runs every point the engine does not refuse, one line per point on stderr with the time left.
// Returns the number that failed.
int run_sweep(const ScaleSetup& s, std::vector<ScalePoint>& points, int to_run) {
  const auto start = bench::Clock::now();
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
    run_point(s, p);
    ++done;
    const double elapsed = bench::ms_since(start) / 1e3;
    const std::string eta = fmt::format("{} elapsed, about {} left", format_duration(elapsed),
                                        format_duration(elapsed / done * (to_run - done)));
    if (p.status == ScalePoint::Status::kFailed) {
      ++failed;
      std::cerr << fmt::format("{}: FAILED (exit {}): {} | {}\n", head, p.exit_code, p.note, eta);
      continue;
    }
    std::cerr << fmt::format("{}: {:.0f} ms/step, {} tok/s | {}\n", head, p.ms.median,
                             group_digits(static_cast<uint64_t>(p.tokens_per_s + 0.5)), eta);
  }
  std::error_code ec;
  fs::remove_all(s.nvme_root, ec);
  return failed;
}

// The JSON beside the harness's header: options, machine, peak, one object per point.
void fill_json(const ScaleSetup& s, const std::vector<ScalePoint>& points, json& j) {
  const BenchScaleOptions& o = s.o;
  j["options"] = {{"config", o.config},
                  {"model", s.model_name},
                  {"batch", o.batch},
                  {"seq_len", o.seq_len},
                  {"gradient_accumulation_steps", s.accumulation},
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
  j["machine"] = {{"cpu", cpu_model_name()},
                  {"cpu_simd", cpu_simd_features()},
                  {"cpus", s.cpus},
                  {"load_average_at_start", s.load_at_start},
                  {"load_average_at_end", load_average()}};
  j["peak"] = s.gpu ? json{{"kind", "--peak-tflops per rank"}, {"tflops_per_rank", o.peak_tflops}}
                    : json{{"kind", "cpu fp32 FMA, all CPUs"},
                           {"gflops", s.peak.gflops},
                           {"isa", s.peak.isa},
                           {"threads", s.peak.threads}};
  j["flops_per_token"] = s.flops_per_token;
  j["points"] = json::array();
  for (const ScalePoint& p : points)
    j["points"].push_back(point_json(p, s.out / "points" / p.label()));
}

// One row per point: step time (median and quartiles after warm-up), throughput, memory per
// tier, communication, MFU; a skipped or failed point says why.
bench::Table scale_table(const ScaleSetup& s, const std::vector<ScalePoint>& points) {
  const bool internode = std::any_of(points.begin(), points.end(), [](const ScalePoint& p) {
    return p.summary.is_object() && p.summary.contains("internode_bytes_per_step");
  });
  std::vector<std::string> header = {
      "stage",       "ranks",          "precision",       "ckpt",     "offload",  "ms/step (q1-q3)",
      "tok/s total", "tok/s per rank", "device MiB/rank", "host MiB", "nvme MiB", "comm MiB/step"};
  if (internode) header.push_back("inter-node MiB/step");
  header.push_back("MFU %");
  bench::Table table(fmt::format("{}, B={} T={} per rank, {} steps ({} untimed)", s.model_name,
                                 s.o.batch, s.o.seq_len, s.o.steps, s.o.warmup),
                     header);
  for (const ScalePoint& p : points) {
    std::vector<std::string> row = {std::to_string(p.stage), std::to_string(p.ranks), p.precision,
                                    p.checkpointing ? "on" : "off", p.offload};
    if (p.status != ScalePoint::Status::kOk) {
      row.push_back(fmt::format(
          "{}: {}", p.status == ScalePoint::Status::kSkipped ? "skipped" : "failed", p.note));
      table.add_row(row);
      continue;
    }
    // A tier the point does not use (no offload: host, nvme) is "-".
    const auto tier_mib = [&](const char* key) {
      return p.summary.contains(key) ? fmt::format("{:.1f}", mib(p.summary_number(key, "total")))
                                     : std::string("-");
    };
    row.insert(
        row.end(),
        {bench::quartile_cell(p.ms), group_digits(static_cast<uint64_t>(p.tokens_per_s + 0.5)),
         group_digits(static_cast<uint64_t>(p.tokens_per_s_per_rank + 0.5)),
         fmt::format("{:.1f}", mib(p.device_bytes())), tier_mib("host_peak_bytes_max"),
         tier_mib("nvme_bytes_max"),
         fmt::format("{:.2f}", mib(p.summary_number("comm_bytes_per_step", "total")))});
    if (internode) {
      const auto it = p.summary.find("internode_bytes_per_step");
      row.push_back(it == p.summary.end() || it->is_null()
                        ? "-"
                        : fmt::format("{:.2f}", mib(it->get<double>())));
    }
    row.push_back(p.mfu ? fmt::format("{:.2f}", 100.0 * *p.mfu) : "-");
    table.add_row(row);
  }
  table.add_note(fmt::format(
      "MFU: model FLOPs (3 x forward, recomputation not counted: {:.3g}/token) x tokens/s over "
      "the reference. Memory: per rank, the max over ranks of each tier's peak (device, host: "
      "the offloaded optimizer's tier, nvme: swap files). comm: the engine's collectives per "
      "step (whole buffers, as nccl-tests counts them) on rank 0.{}",
      s.flops_per_token,
      internode ? " inter-node: bytes the nodes' interfaces sent per step (TCP/IP headers and "
                  "other traffic included)."
                : ""));
  return table;
}

}  // namespace

int bench_scale(const BenchScaleOptions& options) {
  Logger log;
  bench::Report report("scale", log);
  const ScaleSetup s = prepare(options);
  std::vector<ScalePoint> points = sweep_points(s.o);
  const int to_run = static_cast<int>(std::count_if(
      points.begin(), points.end(), [](const ScalePoint& p) { return refusal(p).empty(); }));
  log.rank0(
      "zt-bench scale: {} ({:.2f}M parameters), B={} T={} per rank (weak scaling), {} steps ({} "
      "untimed), {} points ({} to run) from {}",
      s.model_name, s.parameters_m, s.o.batch, s.o.seq_len, s.o.steps, s.o.warmup, points.size(),
      to_run, s.o.config);
  if (s.gpu)
    report.add_reference({"--peak-tflops, per rank", "TFLOP/s", s.o.peak_tflops});
  else
    report.add_reference({fmt::format("peak fp32 FMA of all {} CPUs ({} loop, best of 10 x 100 "
                                      "ms, load average {:.2f})",
                                      s.peak.threads, s.peak.isa, s.load_at_start),
                          "GFLOP/s", s.peak.gflops});
  if (!s.gpu && s.load_at_start > 0.5 * s.cpus)
    log.warn(
        "the machine was busy while the peak was measured (load average {:.2f} on {} CPUs): the "
        "peak may read low and MFU high; compare points within this run",
        s.load_at_start, s.cpus);

  const int failed = run_sweep(s, points, to_run);
  fill_json(s, points, report.json());
  report.add_table(scale_table(s, points));
  report.write(s.json_path.string(), s.o.markdown_path);
  if (scale::draw_plots(s.o, s.out,
                        fmt::format("{}, B={} T={} per rank", s.model_name, s.o.batch, s.o.seq_len),
                        points))
    log.rank0("wrote {}, {}, {}/throughput.png and {}/memory.png", s.json_path.string(),
              s.o.markdown_path, s.out.string(), s.out.string());
  else
    log.rank0(
        "wrote {}, {} and the plots' .gp/.dat files in {}; the PNGs were not drawn because "
        "gnuplot is missing (install gnuplot-nox)",
        s.json_path.string(), s.o.markdown_path, s.out.string());
  if (failed > 0) {
    log.warn("{} of {} points failed (see {} and each point's stderr.log)", failed, to_run,
             s.json_path.string());
    return 1;
  }
  return 0;
}

}  // namespace zt
