// zt.freeze and zt.lora: which parameters a job trains (runtime/tuning.h). zt.freeze is a list
// of glob patterns over Hugging Face tensor names (runtime/glob.h). zt.lora is PEFT LoraConfig's
// keys, inline or as the path of a PEFT adapter_config.json (or of the adapter directory that
// holds one, relative to the config file's folder), read by the same rules: the keys ZeroTrain
// implements fill LoraConfig; PEFT's bookkeeping keys are ignored; every other PEFT key is
// accepted only at the value that leaves plain LoRA's math unchanged (use_dora false,
// rank_pattern {}, layers_to_transform null, ...) and refused otherwise, naming the key. Errors
// inside an adapter file name that file. Pure validation: reads the one file, knows no model
// (whether the patterns and module names match the model's tensors is model_zoo/'s check).
#include <filesystem>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "runtime/config/blocks.h"

namespace zt::config_detail {

namespace {

// The LoraConfig keys read into LoraConfig (the table below has the rest).
constexpr std::string_view kLoraFields[] = {
    "r", "lora_alpha", "lora_dropout", "target_modules", "use_rslora", "modules_to_save", "bias"};

// The value of a PEFT key ZeroTrain accepts; any other value is refused with the key's refusal.
// null always counts as absent (Reader::find), as PEFT writes null for "not used".
enum class Accept {
  kAny,          // PEFT's bookkeeping: any value, ignored
  kFalse,        // a boolean, false
  kTrue,         // true (any other value refused, whatever its type)
  kFalseInline,  // inline: false; in an adapter_config.json any boolean (save_pretrained writes
                 // true there)
  kNull,         // absent or null
  kEmpty,        // absent, null, {} or []
  kValue,        // the string `value`
};

struct PeftKey {
  std::string_view key;
  Accept accept;
  std::string_view refusal;     // "'<key>' <refusal> (got <value>)": the reason and what to write
  std::string_view value = {};  // kValue only
};

// PEFT's LoraConfig keys (peft/tuners/lora/config.py, as an adapter_config.json of PEFT 0.19
// writes them) beside kLoraFields. Keep docs/configs.md ("Freezing and LoRA") in step.
constexpr PeftKey kPeftKeys[] = {
    // Bookkeeping: where the adapter came from and what wrote it.
    {"base_model_name_or_path", Accept::kAny, ""},
    {"revision", Accept::kAny, ""},
    {"auto_mapping", Accept::kAny, ""},
    {"peft_version", Accept::kAny, ""},
    // Read by PEFT only with megatron_config and use_qalora, both refused below unless unset.
    {"megatron_core", Accept::kAny, ""},
    {"qalora_group_size", Accept::kAny, ""},
    {"task_type", Accept::kValue,
     "must be \"CAUSAL_LM\": ZeroTrain trains causal language models only", "CAUSAL_LM"},
    {"peft_type", Accept::kValue, "must be \"LORA\": zt.lora takes LoRA adapters only", "LORA"},
    {"inference_mode", Accept::kFalseInline,
     "true loads an adapter frozen, for inference; zt.lora trains it: set false or remove it"},
    {"fan_in_fan_out", Accept::kFalse,
     "is not supported: it marks base weights stored (in, out); set it to false or remove it"},
    {"init_lora_weights", Accept::kTrue,
     "is not supported: only PEFT's default initialisation (true: A Kaiming-uniform, B zeros) is "
     "built; set it to true or remove it"},
    {"use_dora", Accept::kFalse,
     "is not supported: DoRA (weight-decomposed LoRA) is not built; set it to false or remove it"},
    {"lora_bias", Accept::kFalse,
     "is not supported: a bias on lora_B is not built; set it to false or remove it"},
    {"use_qalora", Accept::kFalse,
     "is not supported: QALoRA is not built; set it to false or remove it"},
    // Either: a tied embedding in modules_to_save trains as the one tensor of both uses here,
    // which is what true asks of PEFT (the saved file says true then).
    {"ensure_weight_tying", Accept::kAny, ""},
    {"layers_to_transform", Accept::kNull,
     "is not supported: adapters go on the target modules of every block; remove it"},
    {"layers_pattern", Accept::kNull,
     "is not supported: it goes with layers_to_transform, which is not; remove it"},
    {"rank_pattern", Accept::kEmpty,
     "is not supported: every adapter has rank r; remove it or give {}"},
    {"alpha_pattern", Accept::kEmpty,
     "is not supported: every adapter has lora_alpha; remove it or give {}"},
    {"exclude_modules", Accept::kEmpty,
     "is not supported: list the modules to adapt in target_modules instead; remove it"},
    {"target_parameters", Accept::kEmpty,
     "is not supported: adapters go on linear modules (target_modules) only; remove it"},
    {"trainable_token_indices", Accept::kNull,
     "is not supported: embedding rows cannot train alone; remove it (modules_to_save trains a "
     "whole module)"},
    {"layer_replication", Accept::kNull, "is not supported: layers are not replicated; remove it"},
    {"megatron_config", Accept::kNull,
     "is not supported: ZeroTrain has no Megatron parallel layers; remove it"},
    {"loftq_config", Accept::kEmpty,
     "is not supported: LoftQ initialisation is not built; remove it or give {}"},
    {"eva_config", Accept::kNull, "is not supported: EVA initialisation is not built; remove it"},
    {"corda_config", Accept::kNull,
     "is not supported: CorDA initialisation is not built; remove it"},
    {"lora_ga_config", Accept::kNull,
     "is not supported: LoRA-GA initialisation is not built; remove it"},
    {"arrow_config", Accept::kNull, "is not supported: Arrow routing is not built; remove it"},
    {"alora_invocation_tokens", Accept::kNull,
     "is not supported: activated LoRA (aLoRA) is not built; remove it"},
    {"use_bdlora", Accept::kNull, "is not supported: BD-LoRA is not built; remove it"},
    {"kasa_config", Accept::kNull, "is not supported: KaSA is not built; remove it"},
    {"monteclora_config", Accept::kNull, "is not supported: MonteCLoRA is not built; remove it"},
    {"velora_config", Accept::kNull, "is not supported: VeLoRA is not built; remove it"},
};

enum class Form { kInline, kFile };

bool accepted(const PeftKey& rule, const json& v, Form form) {
  switch (rule.accept) {
    case Accept::kAny: return true;
    case Accept::kFalse: return !v.get<bool>();
    case Accept::kTrue: return v.is_boolean() && v.get<bool>();
    case Accept::kFalseInline: return form == Form::kFile || !v.get<bool>();
    case Accept::kNull: return false;  // null never reaches here
    case Accept::kEmpty: return (v.is_object() || v.is_array()) && v.empty();
    case Accept::kValue: return v.is_string() && v.get_ref<const std::string&>() == rule.value;
  }
  return false;
}

void check_peft_keys(const Reader& r, const json& block, std::string_view path, Form form) {
  for (const PeftKey& rule : kPeftKeys) {
    const json* v = Reader::find(block, rule.key);
    if (!v) continue;
    const std::string key_path = join(path, rule.key);
    if (rule.accept == Accept::kFalse || rule.accept == Accept::kFalseInline)
      r.boolean(*v, key_path);
    if (!accepted(rule, *v, form))
      r.fail(fmt::format("'{}' {} (got {})", key_path, rule.refusal, describe_value(*v)));
  }
}

std::vector<std::string_view> lora_keys() {
  std::vector<std::string_view> keys(std::begin(kLoraFields), std::end(kLoraFields));
  for (const PeftKey& rule : kPeftKeys) keys.push_back(rule.key);
  return keys;
}

// A list of non-empty strings, each `item` ("a module name such as \"lm_head\"").
std::vector<std::string> string_list(const Reader& r, const json& v, const std::string& path,
                                     std::string_view item) {
  if (!v.is_array()) r.type_error(v, path, fmt::format("a list, each {}", item));
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string item_path = fmt::format("{}[{}]", path, i);
    if (!v[i].is_string()) r.type_error(v[i], item_path, item);
    out.push_back(v[i].get<std::string>());
    if (out.back().empty())
      r.fail(fmt::format("'{}' is an empty string; give {}", item_path, item));
  }
  return out;
}

// target_modules: PEFT's list of module-name suffixes, or "all-linear" (any case, as PEFT). A
// string is otherwise a regular expression in PEFT: refused, not guessed at.
std::vector<std::string> parse_target_modules(const Reader& r, const json& v,
                                              const std::string& path) {
  constexpr std::string_view kExpected =
      "a list of module names such as [\"q_proj\", \"v_proj\"], or \"all-linear\"";
  if (v.is_string()) {
    if (equal_ignoring_case(v.get_ref<const std::string&>(), "all-linear")) return {"all-linear"};
    r.fail(fmt::format(
        "'{}' is {}: a single string is a regular expression in PEFT, which is not supported; "
        "give a list of module names such as [\"q_proj\", \"v_proj\"], or \"all-linear\"",
        path, describe_value(v)));
  }
  if (!v.is_array()) r.type_error(v, path, kExpected);
  std::vector<std::string> modules = string_list(r, v, path, "a module name such as \"q_proj\"");
  if (modules.empty()) {
    r.fail(fmt::format(
        "'{}' is an empty list; list module names such as [\"q_proj\", \"v_proj\"], give "
        "\"all-linear\", or remove the key for the model's default",
        path));
  }
  for (size_t i = 0; i < modules.size(); ++i) {
    if (equal_ignoring_case(modules[i], "all-linear")) {
      r.fail(
          fmt::format("'{}[{}]' is \"{}\": PEFT reads it as a module name inside a list; give "
                      "\"all-linear\" alone, not in a list",
                      path, i, modules[i]));
    }
  }
  return modules;
}

constexpr Choice<std::string_view> kBiases[] = {
    {"none", "none"}, {"all", "all"}, {"lora_only", "lora_only"}};

// The LoraConfig keys of `block` (the zt.lora object, or an adapter_config.json's top level with
// `path` empty).
LoraConfig parse_lora_keys(const Reader& r, const json& block, std::string_view path, Form form) {
  const std::vector<std::string_view> allowed = lora_keys();
  r.check_keys(block, path, allowed, " (not a PEFT LoraConfig key ZeroTrain reads)");
  check_peft_keys(r, block, path, form);
  LoraConfig lora;
  lora.enabled = true;
  if (const json* v = Reader::find(block, "r")) {
    const std::string key = join(path, "r");
    lora.r = r.int32(*v, key);
    r.check_bound(*v, Bound::kPositive, key);
  }
  if (const json* v = Reader::find(block, "lora_alpha")) {
    const std::string key = join(path, "lora_alpha");
    lora.alpha = static_cast<float>(r.number(*v, key));
    r.check_bound(*v, Bound::kPositive, key);
  }
  if (const json* v = Reader::find(block, "lora_dropout")) {
    const std::string key = join(path, "lora_dropout");
    const double p = r.number(*v, key);
    if (!(p >= 0 && p < 1))
      r.fail(fmt::format("'{}' must be >= 0 and < 1, got {}", key, v->dump()));
    lora.dropout = static_cast<float>(p);
  }
  if (const json* v = Reader::find(block, "target_modules"))
    lora.target_modules = parse_target_modules(r, *v, join(path, "target_modules"));
  if (const json* v = Reader::find(block, "use_rslora"))
    lora.use_rslora = r.boolean(*v, join(path, "use_rslora"));
  if (const json* v = Reader::find(block, "modules_to_save"))
    lora.modules_to_save =
        string_list(r, *v, join(path, "modules_to_save"), "a module name such as \"lm_head\"");
  if (const json* v = Reader::find(block, "bias"))
    lora.bias = std::string(r.choice(*v, join(path, "bias"), kBiases, Case::kSensitive));
  return lora;
}

// An adapter_config.json's keys, errors naming the file.
LoraConfig read_adapter_config_file(const std::string& source) {
  const json adapter = read_json_object(source, "PEFT adapter config");
  std::vector<std::string> notes;  // the LoRA keys add none
  const Reader file_reader(source, notes);
  return parse_lora_keys(file_reader, adapter, "", Form::kFile);
}

// zt.lora as a path: the adapter_config.json it names (or that the directory it names holds),
// relative to the config file's folder. Errors about the path name the config file; errors about
// the file's keys name the adapter file.
LoraConfig parse_lora_file(const Reader& r, const std::string& given) {
  namespace fs = std::filesystem;
  if (given.empty()) r.fail("'zt.lora' is an empty string; give an object or a file's path");
  fs::path file = given;
  if (file.is_relative()) file = fs::path(r.source()).parent_path() / file;
  std::error_code ec;
  if (fs::is_directory(file, ec)) file /= "adapter_config.json";
  if (!fs::exists(file, ec)) {
    r.fail(
        fmt::format("'zt.lora' is \"{}\": no such file ({}); give a PEFT adapter_config.json "
                    "or its directory, relative to the config file's folder",
                    given, file.string()));
  }
  return read_adapter_config_file(file.string());
}

LoraConfig parse_lora(const Reader& r, const json& v) {
  if (v.is_string()) return parse_lora_file(r, v.get<std::string>());
  if (!v.is_object()) {
    r.type_error(v, "zt.lora",
                 "an object of PEFT LoraConfig keys, or the path of a PEFT adapter_config.json");
  }
  return parse_lora_keys(r, v, "zt.lora", Form::kInline);
}

}  // namespace

Tuning parse_tuning(const Reader& r, const json& zt) {
  Tuning tuning;
  if (const json* v = Reader::find(zt, "freeze")) {
    tuning.freeze =
        string_list(r, *v, "zt.freeze", "a tensor-name pattern such as \"model.layers.0.*\"");
  }
  if (const json* v = Reader::find(zt, "lora")) tuning.lora = parse_lora(r, *v);
  return tuning;
}

}  // namespace zt::config_detail

namespace zt {

LoraConfig read_peft_adapter_config(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path file = std::filesystem::is_directory(path, ec)
                                         ? std::filesystem::path(path) / "adapter_config.json"
                                         : std::filesystem::path(path);
  return config_detail::read_adapter_config_file(file.string());
}

}  // namespace zt
