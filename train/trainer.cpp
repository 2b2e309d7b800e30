// zt-train's set-up and loop: the loop calls the components of train/ (Checkpointer,
// MetricsWriter) and the engine; the helpers above train_run each do one part of a run.
#include "train/trainer.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include <nlohmann/json.hpp>

#include "comm/communicator_factory.h"
#include "launch/tool_frame.h"
#include "model_zoo/lora.h"
#include "model_zoo/model_spec.h"
#include "offload/swap_store.h"
#include "runtime/byte_count.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/data/token_data.h"
#include "runtime/device_factory.h"
#include "runtime/file_io.h"
#include "runtime/status.h"
#include "train/checkpointer.h"
#include "train/gemm_choice.h"
#include "train/metrics_writer.h"
#include "train/monitors.h"
#include "train/offload_plan.h"
#include "train/progress.h"
#include "train/test_fault.h"
#include "train/trainer_state.h"
#include "train/weights_export.h"
#include "zero/engine.h"
#include "zero/lr_schedule.h"

namespace zt {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

namespace {

// A micro-batch's arrays, filled by DataLoader::next. Positions are passed to the model only for
// a file of packed examples (TokenFile::has_flags): plain files train one document per row, as
// before positions existed.
struct BatchArrays {
  BatchArrays(int64_t B, int64_t T, bool documents)
      : B(B), T(T), inputs(B * T), targets(B * T), positions(documents ? B * T : 0) {}
  Batch next(DataLoader& loader) {
    loader.next(inputs.data(), targets.data(), positions.empty() ? nullptr : positions.data());
    return Batch{inputs.data(), targets.data(), B, T,
                 positions.empty() ? nullptr : positions.data()};
  }
  int64_t B, T;
  std::vector<int32_t> inputs, targets, positions;
};

// An evaluation: the validation loss, and the wall time it took.
struct Evaluation {
  double loss = 0.0;
  double ms = 0.0;
};

// Mean loss over the counted targets of the first `batches` batches of the validation file (the
// same batches every time, so evaluations are comparable).
Evaluation evaluate(Engine& engine, DataLoader& loader, const TokenFile& file, int batches,
                    int64_t B, int64_t T) {
  const auto t0 = std::chrono::steady_clock::now();
  BatchArrays arrays(B, T, file.has_flags());
  loader.seek(0);
  double sum = 0.0, targets = 0.0;
  for (int i = 0; i < batches; ++i) {
    int64_t counted = 0;
    const double loss = engine.eval_loss(arrays.next(loader), &counted);
    sum += loss * static_cast<double>(counted);
    targets += static_cast<double>(counted);
  }
  return {sum / std::max(targets, 1.0),
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()};
}

}  // namespace

namespace {

// Model states are allocated here, on every rank: the engine's constructor allocates the
// parameter groups and optimizer state after its one collective (duplicating the
// communicator), with none among the allocations. So model states that do not fit the device
// (zt.device_memory_limit, or a GPU's memory) are agreed on like a set-up error: every rank
// stops before the first step, the lowest failing rank reports, no rank is aborted or left
// in a collective. Any other error takes the path of every error in training (on_error).
// (Over MPI_COMM_WORLD, which is `comm`'s group in zt-train.) Returns the agreed exit code.
int build_engine(const TrainSetup& setup, Device& device, Communicator& comm, const Logger& log,
                 std::unique_ptr<Model>& model_slot, OffloadStores& offload,
                 std::optional<Engine>& engine_slot) {
  const Config& config = setup.config;
  std::string out_of_memory;
  try {
    model_slot = build_model(setup.model);
    Model& built = *model_slot;
    built.set_chunk_budget_bytes(device.chunk_budget_bytes());  // the LM head's logits chunk
    EngineOptions engine_opts = engine_options(config, built);
    engine_opts.offload =
        set_up_offload(config, device, comm.rank(),
                       {.rank0 = [&](const std::string& line) { log.rank0("{}", line); },
                        .all = [&](const std::string& line) { log.all("{}", line); }},
                       offload);
    engine_slot.emplace(device, comm, built, std::move(engine_opts));
    if (offload.host && offload.host->pinning()) {
      if (!offload.host->pinning_failure().empty())
        log.all("warning: host memory of the offload tier is not all pinned: {}",
                offload.host->pinning_failure());
      else
        log.rank0("pin_memory: {} of host-tier memory pinned per rank for the device's copies",
                  format_bytes(offload.host->pinned_bytes()));
    }
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kOutOfMemory) throw;
    describe_current_exception(&out_of_memory);
  }
  return agree_on_failure("zt-train", comm.rank(), comm.world(),
                          out_of_memory.empty() ? 0 : kExitFailure, out_of_memory);
}

// Test-only faults (ZT_TEST_FAULT): each point throws when the variable names it, this rank,
// the step and the unit. The engine's points fire at the step the loop is in (`step_now`).
class FaultPoints {
 public:
  FaultPoints(int rank, Model& model)
      : fault_(TestFault::from_environment()), rank_(rank), model_(model) {}
  void operator()(TestFault::Point at, int64_t step, int unit) const {
    if (fault_ && fault_->due(at, rank_, step, unit))
      fault_->fire(model_.units()[unit]->name(), step, rank_);
  }
  void hook_engine(Engine& engine, const int64_t& step_now) const {
    if (!fault_) return;
    engine.set_fault_hook([this, &step_now](EnginePoint point, int unit) {
      const TestFault::Point at = point == EnginePoint::kForward    ? TestFault::Point::kForward
                                  : point == EnginePoint::kBackward ? TestFault::Point::kBackward
                                  : point == EnginePoint::kOptimizer
                                      ? TestFault::Point::kOptimizer
                                      : TestFault::Point::kEvaluation;
      (*this)(at, step_now, unit);
    });
  }

