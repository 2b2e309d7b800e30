// Prompts, stop ids and exact match for zt-generate (prompts.h).
#include "generate/prompts.h"

#include <filesystem>
#include <fstream>

#include "runtime/data/chat_template.h"
#include "runtime/file_io.h"
#include "runtime/status.h"

namespace zt {

namespace {

std::string trimmed(const std::string& s) {
  const char* ws = " \t\r\n";
  const size_t a = s.find_first_not_of(ws);
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(ws) - a + 1);
}

// The conversation of a line: its messages, or a plain prompt wrapped (with chat).
nlohmann::ordered_json conversation(const nlohmann::ordered_json& line, const std::string& where,
                                    const PromptOptions& options, Prompt& prompt) {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (line.contains("messages")) {
    messages = line["messages"];
    if (!messages.is_array() || messages.empty())
      throw_input(fmt::format("{}: \"messages\" must be a non-empty array", where));
    for (const auto& m : messages)
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
        throw_input(fmt::format("{}: every message needs a string \"role\"", where));
    const auto& last = messages.back();
    if (last["role"] == "assistant") {
      if (!last.contains("content") || !last["content"].is_string())
        throw_input(
            fmt::format("{}: the last (assistant) message needs a string \"content\"", where));
      prompt.expected = last["content"].get<std::string>();
      messages.erase(messages.size() - 1);
      if (messages.empty())
        throw_input(fmt::format("{}: nothing before the assistant's message to answer", where));
    }
    return messages;
  }
  if (!options.system.empty())
    messages.push_back({{"role", "system"}, {"content", options.system}});
  messages.push_back({{"role", "user"}, {"content", line["prompt"]}});
  return messages;
}

}  // namespace

Prompt make_prompt(const nlohmann::ordered_json& line, const std::string& where,
                   BpeTokenizer& tokenizer, const PromptOptions& options) {
  if (!line.is_object())
    throw_input(fmt::format("{}: expected a JSON object with \"prompt\" or \"messages\"", where));
  const bool plain = line.contains("prompt"), chat_line = line.contains("messages");
  if (plain == chat_line)
    throw_input(fmt::format("{}: give exactly one of \"prompt\" and \"messages\"", where));
  if (plain && !line["prompt"].is_string())
    throw_input(fmt::format("{}: \"prompt\" must be a string", where));
  if (line.contains("completion") && (!plain || !line["completion"].is_string()))
    throw_input(fmt::format("{}: \"completion\" must be a string beside \"prompt\"", where));
  Prompt p;
  p.where = where;
  if (plain && !options.chat) {
    p.input = line["prompt"];
    p.text = line["prompt"].get<std::string>();
    if (options.bos_id) p.ids.push_back(*options.bos_id);
    tokenizer.encode_append(p.text, p.ids, SpecialTokens::kAsText, AddSpecialTokens::kNo);
  } else {
    if (!options.chat)
      throw_input(fmt::format("{}: \"messages\" need a chat template (--chat)", where));
    p.input = conversation(line, where, options, p);
    try {
      p.text = options.chat->render(p.input, true, line.value("tools", nlohmann::ordered_json()),
                                    line.value("chat_template_kwargs", nlohmann::ordered_json()));
    } catch (const Error& e) {
      throw_input(fmt::format("{}: {}", where, e.message()));
    }
    p.ids = tokenizer.encode(p.text, SpecialTokens::kMatch, AddSpecialTokens::kNo);
  }
  if (plain && line.contains("completion")) p.expected = line["completion"].get<std::string>();
  if (p.ids.empty()) throw_input(fmt::format("{}: the prompt has no tokens", where));
  return p;
}

std::vector<Prompt> read_prompts(const std::string& path, BpeTokenizer& tokenizer,
                                 const PromptOptions& options) {
  std::ifstream in(path);
  if (!in) throw_input(fmt::format("{}: cannot open the prompts file", path));
  std::vector<Prompt> prompts;
  std::string text;
  for (int line = 1; std::getline(in, text); ++line) {
    if (trimmed(text).empty()) continue;
    const std::string where = fmt::format("{}:{}", path, line);
    nlohmann::ordered_json j;
    try {
      j = nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      throw_input(fmt::format("{}: not JSON: {}", where, e.what()));
    }
    prompts.push_back(make_prompt(j, where, tokenizer, options));
  }
  if (prompts.empty()) throw_input(fmt::format("{}: no prompts in the file", path));
  return prompts;
}

std::vector<int32_t> default_stop_ids(const std::string& dir, const BpeTokenizer& tokenizer) {
  namespace fs = std::filesystem;
  auto read_json = [&](const std::string& name) -> nlohmann::json {
    const std::string path = (fs::path(dir) / name).string();
    if (!fs::exists(path)) return nullptr;
    try {
      return nlohmann::json::parse(read_file(path, name));
    } catch (const nlohmann::json::exception& e) {
      throw_input(fmt::format("{}: not JSON: {}", path, e.what()));
    }
  };
  auto ids_of = [&](const nlohmann::json& j, const std::string& name) {
    std::vector<int32_t> ids;
    if (!j.is_object() || !j.contains("eos_token_id") || j["eos_token_id"].is_null()) return ids;
    const nlohmann::json& v = j["eos_token_id"];
    for (const auto& id : v.is_array() ? v : nlohmann::json::array({v})) {
      if (!id.is_number_integer())
        throw_input(fmt::format("{}/{}: eos_token_id must be an id or a list of ids", dir, name));
      ids.push_back(id.get<int32_t>());
    }
    return ids;
  };
  for (const char* name : {"generation_config.json", "config.json"}) {
    std::vector<int32_t> ids = ids_of(read_json(name), name);
    if (!ids.empty()) return ids;
  }
  const nlohmann::json config = read_json("tokenizer_config.json");
  if (config.is_object() && config.contains("eos_token")) {
    const nlohmann::json& eos = config["eos_token"];
    const nlohmann::json content = eos.is_object() ? eos.value("content", nlohmann::json()) : eos;
    if (content.is_string())
      if (const auto id = tokenizer.token_id(content.get<std::string>())) return {*id};
  }
  return {};
}

bool exact_match(const std::string& answer, const std::string& expected) {
  return trimmed(answer) == trimmed(expected);
}

}  // namespace zt
