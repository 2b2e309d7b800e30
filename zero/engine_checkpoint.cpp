// The engine's part of sharded checkpoints (docs/architecture.md, "Checkpoints"): what a rank
// writes (its ShardLayout slice of each unit's master, optimizer state and, under pure 16-bit,
// working parameters) and how a rank of any world size and stage takes back the global flat
// ranges it holds. Streams through one bounded host buffer; no communication (the trainer puts
// the barriers and the manifest around it); the file format is zero/checkpoint/'s.
// Tests: tests/mpi/checkpoint_engine_test.cpp.
#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/status.h"
#include "zero/engine.h"

namespace zt {

namespace {

constexpr int64_t kStagingElements = int64_t{1} << 20;  // per host staging piece (4 MiB of fp32)
constexpr const char* kMasterKind = "master";
constexpr const char* kWorkingKind = "working";

template <class T>
T* advance(T* base, int64_t elements, DType dtype) {
  using Byte = std::conditional_t<std::is_const_v<T>, const std::byte, std::byte>;
  return reinterpret_cast<Byte*>(base) + static_cast<size_t>(elements) * dtype_size(dtype);
}

// `count` elements of `dtype` at `src` in `device`'s memory into the writer's open record.
void append_from(RecordSink& writer, Device& device, const void* src, DType dtype, int64_t count,
                 std::vector<std::byte>& staging) {
  for (int64_t at = 0; at < count; at += kStagingElements) {
    const size_t bytes =
        static_cast<size_t>(std::min(kStagingElements, count - at)) * dtype_size(dtype);
    if (std::byte* direct = writer.append_space(bytes)) {  // a snapshot: one copy
      device.copy_to_host(direct, advance(src, at, dtype), bytes);
      continue;
    }
    device.copy_to_host(staging.data(), advance(src, at, dtype), bytes);
    writer.append(staging.data(), bytes);
  }
}

// Elements [begin, begin + count) of kind k of unit u's swap files into the open record.
void append_from(RecordSink& writer, SwappedState& swapped, int u, int kind, int64_t begin,
                 int64_t count, std::vector<std::byte>& staging) {
  for (int64_t at = 0; at < count; at += kStagingElements) {
    const int64_t n = std::min(kStagingElements, count - at);
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    if (std::byte* direct = writer.append_space(bytes)) {
      swapped.read_part(u, kind, begin + at, n, reinterpret_cast<float*>(direct));
      continue;
    }
    swapped.read_part(u, kind, begin + at, n, reinterpret_cast<float*>(staging.data()));
    writer.append(staging.data(), bytes);
  }
}

void widen(const void* src, DType dtype, int64_t n, float* dst) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i)
    dst[i] = dtype == DType::kBF16 ? bf16_to_fp32(h[i]) : fp16_to_fp32(h[i]);
}

nlohmann::json scaler_json(const LossScalerState& s) {
  return {{"scale", s.scale},
          {"hysteresis_left", s.hysteresis_left},
          {"clean_steps", s.clean_steps},
          {"steps", s.counters.steps},
          {"skipped_steps", s.counters.skipped_steps},
          {"scale_decreases", s.counters.scale_decreases},
          {"scale_increases", s.counters.scale_increases}};
}

}  // namespace

std::vector<CheckpointUnit> Engine::checkpoint_units() const {
  std::vector<CheckpointUnit> units;
  auto model_units = model_.units();
  for (size_t u = 0; u < groups_.size(); ++u)  // frozen units are the base's, not the run's
    if (!groups_[u]->frozen())
      units.push_back(checkpoint_unit(groups_[u]->name(), model_units[u]->layout(),
                                      groups_[u]->shard().padded));
  return units;
}

void Engine::describe_checkpoint(CheckpointManifest& manifest) const {
  manifest.world_size = comm_.world();
  manifest.zero_stage = policy_.stage();
  manifest.compute_dtype = options_.precision.compute;
  manifest.grad_dtype = groups_.empty() ? DType::kF32 : groups_[0]->grad_dtype();
  manifest.units = checkpoint_units();
}