 private:
  std::optional<TestFault> fault_;
  int rank_;
  Model& model_;
};

}  // namespace

SaveFaultHook checkpoint_fault_hook(Model& model, int rank) {
  std::optional<TestFault> fault = TestFault::from_environment();
  if (!fault) return {};
  return [fault = *fault, &model, rank](SavePoint at, int64_t step, int unit) {
    const TestFault::Point point =
        at == SavePoint::kCommit ? TestFault::Point::kCommit : TestFault::Point::kCheckpoint;
    if (fault.due(point, rank, step, unit)) fault.fire(model.units()[unit]->name(), step, rank);
  };
}

namespace {

// --resume: this rank reads the global ranges it holds here, whatever the world size, stage
// and tier of the saving run. Agreed on like a set-up error: a checkpoint that does not load
// into this run (another optimizer, ...) stops every rank before the first step.
struct Resumed {
  int exit_code = 0;
  int64_t first_step = 1;
  std::vector<std::string> notes;  // printed with the run's start-up lines
};

Resumed resume_training(const TrainSetup& setup, Engine& engine, Communicator& comm,
                        DataLoader& train_loader, std::optional<DataLoader>& val_loader) {
  const Config& config = setup.config;
  const int rank = comm.rank(), world = comm.world();
  const int64_t B = config.train_micro_batch_size_per_gpu, T = config.zt.seq_len;
  const ResumePoint point = resume_point(*setup.resume);
  Resumed resumed;
  std::string refused;
  try {
    resumed.notes = engine.load_state(*setup.resume, point.engine);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kInput) throw;
    describe_current_exception(&refused);
  }
  resumed.exit_code =
      agree_on_failure("zt-train", rank, world, refused.empty() ? 0 : kExitBadInput, refused);
  if (resumed.exit_code != 0) return resumed;
  resumed.first_step = point.step + 1;
  if (rank == 0)
    for (const std::string& dir : remove_unfinished_saves(setup.checkpoint_root))
      resumed.notes.push_back(fmt::format("removed {}: left by a save that did not finish", dir));
  // The data position in tokens of the whole job, as this world's batches.
  const int64_t position = resumed_train_position(point, world, B, T, resumed.notes);
  train_loader.seek(position);
  if (val_loader) val_loader->seek(point.val_position);
  if (point.seed != config.zt.seed)
    resumed.notes.push_back(
        fmt::format("the checkpoint was trained with zt.seed {}, this run has "
                    "{} (it changes the shuffled data order)",
                    point.seed, config.zt.seed));
  return resumed;
}

