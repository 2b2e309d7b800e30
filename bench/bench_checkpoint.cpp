// zt-bench checkpoint: synchronous against asynchronous checkpoint saves, in one process.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <vector>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "bench/bench.h"
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

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The manifest's trainer_state of a benchmark save (the Checkpointer adds the engine's).
nlohmann::json bench_state(int64_t step) {
  return {{"step", step}, {"bench", "zt-bench checkpoint"}};
}

}  // namespace

int bench_checkpoint(const BenchCheckpointOptions& o) {
  Logger log;
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
  auto step = [&] {
    const auto t0 = Clock::now();
    engine.train_step({&batch, 1}, 1e-4f);
    return ms_since(t0);
  };
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

  std::vector<double> sync_ms, blocked_ms, write_ms, async_total_ms, steps_plain, steps_writing;
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
  for (int round = 0; round < o.repeats; ++round) {
    steps_plain.push_back(step());
    // synchronous: training waits for the whole save
    checkpointer.save_sync(save, bench_state(save));
    ++save;
    sync_ms.push_back(last.save_ms);
    bytes = last.bytes;
    // asynchronous: training waits for the snapshot; a step runs while the thread writes
    checkpointer.begin_async(save, bench_state(save));
    ++save;
    steps_writing.push_back(step());
    checkpointer.finish_pending();
    blocked_ms.push_back(last.blocked_ms);
    write_ms.push_back(last.write_ms);
    async_total_ms.push_back(last.save_ms);
  }
  std::filesystem::remove_all(root);

  const double sync = median(sync_ms), blocked = median(blocked_ms);
  log.rank0("shard file {:.1f} MiB (fp32 master, m, v of {:.1f}M parameters)", bytes / 1048576.0,
            params / 1e6);
  log.rank0("{:<34} {:>10} {:>16}", "per save (median of rounds)", "ms", "x synchronous");
  log.rank0("{:<34} {:>10.1f} {:>16}", "synchronous: training blocked", sync, "1.00");
  log.rank0("{:<34} {:>10.1f} {:>16.3f}", "asynchronous: training blocked", blocked,
            blocked / sync);
  log.rank0("{:<34} {:>10.1f} {:>16.3f}", "asynchronous: background write", median(write_ms),
            median(write_ms) / sync);
  log.rank0("{:<34} {:>10.1f} {:>16}", "step without a save", median(steps_plain), "");
  log.rank0("{:<34} {:>10.1f} {:>16}", "step beside the background write", median(steps_writing),
            "");
  log.rank0(
      "asynchronous blocked per round (ms): {:.1f}; the snapshot's memory was mapped "
      "before the rounds, as zt-train maps it before training ({:.0f} ms)",
      fmt::join(blocked_ms, ", "), map_ms);
  log.rank0(
      "blocked: from the save's start to training going on (synchronous: the shard file "
      "written, fsync'd and committed; asynchronous: the state copied to host memory). The "
      "rounds alternate, so the machine's load falls on both alike");

  nlohmann::ordered_json j = {{"bench", "checkpoint"},
                              {"model", o.model},
                              {"parameters", params},
                              {"precision", o.precision},
                              {"cpu", cpu_model_name()},
                              {"shard_bytes", bytes},
                              {"sync_ms", sync},
                              {"async_blocked_ms", blocked},
                              {"blocked_ratio", blocked / sync},
                              {"async_write_ms", median(write_ms)},
                              {"async_total_ms", median(async_total_ms)},
                              {"step_ms", median(steps_plain)},
                              {"step_ms_while_writing", median(steps_writing)},
                              {"sync_ms_per_round", sync_ms},
                              {"async_blocked_ms_per_round", blocked_ms},
                              {"snapshot_map_ms", map_ms}};
  if (!o.json_path.empty()) {
    std::ofstream out(o.json_path);
    if (!out) throw_input(fmt::format("cannot write --json file {}", o.json_path));
    out << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace zt
