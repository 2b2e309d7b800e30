// zt-train's loop.
#include "launch/trainer.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <limits>
#include <sstream>
#include <thread>
#include <tuple>

#include <nlohmann/json.hpp>

#include "comm/communicator_factory.h"
#include "launch/hf_model_dir.h"
#include "launch/test_fault.h"
#include "launch/tool_frame.h"
#include "launch/weights_io.h"
#include "model_zoo/model_spec.h"
#include "offload/swap_store.h"
#include "runtime/byte_count.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/data/token_data.h"
#include "runtime/device_factory.h"
#include "runtime/file_io.h"
#include "runtime/status.h"
#include "zero/checkpoint/directory.h"
#include "zero/checkpoint/snapshot.h"
#include "zero/engine.h"
#include "zero/lr_schedule.h"

namespace zt {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

ModelSpec resolve_model(const Config& config) {
  const ModelChoice& m = config.zt.model;
  const bool given = m.has_object || !m.zoo_name.empty();
  const std::string& from = config.zt.init_from;
  const bool hf = !from.empty() && is_hf_model_dir(from);
  if (!given && !hf)
    throw_input(fmt::format("{}: 'zt.model' is missing, and 'zt.init_from' {} is not a Hugging "
                            "Face model directory (no {} there) to take the model from",
                            config.source, from, kHfConfigName));
  ModelSpec c;
  if (!given)
    c = read_hf_config(from);
  else if (!m.hf_config.is_null())
    c = model_spec_from_hf_config(m.hf_config, config.source + ": zt.model");
  else if (m.has_object)
    c = ModelSpec{Gpt2Config{m.n_layer, m.n_head, m.n_embd, m.vocab_size, m.n_positions}};
  else
    c = zoo_model_spec(m.zoo_name);
  validate_model_spec(c, config.source);
  if (given && hf) {  // both name the model: they must agree, key by key of their config.json
    const ModelSpec d = read_hf_config(from);
    const nlohmann::ordered_json mine = hf_config_json(c, DType::kF32);
    const nlohmann::ordered_json theirs = hf_config_json(d, DType::kF32);
    for (const auto& [key, value] : mine.items())
      if (!theirs.contains(key) || theirs[key] != value)
        throw_input(fmt::format("{}: 'zt.model' has {} {}, but {}/{} says {} (leave zt.model out "
                                "to take the directory's)",
                                config.source, key, value.dump(), from, kHfConfigName,
                                theirs.contains(key) ? theirs[key].dump() : "nothing"));
  }
  if (config.zt.seq_len > c.max_positions())
    throw_input(fmt::format("{}: 'zt.seq_len' is {} but the model has {} positions",
                            config.source, config.zt.seq_len, c.max_positions()));
  return c;
}

namespace {

// Features the config accepts whose machinery lands with later work: refused plainly rather
// than silently ignored.
void refuse_unbuilt_features(const Config& config) {
  auto refuse = [&](bool used, const char* what) {
    if (used) throw_input(fmt::format("{}: {} is not supported by this build yet", config.source, what));
  };
  const OffloadConfig& oo = config.zero_optimization.offload_optimizer;
  refuse(oo.device != OffloadDevice::kNone && oo.ratio < 1.0,
         "'zero_optimization.offload_optimizer.ratio' below 1 (partial offload)");
}

// Where a checkpoint's trainer_state says training stopped. Written by save_checkpoint below.
struct ResumePoint {
  int64_t step = 0;             // the last step trained
  int64_t train_position = 0;   // the training DataLoader's position() after it
  int64_t val_position = 0;
  int world = 1;                // the saving run's world size, micro-batch and sequence length:
  int64_t micro_batch = 1;      // the data position is remapped when they differ
  int64_t seq_len = 1;
  uint64_t seed = 0;
  nlohmann::json engine;        // Engine::save_state's
};

ResumePoint resume_point(const CheckpointReader& reader) {
  const std::string where = reader.dir() + "/manifest.json";
  const nlohmann::json& t = reader.manifest().trainer_state;
  auto integer = [&](const char* key, int64_t lowest) {
    const auto it = t.find(key);
    if (it == t.end() || !it->is_number_integer() || it->get<int64_t>() < lowest)
      throw_input(fmt::format("{}: trainer_state.{} is missing or not an integer >= {} (not a "
                              "zt-train checkpoint?)",
                              where, key, lowest));
    return it->get<int64_t>();
  };
  ResumePoint p;
  p.step = integer("step", 0);
  p.train_position = integer("train_position", 0);
  p.val_position = integer("val_position", 0);
  p.world = static_cast<int>(integer("world", 1));
  p.micro_batch = integer("micro_batch", 1);
  p.seq_len = integer("seq_len", 1);
  p.seed = static_cast<uint64_t>(integer("seed", 0));
  const auto engine = t.find("engine");
  if (engine == t.end() || !engine->is_object())
    throw_input(fmt::format("{}: trainer_state.engine is missing or not an object", where));
  p.engine = *engine;
  return p;
}

// The checkpoint's units as check_model compares them, from the model's tables alone.
std::vector<CheckpointUnit> model_checkpoint_units(Model& model) {
  std::vector<CheckpointUnit> units;
  for (Unit* u : model.units())
    units.push_back(checkpoint_unit(u->name(), u->layout(), u->layout().numel()));
  return units;
}

// Preemption: SIGTERM and SIGUSR1 (what schedulers send before they kill a job) only set this
// flag; the training loop reads it after every step and the ranks agree on it (one all-gather of
// a number), so that every rank saves and stops after the same step. The signals are blocked in
// every thread (block_preemption_signals) and taken synchronously by one waiting thread. The one
// process-wide state of the trainer: a signal can reach nothing else.
std::atomic<int> preempt_signal{0};

sigset_t preemption_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  return set;
}

// A detached thread waiting for the signals for the rest of the process (it holds nothing).
void install_preemption_handlers() {
  static std::once_flag started;
  std::call_once(started, [] {
    block_preemption_signals();  // the caller's thread too, if main() did not
    std::thread([] {
      const sigset_t set = preemption_signals();
      for (;;) {
        int signal = 0;
        if (sigwait(&set, &signal) == 0) preempt_signal.store(signal);
      }
    }).detach();
  });
}

// The NVMe swap store of an offload block's device "nvme": its nvme_path, this rank, the aio
// block's settings; its notices (stale files of a killed run removed) logged by the rank.
SwapStoreOptions swap_options(const Config& config, const std::string& nvme_path, int rank,
                              const Logger& log) {
  SwapStoreOptions o;
  o.nvme_path = nvme_path;
  o.rank = rank;
  o.aio.block_size = config.aio.block_size;
  o.aio.queue_depth = config.aio.queue_depth;
  o.aio.intra_op_parallelism = config.aio.thread_count;
  o.aio.single_submit = config.aio.single_submit;
  o.aio.overlap_events = config.aio.overlap_events;
  o.notice = [&log](const std::string& line) { log.all("{}", line); };
  return o;
}

}  // namespace

