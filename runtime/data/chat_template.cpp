// ChatTemplate: finding, reading and rendering a model's chat template. See chat_template.h.
#include "runtime/data/chat_template.h"

#include <filesystem>

#include <fmt/format.h>

#include "runtime/file_io.h"
#include "runtime/status.h"

namespace zt {
namespace {

namespace fs = std::filesystem;
using OrderedJson = nlohmann::ordered_json;

// The special tokens of tokenizer_config.json, as transformers' special_tokens_map has them.
OrderedJson read_special_tokens(const OrderedJson& config, const std::string& file) {
  OrderedJson tokens = OrderedJson::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                          "cls_token", "mask_token"}) {
    if (!config.contains(key) || config[key].is_null()) continue;
    const OrderedJson& t = config[key];
    if (t.is_string()) {
      tokens[key] = t;
    } else if (t.is_object() && t.contains("content") && t["content"].is_string()) {
      tokens[key] = t["content"];
    } else {
      throw_input(fmt::format("{}: {} is neither a string nor an object with a \"content\" string",
                              file, key));
    }
  }
  if (config.contains("additional_special_tokens") &&
      config["additional_special_tokens"].is_array()) {
    OrderedJson extra = OrderedJson::array();
    for (const auto& t : config["additional_special_tokens"]) {
      if (t.is_string())
        extra.push_back(t);
      else if (t.is_object() && t.contains("content") && t["content"].is_string())
        extra.push_back(t["content"]);
    }
    tokens["additional_special_tokens"] = extra;
  }
  return tokens;
}

// tokenizer_config.json's chat_template: a string, or the template named "default" of a list.
std::string template_from_config(const OrderedJson& config, const std::string& file) {
  if (!config.contains("chat_template") || config["chat_template"].is_null())
    throw_input(
        fmt::format("{} has no chat_template (and there is no chat_template.jinja beside "
                    "it): this model ships no chat template",
                    file));
  const OrderedJson& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (!t.is_array())
    throw_input(fmt::format("{}: chat_template is neither a string nor a list of templates", file));
  std::string names;
  for (const auto& entry : t) {
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
        !entry.contains("template") || !entry["template"].is_string())
      throw_input(fmt::format(
          "{}: chat_template is a list whose entries must be {{\"name\", \"template\"}} strings",
          file));
    if (entry["name"] == "default") return entry["template"].get<std::string>();
    names += (names.empty() ? "" : ", ") + entry["name"].get<std::string>();
  }
  throw_input(fmt::format("{}: chat_template lists no template named \"default\" (it has: {})",
                          file, names));
}

}  // namespace

ChatTemplate ChatTemplate::load(const std::string& dir, const jinja::Limits& limits) {
  const fs::path base(dir);
  const std::string config_file = (base / "tokenizer_config.json").string();
  const std::string jinja_file = (base / "chat_template.jinja").string();
  OrderedJson config = OrderedJson::object();
  const bool has_config = fs::exists(config_file);
  if (has_config) {
    config = OrderedJson::parse(read_file(config_file, "the tokenizer config"), nullptr, false);
    if (config.is_discarded() || !config.is_object())
      throw_input(fmt::format("{} is not a JSON object", config_file));
  }
  if (fs::exists(jinja_file)) {
    return ChatTemplate(read_file(jinja_file, "the chat template"),
                        read_special_tokens(config, config_file), jinja_file, limits);
  }
  if (!has_config)
    throw_input(fmt::format("{} has neither chat_template.jinja nor tokenizer_config.json", dir));
  return ChatTemplate(template_from_config(config, config_file),
                      read_special_tokens(config, config_file), config_file + " chat_template",
                      limits);
}

bool ChatTemplate::found_in(const std::string& dir) {
  const fs::path base(dir);
  if (fs::exists(base / "chat_template.jinja")) return true;
  const fs::path config_file = base / "tokenizer_config.json";
  if (!fs::exists(config_file)) return false;
  const OrderedJson config =
      OrderedJson::parse(read_file(config_file.string(), "the tokenizer config"), nullptr, false);
  if (config.is_discarded() || !config.is_object()) return true;  // load() names the problem
  return config.contains("chat_template") && !config["chat_template"].is_null();
}

ChatTemplate ChatTemplate::load_file(const std::string& path, const std::string& dir,
                                     const jinja::Limits& limits) {
  const std::string config_file = (fs::path(dir) / "tokenizer_config.json").string();
  OrderedJson config = OrderedJson::object();
  if (fs::exists(config_file)) {
    config = OrderedJson::parse(read_file(config_file, "the tokenizer config"), nullptr, false);
    if (config.is_discarded() || !config.is_object())
      throw_input(fmt::format("{} is not a JSON object", config_file));
  }
  return ChatTemplate(read_file(path, "the chat template"),
                      read_special_tokens(config, config_file), path, limits);
}

ChatTemplate::ChatTemplate(const std::string& source, OrderedJson special_tokens, std::string name,
                           const jinja::Limits& limits)
    : template_(source, std::move(name), limits), special_tokens_(std::move(special_tokens)) {
  if (!special_tokens_.is_object()) throw_input("chat template: special tokens must be an object");
}

std::string ChatTemplate::render(const OrderedJson& messages, bool add_generation_prompt,
                                 const OrderedJson& tools, const OrderedJson& extra) const {
  if (!messages.is_array())
    throw_input(fmt::format("{}: the conversation must be a JSON array of messages", name()));
  if (!tools.is_null() && !tools.is_array())
    throw_input(fmt::format("{}: tools must be null or a JSON array", name()));
  OrderedJson context = OrderedJson::object();
  context["messages"] = messages;
  context["tools"] = tools;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = add_generation_prompt;
  for (auto it = special_tokens_.begin(); it != special_tokens_.end(); ++it)
    context[it.key()] = it.value();
  if (extra.is_object())
    for (auto it = extra.begin(); it != extra.end(); ++it) context[it.key()] = it.value();
  else if (!extra.is_null())
    throw_input(fmt::format("{}: extra variables must be a JSON object", name()));
  return template_.render(context, options_);
}

}  // namespace zt