// A committed save's line and metrics.jsonl row.
void report_save(const SaveReport& s, const std::string& root, int world, const Logger& log,
                 MetricsWriter& metrics) {
  const std::string how =
      s.async ? fmt::format(
                    "async: training blocked {:.0f} ms for the snapshot, the file written "
                    "in {:.0f} ms behind it, committed {:.0f} ms after the save began",
                    s.blocked_ms, s.write_ms, s.save_ms)
              : fmt::format("{:.0f} ms", s.save_ms);
  for (const std::string& dir : s.removed)
    log.rank0("removed {}: left by a save that did not finish", dir);
  log.rank0("step {:>5} | saved checkpoint {} ({:.1f} MiB in {} shard file{}, {})", s.step,
            checkpoint_step_dir(root, s.step), s.bytes / 1048576.0, world, world > 1 ? "s" : "",
            how);
  if (s.async)
    metrics.write({{"checkpoint", s.step},
                   {"async", true},
                   {"blocked_ms", s.blocked_ms},
                   {"write_ms", s.write_ms},
                   {"save_ms", s.save_ms}});
  else
    metrics.write({{"checkpoint", s.step},
                   {"async", false},
                   {"blocked_ms", s.save_ms},
                   {"save_ms", s.save_ms}});
}

// The "auto" values the Hugging Face Trainer's arguments filled (runtime/config/
// trainer_arguments.h), once, as a table: key, value, argument.
void log_from_arguments(const Config& config, const Logger& log) {
  if (config.from_arguments.empty()) return;
  size_t key_width = 3, value_width = 5;
  for (const Config::FromArgument& a : config.from_arguments) {
    key_width = std::max(key_width, a.key.size());
    value_width = std::max(value_width, a.value.size());
  }
  log.rank0("\"auto\" from the Hugging Face Trainer's arguments in the zt block:");
  log.rank0("  {:<{}}  {:<{}}  {}", "key", key_width, "value", value_width, "from");
  for (const Config::FromArgument& a : config.from_arguments)
    log.rank0("  {:<{}}  {:<{}}  {}", a.key, key_width, a.value, value_width, a.from);
}

