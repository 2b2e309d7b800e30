// zt-bench zero: every stage with overlap_comm off and on, the same model, batch and ranks.
#include "bench/bench.h"

#include <mpi.h>

#include <algorithm>
#include <random>

#include <nlohmann/json.hpp>

#include "bench/harness.h"
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

struct StageFigures {
  bench::Summary ms;          // step time without overlap, max over ranks
  bench::Summary ms_overlap;  // the same with overlap_comm
  bench::Summary gain_ms;     // per round: ms without overlap - ms with it
  double reduce_ms = 0;       // time in gradient reductions per step (the communication thread's)
  double gather_ms = 0;       // time in all-gathers per step
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
    return max_over_ranks(bench::time_ms([&] { engine.train_step({&batch, 1}, 1e-4f); }));
  }
  CpuDevice device;
  MpiCommunicator comm;
  Gpt2 model;
  Engine engine;
  std::vector<int32_t> inputs, targets;
  Batch batch;
};

// The stage with overlap_comm off and on, the two engines stepping in turn in each round so both
// see the same machine; the overlap gain is taken per round.
StageFigures run_stage(const BenchZeroOptions& o, const Gpt2Config& config, int stage) {
  StageRun off(o, config, stage, false), on(o, config, stage, true);
  bench::Rounds rounds(o.warmup, o.steps);
  rounds.add("off", [&](int round) {
    if (round == o.warmup) off.engine.reset_comm_stats();  // the timed steps' collectives only
    return off.step();
  });
  rounds.add("on", [&](int) { return on.step(); });
  rounds.run();
  std::vector<double> gain;
  for (int i = 0; i < o.steps; ++i)
    gain.push_back(rounds.figures("off")[i] - rounds.figures("on")[i]);
  StageFigures f;
  f.ms = rounds.summary("off");
  f.ms_overlap = rounds.summary("on");
  f.gain_ms = bench::summarize(gain);
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
  bench::Report report("zero", log);
  const Gpt2Config config = gpt2_zoo_config(o.model);
  log.rank0(
      "zt-bench zero: {} on {} ranks, {} thread(s) each, B={} T={} per rank, fp32 AdamW, {} "
      "rounds",
      o.model, world, cpu_threads(), o.batch, o.seq_len, o.steps);
  bench::Table table("every ZeRO stage, overlap_comm off and on",
                     {"stage", "ms, no overlap (q1-q3)", "ms, overlap (q1-q3)", "reduce ms",
                      "hidden", "params MiB", "grads MiB", "optim MiB", "comm MiB"});
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  const auto mib = [](double b) { return fmt::format("{:.1f}", b / 1048576.0); };
  for (int stage = 0; stage <= 3; ++stage) {
    const StageFigures f = run_stage(o, config, stage);
    // Share of the reduce time that overlap took off the step: median paired gain / reduce time.
    const double hidden = f.reduce_ms > 0 ? f.gain_ms.median / f.reduce_ms : 0.0;
    table.add_row({std::to_string(stage), bench::quartile_cell(f.ms),
                   bench::quartile_cell(f.ms_overlap), fmt::format("{:.1f}", f.reduce_ms),
                   fmt::format("{:.0f}%", 100.0 * hidden), mib(f.peak[0]), mib(f.peak[1]),
                   mib(f.peak[2]), mib(f.peak[4])});
    nlohmann::ordered_json peak;
    for (int c = 0; c < kNumMemCategories; ++c)
      peak[std::string(mem_category_name(static_cast<MemCategory>(c)))] = f.peak[c];
    rows.push_back({{"stage", stage},
                    {"ranks", world},
                    {"ms_per_step", f.ms.median},
                    {"ms_per_step_overlap", f.ms_overlap.median},
                    {"ms", bench::to_json(f.ms)},
                    {"ms_overlap", bench::to_json(f.ms_overlap)},
                    {"overlap_gain_ms", f.gain_ms.median},
                    {"reduce_ms_per_step", f.reduce_ms},
                    {"gather_ms_per_step", f.gather_ms},
                    {"hidden_fraction", hidden},
                    {"peak_bytes", peak}});
  }
  table.add_note(
      "hidden = median over rounds of (ms without overlap - ms with overlap), over the reduce "
      "ms: the share of the gradient reduction time overlap_comm removes; the two engines step "
      "in turn in every round so both see the same machine. Times are the max over ranks.");
  report.add_table(table);
  nlohmann::ordered_json& j = report.json();
  j["model"] = o.model;
  j["ranks"] = world;
  j["batch"] = o.batch;
  j["seq_len"] = o.seq_len;
  j["rows"] = rows;
  report.write(o.json_path, o.markdown_path);
  return 0;
}

}  // namespace zt
