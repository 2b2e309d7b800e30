// Instruction data: JSONL parsing and the template, tokenisation with a loss mask, greedy
// packing. Holds no state between calls; reads files only in read_instruction_file().
#include "runtime/data/instruction_data.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "runtime/data/chat_segments.h"
#include "runtime/data/chat_template.h"
#include "runtime/data/token_data.h"
#include "runtime/file_io.h"
#include "runtime/status.h"

namespace zt {

namespace {

// Ordered, so that a chat template sees each message's keys in the line's order (tojson).
using json = nlohmann::ordered_json;

// The template's header line for a role (instruction_data.h shows the whole rendering).
std::optional<std::string_view> role_header(std::string_view role) {
  if (role == "system") return "### System\n";
  if (role == "user") return "### User\n";
  if (role == "assistant") return "### Assistant\n";
  return std::nullopt;
}
constexpr std::string_view kMessageSeparator = "\n\n";

// Appends `text` to the segments, joining it to the last one when the loss is the same, so
// that a run of prompt text is tokenised as one string.
void append(std::vector<TextSegment>& segments, std::string_view text, Loss loss) {
  if (text.empty()) return;
  if (!segments.empty() && segments.back().loss == loss) {
    segments.back().text += text;
  } else {
    segments.push_back({std::string(text), loss});
  }
}

// What a JSON value is, for "must be a string; got a number".
std::string_view kind_of(const json& value) {
  switch (value.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float: return "a number";
    default: return "not a JSON value";
  }
}

const std::string& string_member(const json& object, std::string_view key, const std::string& where,
                                 const std::string& key_path) {
  auto it = object.find(key);
  if (it == object.end()) throw_input(fmt::format("{}: {} is missing", where, key_path));
  if (!it->is_string()) {
    throw_input(fmt::format("{}: {} must be a string; got {}", where, key_path, kind_of(*it)));
  }
  return it->get_ref<const std::string&>();
}

void render_messages(const json& messages, const std::string& where,
                     std::vector<TextSegment>& segments) {
  if (!messages.is_array()) {
    throw_input(fmt::format("{}: \"messages\" must be an array; got {}", where, kind_of(messages)));
  }
  bool any_assistant = false;
  std::string last_role;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string key_path = fmt::format("messages[{}]", i);
    const json& message = messages[i];
    if (!message.is_object()) {
      throw_input(fmt::format("{}: {} must be an object with \"role\" and \"content\"; got {}",
                              where, key_path, kind_of(message)));
    }
    const std::string& role = string_member(message, "role", where, key_path + ".role");
    const std::string& content = string_member(message, "content", where, key_path + ".content");
    const std::optional<std::string_view> header = role_header(role);
    if (!header) {
      throw_input(fmt::format("{}: {}.role \"{}\" is not system, user or assistant", where,
                              key_path, role));
    }
    if (i > 0) append(segments, kMessageSeparator, Loss::kNo);
    append(segments, *header, Loss::kNo);
    const bool assistant = role == "assistant";
    append(segments, content, assistant ? Loss::kYes : Loss::kNo);
    any_assistant = any_assistant || assistant;
    last_role = role;
  }
  if (!any_assistant) {
    throw_input(
        fmt::format("{}: no assistant message; the loss counts on the assistant's "
                    "contents only",
                    where));
  }
  if (last_role != "assistant") {
    throw_input(
        fmt::format("{}: the last message is from the {}; a conversation must end "
                    "with the assistant's",
                    where, last_role));
  }
}

// The messages of a line for a chat template: an array of objects with a "role" string, the
// last from the assistant; the rest is the template's to judge.
void check_chat_messages(const json& messages, const std::string& where) {
  if (!messages.is_array()) {
    throw_input(fmt::format("{}: \"messages\" must be an array; got {}", where, kind_of(messages)));
  }
  if (messages.empty()) {
    throw_input(fmt::format(
        "{}: no assistant message; the loss counts on the assistant's turns only", where));
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string key_path = fmt::format("messages[{}]", i);
    if (!messages[i].is_object()) {
      throw_input(fmt::format("{}: {} must be an object with a \"role\"; got {}", where, key_path,
                              kind_of(messages[i])));
    }
    string_member(messages[i], "role", where, key_path + ".role");
  }
  const std::string& last_role = messages.back()["role"].get_ref<const std::string&>();
  if (last_role != "assistant") {
    throw_input(
        fmt::format("{}: the last message is from the {}; a conversation must end "
                    "with the assistant's",
                    where, last_role));
  }
}

// root["key"], which must be null (or absent) or of the kind `is_kind` accepts.
json optional_member(const json& root, std::string_view key, bool (json::*is_kind)() const,
                     std::string_view kind, const std::string& where) {
  auto it = root.find(key);
  if (it == root.end() || it->is_null()) return nullptr;
  if (!((*it).*is_kind)()) {
    throw_input(fmt::format("{}: \"{}\" must be {}; got {}", where, key, kind, kind_of(*it)));
  }
  return *it;
}

}  // namespace

