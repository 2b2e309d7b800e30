// safetensors <-> engine unit buffers.
#include "launch/weights_io.h"

#include <cstring>
#include <set>

#include "runtime/safetensors.h"
#include "runtime/status.h"

namespace zt {

namespace {

// The exported shape: dim 0 trimmed to the rows that hold real values.
std::vector<int64_t> exported_shape(const ParamSpec& spec) {
  std::vector<int64_t> shape = spec.shape;
  shape[0] = spec.exported_rows();
  return shape;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

void save_weights(Engine& engine, const std::string& path) {
  SafetensorsWriter writer;
  writer.set_metadata("format", "pt");
  auto units = engine.model().units();
  for (size_t u = 0; u < units.size(); ++u) {
    const float* flat = engine.unit_params(static_cast<int>(u));
    for (const auto& e : units[u]->layout().entries())
      writer.add_f32(e.spec.name, exported_shape(e.spec), flat + e.offset);
  }
  writer.write(path);
}

void load_weights(Engine& engine, const std::string& path) {
  SafetensorsReader reader = SafetensorsReader::open(path);
  std::set<std::string> used;
  auto units = engine.model().units();
  for (size_t u = 0; u < units.size(); ++u) {
    float* flat = engine.unit_params(static_cast<int>(u));
    for (const auto& e : units[u]->layout().entries()) {
      const SafetensorsEntry* entry = reader.find(e.spec.name);
      if (!entry) entry = reader.find("transformer." + e.spec.name);
      if (!entry)
        throw_input(fmt::format("{}: tensor '{}' is missing", path, e.spec.name));
      const auto expected = exported_shape(e.spec);
      if (entry->shape != expected)
        throw_input(fmt::format("{}: tensor '{}' has shape {}, expected {} for this model", path,
                                entry->name, shape_string(entry->shape),
                                shape_string(expected)));
      std::memset(flat + e.offset, 0, static_cast<size_t>(e.numel) * sizeof(float));
      reader.read_as_f32(*entry, flat + e.offset);
      used.insert(entry->name);
    }
  }
  for (const auto& entry : reader.entries()) {
    if (used.count(entry.name)) continue;
    if (ends_with(entry.name, ".attn.bias") || ends_with(entry.name, ".attn.masked_bias") ||
        entry.name == "lm_head.weight")
      continue;  // causal-mask buffers and the tied head: nothing to load
    throw_input(fmt::format("{}: unexpected tensor '{}' (not a parameter of this model)", path,
                            entry.name));
  }
}

}  // namespace zt
