// safetensors <-> engine unit buffers.
#include "pretrained/weights_io.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "runtime/formats/safetensors.h"
#include "runtime/status.h"

namespace zt {

namespace {

std::string shape_string(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<int64_t> exported_shape(const ParamSpec& spec) {
  std::vector<int64_t> shape = spec.shape;
  shape[0] = spec.exported_rows();
  return shape;
}

void save_weights(Engine& engine, const std::string& path, WeightsDtype which,
                  const std::function<void(int unit)>& before_unit) {
  SafetensorsWriter writer;
  writer.set_metadata("format", "pt");
  auto units = engine.model().units();
  const bool writes = engine.comm().rank() == 0;
  const DType dtype = which == WeightsDtype::kWorking ? engine.working_dtype() : DType::kF32;
  const size_t element = dtype_size(dtype);
  // Rank 0 keeps every unit until the file is written; the others only take part in the
  // gathers, one unit at a time.
  std::vector<std::vector<std::byte>> full(writes ? units.size() : 1);
  for (size_t u = 0; u < units.size(); ++u) {
    if (before_unit) before_unit(static_cast<int>(u));
    std::vector<std::byte>& unit = full[writes ? u : 0];
    unit.resize(static_cast<size_t>(units[u]->layout().numel()) * element);
    if (dtype == DType::kF32)
      engine.read_unit_params(static_cast<int>(u), reinterpret_cast<float*>(unit.data()));
    else
      engine.read_unit_working(static_cast<int>(u), unit.data());  // collective (stage 3)
    if (!writes) continue;
    for (const auto& e : units[u]->layout().entries())
      if (!e.spec.adapter)  // the model's weights; adapters go to adapter files
        writer.add(e.spec.name, dtype, exported_shape(e.spec),
                   unit.data() + static_cast<size_t>(e.offset) * element);
  }
  if (writes) writer.write(path);
}

// Finds every parameter of `model` in the file (checking shapes) and every file entry among the
// parameters or the ignorable buffers; returns the entry for each parameter, units in order.
std::vector<std::vector<const SafetensorsEntry*>> match_weight_entries(const SafetensorsSet& reader,
                                                                       Model& model) {
  const std::string& path = reader.path();
  std::set<std::string> used;
  std::vector<std::vector<const SafetensorsEntry*>> matched;
  for (Unit* unit : model.units()) {
    matched.emplace_back();
    for (const auto& e : unit->layout().entries()) {
      if (e.spec.adapter) {  // not the base model's: keeps its own values
        matched.back().push_back(nullptr);
        continue;
      }
      const SafetensorsEntry* entry = reader.find(e.spec.name);
      if (!entry) entry = reader.find("transformer." + e.spec.name);
      if (!entry) throw_input(fmt::format("{}: tensor '{}' is missing", path, e.spec.name));
      const auto expected = exported_shape(e.spec);
      if (entry->shape != expected)
        throw_input(fmt::format("{}: tensor '{}' has shape {}, expected {} for this model",
                                reader.file_of(*entry), entry->name, shape_string(entry->shape),
                                shape_string(expected)));
      matched.back().push_back(entry);
      used.insert(entry->name);
    }
  }
  for (const SafetensorsEntry* entry : reader.entries()) {
    if (used.count(entry->name)) continue;
    if (ends_with(entry->name, ".attn.bias") || ends_with(entry->name, ".attn.masked_bias") ||
        ends_with(entry->name, ".rotary_emb.inv_freq") || entry->name == "lm_head.weight")
      continue;  // GPT-2's causal-mask buffers, older Llama exports' RoPE frequencies and a
                 // tied head: nothing to load
    throw_input(fmt::format("{}: unexpected tensor '{}' (not a parameter of this model)",
                            reader.file_of(*entry), entry->name));
  }
  return matched;
}

void check_weights_file(const std::string& path, Model& model) {
  match_weight_entries(SafetensorsSet::open(path), model);
}

void load_weights(Engine& engine, const std::string& path) {
  const SafetensorsSet reader = SafetensorsSet::open(path);
  const auto matched = match_weight_entries(reader, engine.model());
  auto units = engine.model().units();
  for (size_t u = 0; u < units.size(); ++u) {
    std::vector<float> full(static_cast<size_t>(units[u]->layout().numel()), 0.0f);
    auto entries = units[u]->layout().entries();
    const bool adapters = std::any_of(entries.begin(), entries.end(),
                                      [](const FlatLayout::Entry& e) { return e.spec.adapter; });
    // A unit holding adapters keeps their values (collective under stage 3: every rank reads).
    if (adapters) engine.read_unit_params(static_cast<int>(u), full.data());
    for (size_t i = 0; i < entries.size(); ++i)
      if (matched[u][i]) reader.read_as_f32(*matched[u][i], full.data() + entries[i].offset);
    engine.write_unit_params(static_cast<int>(u), full.data());
  }
}

void load_trainable_weights(Engine& engine, const std::string& path) {
  const SafetensorsSet reader = SafetensorsSet::open(path);
  auto units = engine.model().units();
  std::set<std::string> used;
  std::vector<std::vector<const SafetensorsEntry*>> matched(units.size());
  for (size_t u = 0; u < units.size(); ++u) {  // every check before any write
    if (units[u]->frozen()) continue;
    for (const auto& e : units[u]->layout().entries()) {
      const SafetensorsEntry* entry = reader.find(e.spec.name);
      if (!entry) throw_input(fmt::format("{}: tensor '{}' is missing", path, e.spec.name));
      if (entry->shape != exported_shape(e.spec))
        throw_input(fmt::format("{}: tensor '{}' has shape {}, expected {} for this model",
                                reader.file_of(*entry), entry->name, shape_string(entry->shape),
                                shape_string(exported_shape(e.spec))));
      matched[u].push_back(entry);
      used.insert(entry->name);
    }
  }
  for (const SafetensorsEntry* entry : reader.entries())
    if (!used.count(entry->name))
      throw_input(fmt::format("{}: unexpected tensor '{}' (not a trainable parameter here)",
                              reader.file_of(*entry), entry->name));
  for (size_t u = 0; u < units.size(); ++u) {
    if (units[u]->frozen()) continue;
    std::vector<float> full(static_cast<size_t>(units[u]->layout().numel()), 0.0f);
    auto entries = units[u]->layout().entries();
    for (size_t i = 0; i < entries.size(); ++i)
      reader.read_as_f32(*matched[u][i], full.data() + entries[i].offset);
    engine.write_unit_params(static_cast<int>(u), full.data());
  }
}

}  // namespace zt