nlohmann::json Engine::save_state(RecordSink& writer,
                                  const std::function<void(int unit)>& before_unit) {
  const Precision& precision = options_.precision;
  const bool pure_16bit = precision.mixed() && !precision.has_master();
  const std::vector<std::string> kinds = optimizer_state_names(options_.optimizer);
  Device& state_device = options_.offload.host() ? *options_.offload.host() : device_;
  std::vector<std::byte> staging(static_cast<size_t>(kStagingElements) * sizeof(float));
  for (size_t i = 0; i < groups_.size(); ++i) {
    const int u = static_cast<int>(i);
    ParamGroup& g = *groups_[i];
    if (g.frozen()) continue;
    if (before_unit) before_unit(u);
    const ShardLayout& s = g.shard();
    const int64_t begin = s.begin(), count = s.shard;
    // The slice inside the master range (the shard itself when the optimizer is sharded, a part
    // of the whole buffer at stage 0), which is also inside the working range.
    const int64_t in_master = begin - g.master_offset();
    ZT_ASSERT(in_master >= 0 && in_master + count <= g.master_size(),
              "unit {}: shard [{}, {}) outside the master range", g.name(), begin, begin + count);
    if (pure_16bit) {
      writer.begin_record(g.name(), kWorkingKind, precision.compute, begin, count);
      append_from(writer, device_, advance(g.working_master_range(), in_master, precision.compute),
                  precision.compute, count, staging);
    } else {
      writer.begin_record(g.name(), kMasterKind, DType::kF32, begin, count);
      if (swapped_)
        append_from(writer, *swapped_, u, 0, in_master, count, staging);
      else
        append_from(writer, g.master_device(), g.master() + in_master, DType::kF32, count, staging);
    }
    writer.end_record();
    const std::vector<float*> state = swapped_ ? std::vector<float*>() : optimizer_->state(u);
    for (size_t k = 0; k < kinds.size(); ++k) {
      writer.begin_record(g.name(), kinds[k], DType::kF32, begin, count);
      if (swapped_)
        append_from(writer, *swapped_, u, static_cast<int>(k) + 1, in_master, count, staging);
      else
        append_from(writer, state_device, state[k] + in_master, DType::kF32, count, staging);
      writer.end_record();
    }
  }
  nlohmann::json j = {{"optimizer_steps", step_},
                      {"optimizer_state", kinds},
                      {"precision", precision_name(precision)},
                      {"loss_scaler", nullptr}};
  if (loss_scaler_) j["loss_scaler"] = scaler_json(loss_scaler_->state());
  if (const auto frozen = frozen_fingerprints(); !frozen.empty()) j["frozen_base"] = frozen;
  return j;
}

