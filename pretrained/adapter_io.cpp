// PEFT adapter directories and the merge (adapter_io.h).
#include "pretrained/adapter_io.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <set>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "model_zoo/lora.h"
#include "runtime/config.h"
#include "runtime/file_io.h"
#include "runtime/formats/safetensors.h"
#include "runtime/status.h"

namespace zt {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kPeftPrefix = "base_model.model.";
constexpr std::string_view kLoraA = ".lora_A.weight";
constexpr std::string_view kLoraB = ".lora_B.weight";
constexpr std::string_view kBias = ".bias";

// Whether adapter files hold tensor `spec` of `unit`: an adapter, or another tensor that trains
// (under LoRA every base tensor is frozen but the biases `bias` trains).
bool in_adapter_file(const Unit& unit, const ParamSpec& spec) {
  return spec.adapter || !unit.frozen();
}

bool holds_adapter_file_tensors(const Unit& unit) {
  for (const auto& e : unit.layout().entries())
    if (in_adapter_file(unit, e.spec)) return true;
  return false;
}

// "model.layers.0.self_attn.q_proj" of "model.layers.0.self_attn.q_proj.lora_A.weight".
std::string module_of(const std::string& name) {
  for (std::string_view suffix : {kLoraA, kLoraB})
    if (name.ends_with(suffix)) return name.substr(0, name.size() - suffix.size());
  return {};
}

// The adapter tensors' names of a model.
std::set<std::string> adapter_names(Model& model) {
  std::set<std::string> names;
  for (Unit* u : model.units())
    for (const auto& e : u->layout().entries())
      if (e.spec.adapter) names.insert(e.spec.name);
  return names;
}

// A float as the JSON number Python writes for it: its shortest decimal (0.05, not
// 0.05000000074505806), and an integral lora_alpha as an integer (PEFT's type for it is int).
double shortest(float v) { return std::stod(fmt::format("{}", v)); }
nlohmann::json alpha_number(float v) {
  if (v == std::floor(v) && std::abs(v) < 1e9f) return static_cast<int64_t>(v);
  return shortest(v);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// The settings of the adapter file that decide its tensors and their effect, against this run's.
void check_adapter_config(const std::string& path, const LoraConfig& file, const ModelSpec& model,
                          Model& built) {
  const LoraConfig& run = model.tuning.lora;
  auto refuse = [&](const std::string& what) {
    throw_input(fmt::format(
        "{}: {}; load an adapter trained with this run's LoRA settings, or train with the "
        "adapter's (zt.lora may name its directory)",
        path, what));
  };
  if (file.r != run.r) refuse(fmt::format("r is {}, this run's zt.lora.r {}", file.r, run.r));
  if (file.alpha != run.alpha)
    refuse(
        fmt::format("lora_alpha is {}, this run's zt.lora.lora_alpha {}", file.alpha, run.alpha));
  if (file.use_rslora != run.use_rslora)
    refuse(fmt::format("use_rslora is {}, this run's zt.lora.use_rslora {}", file.use_rslora,
                       run.use_rslora));
  if (file.bias != run.bias)
    refuse(fmt::format("bias is \"{}\", this run's zt.lora.bias \"{}\"", file.bias, run.bias));
  if (file.modules_to_save != run.modules_to_save)
    refuse(fmt::format("modules_to_save is [{}], this run's zt.lora.modules_to_save [{}]",
                       fmt::join(file.modules_to_save, ", "),
                       fmt::join(run.modules_to_save, ", ")));
  // target_modules: the same modules adapted on this model (the lists may spell them apart).
  ModelSpec theirs = model;
  theirs.tuning.lora = file;
  theirs.tuning = resolve_tuning(theirs, theirs.tuning);
  std::set<std::string> their_names;
  try {
    their_names = adapter_names(*build_model(theirs));
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kInput) throw;
    throw_input(fmt::format("{}: {}", path, e.message()));
  }
  if (their_names != adapter_names(built))
    refuse(fmt::format(
        "target_modules [{}] adapt other layers than this run's zt.lora "
        "target_modules [{}]",
        fmt::join(theirs.tuning.lora.target_modules, ", "), fmt::join(run.target_modules, ", ")));
}

// An adapter directory checked against the model: per unit, per tensor (FlatLayout order), the
// file's entry to read into it, or null (not an adapter file's tensor, or a trained bias the file
// leaves out).
struct AdapterFile {
  SafetensorsReader reader;
  std::vector<std::vector<const SafetensorsEntry*>> matched;
};

AdapterFile open_adapter_dir(const std::string& dir, const ModelSpec& model, Model& built) {
  const LoraConfig& lora = model.tuning.lora;
  ZT_ASSERT(lora.enabled, "an adapter directory for a model without LoRA");
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw_input(fmt::format("{}: not a directory; a PEFT adapter directory holds {} and {}", dir,
                            kAdapterConfigName, kAdapterWeightsName));
  const std::string config_path = (fs::path(dir) / kAdapterConfigName).string();
  if (!fs::exists(config_path, ec))
    throw_input(fmt::format("{}: no such file; a PEFT adapter directory holds {} and {}",
                            config_path, kAdapterConfigName, kAdapterWeightsName));
  check_adapter_config(config_path, read_peft_adapter_config(config_path), model, built);

  AdapterFile f{SafetensorsReader::open((fs::path(dir) / kAdapterWeightsName).string()), {}};
  const std::string& path = f.reader.path();
  std::set<std::string> used;
  for (Unit* unit : built.units()) {
    f.matched.emplace_back();
    for (const auto& e : unit->layout().entries()) {
      const SafetensorsEntry* entry = nullptr;
      if (in_adapter_file(*unit, e.spec)) {
        const std::string name = peft_saved_name(lora, e.spec);
        entry = f.reader.find(name);
        // A targeted module's bias as PEFT before its base_layer wrapper named it.
        if (!entry && !e.spec.adapter)
          entry = f.reader.find(std::string(kPeftPrefix) + e.spec.name);
        if (!entry && e.spec.adapter)
          throw_input(
              fmt::format("{}: tensor '{}' is missing (an adapter of {} under this run's "
                          "zt.lora)",
                          path, name, module_of(e.spec.name)));
        if (!entry && zoo::lora_saves_whole(lora, e.spec.name))
          throw_input(
              fmt::format("{}: tensor '{}' is missing (a module of this run's "
                          "zt.lora.modules_to_save)",
                          path, name));
      }
      if (entry) {
        if (entry->shape != e.spec.shape)
          throw_input(fmt::format("{}: tensor '{}' has shape {}; this model's is {} (r {})", path,
                                  entry->name, shape_text(entry->shape), shape_text(e.spec.shape),
                                  lora.r));
        if (entry->dtype != "F32" && entry->dtype != "F16" && entry->dtype != "BF16")
          throw_input(fmt::format("{}: tensor '{}' is {}; adapters are read from F32, F16 or BF16",
                                  path, entry->name, entry->dtype));
        used.insert(entry->name);
      }
      f.matched.back().push_back(entry);
    }
  }
  for (const SafetensorsEntry& entry : f.reader.entries())
    if (!used.contains(entry.name))
      throw_input(fmt::format(
          "{}: unexpected tensor '{}': no adapter or trained bias of this model under this run's "
          "zt.lora has that name (PEFT's saved names: \"{}\" + the model's tensor name, no "
          "adapter name)",
          path, entry.name, kPeftPrefix));
  return f;
}

}  // namespace

