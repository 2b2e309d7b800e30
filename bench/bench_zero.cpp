// zt-bench zero: every stage with overlap_comm off and on, the same model, batch and ranks.
#include "bench/bench.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "comm/mpi_communicator.h"
#include "comm/process_group.h"
#include "launch/cpu_binding.h"
#include "launch/logger.h"
#include "model_zoo/gpt2.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/status.h"
#include "zero/engine.h"

namespace zt {

namespace {

using Clock = std::chrono::steady_clock;

struct StageFigures {
  double ms = 0;          // median step time without overlap, max over ranks
  double ms_overlap = 0;  // the same with overlap_comm
  double reduce_ms = 0;   // time in gradient reductions per step (the communication thread's)
  double gather_ms = 0;   // time in all-gathers per step
  std::array<double, kNumMemCategories> peak{};  // max over ranks
};

double max_over_ranks(double x) {
  double m = x;
  ZT_MPI_CHECK(MPI_Allreduce(&x, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  return m;
}

// One engine of the stage with its own communicator, model and batch.
struct StageRun {
  StageRun(const BenchZeroOptions& o, const Gpt2Config& config, int stage, bool overlap)
      : comm(device), model(config), engine(device, comm, model, options(stage, overlap)) {
    std::mt19937 rng(77 + comm.rank());
    std::uniform_int_distribution<int32_t> token(0, config.vocab_size - 1);
    inputs.resize(o.batch * o.seq_len);
    targets.resize(o.batch * o.seq_len);
    for (auto& t : inputs) t = token(rng);
    for (auto& t : targets) t = token(rng);
    batch = Batch{inputs.data(), targets.data(), o.batch, o.seq_len};
  }
  static EngineOptions options(int stage, bool overlap) {
    EngineOptions eo;
    eo.optimizer.type = OptimizerOptions::Type::kAdamW;
    eo.optimizer.weight_decay = 0.1f;
    eo.gradient_clipping = 1.0f;
    eo.policy = ZeroPolicy::for_stage(stage);
    eo.overlap_comm = overlap;
    eo.reduce_bucket_size = 5'000'000;
    return eo;
  }
  // One step; returns its time in ms, the max over ranks.
  double step() {
    ZT_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    auto t0 = Clock::now();
    engine.train_step({&batch, 1}, 1e-4f);
    return max_over_ranks(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  CpuDevice device;
  MpiCommunicator comm;
  Gpt2 model;
  Engine engine;
  std::vector<int32_t> inputs, targets;
  Batch batch;
};

// The stage with overlap_comm off and on, steps alternating between the two engines so both
// see the same machine; the overlap gain is the median of the per-pair differences.
StageFigures run_stage(const BenchZeroOptions& o, const Gpt2Config& config, int stage,
                       double* gain_ms) {
  StageRun off(o, config, stage, false), on(o, config, stage, true);
  for (int i = 0; i < o.warmup; ++i) {
    off.step();
    on.step();
  }
  off.engine.reset_comm_stats();
  std::vector<double> ms_off, ms_on, gain;
  for (int i = 0; i < o.steps; ++i) {
    ms_off.push_back(off.step());
    ms_on.push_back(on.step());
    gain.push_back(ms_off.back() - ms_on.back());
  }
  StageFigures f;
  f.ms = median(ms_off);
  f.ms_overlap = median(ms_on);
  *gain_ms = median(gain);
  const CommStats s = off.engine.comm_stats();
  f.reduce_ms = max_over_ranks(
      1e3 * (s[CollectiveKind::kReduceScatter].seconds + s[CollectiveKind::kAllReduce].seconds) /
      o.steps);
  f.gather_ms = max_over_ranks(1e3 * s[CollectiveKind::kAllGather].seconds / o.steps);
  for (int c = 0; c < kNumMemCategories; ++c)
    f.peak[c] =
        max_over_ranks(static_cast<double>(on.device.memory().peak(static_cast<MemCategory>(c))));
  return f;
}

}  // namespace

int bench_zero(const BenchZeroOptions& o) {
  MpiSession session(nullptr, nullptr);
  const int rank = session.group().rank, world = session.group().world;
  const CpuBinding cpus = bind_local_cpus(session.group());
  choose_cpu_threads(0, cpus.mine().threads);
  Logger log(rank, world);
  const Gpt2Config config = gpt2_zoo_config(o.model);
  log.rank0(
      "zt-bench zero: {} on {} ranks, {} thread(s) each, B={} T={} per rank, fp32 AdamW, "
      "median of {} steps",
      o.model, world, cpu_threads(), o.batch, o.seq_len, o.steps);
  log.rank0("{:>5} {:>12} {:>12} {:>12} {:>9} {:>11} {:>11} {:>11} {:>11}", "stage", "ms (no ovl)",
            "ms (overlap)", "reduce ms", "hidden", "params MiB", "grads MiB", "optim MiB",
            "comm MiB");
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (int stage = 0; stage <= 3; ++stage) {
    double gain_ms = 0;
    const StageFigures f = run_stage(o, config, stage, &gain_ms);
    // Share of the reduce time that overlap took off the step: median paired gain / reduce time.
    const double hidden = f.reduce_ms > 0 ? gain_ms / f.reduce_ms : 0.0;
    auto mib = [](double b) { return b / 1048576.0; };
    log.rank0(
        "{:>5} {:>12.1f} {:>12.1f} {:>12.1f} {:>8.0f}% {:>11.1f} {:>11.1f} {:>11.1f} {:>11.1f}",
        stage, f.ms, f.ms_overlap, f.reduce_ms, 100.0 * hidden, mib(f.peak[0]), mib(f.peak[1]),
        mib(f.peak[2]), mib(f.peak[4]));
    nlohmann::ordered_json peak;
    for (int c = 0; c < kNumMemCategories; ++c)
      peak[std::string(mem_category_name(static_cast<MemCategory>(c)))] = f.peak[c];
    rows.push_back({{"stage", stage},
                    {"ranks", world},
                    {"ms_per_step", f.ms},
                    {"ms_per_step_overlap", f.ms_overlap},
                    {"overlap_gain_ms", gain_ms},
                    {"reduce_ms_per_step", f.reduce_ms},
                    {"gather_ms_per_step", f.gather_ms},
                    {"hidden_fraction", hidden},
                    {"peak_bytes", peak}});
  }
  log.rank0(
      "hidden = median over step pairs of (ms without overlap - ms with overlap), over the "
      "reduce ms: the share of the gradient reduction time overlap_comm removes; steps of "
      "the two engines alternate so both see the same machine");
  if (rank == 0 && !o.json_path.empty()) {
    std::ofstream out(o.json_path);
    if (!out) throw_input(fmt::format("cannot write --json file {}", o.json_path));
    out << nlohmann::ordered_json{{"bench", "zero"},
                                  {"model", o.model},
                                  {"batch", o.batch},
                                  {"seq_len", o.seq_len},
                                  {"rows", rows}}
               .dump(2)
        << "\n";
  }
  return 0;
}

}  // namespace zt