EngineOptions engine_options(const Config& config, Model& model) {
  EngineOptions o;
  o.param_buffers = config.zero_optimization.offload_param.buffer_count;
  const OptimizerConfig& oc = config.optimizer;
  o.optimizer.type = oc.type == OptimizerType::kSGD ? OptimizerOptions::Type::kSgd
                     : oc.decoupled_weight_decay()  ? OptimizerOptions::Type::kAdamW
                                                    : OptimizerOptions::Type::kAdam;
  o.optimizer.beta1 = static_cast<float>(oc.betas[0]);
  o.optimizer.beta2 = static_cast<float>(oc.betas[1]);
  o.optimizer.eps = static_cast<float>(oc.eps);
  o.optimizer.weight_decay = static_cast<float>(oc.weight_decay);
  o.optimizer.momentum = static_cast<float>(oc.momentum);
  o.gradient_clipping = static_cast<float>(config.gradient_clipping);
  o.seed = config.zt.seed;
  const ZeroConfig& z = config.zero_optimization;
  o.policy = ZeroPolicy::for_stage(z.stage);
  o.overlap_comm = z.overlap_comm;
  o.reduce_bucket_size = z.reduce_bucket_size;
  o.allgather_bucket_size = z.allgather_bucket_size;
  o.prefetch_bucket_size = z.stage3_prefetch_bucket_size;
  o.max_live_parameters = z.stage3_max_live_parameters;
  o.max_reuse_distance = z.stage3_max_reuse_distance;
  o.persistence_threshold = z.stage3_param_persistence_threshold;
  o.precision = precision_from_config(config);
  // Activation checkpointing: every checkpointable layer, or the first `count` of them.
  const auto& ac = config.activation_checkpointing;
  auto layers = model.layers();
  o.checkpoint.assign(layers.size(), false);
  int remaining = ac.policy == ActivationCheckpointing::Policy::kEveryUnit ? static_cast<int>(layers.size())
                  : ac.policy == ActivationCheckpointing::Policy::kCount   ? ac.count
                                                                           : 0;
  for (size_t l = 0; l < layers.size() && remaining > 0; ++l) {
    if (!layers[l]->checkpointable()) continue;
    o.checkpoint[l] = true;
    --remaining;
  }
  return o;
}

namespace {

nlohmann::ordered_json peak_bytes_json(const MemoryTracker& mem) {
  nlohmann::ordered_json j;
  for (int c = 0; c < kNumMemCategories; ++c) {
    auto cat = static_cast<MemCategory>(c);
    j[std::string(mem_category_name(cat))] = mem.peak(cat);
  }
  return j;
}

// wall_clock_breakdown: this rank's StepTimes in milliseconds. forward/backward/optimizer are
// the training thread's phases; reduce/gather the communication threads' busy time, which
// overlaps them.
nlohmann::ordered_json wall_clock_json(const StepTimes& t) {
  return {{"forward", 1e3 * t.forward},     {"backward", 1e3 * t.backward},
          {"optimizer", 1e3 * t.optimizer}, {"reduce", 1e3 * t.reduce},
          {"gather", 1e3 * t.gather}};
}

// What the engine's collectives moved per step, `moved` over `steps` steps: bytes per collective
// kind (the whole buffer, as CommStats counts them) and their "total".
nlohmann::ordered_json comm_bytes_json(const CommStats& moved, int64_t steps) {
  nlohmann::ordered_json j;
  double total = 0.0;
  for (int k = 0; k < kNumCollectiveKinds; ++k) {
    const auto kind = static_cast<CollectiveKind>(k);
    const double bytes = static_cast<double>(moved[kind].bytes) / steps;
    j[std::string(collective_kind_name(kind))] = bytes;
    total += bytes;
  }
  j["total"] = total;
  return j;
}

// The bytes this network namespace has transmitted: the tx bytes of every interface of
// /proc/net/dev but lo. The kernel's interface counters, not ZeroTrain's: they include TCP/IP
// headers and every other traffic of the node (Open MPI's daemons, ssh, ...). -1 where there is
// no /proc/net/dev.
double network_tx_bytes() {
  std::ifstream in("/proc/net/dev");
  if (!in) return -1.0;
  double tx = 0.0;
  // After two header lines (no ':'), one line per interface:
  //   "  eth0: rx_bytes packets errs drop fifo frame compressed multicast tx_bytes ..."
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::istringstream name_field(line.substr(0, colon)), fields(line.substr(colon + 1));
    std::string name;
    name_field >> name;
    if (name == "lo") continue;
    std::array<double, 9> counters{};
    for (double& c : counters) fields >> c;
    if (fields) tx += counters[8];
  }
  return tx;
}

// A micro-batch's arrays, filled by DataLoader::next. Positions are passed to the model only for
// a file of packed examples (TokenFile::has_flags): plain files train one document per row, as
// before positions existed.
struct BatchArrays {
  BatchArrays(int64_t B, int64_t T, bool documents)
      : B(B), T(T), inputs(B * T), targets(B * T), positions(documents ? B * T : 0) {}
  Batch next(DataLoader& loader) {
    loader.next(inputs.data(), targets.data(), positions.empty() ? nullptr : positions.data());
    return Batch{inputs.data(), targets.data(), B, T, positions.empty() ? nullptr : positions.data()};
  }
  int64_t B, T;
  std::vector<int32_t> inputs, targets, positions;
};

// Mean loss over the counted targets of the first `batches` batches of the validation file (the
// same batches every time, so evaluations are comparable).
double evaluate(Engine& engine, DataLoader& loader, const TokenFile& file, int batches, int64_t B,
                int64_t T) {
  BatchArrays arrays(B, T, file.has_flags());
  loader.seek(0);
  double sum = 0.0, targets = 0.0;
  for (int i = 0; i < batches; ++i) {
    int64_t counted = 0;
    const double loss = engine.eval_loss(arrays.next(loader), &counted);
    sum += loss * static_cast<double>(counted);
    targets += static_cast<double>(counted);
  }
  return sum / std::max(targets, 1.0);
}

}  // namespace