// The run's start-up lines: what trains, where, how; the resume point; precision and stage 3
// notes. `threads`: every rank's thread count.
void log_start(const TrainSetup& setup, const CpuBinding& cpus, const std::vector<double>& threads,
               const Device& device, Engine& engine, const Resumed& resumed, int world,
               const Logger& log, MetricsWriter& metrics) {
  const Config& config = setup.config;
  int64_t params = 0;
  for (const Unit* u : engine.model().units()) params += u->layout().param_count();
  const Precision& precision = engine.options().precision;
  log.rank0(
      "zt-train: {} | {} | {:.2f}M parameters | {} layers | {} rank{} | ZeRO stage {} | {} | "
      "B={} T={} accumulation={} | {} train tokens{}",
      config.source, setup.model.model_type(), params / 1e6, setup.model.layers(), world,
      world > 1 ? "s" : "", config.zero_optimization.stage, precision_name(precision),
      config.train_micro_batch_size_per_gpu, config.zt.seq_len, config.gradient_accumulation_steps,
      setup.train_file.size(),
      setup.val_file ? fmt::format(", {} val tokens", setup.val_file->size()) : "");
  if (const std::string line = zoo::describe_trainable(engine.model(), setup.model.tuning);
      !line.empty())
    log.rank0("{}", line);
  log.rank0("{}", describe_cpu_binding(cpus, threads));
  if (config.zt.device == "cpu") log.rank0("cpu kernels: {}", cpu_gemm_description());
  if (device.memory_limit() > 0)
    log.rank0("device memory limit: {} per rank (zt.device_memory_limit)",
              format_bytes(device.memory_limit()));
  // DeepSpeed keys accepted with no effect and "auto" values resolved: one line each.
  for (const std::string& note : config.notes) log.rank0("note: {}", note);
  log_from_arguments(config, log);
  if (setup.resume) {
    const CheckpointManifest& m = setup.resume->manifest();
    log.rank0(
        "resumed from {}: step {} of a ZeRO stage {} {} run on {} rank{}; training steps {} "
        "to {}",
        setup.resume->dir(), resumed.first_step - 1, m.zero_stage, dtype_name(m.compute_dtype),
        m.world_size, m.world_size > 1 ? "s" : "", resumed.first_step, config.zt.steps);
    for (const std::string& note : resumed.notes) log.rank0("note: {}", note);
    metrics.write(nlohmann::ordered_json{{"resumed_from", setup.resume->dir()},
                                         {"at_step", resumed.first_step - 1}});
  }
  if (precision.mixed())
    log.rank0(
        "precision: {} working parameters, activations and gradients; gradients stored in "
        "{}, reduced in {}; {}{}",
        dtype_name(precision.compute), dtype_name(precision.grad_accum), dtype_name(precision.comm),
        precision.has_master() ? "fp32 master weights" : "no master weights",
        precision.loss_scaling()
            ? (precision.fp16.loss_scale > 0
                   ? fmt::format("; static loss scale {}", precision.fp16.loss_scale)
                   : fmt::format("; dynamic loss scale from 2^{}",
                                 precision.fp16.initial_scale_power))
            : std::string());
  const ZeroConfig& zero = config.zero_optimization;
  if (zero.stage == 3 && zero.stage3_max_reuse_distance > 0)
    log.rank0(
        "stage 3: a unit used again before {} more elements are gathered stays gathered "
        "(stage3_max_reuse_distance, DeepSpeed's behaviour), within "
        "stage3_max_live_parameters = {}; set stage3_max_reuse_distance to 0 to release "
        "every unit after use",
        zero.stage3_max_reuse_distance, zero.stage3_max_live_parameters);
  if (precision.mixed() && !precision.master_weights)
    log.rank0(
        "warning: pure {} training (no fp32 master weights) is less stable than mixed "
        "precision: updates smaller than half a unit in the last place of a weight are "
        "lost; use it to compare memory, not to train for quality",
        dtype_name(precision.compute));
}

// A training step's row of metrics.jsonl (its val_loss and wall_clock_ms added by the loop).
nlohmann::ordered_json step_row(const StepResult& r, int64_t step, double ms, double tokens_per_s,
                                const Device& device, const Engine& engine, bool documents) {
  nlohmann::ordered_json row = {{"step", step},
                                {"loss", r.loss},
                                {"lr", r.lr},
                                {"grad_norm", r.grad_norm},
                                {"ms", ms},
                                {"tokens_per_s", tokens_per_s},
                                {"peak_bytes", peak_bytes_json(device.memory())}};
  // Instruction data: the targets the loss counted (completion tokens) of the B*T*accumulation
  // *world positions.
  if (documents) row["loss_targets"] = r.targets;
  if (const MemoryTracker* host = engine.host_memory())
    row["host_peak_bytes"] = peak_bytes_json(*host);
  if (engine.options().precision.loss_scaling()) {
    row["loss_scale"] = r.loss_scale;
    row["skipped"] = r.skipped;
  }
  return row;
}