InstructionExample parse_instruction_example(std::string_view line, const std::string& where,
                                             const ChatTemplate* chat_template) {
  json root;
  try {
    root = json::parse(line);
  } catch (const json::parse_error& e) {
    // what() is "[json.exception.parse_error.101] parse error at line 1, column 7: ...".
    const std::string_view reason = e.what();
    const size_t tag_end = reason.find("] ");
    throw_input(
        fmt::format("{}: not JSON: {}", where,
                    tag_end == std::string_view::npos ? reason : reason.substr(tag_end + 2)));
  }
  if (!root.is_object()) {
    throw_input(
        fmt::format("{}: expected a JSON object with \"prompt\" and \"completion\" or "
                    "with \"messages\"; got {}",
                    where, kind_of(root)));
  }
  const bool pair = root.contains("prompt") || root.contains("completion");
  const bool chat = root.contains("messages");
  if (pair && chat) {
    throw_input(
        fmt::format("{}: has both \"messages\" and \"prompt\"/\"completion\"; give one "
                    "form per example",
                    where));
  }
  if (!pair && !chat) {
    throw_input(
        fmt::format("{}: has neither \"prompt\" and \"completion\" nor \"messages\"", where));
  }
  InstructionExample example{where, {}};
  example.messages = chat;
  if (pair) {
    append(example.segments, string_member(root, "prompt", where, "\"prompt\""), Loss::kNo);
    append(example.segments, string_member(root, "completion", where, "\"completion\""),
           Loss::kYes);
  } else if (chat_template != nullptr) {
    check_chat_messages(root["messages"], where);
    example.segments = render_chat_segments(
        *chat_template, root["messages"],
        optional_member(root, "tools", &json::is_array, "an array", where),
        optional_member(root, "chat_template_kwargs", &json::is_object, "an object", where), where);
    example.templated = true;
  } else {
    render_messages(root["messages"], where, example.segments);
  }
  return example;
}

std::vector<InstructionExample> read_instruction_file(const std::string& path,
                                                      const ChatTemplate* chat_template) {
  const std::string text = read_file(path, "instruction data");
  std::vector<InstructionExample> examples;
  size_t line_number = 0;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + begin, end - begin);
    ++line_number;
    begin = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    examples.push_back(
        parse_instruction_example(line, fmt::format("{}:{}", path, line_number), chat_template));
  }
  if (examples.empty()) {
    throw_input(
        fmt::format("{}: no examples (the file is empty or blank); expected one JSON "
                    "object per line",
                    path));
  }
  return examples;
}