std::vector<std::string> Engine::load_state(const CheckpointReader& reader,
                                            const nlohmann::json& engine_state) {
  const std::string manifest_path = reader.dir() + "/manifest.json";
  auto refuse = [&](const std::string& problem) {
    throw_input(fmt::format("{}: {}", manifest_path, problem));
  };
  const CheckpointManifest& manifest = reader.manifest();
  // ---- every check first: nothing is set unless all of it loads ----
  reader.check_model(checkpoint_units());
  if (!engine_state.is_object()) refuse("the engine state is missing or not an object");
  const auto steps = engine_state.find("optimizer_steps");
  if (steps == engine_state.end() || !steps->is_number_integer() || steps->get<int64_t>() < 0)
    refuse("engine state 'optimizer_steps' is missing or not an integer >= 0");
  const std::vector<std::string> kinds = optimizer_state_names(options_.optimizer);
  const auto saved_kinds = engine_state.find("optimizer_state");
  std::vector<std::string> saved;
  if (saved_kinds == engine_state.end() || !saved_kinds->is_array())
    refuse("engine state 'optimizer_state' is missing or not an array");
  for (const auto& k : *saved_kinds) {
    if (!k.is_string()) refuse("engine state 'optimizer_state' holds a non-string");
    saved.push_back(k.get<std::string>());
  }
  if (saved != kinds)
    refuse(
        fmt::format("the checkpoint's optimizer keeps [{}], this run's keeps [{}]: another "
                    "optimizer type (or SGD momentum on/off) cannot continue its state",
                    fmt::join(saved, ", "), fmt::join(kinds, ", ")));
  std::optional<LossScalerState> scaler_state;
  if (const auto it = engine_state.find("loss_scaler");
      it != engine_state.end() && !it->is_null()) {
    try {
      LossScalerState s;
      s.scale = it->at("scale").get<double>();
      s.hysteresis_left = it->at("hysteresis_left").get<int>();
      s.clean_steps = it->at("clean_steps").get<int64_t>();
      s.counters.steps = it->at("steps").get<int64_t>();
      s.counters.skipped_steps = it->at("skipped_steps").get<int64_t>();
      s.counters.scale_decreases = it->at("scale_decreases").get<int64_t>();
      s.counters.scale_increases = it->at("scale_increases").get<int64_t>();
      scaler_state = s;
    } catch (const nlohmann::json::exception& e) {
      refuse(fmt::format("engine state 'loss_scaler' is malformed: {}", e.what()));
    }
  }
  std::optional<LossScaler> restored_scaler;  // set at the end, with everything else
  if (scaler_state && loss_scaler_) {
    restored_scaler.emplace(*loss_scaler_);
    try {
      restored_scaler->restore(*scaler_state);
    } catch (const Error& e) {
      refuse(e.message());
    }
  }
  // The frozen base the checkpoint's adapters were trained on must be this run's.
  const auto frozen = frozen_fingerprints();
  std::map<std::string, std::string> saved_frozen;
  if (const auto it = engine_state.find("frozen_base"); it != engine_state.end()) {
    try {
      saved_frozen = it->get<std::map<std::string, std::string>>();
    } catch (const nlohmann::json::exception&) {
      refuse("engine state 'frozen_base' is not an object of strings");
    }
  }
  for (const auto& [unit, fingerprint] : frozen) {
    const auto there = saved_frozen.find(unit);
    if (there == saved_frozen.end())
      refuse(
          fmt::format("this run freezes unit {} (zt.freeze, zt.lora), the checkpoint's did "
                      "not: it cannot continue that run",
                      unit));
    if (there->second != fingerprint)
      refuse(
          fmt::format("the checkpoint was trained on another base: frozen unit {} held {} "
                      "there and holds {} here (zt.init_from names other weights?)",
                      unit, there->second, fingerprint));
  }
  for (const auto& [unit, fingerprint] : saved_frozen)
    if (!frozen.contains(unit))
      refuse(fmt::format("the checkpoint's run froze unit {}, this run does not", unit));
  std::vector<std::string> notes;
  const DType compute = options_.precision.compute;
  bool masterless = false;
  for (const auto& g : groups_) {
    if (g->frozen()) continue;
    const std::string& name = g->name();
    if (reader.has(name, kMasterKind)) {
      if (reader.dtype(name, kMasterKind) != DType::kF32)
        refuse(fmt::format("unit {}: the master is {}, not fp32", name,
                           dtype_name(reader.dtype(name, kMasterKind))));
    } else if (reader.has(name, kWorkingKind)) {
      masterless = true;
    } else {
      refuse(fmt::format("unit {}: no master and no working parameters", name));
    }
    for (const std::string& k : kinds) {
      if (!reader.has(name, k)) refuse(fmt::format("unit {}: no {} records", name, k));
      if (reader.dtype(name, k) != DType::kF32)
        refuse(
            fmt::format("unit {}: {} is {}, not fp32", name, k, dtype_name(reader.dtype(name, k))));
    }
  }
  if (manifest.compute_dtype != compute)
    notes.push_back(fmt::format(
        "the checkpoint was trained in {} and this run computes in {}: the working parameters "
        "are its fp32 master rounded to {}",
        dtype_name(manifest.compute_dtype), dtype_name(compute), dtype_name(compute)));
  const bool keeps_master = !options_.precision.mixed() || options_.precision.has_master();
  if (masterless && keeps_master)
    notes.push_back(
        fmt::format("the checkpoint has no fp32 master (pure 16-bit): the master "
                    "starts from its {} working parameters, widened",
                    dtype_name(manifest.compute_dtype)));
  if (scaler_state && !loss_scaler_)
    notes.push_back(
        "the checkpoint's fp16 loss scaler state is not used: this run does not "
        "scale the loss");
  if (!scaler_state && loss_scaler_)
    notes.push_back(
        fmt::format("the checkpoint has no loss scaler state: fp16 loss scaling "
                    "starts afresh at {}",
                    loss_scaler_->scale()));

  // ---- set this rank's ranges ----
  Device& state_device = options_.offload.host() ? *options_.offload.host() : device_;
  std::vector<float> staging(static_cast<size_t>(kStagingElements));
  std::vector<uint16_t> narrow;
  for (size_t i = 0; i < groups_.size(); ++i) {
    const int u = static_cast<int>(i);
    ParamGroup& g = *groups_[i];
    if (g.frozen()) continue;
    const std::string& name = g.name();
    if (g.params_sharded() && g.state() != ParamState::kSharded) {  // assign needs the shard only
      g.ensure_full(*gather_queue_);
      g.release();
    }
    const bool has_master = reader.has(name, kMasterKind);
    const char* source = has_master ? kMasterKind : kWorkingKind;
    const DType source_dtype = reader.dtype(name, source);
    g.assign([&](int64_t begin, int64_t end, float* dst) {
      if (source_dtype == DType::kF32) {
        reader.read_range(name, source, begin, end - begin, DType::kF32, dst);
        return;
      }
      narrow.resize(static_cast<size_t>(end - begin));
      reader.read_range(name, source, begin, end - begin, source_dtype, narrow.data());
      widen(narrow.data(), source_dtype, end - begin, dst);
    });
    const std::vector<float*> state = swapped_ ? std::vector<float*>() : optimizer_->state(u);
    const int64_t begin = g.master_offset(), n = g.master_size();
    for (size_t k = 0; k < kinds.size(); ++k) {
      for (int64_t at = 0; at < n; at += kStagingElements) {
        const int64_t count = std::min(kStagingElements, n - at);
        reader.read_range(name, kinds[k], begin + at, count, DType::kF32, staging.data());
        if (swapped_)
          swapped_->write_part(u, static_cast<int>(k) + 1, at, staging.data(), count);
        else
          state_device.copy_from_host(state[k] + at, staging.data(),
                                      static_cast<size_t>(count) * sizeof(float));
      }
    }
  }
  step_ = steps->get<int64_t>();
  if (restored_scaler) *loss_scaler_ = *restored_scaler;
  return notes;
}

}  // namespace zt