// A step's progress lines: every steps_per_print steps (and the first and last) the step line
// and, with wall_clock_breakdown, its times; the evaluation's.
void log_step(const Config& config, const StepResult& r, int64_t step, double ms,
              double tokens_per_s, const Device& device, const std::optional<Evaluation>& eval,
              const std::string& left, const Logger& log) {
  const int64_t steps = config.zt.steps;
  const bool print = step == 1 || step % config.steps_per_print == 0 || step == steps;
  if (print)
    log.rank0(
        "step {:>5}/{} | loss {:.9g} | lr {:.3e} | norm {:.4f} | {:.0f} tok/s | "
        "{:.1f} ms | peak {:.1f} MiB{}",
        step, steps, r.loss, r.lr, r.grad_norm, tokens_per_s, ms,
        device.memory().peak_total() / 1048576.0, left.empty() ? "" : " | left " + left);
  if (eval) log.rank0("step {:>5} | val loss {:.6f} ({:.0f} ms)", step, eval->loss, eval->ms);
  if (config.wall_clock_breakdown && print)
    log.rank0(
        "step {:>5} | time (ms, rank 0) | forward {:.1f} | backward {:.1f} | "
        "optimizer {:.1f} | reduce {:.1f} | gather {:.1f}",
        step, 1e3 * r.times.forward, 1e3 * r.times.backward, 1e3 * r.times.optimizer,
        1e3 * r.times.reduce, 1e3 * r.times.gather);
}

// Preemption: a signal on any rank stops every rank after the same step. The same gather says
// whether every rank has written its file of an asynchronous save. Collective.
struct AfterStep {
  int signal = 0;            // the lowest rank's signal, 0: none
  bool all_written = false;  // a save is in flight and every rank's file is written
};

AfterStep agree_after_step(Communicator& comm, const Checkpointer& checkpointer) {
  const std::vector<double> flags =
      all_gather_doubles(comm, std::array{static_cast<double>(preemption_signal()),
                                          checkpointer.pending_written() ? 1.0 : 0.0});
  AfterStep a;
  a.all_written = checkpointer.pending();
  for (int r = 0; r < comm.world(); ++r) {
    if (flags[2 * r] != 0.0 && a.signal == 0) a.signal = static_cast<int>(flags[2 * r]);
    a.all_written = a.all_written && flags[2 * r + 1] != 0.0;
  }
  return a;
}

namespace {

// The run's metrics.jsonl: a resumed run keeps the rows through its checkpoint's step; a
// restarted one from the start keeps only the earlier restarts' rows, and writes its own first.
MetricsWriter open_metrics(const TrainSetup& setup, int rank) {
  std::optional<int64_t> kept_through;
  if (setup.resume)
    kept_through = resume_point(*setup.resume).step;
  else if (setup.restart)
    kept_through = -1;
  MetricsWriter metrics(std::filesystem::path(setup.config.zt.output_dir) / "metrics.jsonl", rank,
                        kept_through, test_write_limit_from_environment());
  metrics.add_monitors(std::make_unique<Monitors>(setup.config, rank, kept_through,
                                                  test_write_limit_from_environment()));
  if (setup.restart) metrics.write(*setup.restart);
  return metrics;
}

// Seconds on the steady clock, for Progress.
double seconds_now() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

// The evaluation before the first step, printed and written as step 0's row; its loss.
double report_first_evaluation(const Evaluation& first, const Logger& log, MetricsWriter& metrics) {
  log.rank0("step {:>5} | val loss {:.6f} ({:.0f} ms)", 0, first.loss, first.ms);
  metrics.write(
      nlohmann::ordered_json{{"step", 0}, {"val_loss", first.loss}, {"val_ms", first.ms}});
  return first.loss;
}

}  // namespace