std::string peft_saved_name(const LoraConfig& lora, const ParamSpec& spec) {
  std::string name = spec.name;
  if (!spec.adapter && name.ends_with(kBias)) {
    const std::string module = name.substr(0, name.size() - kBias.size());
    // PEFT's LoRA layer wraps the targeted module as base_layer: its bias is there.
    if (zoo::lora_targets(lora, module)) name = module + ".base_layer.bias";
  }
  return std::string(kPeftPrefix) + name;
}

nlohmann::json adapter_config_json(const ModelSpec& model, Model& built,
                                   const std::string& base_model_name_or_path) {
  const LoraConfig& lora = model.tuning.lora;
  // A tied embedding trained whole is the one tensor of the input and the head, which PEFT keeps
  // so with ensure_weight_tying.
  const bool tied_saved = !model.is_gpt2() && model.llama().tie_word_embeddings &&
                          zoo::lora_saves_whole(lora, "model.embed_tokens.weight");
  std::set<std::string> targets(lora.target_modules.begin(), lora.target_modules.end());
  if (targets.contains("all-linear")) {  // PEFT writes the names it expanded it to
    targets.clear();
    for (const std::string& name : adapter_names(built)) {
      const std::string module = module_of(name);
      targets.insert(module.substr(module.rfind('.') + 1));
    }
  }
  using json = nlohmann::json;  // keys sorted, as PEFT's json.dumps(sort_keys=True)
  return json{
      {"alora_invocation_tokens", nullptr},
      {"alpha_pattern", json::object()},
      {"arrow_config", nullptr},
      {"auto_mapping", nullptr},
      {"base_model_name_or_path",
       base_model_name_or_path.empty() ? json(nullptr) : json(base_model_name_or_path)},
      {"bias", lora.bias},
      {"corda_config", nullptr},
      {"ensure_weight_tying", tied_saved},
      {"eva_config", nullptr},
      {"exclude_modules", nullptr},
      {"fan_in_fan_out", false},
      {"inference_mode", true},
      {"init_lora_weights", true},
      {"layer_replication", nullptr},
      {"layers_pattern", nullptr},
      {"layers_to_transform", nullptr},
      {"loftq_config", json::object()},
      {"lora_alpha", alpha_number(lora.alpha)},
      {"lora_bias", false},
      {"lora_dropout", shortest(lora.dropout)},  // a float: 0.0, not 0
      {"megatron_config", nullptr},
      {"megatron_core", "megatron.core"},
      {"modules_to_save",
       lora.modules_to_save.empty() ? json(nullptr) : json(lora.modules_to_save)},
      {"peft_type", "LORA"},
      {"qalora_group_size", 16},
      {"r", lora.r},
      {"rank_pattern", json::object()},
      {"revision", nullptr},
      {"target_modules", std::vector<std::string>(targets.begin(), targets.end())},
      {"target_parameters", nullptr},
      {"task_type", "CAUSAL_LM"},
      {"trainable_token_indices", nullptr},
      {"use_dora", false},
      {"use_qalora", false},
      {"use_rslora", lora.use_rslora},
  };
}

