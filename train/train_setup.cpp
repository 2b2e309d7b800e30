// zt-train's set-up: the model a config names, the engine's options, and prepare_training()'s
// checks of everything a job's input can get wrong before any model memory is allocated (see
// trainer.h). What it does not do: allocate the model, the engine or the offload tiers (train()).
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator_factory.h"
#include "model_zoo/hf_config.h"
#include "model_zoo/model_spec.h"
#include "pretrained/adapter_io.h"
#include "pretrained/weights_io.h"
#include "runtime/data/token_data.h"
#include "runtime/device_factory.h"
#include "runtime/status.h"
#include "train/gemm_choice.h"
#include "train/metrics_writer.h"
#include "train/trainer.h"
#include "train/trainer_state.h"

namespace zt {

ModelSpec resolve_model(const Config& config) {
  const ModelChoice& m = config.zt.model;
  const bool given = m.has_object || !m.zoo_name.empty();
  const std::string& from = config.zt.init_from;
  const bool hf = !from.empty() && is_hf_model_dir(from);
  if (!given && !hf)
    throw_input(
        fmt::format("{}: 'zt.model' is missing, and 'zt.init_from' {} is not a Hugging "
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
        throw_input(
            fmt::format("{}: 'zt.model' has {} {}, but {}/{} says {} (leave zt.model out "
                        "to take the directory's)",
                        config.source, key, value.dump(), from, kHfConfigName,
                        theirs.contains(key) ? theirs[key].dump() : "nothing"));
  }
  if (config.zt.seq_len > c.max_positions())
    throw_input(fmt::format("{}: 'zt.seq_len' is {} but the model has {} positions", config.source,
                            config.zt.seq_len, c.max_positions()));
  c.tuning = resolve_tuning(c, config.zt.tuning);  // zt.freeze, zt.lora
  if (c.tuning.any()) {  // what the model refuses of them, naming the config (tables only)
    try {
      build_model(c);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kInput) throw;
      throw_input(fmt::format("{}: {}", config.source, e.message()));
    }
  }
  return c;
}

namespace {

// Features the config accepts whose machinery lands with later work: refused plainly rather
// than silently ignored.
void refuse_unbuilt_features(const Config& config) {
  auto refuse = [&](bool used, const char* what) {
    if (used)
      throw_input(fmt::format("{}: {} is not supported by this build yet", config.source, what));
  };
  const OffloadConfig& oo = config.zero_optimization.offload_optimizer;
  refuse(oo.device != OffloadDevice::kNone && oo.ratio < 1.0,
         "'zero_optimization.offload_optimizer.ratio' below 1 (partial offload)");
}

// The checkpoint's units as check_model compares them, from the model's tables alone (frozen
// units are the base's, never in a checkpoint).
std::vector<CheckpointUnit> model_checkpoint_units(Model& model) {
  std::vector<CheckpointUnit> units;
  for (Unit* u : model.units())
    if (!u->frozen()) units.push_back(checkpoint_unit(u->name(), u->layout(), u->layout().numel()));
  return units;
}

}  // namespace

EngineOptions engine_options(const Config& config, Model& model) {
  EngineOptions o;
  const OptimizerConfig& oc = config.optimizer;
  o.optimizer.type = oc.type == OptimizerType::kSGD ? OptimizerOptions::Type::kSgd
                     : oc.decoupled_weight_decay()  ? OptimizerOptions::Type::kAdamW
                                                    : OptimizerOptions::Type::kAdam;
  o.optimizer.beta1 = static_cast<float>(oc.betas[0]);
  o.optimizer.beta2 = static_cast<float>(oc.betas[1]);
  o.optimizer.eps = static_cast<float>(oc.eps);
  o.optimizer.weight_decay = static_cast<float>(oc.weight_decay);
  o.optimizer.momentum = static_cast<float>(oc.momentum);
  o.optimizer.bias_correction = oc.bias_correction;
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
  int remaining = ac.policy == ActivationCheckpointing::Policy::kEveryUnit
                      ? static_cast<int>(layers.size())
                  : ac.policy == ActivationCheckpointing::Policy::kCount ? ac.count
                                                                         : 0;
  for (size_t l = 0; l < layers.size() && remaining > 0; ++l) {
    if (!layers[l]->checkpointable()) continue;
    o.checkpoint[l] = true;
    --remaining;
  }
  return o;
}

TrainSetup prepare_training(const std::string& config_path,
                            const std::vector<std::string>& overrides, int rank, int world,
                            const std::optional<std::string>& resume) {
  Config config = load_config(config_path, overrides, world);
  refuse_unbuilt_features(config);
  precision_from_config(config);     // rejects data types that do not fit the precision
  gemm_setting(config.zt.cpu_gemm);  // ZT_CPU_GEMM, which overrides zt.cpu_gemm, checked here
  if (config.zt.device == "cuda" && cuda_device_count() == 0)
    throw_input(
        fmt::format("{}: 'zt.device' is cuda, but {}", config.source, cuda_unavailable_reason()));
  if (config.zt.comm_backend == "nccl" && (!nccl_built() || config.zt.device != "cuda"))
    throw_input(fmt::format(
        "{}: 'zt.comm_backend' is nccl, but {}", config.source,
        nccl_built() ? "'zt.device' is not cuda" : "this build has no NCCL communicator"));
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
  if (!config.zt.init_adapter.empty())
    check_adapter_dir(config.zt.init_adapter, model, *build_model(model));
  std::string root = checkpoint_root(config);
  std::optional<CheckpointReader> reader;
  if (resume) {
    // Every file read whole and checked, on every rank: a bad checkpoint is refused by all.
    reader.emplace(resume->empty() ? root : *resume);
    reader->check_model(model_checkpoint_units(*build_model(model)));
    resume_point(*reader);
    checkpoint_gemm_paths(reader->manifest().trainer_state, reader->dir() + "/manifest.json");
  }
  // Each rank writes its swap files under an nvme block's path on its own node, so every rank
  // checks it (the swap store's own check, offload/swap_store.cpp, cannot name the file or key).
  const auto check_nvme_path = [&](const char* key, OffloadDevice device, const std::string& path) {
    std::error_code ec;
    if (device == OffloadDevice::kNvme && !std::filesystem::is_directory(path, ec))
      throw_input(
          fmt::format("{}: '{}' is '{}', which is not an existing directory on this "
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
  return TrainSetup{std::move(config),
                    model,
                    std::move(train_file),
                    std::move(val_file),
                    std::move(root),
                    std::move(reader),
                    restart_row_from_environment()};
}

OptimizerOptions optimizer_named(const std::string& name) {
  OptimizerOptions o;
  using Type = OptimizerOptions::Type;
  if (name == "adamw")
    o.type = Type::kAdamW;
  else if (name == "adam")
    o.type = Type::kAdam;
  else if (name == "sgd-momentum")
    o.type = Type::kSgd, o.momentum = 0.9f;
  else if (name == "sgd")
    o.type = Type::kSgd;
  else
    throw_input(
        fmt::format("--optimizer must be adamw, adam, sgd-momentum or sgd; got '{}'", name));
  return o;
}

}  // namespace zt