TrainSetup prepare_training(const std::string& config_path,
                            const std::vector<std::string>& overrides, int rank, int world,
                            const std::optional<std::string>& resume) {
  Config config = load_config(config_path, overrides, world);
  refuse_unbuilt_features(config);
  precision_from_config(config);  // rejects data types that do not fit the precision
  if (config.zt.device == "cuda" && cuda_device_count() == 0)
    throw_input(fmt::format("{}: 'zt.device' is cuda, but {}", config.source,
                            cuda_unavailable_reason()));
  if (config.zt.comm_backend == "nccl" && (!nccl_built() || config.zt.device != "cuda"))
    throw_input(fmt::format("{}: 'zt.comm_backend' is nccl, but {}", config.source,
                            nccl_built() ? "'zt.device' is not cuda"
                                         : "this build has no NCCL communicator"));
  const ModelSpec model = resolve_model(config);
  // zero_optimization sizes given as "auto" follow the hidden size, as the Hugging Face Trainer
  // derives them; each adds a start-up note.
  resolve_auto_from_model(config, model.hidden_size());
  TokenFile train_file = TokenFile::open(config.zt.train_data, model.vocab_size());
  // Constructing a loader checks the file holds at least one batch for every rank.
  DataLoader(train_file, config.train_micro_batch_size_per_gpu, config.zt.seq_len, rank, world,
             false, 0);
  std::optional<TokenFile> val_file;
  if (!config.zt.val_data.empty()) {
    val_file.emplace(TokenFile::open(config.zt.val_data, model.vocab_size()));
    DataLoader(*val_file, config.train_micro_batch_size_per_gpu, config.zt.seq_len, rank, world,
               false, 0);
  }
  if (!config.zt.init_from.empty()) {
    check_weights_file(config.zt.init_from, *build_model(model));  // tables only
  }
  std::string checkpoint_root = config.zt.checkpoint.dir.empty()
                                    ? (std::filesystem::path(config.zt.output_dir) / "checkpoints").string()
                                    : config.zt.checkpoint.dir;
  std::optional<CheckpointReader> reader;
  if (resume) {
    // Every file read whole and checked, on every rank: a bad checkpoint is refused by all.
    reader.emplace(resume->empty() ? checkpoint_root : *resume);
    reader->check_model(model_checkpoint_units(*build_model(model)));
    resume_point(*reader);
  }
  // Each rank writes its swap files under an nvme block's path on its own node, so every rank
  // checks it (the swap store's own check, offload/swap_store.cpp, cannot name the file or key).
  const auto check_nvme_path = [&](const char* key, OffloadDevice device, const std::string& path) {
    std::error_code ec;
    if (device == OffloadDevice::kNvme && !std::filesystem::is_directory(path, ec))
      throw_input(fmt::format("{}: '{}' is '{}', which is not an existing directory on this "
                              "node (each rank writes its swap files under it)",
                              config.source, key, path));
  };
  const auto& zero = config.zero_optimization;
  check_nvme_path("zero_optimization.offload_optimizer.nvme_path", zero.offload_optimizer.device,
                  zero.offload_optimizer.nvme_path);
  check_nvme_path("zero_optimization.offload_param.nvme_path", zero.offload_param.device,
                  zero.offload_param.nvme_path);
  if (rank == 0) {
    std::error_code ec;
    std::filesystem::create_directories(config.zt.output_dir, ec);
    if (ec)
      throw_input(fmt::format("{}: cannot create zt.output_dir '{}': {}", config.source,
                              config.zt.output_dir, ec.message()));
  }
  return TrainSetup{std::move(config), model,   std::move(train_file), std::move(val_file),
                    std::move(checkpoint_root), std::move(reader)};
}

namespace {

// What offload needs beyond the engine, declared before it so that it outlives it.
struct OffloadSlots {
  std::optional<CpuDevice> host;  // the host tier of offload_optimizer (and offload_param)
  // The NVMe swap files of offload_optimizer and of offload_param (unset when the parameters
  // share the optimizer's nvme_path): removed when a store goes, after the engine.
  std::optional<SwapStore> optimizer_swap, param_swap;
};

// --resume continues the run's log rather than starting it again: of an existing metrics.jsonl,
// the rows up to the resumed step stay (what a straight run would have written by then) and the
// rest go, since this run redoes those steps: step rows past it, checkpoint rows of later saves,
// summaries. Rewritten atomically (the old file stays whole if that fails); the run then appends.
// A line that is not JSON (one cut short when a run was killed) ends what is kept.
void keep_metrics_through(const std::filesystem::path& file, int64_t step) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return;
  const std::string text = read_file(file.string(), "the metrics log");
  AtomicFile kept(file.string());
  for (size_t at = 0; at < text.size();) {
    const size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line(text.data() + at, end - at);
    at = end + 1;
    const nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
    if (row.is_discarded() || !row.is_object()) break;
    if (row.contains("summary")) continue;
    int64_t at_step = 0;
    for (const char* key : {"step", "checkpoint", "at_step"})
      if (row.contains(key) && row[key].is_number_integer()) at_step = row[key].get<int64_t>();
    if (at_step > step) continue;
    kept.write(line);
    kept.write("\n");
  }
  kept.commit();
}

