// zt-bench checkpoint: synchronous against asynchronous checkpoint saves, in one process.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench.h"
#include "bench/harness.h"
#include "comm/self_communicator.h"
#include "launch/logger.h"
#include "model_zoo/gpt2.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/cpu/cpu_peak.h"
#include "runtime/status.h"
#include "train/checkpointer.h"
#include "train/trainer.h"
#include "zero/engine.h"

namespace zt {

namespace {

// The manifest's trainer_state of a benchmark save (the Checkpointer adds the engine's).
nlohmann::json bench_state(int64_t step) {
  return {{"step", step}, {"bench", "zt-bench checkpoint"}};
}

}  // namespace

int bench_checkpoint(const BenchCheckpointOptions& o) {
  Logger log;
  bench::Report report("checkpoint", log);
  const Gpt2Config config = gpt2_zoo_config(o.model);
  CpuDevice device;
  SelfCommunicator comm(device);
  Gpt2 model(config);
  EngineOptions eo;
  eo.optimizer.type = OptimizerOptions::Type::kAdamW;
  eo.optimizer.weight_decay = 0.1f;
  eo.policy = ZeroPolicy::for_stage(0);
  eo.precision = bench_precision(o.precision);
  Engine engine(device, comm, model, eo);
  const RandomBatch random(config.vocab_size, o.batch, o.seq_len);
  const Batch batch = random.batch();
  auto step = [&] { return bench::time_ms([&] { engine.train_step({&batch, 1}, 1e-4f); }); };
  const std::string root =
      (std::filesystem::path(o.path) / fmt::format("zt_bench_checkpoint_{}", ::getpid())).string();
  std::filesystem::remove_all(root);
  int64_t params = 0;
  for (Unit* u : model.units()) params += u->layout().param_count();
  log.rank0(
      "zt-bench checkpoint: {} ({:.1f}M parameters), {}, AdamW, 1 rank, B={} T={}; "
      "checkpoints under {}; {} rounds, each a synchronous then an asynchronous save",
      o.model, params / 1e6, o.precision, o.batch, o.seq_len, root, o.repeats);
  log.rank0("CPU: {} ({}); {} threads", cpu_model_name(), cpu_simd_features(), cpu_threads());
  step();  // a step first: Adam's moments exist and are not zero

  std::vector<double> write_ms, async_total_ms, steps_writing;
  int64_t bytes = 0, save = 1;
  // zt-train's Checkpointer, on one rank: the same protocol, snapshot and writer thread, and
  // zt-train's test fault points (tests/e2e/bench_checkpoint.sh).
  SaveReport last;
  Checkpointer checkpointer(engine, comm,
                            {.root = root,
                             .keep_last = 2,
                             .on_saved = [&](const SaveReport& s) { last = s; },
                             .fault = checkpoint_fault_hook(model, 0)});
  // The snapshot is kept from round to round, as zt-train keeps it from save to save, and mapped
  // before the first round, as zt-train maps it before training (a snapshot thrown away).
  const double map_ms = checkpointer.map_snapshot().ms;
  // Each round: a step without a save; a synchronous save (training waits for all of it); an
  // asynchronous one (training waits for the snapshot; a step runs while the thread writes).
  bench::Rounds rounds(0, o.repeats);
  rounds.add("step", [&](int) { return step(); });
  rounds.add("sync", [&](int) {
    checkpointer.save_sync(save, bench_state(save));
    ++save;
    bytes = last.bytes;
    return last.save_ms;
  });
  rounds.add("async", [&](int) {
    checkpointer.begin_async(save, bench_state(save));
    ++save;
    steps_writing.push_back(step());
    checkpointer.finish_pending();
    write_ms.push_back(last.write_ms);
    async_total_ms.push_back(last.save_ms);
    return last.blocked_ms;
  });
  rounds.run();
  std::filesystem::remove_all(root);

  const std::vector<double>&sync_ms = rounds.figures("sync"), &blocked_ms = rounds.figures("async");
  const bench::Summary sync = rounds.summary("sync"), blocked = rounds.summary("async"),
                       write = bench::summarize(write_ms),
                       blocked_ratio = bench::paired_ratio(blocked_ms, sync_ms),
                       write_ratio = bench::paired_ratio(write_ms, sync_ms),
                       plain = rounds.summary("step"), writing = bench::summarize(steps_writing),
                       writing_ratio = bench::paired_ratio(steps_writing, rounds.figures("step"));
  report.add_reference({"a synchronous save of the same state, same round", "ms", sync.median});
  bench::Table table(fmt::format("per save: shard file {:.1f} MiB (fp32 master, m, v of {:.1f}M "
                                 "parameters)",
                                 bytes / 1048576.0, params / 1e6),
                     {"", "ms (q1-q3)", "x reference (q1-q3)"});
  table.add_row({"synchronous: training blocked", bench::quartile_cell(sync), "1"});
  table.add_row({"asynchronous: training blocked", bench::quartile_cell(blocked),
                 bench::quartile_cell(blocked_ratio, 3)});
  table.add_row({"asynchronous: background write", bench::quartile_cell(write),
                 bench::quartile_cell(write_ratio, 3)});
  table.add_row({"step without a save", bench::quartile_cell(plain), ""});
  table.add_row({"step beside the background write", bench::quartile_cell(writing),
                 fmt::format("{} x step", bench::quartile_cell(writing_ratio, 3))});
  table.add_note(fmt::format(
      "blocked: from the save's start to training going on (synchronous: the shard file "
      "written, fsync'd and committed; asynchronous: the state copied to host memory). Ratios "
      "per round over {} rounds, which alternate, so the machine's load falls on both alike. "
      "The snapshot's memory was mapped before the rounds, as zt-train maps it before training "
      "({:.0f} ms).",
      o.repeats, map_ms));
  report.add_table(table);

  nlohmann::ordered_json& j = report.json();
  j["model"] = o.model;
  j["parameters"] = params;
  j["precision"] = o.precision;
  j["shard_bytes"] = bytes;
  j["sync_ms"] = sync.median;
  j["async_blocked_ms"] = blocked.median;
  j["blocked_ratio"] = bench::to_json(blocked_ratio);
  j["async_write_ms"] = write.median;
  j["async_total_ms"] = bench::summarize(async_total_ms).median;
  j["step_ms"] = plain.median;
  j["step_ms_while_writing"] = writing.median;
  j["sync_ms_per_round"] = sync_ms;
  j["async_blocked_ms_per_round"] = blocked_ms;
  j["snapshot_map_ms"] = map_ms;
  report.write(o.json_path, o.markdown_path);
  return 0;
}

}  // namespace zt
