// ChatTemplate: the Jinja chat template a model ships, rendered as transformers'
// apply_chat_template renders it (tokenize=False), by our engine (runtime/data/jinja.h).
//
// Where the template comes from, for a model directory (transformers' order):
//   1. chat_template.jinja beside tokenizer_config.json (what newer transformers writes);
//   2. tokenizer_config.json's "chat_template": a string, or a list of {"name", "template"}
//      objects, of which "tool_use" is taken when tools are given and it exists, else
//      "default".
// A directory with neither, a malformed tokenizer_config.json or a template that does not
// parse is one zt::Error (kInput) naming the file.
//
// The variables a template sees: messages (the conversation, a JSON array of {"role",
// "content", ...} objects, passed through as is), add_generation_prompt, tools (null unless
// given), documents (null), and the special tokens tokenizer_config.json defines (bos_token,
// eos_token, unk_token, pad_token, ...: strings, or {"content": ...} objects read as their
// content; a null token is left undefined), plus any `extra` variables (enable_thinking, ...).
//
// For a loss mask, render prefixes of a conversation: the text of messages[0..k) with
// add_generation_prompt true ends where the assistant's reply k begins; with the reply
// included it ends where the reply ends.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "runtime/data/jinja.h"

namespace zt {

class ChatTemplate {
 public:
  // Reads the template and special tokens of the model (or tokenizer) directory `dir`.
  static ChatTemplate load(const std::string& dir, const jinja::Limits& limits = {});
  // Whether `dir` has a template for load() to find: chat_template.jinja, or a
  // tokenizer_config.json with a non-null chat_template (or one that does not parse, which
  // load() then reports).
  static bool found_in(const std::string& dir);
  // The template of the .jinja file `path`, with the special tokens of `dir`'s
  // tokenizer_config.json (none when it has none).
  static ChatTemplate load_file(const std::string& path, const std::string& dir,
                                const jinja::Limits& limits = {});

  // A template given as source; `special_tokens` is an object such as {"bos_token": "<s>"}.
  ChatTemplate(const std::string& source, nlohmann::ordered_json special_tokens,
               std::string name = "chat_template", const jinja::Limits& limits = {});

  // The conversation's text. `messages` is a JSON array; `tools` null or an array; `extra` an
  // object of further variables (or null). Throws zt::Error (kInput) naming the template line
  // on a template error (raise_exception included) or an exceeded limit.
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& tools = nullptr,
                     const nlohmann::ordered_json& extra = nullptr) const;

  const nlohmann::ordered_json& special_tokens() const { return special_tokens_; }
  const std::string& name() const { return template_.name(); }

  // For tests: the clock strftime_now reads.
  void set_render_options(jinja::RenderOptions options) { options_ = std::move(options); }

 private:
  jinja::Template template_;
  nlohmann::ordered_json special_tokens_;
  jinja::RenderOptions options_;
};

}  // namespace zt