namespace {

// A chat template's text tokenised whole, special tokens matched, with each segment's flags,
// when every segment boundary is a token boundary of that tokenisation; else false.
bool encode_whole(BpeTokenizer& tokenizer, const std::vector<TextSegment>& segments,
                  std::vector<int32_t>& ids, std::vector<uint8_t>& flags) {
  std::string text;
  for (const TextSegment& segment : segments) text += segment.text;
  const std::vector<int32_t> whole = tokenizer.encode(text, SpecialTokens::kMatch);
  std::vector<uint8_t> whole_flags;
  size_t bytes = 0, tokens = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    bytes += segments[i].text.size();
    size_t end = whole.size();
    if (i + 1 < segments.size()) {
      const std::vector<int32_t> before =
          tokenizer.encode(std::string_view(text).substr(0, bytes), SpecialTokens::kMatch);
      if (before.size() < tokens || before.size() > whole.size() ||
          !std::equal(before.begin(), before.end(), whole.begin())) {
        return false;
      }
      end = before.size();
    }
    whole_flags.resize(end, segments[i].loss == Loss::kYes ? kTokenLoss : 0);
    tokens = end;
  }
  ids.insert(ids.end(), whole.begin(), whole.end());
  flags.insert(flags.end(), whole_flags.begin(), whole_flags.end());
  return true;
}

}  // namespace

TokenizedExample tokenize_example(BpeTokenizer& tokenizer, const InstructionExample& example,
                                  int32_t end_id, std::optional<int32_t> bos_id) {
  TokenizedExample out{example.where, {}, {}};
  if (bos_id) out.ids.push_back(*bos_id);
  out.flags.resize(out.ids.size(), 0);
  const size_t first = out.ids.size();
  if (!example.templated || !encode_whole(tokenizer, example.segments, out.ids, out.flags)) {
    out.by_segments = example.templated;
    for (const TextSegment& segment : example.segments) {
      tokenizer.encode_append(segment.text, out.ids,
                              example.templated ? SpecialTokens::kMatch : SpecialTokens::kAsText);
      out.flags.resize(out.ids.size(), segment.loss == Loss::kYes ? kTokenLoss : 0);
    }
  }
  if (example.templated) {
    // The template wrote its BOS: not a second one.
    if (bos_id && out.ids.size() > first && out.ids[first] == *bos_id) {
      out.ids.erase(out.ids.begin());
      out.flags.erase(out.flags.begin());
    }
  } else {
    out.ids.push_back(end_id);
    out.flags.push_back(kTokenLoss);
  }
  if (out.ids.empty()) return out;
  out.flags[0] = kTokenDocStart;  // never kTokenLoss: see instruction_data.h
  return out;
}

PackedExamples pack_examples(std::span<const TokenizedExample> examples, int64_t seq_len,
                             int32_t pad_id, Packing packing) {
  ZT_ASSERT(seq_len >= 1, "seq_len={}", seq_len);
  PackedExamples packed;
  int64_t fill = 0;  // tokens in the open block
  auto pad = [&](int64_t n) {
    packed.ids.insert(packed.ids.end(), static_cast<size_t>(n), pad_id);
    packed.flags.insert(packed.flags.end(), static_cast<size_t>(n), kTokenDocStart);
  };
  auto close_block = [&] {
    pad(seq_len - fill);
    packed.padding_tokens += seq_len - fill;
    fill = 0;
  };
  for (const TokenizedExample& example : examples) {
    const auto n = std::min(static_cast<int64_t>(example.ids.size()), seq_len);
    packed.truncated += n < static_cast<int64_t>(example.ids.size());
    if (fill > 0 && (packing == Packing::kOnePerBlock || fill + n > seq_len)) close_block();
    packed.ids.insert(packed.ids.end(), example.ids.begin(), example.ids.begin() + n);
    packed.flags.insert(packed.flags.end(), example.flags.begin(), example.flags.begin() + n);
    const auto loss = std::count_if(example.flags.begin(), example.flags.begin() + n,
                                    [](uint8_t f) { return (f & kTokenLoss) != 0; });
    packed.completion_tokens += loss;
    if (loss == 0 && packed.without_completion++ == 0) {
      packed.first_without_completion = example.where;
    }
    fill = (fill + n) % seq_len;  // a full block is closed without padding
    ++packed.examples;
  }
  if (fill > 0) close_block();
  packed.blocks = static_cast<int64_t>(packed.ids.size()) / seq_len;
  pad(1);  // the target of the last block's last token
  return packed;
}

}  // namespace zt