SaveAdapterResult save_adapter(Engine& engine, const ModelSpec& model,
                               const std::string& base_model_name_or_path, const std::string& dir) {
  const LoraConfig& lora = model.tuning.lora;
  ZT_ASSERT(lora.enabled, "save_adapter without LoRA");
  const bool writes = engine.comm().rank() == 0;
  auto units = engine.model().units();
  std::vector<SafetensorsTensorSpec> specs;  // in unit order, each unit's in layout order
  for (Unit* u : units)
    for (const auto& e : u->layout().entries())
      if (in_adapter_file(*u, e.spec))
        specs.push_back({peft_saved_name(lora, e.spec), DType::kF32, e.spec.shape});
  const fs::path d(dir);
  std::unique_ptr<SafetensorsStreamWriter> writer;
  if (writes) {
    std::error_code ec;
    fs::create_directories(d, ec);
    if (ec) throw_system(fmt::format("cannot create {}: {}", dir, ec.message()));
    writer = std::make_unique<SafetensorsStreamWriter>(
        (d / kAdapterWeightsName).string(), std::move(specs),
        std::map<std::string, std::string>{{"format", "pt"}});
  }
  SaveAdapterResult result;
  std::vector<float> full;
  for (size_t u = 0; u < units.size(); ++u) {
    if (!holds_adapter_file_tensors(*units[u])) continue;
    full.assign(static_cast<size_t>(units[u]->layout().numel()), 0.0f);
    engine.read_unit_params(static_cast<int>(u), full.data());  // collective (stage 3)
    if (!writes) continue;
    for (const auto& e : units[u]->layout().entries()) {
      if (!in_adapter_file(*units[u], e.spec)) continue;
      const size_t bytes = static_cast<size_t>(e.spec.numel()) * sizeof(float);
      writer->write(full.data() + e.offset, bytes);
      ++result.tensors;
      result.bytes += bytes;
    }
  }
  if (!writes) return result;
  writer->commit();
  AtomicFile config((d / kAdapterConfigName).string());
  config.write(adapter_config_json(model, engine.model(), base_model_name_or_path).dump(2));
  config.commit();
  return result;
}