// The body of train(). The model and the engine live in the caller's slots, so that they are
// still alive in train()'s error handler.
TrainResult train_run(const TrainSetup& setup, const CpuBinding& cpus, Device& device,
                      Communicator& comm, const Logger& log, std::unique_ptr<Model>& model_slot,
                      OffloadSlots& offload, std::optional<Engine>& engine_slot) {
  const Config& config = setup.config;
  const ModelSpec& model_config = setup.model;
  const int rank = comm.rank(), world = comm.world();
  const int64_t B = config.train_micro_batch_size_per_gpu, T = config.zt.seq_len;
  const int64_t accumulation = config.gradient_accumulation_steps;
  const TokenFile& train_file = setup.train_file;
  const std::optional<TokenFile>& val_file = setup.val_file;
  // Before the first parallel region (the parameter initialisation): OpenMP sizes its pool then.
  choose_cpu_threads(config.zt.num_threads, cpus.mine().threads);
  const std::vector<double> threads =
      all_gather_doubles(comm, std::array{static_cast<double>(cpu_threads())});
  DataLoader train_loader(train_file, B, T, rank, world, config.zt.shuffle, config.zt.seed);
  std::optional<DataLoader> val_loader;
  if (val_file) val_loader.emplace(*val_file, B, T, rank, world, false, config.zt.seed);
  const std::optional<TestFault> fault = TestFault::from_environment();
  // Rank 0 writes the metrics: a log, one checked write per row (see trainer.h).
  const std::filesystem::path out_dir = config.zt.output_dir;
  CheckedFile metrics;
  if (rank == 0) {
    const std::filesystem::path file = out_dir / "metrics.jsonl";
    if (setup.resume) keep_metrics_through(file, resume_point(*setup.resume).step);
    metrics = CheckedFile(file.string(),
                          setup.resume ? CheckedFile::Mode::kAppend : CheckedFile::Mode::kTruncate);
    metrics.set_test_write_limit(test_write_limit_from_environment());
  }
  auto write_row = [&](const nlohmann::ordered_json& row) {
    if (rank == 0) metrics.write(row.dump() + "\n");
  };

  // Model states are allocated here, on every rank: the engine's constructor allocates the
  // parameter groups and optimizer state after its one collective (duplicating the
  // communicator), with none among the allocations. So model states that do not fit the device
  // (zt.device_memory_limit, or a GPU's memory) are agreed on like a set-up error: every rank
  // stops before the first step, the lowest failing rank reports, no rank is aborted or left
  // in a collective. Any other error takes the path of every error in training (on_error).
  // (Over MPI_COMM_WORLD, which is `comm`'s group in zt-train.)
  std::string out_of_memory;
  try {
    model_slot = build_model(model_config);
    Model& built = *model_slot;
    built.set_chunk_budget_bytes(device.chunk_budget_bytes());  // the LM head's logits chunk
    EngineOptions engine_opts = engine_options(config, built);
    const OffloadConfig& oo = config.zero_optimization.offload_optimizer;
    const OffloadConfig& op = config.zero_optimization.offload_param;
    if (oo.device != OffloadDevice::kNone) {
      // ZeRO-Offload: the master and the optimizer state in host memory, updated there; with
      // nvme (ZeRO-Infinity) they live in swap files and stream through host staging.
      engine_opts.offload_optimizer = &offload.host.emplace();
      // pin_memory (of either block: they share the host tier) page-locks its buffers for a
      // GPU's copies; the CPU device reads host memory directly, so there it has no effect.
      if (oo.pin_memory || op.pin_memory) {
        if (std::optional<HostPinning> pinning = host_pinning_for(device))
          offload.host->set_pinning(std::move(*pinning));
        else
          log.rank0("note: pin_memory has no effect on zt.device {}: the device reads host "
                    "memory directly",
                    config.zt.device);
      }
      if (oo.device == OffloadDevice::kNvme) {
        engine_opts.optimizer_swap =
            &offload.optimizer_swap.emplace(swap_options(config, oo.nvme_path, rank, log));
        log.rank0("offload_optimizer: fp32 master and optimizer state in swap files under {}, "
                  "streamed through host memory; {}",
                  offload.optimizer_swap->directory(), default_aio_backend().describe);
      } else {
        log.rank0("offload_optimizer: fp32 master and optimizer state in host memory, updated "
                  "by the CPU kernels");
      }
    }
    if (op.device != OffloadDevice::kNone) {
      // ZeRO-Infinity's parameter tier (stage 3, with offload_optimizer: checked by the config).
      // One swap store per directory: with the optimizer's nvme_path, the parameters share it.
      engine_opts.offload_param = true;  // param_buffers: engine_options
      if (op.device == OffloadDevice::kNvme) {
        const bool shared = offload.optimizer_swap && op.nvme_path == oo.nvme_path;
        engine_opts.param_swap =
            shared ? &*offload.optimizer_swap
                   : &offload.param_swap.emplace(swap_options(config, op.nvme_path, rank, log));
        log.rank0("offload_param: stage-3 parameter shards in swap files under {}, through {} "
                  "host buffers that prefetch the next units' shards",
                  engine_opts.param_swap->directory(), op.buffer_count);
      } else {
        log.rank0("offload_param: stage-3 parameter shards in host memory, copied in for each "
                  "gather");
      }
    }
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
  TrainResult result;
  result.exit_code = agree_on_failure("zt-train", rank, world,
                                      out_of_memory.empty() ? 0 : kExitFailure, out_of_memory);
  if (result.exit_code != 0) return result;  // printed by the lowest failing rank
  Model& model = *model_slot;
  Engine& engine = *engine_slot;
  int64_t step_now = 0;  // the step being trained, or the one an evaluation comes after
  // Test-only: throws when ZT_TEST_FAULT names this point, rank, step and unit.
  auto inject = [&](TestFault::Point at, int64_t step, int unit) {
    if (fault && fault->due(at, rank, step, unit))
      fault->fire(model.units()[unit]->name(), step, rank);
  };
  if (fault) {
    engine.set_fault_hook([&](EnginePoint point, int unit) {
      const TestFault::Point at = point == EnginePoint::kForward    ? TestFault::Point::kForward
                                  : point == EnginePoint::kBackward ? TestFault::Point::kBackward
                                  : point == EnginePoint::kOptimizer
                                      ? TestFault::Point::kOptimizer
                                      : TestFault::Point::kEvaluation;
      inject(at, step_now, unit);
    });
  }
  if (!config.zt.init_from.empty()) {
    load_weights(engine, config.zt.init_from);
    log.rank0("loaded weights from {}", config.zt.init_from);
  }
  // --resume: this rank reads the global ranges it holds here, whatever the world size, stage
  // and tier of the saving run. Agreed on like a set-up error: a checkpoint that does not load
  // into this run (another optimizer, ...) stops every rank before the first step.
  int64_t first_step = 1;
  std::vector<std::string> resume_notes;
  if (setup.resume) {
    const CheckpointReader& reader = *setup.resume;
    const ResumePoint point = resume_point(reader);
    std::string refused;
    try {
      resume_notes = engine.load_state(reader, point.engine);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kInput) throw;
      describe_current_exception(&refused);
    }
    result.exit_code = agree_on_failure("zt-train", rank, world,
                                        refused.empty() ? 0 : kExitBadInput, refused);
    if (result.exit_code != 0) return result;
    first_step = point.step + 1;
    // The data position in tokens of the whole job, as this world's batches: the same batch
    // index when the world size, micro-batch and sequence length are the saving run's.
    int64_t position = point.train_position;
    if (point.world != world || point.micro_batch != B || point.seq_len != T) {
      const int64_t tokens = point.train_position * point.world * point.micro_batch * point.seq_len;
      const int64_t per_batch = static_cast<int64_t>(world) * B * T;
      position = tokens / per_batch;
      resume_notes.push_back(fmt::format(
          "the checkpoint's data position (batch {} of {} rank(s) x {} rows x {} tokens) is batch "
          "{} of this run's {} rank(s) x {} x {}{}",
          point.train_position, point.world, point.micro_batch, point.seq_len, position, world, B,
          T, tokens % per_batch == 0 ? "" : " (rounded down: a part-batch is seen again)"));
    }
    train_loader.seek(position);
    if (val_loader) val_loader->seek(point.val_position);
    if (point.seed != config.zt.seed)
      resume_notes.push_back(fmt::format("the checkpoint was trained with zt.seed {}, this run has "
                                         "{} (it changes the shuffled data order)",
                                         point.seed, config.zt.seed));
    step_now = point.step;
  }
  const LrSchedule schedule(config.scheduler, config.optimizer.lr);
  const CheckpointConfig& checkpointing = config.zt.checkpoint;
  auto barrier = [&] { all_gather_doubles(comm, std::array{0.0}); };
  // The save protocol of zero/checkpoint/directory.h: rank 0 makes step<N>.tmp, every rank writes its
  // shard file there, rank 0 commits with every file's size and checksum (the manifest, the
  // rename, `latest`, pruning), and no rank goes on before the commit is done. A rank that dies
  // on the way leaves the previous checkpoint as the latest.
  auto trainer_state = [&](int64_t step, const nlohmann::json& engine_state) {
    return nlohmann::json{
        {"step", step},
        {"train_position", train_loader.position()},
        {"val_position", val_loader ? val_loader->position() : 0},
        {"world", world},
        {"micro_batch", B},
        {"seq_len", T},
        {"gradient_accumulation_steps", accumulation},
        {"seed", config.zt.seed},
        {"config", {{"source", config.source},
                    {"zero_stage", config.zero_optimization.stage},
                    {"precision", precision_name(engine.options().precision)}}},
        {"engine", engine_state}};
  };
  // Every rank's shard file written: gather their sizes and checksums, rank 0 commits. Returns
  // the checkpoint's bytes (rank 0; 0 elsewhere).
  auto commit_save = [&](int64_t step, const ShardFileInfo& info, nlohmann::json state) {
    const std::vector<double> files = all_gather_doubles(
        comm, std::array{static_cast<double>(info.bytes), static_cast<double>(info.crc32c)});
    inject(TestFault::Point::kCommit, step, 0);
    int64_t bytes = 0;
    if (rank == 0) {
      CheckpointManifest manifest;
      manifest.step = step;
      engine.describe_checkpoint(manifest);
      for (int r = 0; r < world; ++r) {
        manifest.files.push_back(ShardFileInfo{shard_file_name(r),
                                               static_cast<int64_t>(files[2 * r]),
                                               static_cast<uint32_t>(files[2 * r + 1])});
        bytes += manifest.files.back().bytes;
      }
      manifest.trainer_state = std::move(state);
      commit_checkpoint(setup.checkpoint_root, step, manifest, checkpointing.keep_last);
    }
    barrier();
    return bytes;
  };
  auto ms_since = [](Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  auto log_save = [&](int64_t step, int64_t bytes, const std::string& how) {
    log.rank0("step {:>5} | saved checkpoint {} ({:.1f} MiB in {} shard file{}, {})", step,
              checkpoint_step_dir(setup.checkpoint_root, step), bytes / 1048576.0, world,
              world > 1 ? "s" : "", how);
  };
  auto save_checkpoint = [&](int64_t step) {
    const auto t0 = Clock::now();
    const std::string& root = setup.checkpoint_root;
    if (rank == 0) prepare_checkpoint_dir(root, step);
    barrier();
    ShardFileWriter writer(checkpoint_step_dir(root, step) + ".tmp", rank);
    const nlohmann::json engine_state = engine.save_state(writer, [&](int unit) {
      inject(TestFault::Point::kCheckpoint, step, unit);
    });
    const ShardFileInfo info = writer.finish();
    const int64_t bytes = commit_save(step, info, trainer_state(step, engine_state));
    const double ms = ms_since(t0);
    log_save(step, bytes, fmt::format("{:.0f} ms", ms));
    write_row({{"checkpoint", step}, {"async", false}, {"blocked_ms", ms}, {"save_ms", ms}});
  };

  // zt.checkpoint.async: the save in flight. Training waits only while the state is copied to a
  // host snapshot; a thread of this rank writes the shard file from it while training goes on.
  // After every step the ranks agree whether every file is written (with the preemption flag);
  // then they commit together. A new save, the end of training or a preemption waits for it.
  struct PendingSave {
    int64_t step = 0;
    nlohmann::json state;  // the manifest's trainer_state, as of the snapshot
    ShardFileInfo info;
    std::exception_ptr error;
    std::atomic<bool> written{false};
    double blocked_ms = 0.0, write_ms = 0.0;
    Clock::time_point started;
    std::thread writer;
    ~PendingSave() {
      if (writer.joinable()) writer.join();
    }
  };
  // The host copy of this rank's state, kept from save to save: its memory stays mapped, so
  // every snapshot after the first copies at memory speed. Declared before `pending`, whose
  // writer thread reads it (and is joined when `pending` goes).
  ShardSnapshot snapshot;
  std::unique_ptr<PendingSave> pending;
  auto unit_of_record = [&](const std::string& name) {
    auto units = model.units();
    for (size_t u = 0; u < units.size(); ++u)
      if (units[u]->name() == name) return static_cast<int>(u);
    return 0;
  };
  // The save in flight, committed: waits for this rank's writer (every rank calls it at the same
  // step: after the agreement below, or where all of them wait).
  auto finish_pending = [&] {
    if (!pending) return;
    pending->writer.join();
    if (pending->error) std::rethrow_exception(pending->error);
    const int64_t bytes = commit_save(pending->step, pending->info, std::move(pending->state));
    const double total_ms = ms_since(pending->started);
    log_save(pending->step, bytes,
             fmt::format("async: training blocked {:.0f} ms for the snapshot, the file written in "
                         "{:.0f} ms behind it, committed {:.0f} ms after the save began",
                         pending->blocked_ms, pending->write_ms, total_ms));
    write_row({{"checkpoint", pending->step},
               {"async", true},
               {"blocked_ms", pending->blocked_ms},
               {"write_ms", pending->write_ms},
               {"save_ms", total_ms}});
    pending.reset();
  };
  auto begin_async_save = [&](int64_t step) {
    finish_pending();  // one save at a time
    const auto t0 = Clock::now();
    const std::string& root = setup.checkpoint_root;
    if (rank == 0) prepare_checkpoint_dir(root, step);
    barrier();
    pending = std::make_unique<PendingSave>();
    PendingSave& p = *pending;
    p.step = step;
    p.started = t0;
    snapshot.rewind();
    const nlohmann::json engine_state = engine.save_state(snapshot);
    p.state = trainer_state(step, engine_state);
    p.blocked_ms = ms_since(t0);
    const std::string dir = checkpoint_step_dir(root, step) + ".tmp";
    // The test-only checkpoint fault fires on the writer thread, where an async save writes.
    p.writer = std::thread([&p, &snapshot, dir, rank, step, &inject, &unit_of_record] {
      const auto w0 = Clock::now();
      try {
        ShardFileWriter writer(dir, rank);
        snapshot.write_to(writer, [&](const std::string& unit) {
          inject(TestFault::Point::kCheckpoint, step, unit_of_record(unit));
        });
        p.info = writer.finish();
      } catch (...) {
        p.error = std::current_exception();
      }
      p.write_ms = std::chrono::duration<double, std::milli>(Clock::now() - w0).count();
      p.written.store(true);
    });
  };
  auto save = [&](int64_t step) {
    if (checkpointing.async)
      begin_async_save(step);
    else
      save_checkpoint(step);
  };

  int64_t params = 0;
  for (Unit* u : model.units()) params += u->layout().param_count();
  const Precision& precision = engine.options().precision;
  log.rank0("zt-train: {} | {} | {:.2f}M parameters | {} layers | {} rank{} | ZeRO stage {} | {} | "
            "B={} T={} accumulation={} | {} train tokens{}",
            config.source, model_config.model_type(), params / 1e6, model_config.layers(), world, world > 1 ? "s" : "",
            config.zero_optimization.stage, precision_name(precision), B, T, accumulation,
            train_file.size(),
            val_file ? fmt::format(", {} val tokens", val_file->size()) : "");
  log.rank0("{}", describe_cpu_binding(cpus, threads));
  if (config.zt.device == "cpu") log.rank0("cpu kernels: {}", cpu_gemm_description());
  if (device.memory_limit() > 0)
    log.rank0("device memory limit: {} per rank (zt.device_memory_limit)",
              format_bytes(device.memory_limit()));

  // DeepSpeed keys accepted with no effect and "auto" values resolved: one line each.
  for (const std::string& note : config.notes) log.rank0("note: {}", note);
  if (setup.resume) {
    const CheckpointManifest& m = setup.resume->manifest();
    log.rank0("resumed from {}: step {} of a ZeRO stage {} {} run on {} rank{}; training steps {} "
              "to {}",
              setup.resume->dir(), first_step - 1, m.zero_stage, dtype_name(m.compute_dtype),
              m.world_size, m.world_size > 1 ? "s" : "", first_step, config.zt.steps);
    for (const std::string& note : resume_notes) log.rank0("note: {}", note);
    write_row(nlohmann::ordered_json{{"resumed_from", setup.resume->dir()},
                                     {"at_step", first_step - 1}});
  }

  if (precision.mixed())
    log.rank0("precision: {} working parameters, activations and gradients; gradients stored in "
              "{}, reduced in {}; {}{}",
              dtype_name(precision.compute), dtype_name(precision.grad_accum),
              dtype_name(precision.comm),
              precision.has_master() ? "fp32 master weights" : "no master weights",
              precision.loss_scaling()
                  ? (precision.fp16.loss_scale > 0
                         ? fmt::format("; static loss scale {}", precision.fp16.loss_scale)
                         : fmt::format("; dynamic loss scale from 2^{}",
                                       precision.fp16.initial_scale_power))
                  : std::string());
  const ZeroConfig& zero = config.zero_optimization;
  if (zero.stage == 3 && zero.stage3_max_reuse_distance > 0)
    log.rank0("stage 3: a unit used again before {} more elements are gathered stays gathered "
              "(stage3_max_reuse_distance, DeepSpeed's behaviour), within "
              "stage3_max_live_parameters = {}; set stage3_max_reuse_distance to 0 to release "
              "every unit after use",
              zero.stage3_max_reuse_distance, zero.stage3_max_live_parameters);
  if (precision.mixed() && !precision.master_weights)
    log.rank0("warning: pure {} training (no fp32 master weights) is less stable than mixed "
              "precision: updates smaller than half a unit in the last place of a weight are "
              "lost; use it to compare memory, not to train for quality",
              dtype_name(precision.compute));

  result.first_val_loss = result.last_val_loss = std::numeric_limits<double>::quiet_NaN();
  const bool can_eval = val_loader.has_value();
  if (can_eval && !setup.resume) {  // a resumed run evaluated before its checkpoint
    result.first_val_loss = result.last_val_loss =
        evaluate(engine, *val_loader, *val_file, config.zt.eval_batches, B, T);
    log.rank0("step {:>5} | val loss {:.6f}", 0, result.first_val_loss);
    write_row(nlohmann::ordered_json{{"step", 0}, {"val_loss", result.first_val_loss}});
  }

  // Asynchronous saves: the snapshot's memory is taken and its pages mapped here, before
  // training, by one snapshot thrown away, so that no save blocks training for page faults.
  if (checkpointing.async && (checkpointing.every_n_steps > 0 || checkpointing.given)) {
    const auto t0 = Clock::now();
    snapshot.rewind();
    engine.save_state(snapshot);
    log.rank0("zt.checkpoint.async: {:.1f} MiB of host memory per rank for the save snapshot, "
              "mapped in {:.0f} ms before training",
              snapshot.bytes() / 1048576.0, ms_since(t0));
    snapshot.rewind();
  }

  std::vector<BatchArrays> arrays(accumulation, BatchArrays(B, T, train_file.has_flags()));
  std::vector<Batch> micro(accumulation);
  const int64_t steps = config.zt.steps;
  // The summary's traffic figures are over the timed steps: every step after the first, so that
  // start-up traffic is left out (a run of one step: that step). comm_bytes_per_step from the
  // engine's counters around its train_step calls (evaluations and saves excluded);
  // internode_bytes_per_step, when the job spans several nodes, from each node's network
  // counters (network_tx_bytes) read by its first local rank before the first step, after it
  // and after the last, summed over nodes. Nodes: world / ranks on rank 0's machine, as
  // zt-train --dry-run counts them; rank 0's count is gathered so that every rank agrees on
  // whether the summary gathers the counters.
  const std::vector<double> local_worlds =
      all_gather_doubles(comm, std::array{static_cast<double>(cpus.world_ranks.size())});
  const int nodes = std::max(1, world / std::max(1, static_cast<int>(local_worlds[0])));
  const bool reads_network = nodes > 1 && cpus.local_rank == 0;
  CommStats comm_first, comm_timed;  // what train_step moved: the first step; the later ones
  double tx_start = reads_network ? network_tx_bytes() : 0.0, tx_after_first = tx_start;
  for (int64_t step = first_step; step <= steps; ++step) {
    step_now = step;
    auto t0 = Clock::now();
    for (int64_t i = 0; i < accumulation; ++i) micro[i] = arrays[i].next(train_loader);
    // The schedule advances with applied steps: a skipped fp16 step does not move it.
    const float lr = schedule.lr_at(engine.optimizer_steps());
    const CommStats comm_before = engine.comm_stats();
    StepResult r = engine.train_step(micro, lr);
    // A world of 1 calls the same collectives, whose buffers CommStats counts, but they move
    // nothing between ranks: its figures stay 0.
    CommStats& traffic = step == first_step ? comm_first : comm_timed;
    const CommStats comm_after = engine.comm_stats();
    for (int k = 0; k < kNumCollectiveKinds && world > 1; ++k)
      traffic.by_kind[k].bytes += comm_after.by_kind[k].bytes - comm_before.by_kind[k].bytes;
    if (reads_network && step == first_step) tx_after_first = network_tx_bytes();
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
        result.failure = fmt::format("{}: loss became {} at step {}; lower optimizer.params.lr or "
                                     "enable gradient_clipping", config.source, r.loss, step);
      return result;
    }

    nlohmann::ordered_json row = {{"step", step},        {"loss", r.loss},
                          {"lr", r.lr},          {"grad_norm", r.grad_norm},
                          {"ms", ms},            {"tokens_per_s", tokens_per_s},
                          {"peak_bytes", peak_bytes_json(device.memory())}};
    // Instruction data: the targets the loss counted (completion tokens) of the B*T*accumulation
    // *world positions.
    if (train_file.has_flags()) row["loss_targets"] = r.targets;
    if (const MemoryTracker* host = engine.host_memory())
      row["host_peak_bytes"] = peak_bytes_json(*host);
    if (precision.loss_scaling()) {
      row["loss_scale"] = r.loss_scale;
      row["skipped"] = r.skipped;
      if (r.skipped) log.rank0("step {:>5}/{} | {}", step, steps, r.scale_update.describe());
    }
    const bool eval_now = can_eval && config.zt.eval_every > 0 &&
                          (step % config.zt.eval_every == 0 || step == steps);
    if (eval_now) {
      result.last_val_loss = evaluate(engine, *val_loader, *val_file, config.zt.eval_batches, B, T);
      row["val_loss"] = result.last_val_loss;
    }
    if (config.wall_clock_breakdown) row["wall_clock_ms"] = wall_clock_json(r.times);
    write_row(row);
    if (step == 1 || step % config.steps_per_print == 0 || step == steps)
      log.rank0("step {:>5}/{} | loss {:.9g} | lr {:.3e} | norm {:.4f} | {:.0f} tok/s | "
                "{:.1f} ms | peak {:.1f} MiB",
                step, steps, r.loss, r.lr, r.grad_norm, tokens_per_s, ms,
                device.memory().peak_total() / 1048576.0);
    if (eval_now) log.rank0("step {:>5} | val loss {:.6f}", step, result.last_val_loss);
    if (config.wall_clock_breakdown &&
        (step == 1 || step % config.steps_per_print == 0 || step == steps))
      log.rank0("step {:>5} | time (ms, rank 0) | forward {:.1f} | backward {:.1f} | "
                "optimizer {:.1f} | reduce {:.1f} | gather {:.1f}",
                step, 1e3 * r.times.forward, 1e3 * r.times.backward, 1e3 * r.times.optimizer,
                1e3 * r.times.reduce, 1e3 * r.times.gather);
    const bool save_now = (checkpointing.every_n_steps > 0 && step % checkpointing.every_n_steps == 0) ||
                          (checkpointing.given && step == steps);
    if (save_now) save(step);
    // Preemption: a signal on any rank stops every rank here, after this step and its save. The
    // same gather says whether every rank has written its file of an asynchronous save.
    const std::vector<double> flags = all_gather_doubles(
        comm, std::array{static_cast<double>(preempt_signal.load()),
                         pending && pending->written.load() ? 1.0 : 0.0});
    int signal = 0;
    bool all_written = pending != nullptr;
    for (int r = 0; r < world; ++r) {
      if (flags[2 * r] != 0.0 && signal == 0) signal = static_cast<int>(flags[2 * r]);
      all_written = all_written && flags[2 * r + 1] != 0.0;
    }
    if (all_written || (pending && (signal != 0 || step == steps))) finish_pending();
    if (signal != 0) {
      if (!save_now) {
        save(step);
        finish_pending();
      }
      result.exit_code = kExitPreempted;
      if (rank == 0) {
        metrics.sync();
        result.failure = fmt::format(
            "preempted ({}) after step {} of {}: checkpoint {} saved; continue with zt-train "
            "--resume (exit code {})",
            signal == SIGTERM ? "SIGTERM" : signal == SIGUSR1 ? "SIGUSR1" : "signal", step, steps,
            checkpoint_step_dir(setup.checkpoint_root, step), kExitPreempted);
      }
      return result;
    }
  }

  if (!config.zt.save_weights.empty()) {
    const bool sixteen_bit = config.zero_optimization.stage3_gather_16bit_weights_on_model_save &&
                             precision.mixed();
    engine.set_context(fmt::format("weights save after step {}", steps));
    save_weights(engine, config.zt.save_weights,
                 sixteen_bit ? WeightsDtype::kWorking : WeightsDtype::kMaster, [&](int unit) {
                   inject(TestFault::Point::kSave, steps, unit);
                 });
    log.rank0("saved weights to {} ({})", config.zt.save_weights,
              sixteen_bit ? fmt::format("{} working weights", dtype_name(precision.compute))
                          : std::string("fp32"));
  }
  if (const SavePretrainedConfig& hf = config.zt.save_pretrained; !hf.dir.empty()) {
    engine.set_context(fmt::format("save_pretrained after step {}", steps));
    SavePretrainedOptions o;
    o.dir = hf.dir;
    o.dtype = hf.dtype == "bf16" ? DType::kBF16 : hf.dtype == "fp16" ? DType::kF16 : DType::kF32;
    o.max_shard_size = hf.max_shard_size;
    if (is_hf_model_dir(config.zt.init_from)) o.tokenizer_from = config.zt.init_from;
    const SavePretrainedResult saved = save_pretrained(engine, model_config, o);
    log.rank0("saved a Hugging Face model directory {} ({} weights in {} safetensors file{}, {}; "
              "{} tokenizer file{} copied)",
              hf.dir, hf.dtype, saved.files, saved.files == 1 ? "" : "s",
              format_bytes(saved.bytes), saved.tokenizer_files,
              saved.tokenizer_files == 1 ? "" : "s");
  }
  // Every rank's peak bytes per category, gathered, shown as min/max over ranks, a column pair
  // per tier where bytes live (the device; with an offloaded optimizer the host tier; with NVMe
  // the swap files of the optimizer state and the parameters, in their categories), and appended
  // to the metrics.
  struct Tier {
    std::string name, key;  // column title, summary key prefix
    std::vector<double> mine, lo, hi;
    nlohmann::ordered_json low, high;
  };
  std::vector<Tier> tiers;
  // A tier's bytes per category: a tracker's peaks, or (nvme) what the swap files hold.
  auto add_tier = [&](std::string name, std::string key, const MemoryTracker* mem) {
    Tier t{std::move(name), std::move(key), std::vector<double>(kNumMemCategories + 1, 0.0), {}, {},
           {}, {}};
    for (int c = 0; c < kNumMemCategories; ++c) {
      const auto category = static_cast<MemCategory>(c);
      t.mine[c] = mem ? static_cast<double>(mem->peak(category))
                      : static_cast<double>(engine.nvme_bytes(category));
    }
    t.mine[kNumMemCategories] = mem ? static_cast<double>(mem->peak_total())
                                    : static_cast<double>(engine.nvme_bytes());
    tiers.push_back(std::move(t));
  };
  add_tier("device", "peak_bytes", &device.memory());
  if (const MemoryTracker* host = engine.host_memory()) add_tier("host", "host_peak_bytes", host);
  if (engine.nvme_bytes() > 0) add_tier("nvme", "nvme_bytes", nullptr);
  const size_t rows = kNumMemCategories + 1;
  for (Tier& t : tiers) {
    const std::vector<double> all = all_gather_doubles(comm, t.mine);
    t.lo.assign(all.begin(), all.begin() + rows);
    t.hi = t.lo;
    for (int r = 1; r < world; ++r)
      for (size_t c = 0; c < rows; ++c) {
        t.lo[c] = std::min(t.lo[c], all[r * rows + c]);
        t.hi[c] = std::max(t.hi[c], all[r * rows + c]);
      }
  }
  std::string header = fmt::format("peak memory per rank (MiB): {:>12}", "category");
  for (const Tier& t : tiers) header += fmt::format(" {:>10} {:>10}", t.name + " min", "max");
  log.rank0("{}", header);
  for (size_t c = 0; c < rows; ++c) {
    const std::string name = c < static_cast<size_t>(kNumMemCategories)
                                 ? std::string(mem_category_name(static_cast<MemCategory>(c)))
                                 : "total";
    std::string line = fmt::format("                            {:>12}", name);
    for (Tier& t : tiers) {
      line += fmt::format(" {:>10.1f} {:>10.1f}", t.lo[c] / 1048576.0, t.hi[c] / 1048576.0);
      t.low[name] = t.lo[c];
      t.high[name] = t.hi[c];
    }
    log.rank0("{}", line);
  }
  nlohmann::ordered_json summary = {{"ranks", world}, {"precision", precision_name(precision)}};
  for (const Tier& t : tiers) {
    summary[t.key + "_min"] = t.low;
    summary[t.key + "_max"] = t.high;
  }
  const int64_t timed_steps = std::max<int64_t>(1, steps - first_step);
  const bool one_step = steps == first_step;
  summary["comm_bytes_per_step"] =
      comm_bytes_json(one_step ? comm_first : comm_timed, timed_steps);
  {
    const nlohmann::ordered_json& c = summary["comm_bytes_per_step"];
    std::string line;
    for (const auto& [kind, bytes] : c.items())
      if (kind != "total" && bytes.get<double>() > 0)
        line += fmt::format(" | {} {:.2f} MiB", kind, bytes.get<double>() / 1048576.0);
    log.rank0("communication per step (rank 0, {} timed step{}): {:.2f} MiB{}", timed_steps,
              timed_steps > 1 ? "s" : "", c["total"].get<double>() / 1048576.0, line);
  }
  if (nodes > 1) {
    // Every rank contributes (0 unless it read its node's counters; -1 where it could not).
    const double tx_end = reads_network ? network_tx_bytes() : 0.0;
    const double mine = !reads_network               ? 0.0
                        : tx_start < 0 || tx_end < 0 ? -1.0
                        : one_step                   ? tx_end - tx_start
                                                     : tx_end - tx_after_first;
    const std::vector<double> sent = all_gather_doubles(comm, std::array{mine});
    double sum = 0.0;
    bool known = true;
    for (double s : sent) {
      known = known && s >= 0;
      sum += std::max(0.0, s);
    }
    if (known) {
      summary["internode_bytes_per_step"] = sum / timed_steps;
      log.rank0("between the {} nodes per step (their interfaces' tx counters, TCP/IP headers "
                "and other traffic included): {:.2f} MiB",
                nodes, sum / timed_steps / 1048576.0);
    } else {
      summary["internode_bytes_per_step"] = nullptr;
    }
  }
  if (const LossScaler* scaler = engine.loss_scaler()) {
    summary["loss_scale"] = scaler->scale();
    summary["skipped_steps"] = scaler->counters().skipped_steps;
    log.rank0("fp16: {} of {} steps skipped on overflow; final loss scale {}",
              scaler->counters().skipped_steps, steps, scaler->scale());
  }
  write_row(nlohmann::ordered_json{{"summary", summary}});
  if (rank == 0) {
    metrics.sync();
    metrics.close();
  }
  return result;
}

}  // namespace

void block_preemption_signals() {
  const sigset_t set = preemption_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

TrainResult train(const TrainSetup& setup, const CpuBinding& cpus, Device& device,
                  Communicator& comm, const Logger& log, const TrainErrorHandler& on_error) {
  // Declared here, outside the try: the handler runs while they are alive, so the engine's
  // CommQueue has not been asked to finish (or abandon) anything before the job is ended.
  std::unique_ptr<Model> model;
  OffloadSlots offload;  // the host tier and the swap stores: outlive the engine
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