// The body of train(): set-up, the step loop, the exports and the summary. The model and the
// engine live in the caller's slots, so that they are still alive in train()'s error handler.
TrainResult train_run(const TrainSetup& setup, const CpuBinding& cpus, Device& device,
                      Communicator& comm, const Logger& log, std::unique_ptr<Model>& model_slot,
                      OffloadStores& offload, std::optional<Engine>& engine_slot) {
  const Config& config = setup.config;
  const int rank = comm.rank(), world = comm.world();
  const int64_t B = config.train_micro_batch_size_per_gpu, T = config.zt.seq_len;
  const int64_t accumulation = config.gradient_accumulation_steps, steps = config.zt.steps;
  // Before the first parallel region (the parameter initialisation): OpenMP sizes its pool then.
  choose_cpu_threads(config.zt.num_threads, cpus.mine().threads);
  const std::vector<double> threads =
      all_gather_doubles(comm, std::array{static_cast<double>(cpu_threads())});
  DataLoader train_loader(setup.train_file, B, T, rank, world, config.zt.shuffle, config.zt.seed);
  std::optional<DataLoader> val_loader;
  if (setup.val_file) val_loader.emplace(*setup.val_file, B, T, rank, world, false, config.zt.seed);
  MetricsWriter metrics = open_metrics(setup, rank);

  TrainResult result;
  result.exit_code = build_engine(setup, device, comm, log, model_slot, offload, engine_slot);
  if (result.exit_code != 0) return result;  // printed by the lowest failing rank
  Engine& engine = *engine_slot;
  GemmChoice gemm;
  result.exit_code = set_up_job_gemm_paths(device, engine, comm, config,
                                           setup.resume ? &*setup.resume : nullptr, metrics, gemm);
  if (result.exit_code != 0) return result;  // printed by the lowest failing rank
  int64_t step_now = 0;  // the step being trained, or the one an evaluation comes after
  const FaultPoints faults(rank, *model_slot);
  faults.hook_engine(engine, step_now);
  load_initial_weights(config, setup.model, engine, log);  // zt.init_from, zt.init_adapter
  Resumed resumed;
  if (setup.resume) {
    resumed = resume_training(setup, engine, comm, train_loader, val_loader);
    if ((result.exit_code = resumed.exit_code) != 0) return result;
    step_now = resumed.first_step - 1;
  }
  const LrSchedule schedule(config.scheduler, config.optimizer.lr);
  const CheckpointConfig& checkpointing = config.zt.checkpoint;
  Checkpointer checkpointer(
      engine, comm,
      {.root = setup.checkpoint_root,
       .keep_last = checkpointing.keep_last,
       .on_saved =
           [&](const SaveReport& s) { report_save(s, setup.checkpoint_root, world, log, metrics); },
       .fault = checkpoint_fault_hook(*model_slot, rank)});
  auto save = [&](int64_t step) {
    nlohmann::json state =
        trainer_state(config, world, step, train_loader, val_loader, engine.options().precision);
    if (gemm.paths) state["cpu_gemm"] = gemm.paths->serialize();  // part of the run's bits
    if (checkpointing.async)
      checkpointer.begin_async(step, std::move(state));
    else
      checkpointer.save_sync(step, std::move(state));
  };
  log_start(setup, cpus, threads, device, engine, resumed, world, log, metrics);
  for (const std::string& line : gemm.lines) log.rank0("{}", line);

  auto evaluate_now = [&] {
    return evaluate(engine, *val_loader, *setup.val_file, config.zt.eval_batches, B, T);
  };
  result.first_val_loss = result.last_val_loss = std::numeric_limits<double>::quiet_NaN();
  if (val_loader && !setup.resume)  // a resumed run evaluated before its checkpoint
    result.first_val_loss = result.last_val_loss =
        report_first_evaluation(evaluate_now(), log, metrics);
  if (checkpointing.async && (checkpointing.every_n_steps > 0 || checkpointing.given)) {
    const Checkpointer::SnapshotMapping mapped = checkpointer.map_snapshot();
    log.rank0(
        "zt.checkpoint.async: {:.1f} MiB of host memory per rank for the save snapshot, "
        "mapped in {:.0f} ms before training",
        mapped.bytes / 1048576.0, mapped.ms);
  }

  std::vector<BatchArrays> arrays(accumulation, BatchArrays(B, T, setup.train_file.has_flags()));
  std::vector<Batch> micro(accumulation);
  StepTraffic traffic(comm, static_cast<int>(cpus.world_ranks.size()), cpus.local_rank,
                      resumed.first_step);
  Progress progress(steps);
  for (int64_t step = resumed.first_step; step <= steps; ++step) {
    step_now = step;
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < accumulation; ++i) micro[i] = arrays[i].next(train_loader);
    // The schedule advances with applied steps: a skipped fp16 step does not move it.
    const float lr = schedule.lr_at(engine.optimizer_steps());
    traffic.before_step(engine);
    const StepResult r = engine.train_step(micro, lr);
    traffic.after_step(engine, step);
    if (!r.failure.empty()) {
      // Agreed on every rank (the loss scaler at its minimum still overflowing): ends the run
      // like a diverging loss rather than an abort.
      result.exit_code = kExitFailure;
      if (rank == 0)
        result.failure = fmt::format("{}: step {}: {}", config.source, step, r.failure);
      return result;
    }
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    const double tokens_per_s = static_cast<double>(B * T * accumulation * world) / (ms / 1e3);
    result.last_loss = r.loss;
    if (!std::isfinite(r.loss)) {
      // Every rank holds the same (reduced) loss, so every rank stops here together.
      result.exit_code = kExitFailure;
      if (rank == 0)
        result.failure = fmt::format(
            "{}: loss became {} at step {}; lower optimizer.params.lr or "
            "enable gradient_clipping",
            config.source, r.loss, step);
      return result;
    }

    nlohmann::ordered_json row =
        step_row(r, step, ms, tokens_per_s, device, engine, setup.train_file.has_flags());
    if (engine.options().precision.loss_scaling() && r.skipped)
      log.rank0("step {:>5}/{} | {}", step, steps, r.scale_update.describe());
    std::optional<Evaluation> eval;
    if (val_loader && config.zt.eval_every > 0 &&
        (step % config.zt.eval_every == 0 || step == steps)) {
      eval = evaluate_now();
      result.last_val_loss = eval->loss;
      row.update({{"val_loss", eval->loss}, {"val_ms", eval->ms}});
    }
    if (config.wall_clock_breakdown) row["wall_clock_ms"] = wall_clock_json(r.times);
    metrics.write(row);
    progress.step_done(step, seconds_now());
    log_step(config, r, step, ms, tokens_per_s, device, eval, progress.left(), log);
    const bool save_now =
        (checkpointing.every_n_steps > 0 && step % checkpointing.every_n_steps == 0) ||
        (checkpointing.given && step == steps);
    if (save_now) save(step);
    const AfterStep after = agree_after_step(comm, checkpointer);
    if (after.all_written || (checkpointer.pending() && (after.signal != 0 || step == steps)))
      checkpointer.finish_pending();
    if (after.signal != 0) {
      if (!save_now) {
        save(step);
        checkpointer.finish_pending();
      }
      result.exit_code = kExitPreempted;
      if (rank == 0) {
        metrics.sync();
        result.failure = fmt::format(
            "preempted ({}) after step {} of {}: checkpoint {} saved; continue with zt-train "
            "--resume (exit code {})",
            after.signal == SIGTERM   ? "SIGTERM"
            : after.signal == SIGUSR1 ? "SIGUSR1"
                                      : "signal",
            step, steps, checkpoint_step_dir(setup.checkpoint_root, step), kExitPreempted);
      }
      return result;
    }
  }

  export_weights(config, setup.model, engine, log,
                 [&](int unit) { faults(TestFault::Point::kSave, config.zt.steps, unit); });
  write_summary(metrics, engine, device, comm, traffic, steps,
                [&](const std::string& line) { log.rank0("{}", line); });
  return result;
}

}  // namespace

TrainResult train(const TrainSetup& setup, const CpuBinding& cpus, Device& device,
                  Communicator& comm, const Logger& log, const TrainErrorHandler& on_error) {
  // Declared here, outside the try: the handler runs while they are alive, so the engine's
  // CommQueue has not been asked to finish (or abandon) anything before the job is ended.
  std::unique_ptr<Model> model;
  OffloadStores offload;  // the host tier and the swap stores: outlive the engine
  std::optional<Engine> engine;
  install_preemption_handlers();
  try {
    return train_run(setup, cpus, device, comm, log, model, offload, engine);
  } catch (...) {
    if (on_error) on_error();
    throw;
  }
}

}  // namespace zt
