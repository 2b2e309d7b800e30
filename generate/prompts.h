// What zt-generate is asked: prompts from the command line or a JSONL file, turned into token ids
// as zt-prep turned the model's fine-tuning data into tokens (runtime/data/instruction_data.h),
// and the tokens that stop a generation.
//   {"prompt": P, "completion": C}: P's tokens (special tokens as text, nothing added but the
//     --bos token when given); C, when present, is the expected answer.
//   {"messages": [...]}: rendered by the chat template with add_generation_prompt (special
//     tokens matched, nothing added: a BOS the template writes is its own); a last message from
//     the assistant is the expected answer and is not rendered.
// With chat set, a plain prompt P becomes the conversation [system?, {"role": "user", "content":
// P}]. Errors: kInput, "path:line: ..." or "--prompt: ...".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/data/bpe_tokenizer.h"

namespace zt {

class ChatTemplate;

struct Prompt {
  std::string where;             // "path:line" or "--prompt 2"
  nlohmann::ordered_json input;  // the line's prompt or messages (what the model is given)
  std::string text;              // the text tokenised (rendered, for a conversation)
  std::vector<int32_t> ids;
  std::optional<std::string> expected;  // the completion or the last assistant message
};

struct PromptOptions {
  const ChatTemplate* chat = nullptr;  // set: plain prompts become conversations
  std::string system;                  // with chat: a system message first, when not empty
  std::optional<int32_t> bos_id;       // put before a plain prompt's tokens
};

// One prompt from a JSON object (a JSONL line, or {"prompt": text} for --prompt).
Prompt make_prompt(const nlohmann::ordered_json& line, const std::string& where,
                   BpeTokenizer& tokenizer, const PromptOptions& options);
// Every non-blank line of a JSONL file; kInput for a file without any.
std::vector<Prompt> read_prompts(const std::string& path, BpeTokenizer& tokenizer,
                                 const PromptOptions& options);

// The ids that end a generation for the model directory `dir` (Hugging Face's order):
// generation_config.json's eos_token_id (an id or a list), else config.json's, else the
// tokenizer_config.json eos_token's id; empty when none of them says. Files absent are skipped;
// a malformed one is kInput naming it.
std::vector<int32_t> default_stop_ids(const std::string& dir, const BpeTokenizer& tokenizer);

// An answer compared with the expected one: equal once leading and trailing whitespace is
// removed from both.
bool exact_match(const std::string& answer, const std::string& expected);

}  // namespace zt
