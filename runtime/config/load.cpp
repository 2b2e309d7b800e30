// Config files and parse_config: reading the file (malformed JSON with line and column,
// duplicate keys), `--set key.path=value` overrides, and the top level: its allowed keys, the
// order the blocks are read in, "auto" resolved first, notes collected. Every error is one line,
// "<source>: <message>", thrown as kInput. Reads JSON only: no allocation beyond the structs.
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "runtime/config.h"
#include "runtime/config/auto_values.h"
#include "runtime/config/trainer_arguments.h"
#include "runtime/config/blocks.h"
#include "runtime/config/key_rules.h"
#include "runtime/status.h"

namespace zt {

using nlohmann::json;
using namespace config_detail;

namespace {

// ---- top level -------------------------------------------------------------------------------

constexpr Field<Config> kTopFields[] = {
    {"gradient_clipping", &Config::gradient_clipping, Bound::kNonNegative},
    {"steps_per_print", &Config::steps_per_print, Bound::kPositive},
    {"wall_clock_breakdown", &Config::wall_clock_breakdown},
};

std::vector<std::string_view> top_level_keys() {
  std::vector<std::string_view> keys =
      keys_of(kTopFields, {kTbs, kMicro, kGas, "optimizer", "scheduler", "zero_optimization",
                           "fp16", "bf16", "bfloat16", "data_types", "communication_data_type",
                           "activation_checkpointing", "aio", "tensorboard", "csv_monitor", "zt"});
  for (std::string_view key : rule_keys(top_level_rules())) keys.push_back(key);
  return keys;
}

// ---- loading ---------------------------------------------------------------------------------

// `what` names the file in errors: "config file", "PEFT adapter config".
std::string read_file(const std::string& path, std::string_view what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw_input(fmt::format("{}: is a directory, not a {}", path, what));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_input(fmt::format("{}: cannot open {}: {}", path, what, std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw_input(fmt::format("{}: cannot read {}", path, what));
  return text.str();
}

// Remembers the first key repeated inside one object. nlohmann keeps the last value silently;
// DeepSpeed rejects duplicates, and so do we.
class DuplicateKeyFinder {
 public:
  bool on_event(json::parse_event_t event, const json& parsed) {
    using E = json::parse_event_t;
    if (event == E::object_start || event == E::array_start) frames_.push_back({});
    if (event == E::object_end || event == E::array_end) frames_.pop_back();
    if (event == E::key && !frames_.empty()) note_key(parsed.get<std::string>());
    return true;
  }
  const std::string& duplicate() const { return duplicate_; }

 private:
  struct Frame {
    std::set<std::string> keys;
    std::string current;
  };
  void note_key(const std::string& key) {
    Frame& top = frames_.back();
    if (!top.keys.insert(key).second && duplicate_.empty()) {
      std::string path;
      for (size_t i = 0; i + 1 < frames_.size(); ++i) {
        if (!frames_[i].current.empty()) path = join(path, frames_[i].current);
      }
      duplicate_ = join(path, key);
    }
    top.current = key;
  }
  std::vector<Frame> frames_;
  std::string duplicate_;
};

json parse_json_text(const std::string& text, const std::string& path) {
  DuplicateKeyFinder finder;
  json j;
  try {
    j = json::parse(text, [&finder](int, json::parse_event_t event, json& parsed) {
      return finder.on_event(event, parsed);
    });
  } catch (const json::parse_error& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 3, column 5: ..."
    std::string detail = e.what();
    if (size_t end = detail.find("] ");
        detail.starts_with("[json.exception") && end != std::string::npos) {
      detail = detail.substr(end + 2);
    }
    throw_input(fmt::format("{}: malformed JSON: {}", path, detail));
  }
  if (!finder.duplicate().empty())
    throw_input(fmt::format("{}: duplicate key '{}'", path, finder.duplicate()));
  if (!j.is_object())
    throw_input(
        fmt::format("{}: the top level must be an object, got {}", path, describe_value(j)));
  return j;
}

std::vector<std::string> split_key_path(const std::string& key_path, const std::string& spec) {
  std::vector<std::string> keys;
  size_t start = 0;
  while (true) {
    size_t dot = key_path.find('.', start);
    keys.push_back(key_path.substr(start, dot - start));
    if (keys.back().empty())
      throw_input(fmt::format("--set '{}': empty key in '{}'", spec, key_path));
    if (dot == std::string::npos) return keys;
    start = dot + 1;
  }
}

// "key.path=value": the value is JSON when it parses, else a plain string.
void apply_override(json& root, const std::string& spec) {
  size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw_input(fmt::format("--set '{}': expected key.path=value", spec));
  }
  std::vector<std::string> keys = split_key_path(spec.substr(0, eq), spec);
  std::string text = spec.substr(eq + 1);
  json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) value = text;
  json* node = &root;
  std::string path;
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    path = join(path, keys[i]);
    json& child = (*node)[keys[i]];
    if (child.is_null()) child = json::object();
    if (!child.is_object()) {
      throw_input(
          fmt::format("--set '{}': '{}' is {}, not an object", spec, path, describe_value(child)));
    }
    node = &child;
  }
  (*node)[keys.back()] = std::move(value);
}

}  // namespace

namespace config_detail {

json read_json_object(const std::string& path, std::string_view what) {
  return parse_json_text(read_file(path, what), path);
}

}  // namespace config_detail

json load_config_json(const std::string& path, const std::vector<std::string>& overrides) {
  json j = read_json_object(path, "config file");
  for (const std::string& spec : overrides) apply_override(j, spec);
  return j;
}

Config parse_config(const json& given, const std::string& source, int world_size) {
  ZT_ASSERT(world_size > 0, "world_size={}", world_size);
  Config c;
  Reader r(source, c.notes);
  if (!given.is_object())
    r.fail(fmt::format("the top level must be an object, got {}", describe_value(given)));
  r.check_keys(given, "", top_level_keys());
  c.source = source;
  json j = given;  // "auto" values are resolved in this copy
  apply_trainer_arguments(r, j, c.from_arguments);
  const AutoBatch auto_batch = resolve_auto(r, j, c.auto_from_model);
  resolve_batch(r, j, world_size, c);
  note_auto_batch(r, auto_batch, c, world_size);
  c.optimizer = parse_optimizer(r, find_block(r, j, "", "optimizer"));
  c.scheduler = parse_scheduler(r, find_block(r, j, "", "scheduler"), c.optimizer.lr);
  read_fields(r, j, "", kTopFields, c);
  apply_rules(r, j, "", top_level_rules());
  c.zero_optimization = parse_zero(r, find_block(r, j, "", "zero_optimization"));
  parse_precision(r, j, c);
  parse_monitors(r, j, c);
  c.activation_checkpointing =
      parse_checkpointing(r, find_block(r, j, "", "activation_checkpointing"));
  c.aio = parse_aio(r, find_block(r, j, "", "aio"),
                    c.zero_optimization.offload_optimizer.device == OffloadDevice::kNvme ||
                        c.zero_optimization.offload_param.device == OffloadDevice::kNvme);
  c.zt = parse_zt(r, j);
  c.resolved = given;
  return c;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides,
                   int world_size) {
  return parse_config(load_config_json(path, overrides), path, world_size);
}

std::string checkpoint_root(const Config& config) {
  return config.zt.checkpoint.dir.empty()
             ? (std::filesystem::path(config.zt.output_dir) / "checkpoints").string()
             : config.zt.checkpoint.dir;
}

}  // namespace zt