void check_adapter_dir(const std::string& dir, const ModelSpec& model, Model& built) {
  open_adapter_dir(dir, model, built);
}

void load_adapter(Engine& engine, const ModelSpec& model, const std::string& dir) {
  const AdapterFile f = open_adapter_dir(dir, model, engine.model());  // every check first
  auto units = engine.model().units();
  for (size_t u = 0; u < units.size(); ++u) {
    const auto& matched = f.matched[u];
    if (std::none_of(matched.begin(), matched.end(), [](const auto* e) { return e != nullptr; }))
      continue;
    std::vector<float> full(static_cast<size_t>(units[u]->layout().numel()), 0.0f);
    engine.read_unit_params(static_cast<int>(u), full.data());  // collective (stage 3)
    auto entries = units[u]->layout().entries();
    for (size_t i = 0; i < entries.size(); ++i)
      if (matched[i]) f.reader.read_as_f32(*matched[i], full.data() + entries[i].offset);
    engine.write_unit_params(static_cast<int>(u), full.data());
  }
}

std::map<std::string, ModuleAdapter> read_adapters(Engine& engine) {
  std::map<std::string, ModuleAdapter> adapters;
  const bool keeps = engine.comm().rank() == 0;
  auto units = engine.model().units();
  std::vector<float> full;
  for (size_t u = 0; u < units.size(); ++u) {
    auto entries = units[u]->layout().entries();
    if (std::none_of(entries.begin(), entries.end(), [](const auto& e) { return e.spec.adapter; }))
      continue;
    full.assign(static_cast<size_t>(units[u]->layout().numel()), 0.0f);
    engine.read_unit_params(static_cast<int>(u), full.data());  // collective (stage 3)
    if (!keeps) continue;
    for (const auto& e : entries) {
      if (!e.spec.adapter) continue;
      ModuleAdapter& m = adapters[module_of(e.spec.name)];
      const float* values = full.data() + e.offset;
      if (e.spec.name.ends_with(kLoraA)) {  // (r, in)
        m.a.assign(values, values + e.spec.numel());
        m.r = e.spec.shape.at(0);
        m.in = e.spec.shape.at(1);
      } else {  // lora_B (out, r)
        m.b.assign(values, values + e.spec.numel());
        m.out = e.spec.shape.at(0);
      }
    }
  }
  return adapters;
}

void merge_adapter(const ModuleAdapter& m, float scale, const float* w, float* merged) {
  ZT_ASSERT(static_cast<int64_t>(m.a.size()) == m.r * m.in &&
                static_cast<int64_t>(m.b.size()) == m.out * m.r,
            "adapter A {} and B {} values for r {}, in {}, out {}", m.a.size(), m.b.size(), m.r,
            m.in, m.out);
  std::vector<float> delta(static_cast<size_t>(m.in));  // row i of B·A
  for (int64_t i = 0; i < m.out; ++i) {
    std::fill(delta.begin(), delta.end(), 0.0f);
    for (int64_t k = 0; k < m.r; ++k) {  // k in order: each element's sum is fixed
      const float b = m.b[static_cast<size_t>(i * m.r + k)];
      const float* a = m.a.data() + k * m.in;
      for (int64_t j = 0; j < m.in; ++j) delta[static_cast<size_t>(j)] += b * a[j];
    }
    for (int64_t j = 0; j < m.in; ++j)
      merged[i * m.in + j] = w[i * m.in + j] + scale * delta[static_cast<size_t>(j)];
  }
}

}  // namespace zt
