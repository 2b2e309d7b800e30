// load_tokenizer_json: reading and checking a tokenizer.json into a BpeSpec. Reads the file
// once; no state kept.
#include "runtime/data/tokenizer_json.h"

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "runtime/data/byte_alphabet.h"
#include "runtime/file_io.h"
#include "runtime/status.h"

namespace zt {

namespace {

using nlohmann::json;

constexpr std::string_view kOnlyByteLevel =
    "only byte-level BPE (model.type BPE with a ByteLevel pre-tokenizer or decoder)";

std::string member_path(const std::string& where, std::string_view key) {
  return where.empty() ? std::string(key) : fmt::format("{}.{}", where, key);
}
std::string index_path(const std::string& where, size_t index) {
  return fmt::format("{}[{}]", where, index);
}

// A JSON value for an error message, cut short.
std::string shown(const json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

// Typed access to one file's JSON: every failure names the file and the key path.
class JsonFile {
 public:
  explicit JsonFile(std::string path) : path_(std::move(path)) {}
  const std::string& path() const { return path_; }

  [[noreturn]] void fail(const std::string& where, std::string_view what) const {
    throw_input(fmt::format("{}: {} {}", path_, where, what));
  }

  // object[key]; missing (or object not an object) throws.
  const json& member(const json& object, const std::string& where, std::string_view key) const {
    const json* value = find(object, where, key);
    if (value == nullptr) fail(member_path(where, key), "is missing");
    return *value;
  }
  // object[key], or nullptr when it is absent.
  const json* find(const json& object, const std::string& where, std::string_view key) const {
    if (!object.is_object()) fail(where, fmt::format("must be an object; got {}", shown(object)));
    auto it = object.find(key);
    return it == object.end() ? nullptr : &*it;
  }
  // object[key], or nullptr when it is absent or null.
  const json* find_non_null(const json& object, const std::string& where,
                            std::string_view key) const {
    const json* value = find(object, where, key);
    return value == nullptr || value->is_null() ? nullptr : value;
  }

  const std::string& string(const json& value, const std::string& where) const {
    if (!value.is_string()) fail(where, fmt::format("must be a string; got {}", shown(value)));
    return value.get_ref<const std::string&>();
  }
  bool boolean(const json& value, const std::string& where) const {
    if (!value.is_boolean())
      fail(where, fmt::format("must be true or false; got {}", shown(value)));
    return value.get<bool>();
  }
  int32_t id(const json& value, const std::string& where) const {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
        value.get<int64_t>() > INT32_MAX) {
      fail(where,
           fmt::format("must be a token id (an integer 0..{}); got {}", INT32_MAX, shown(value)));
    }
    return static_cast<int32_t>(value.get<int64_t>());
  }
  const json& array(const json& value, const std::string& where) const {
    if (!value.is_array()) fail(where, fmt::format("must be an array; got {}", shown(value)));
    return value;
  }
  const json& object(const json& value, const std::string& where) const {
    if (!value.is_object()) fail(where, fmt::format("must be an object; got {}", shown(value)));
    return value;
  }
  // object[key] as a bool; `fallback` when absent or null.
  bool optional_boolean(const json& object, const std::string& where, std::string_view key,
                        bool fallback) const {
    const json* value = find_non_null(object, where, key);
    return value == nullptr ? fallback : boolean(*value, member_path(where, key));
  }

 private:
  std::string path_;
};

// Reads `pre_tokenizer` (at `where`) into spec.split_patterns and spec.add_prefix_space.
// `byte_level_seen` is set by the ByteLevel step, which must come last: a step after it would
// see the byte alphabet ("Ġworld"), not the text.
void read_pre_tokenizer(const JsonFile& file, const json& step, const std::string& where,
                        BpeSpec& spec, bool& byte_level_seen) {
  const std::string& type =
      file.string(file.member(step, where, "type"), member_path(where, "type"));
  if (byte_level_seen) {
    file.fail(where, fmt::format("(a {} step) follows ByteLevel; ByteLevel must be the last "
                                 "step, as it turns the text into the byte alphabet",
                                 type));
  }
  if (type == "Sequence") {
    const std::string list_where = member_path(where, "pretokenizers");
    const json& steps = file.array(file.member(step, where, "pretokenizers"), list_where);
    for (size_t i = 0; i < steps.size(); ++i) {
      read_pre_tokenizer(file, steps[i], index_path(list_where, i), spec, byte_level_seen);
    }
  } else if (type == "Split") {
    const std::string pattern_where = member_path(where, "pattern");
    const json& pattern = file.object(file.member(step, where, "pattern"), pattern_where);
    SplitPattern split;
    if (const json* regex = file.find(pattern, pattern_where, "Regex")) {
      split.where = member_path(pattern_where, "Regex");
      split.pattern = file.string(*regex, split.where);
    } else if (const json* literal = file.find(pattern, pattern_where, "String")) {
      split.where = member_path(pattern_where, "String");
      split.pattern = file.string(*literal, split.where);
      split.literal = true;
    } else {
      file.fail(pattern_where,
                fmt::format("must hold \"Regex\" or \"String\"; got {}", shown(pattern)));
    }
    const std::string behavior_where = member_path(where, "behavior");
    const std::string& behavior = file.string(file.member(step, where, "behavior"), behavior_where);
    if (behavior != "Isolated") {
      file.fail(behavior_where, fmt::format("'{}' is not supported; only Isolated (each match "
                                            "is a piece of its own)",
                                            behavior));
    }
    if (file.optional_boolean(step, where, "invert", false)) {
      file.fail(member_path(where, "invert"), "true is not supported; only false");
    }
    spec.split_patterns.push_back(std::move(split));
  } else if (type == "ByteLevel") {
    byte_level_seen = true;
    const std::string prefix_where = member_path(where, "add_prefix_space");
    const bool add_prefix_space =
        file.boolean(file.member(step, where, "add_prefix_space"), prefix_where);
    if (add_prefix_space && !spec.split_patterns.empty()) {
      // Hugging Face would add the space to every piece the Split steps made.
      file.fail(prefix_where, "true after a Split step is not supported");
    }
    spec.add_prefix_space = add_prefix_space;
    if (file.optional_boolean(step, where, "use_regex", true)) {
      spec.split_patterns.push_back(SplitPattern{std::string(kGpt2SplitPattern),
                                                 /*literal=*/false,
                                                 member_path(where, "use_regex")});
    }
  } else {
    file.fail(member_path(where, "type"),
              fmt::format("'{}' is not supported; only ByteLevel, Split and Sequence", type));
  }
}

struct AddedEntry {
  std::string content;
  bool special;
  size_t index;  // in added_tokens, for messages
};

// added_tokens: id -> entry.
std::map<int32_t, AddedEntry> read_added_tokens(const JsonFile& file, const json& root) {
  std::map<int32_t, AddedEntry> added;
  const json* list = file.find_non_null(root, "", "added_tokens");
  if (list == nullptr) return added;
  file.array(*list, "added_tokens");
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string where = index_path("added_tokens", i);
    const json& token = (*list)[i];
    const int32_t id = file.id(file.member(token, where, "id"), member_path(where, "id"));
    const std::string& content =
        file.string(file.member(token, where, "content"), member_path(where, "content"));
    if (content.empty()) file.fail(member_path(where, "content"), "is empty");
    const bool special =
        file.boolean(file.member(token, where, "special"), member_path(where, "special"));
    for (std::string_view key : {"single_word", "lstrip", "rstrip"}) {
      if (file.optional_boolean(token, where, key, false)) {
        file.fail(member_path(where, key), "true is not supported; only false");
      }
    }
    auto [it, inserted] = added.emplace(id, AddedEntry{content, special, i});
    if (!inserted) {
      file.fail(member_path(where, "id"),
                fmt::format("{} is also added_tokens[{}]'s id", id, it->second.index));
    }
  }
  return added;
}

BpeSpec read_spec(const JsonFile& file, const json& root) {
  BpeSpec spec;
  spec.source = file.path();
  file.object(root, "the top level");

  if (const json* normalizer = file.find_non_null(root, "", "normalizer")) {
    const std::string& type =
        file.string(file.member(*normalizer, "normalizer", "type"), "normalizer.type");
    file.fail("normalizer.type", fmt::format("'{}' is not supported; only a null normalizer "
                                             "(ZeroTrain does no Unicode normalisation)",
                                             type));
  }

  const json& model = file.member(root, "", "model");
  const std::string& model_type = file.string(file.member(model, "model", "type"), "model.type");
  if (model_type != "BPE") {
    file.fail("model.type", fmt::format("'{}' is not supported; {}", model_type, kOnlyByteLevel));
  }
  if (const json* dropout = file.find_non_null(model, "model", "dropout")) {
    if (!dropout->is_number() || dropout->get<double>() != 0.0) {
      file.fail("model.dropout", fmt::format("{} is not supported; only null (BPE dropout is "
                                             "random; prepared data must be reproducible)",
                                             shown(*dropout)));
    }
  }
  for (std::string_view key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const json* affix = file.find_non_null(model, "model", key)) {
      if (!file.string(*affix, member_path("model", key)).empty()) {
        file.fail(member_path("model", key),
                  fmt::format("{} is not supported; only null or \"\" ({})", shown(*affix),
                              kOnlyByteLevel));
      }
    }
  }
  if (file.optional_boolean(model, "model", "byte_fallback", false)) {
    file.fail("model.byte_fallback",
              fmt::format("true is not supported (SentencePiece-style BPE); {}", kOnlyByteLevel));
  }
  spec.ignore_merges = file.optional_boolean(model, "model", "ignore_merges", false);

  const json* pre_tokenizer = file.find_non_null(root, "", "pre_tokenizer");
  if (pre_tokenizer == nullptr) {
    file.fail("pre_tokenizer", fmt::format("is missing or null; {}", kOnlyByteLevel));
  }
  bool byte_level_seen = false;
  read_pre_tokenizer(file, *pre_tokenizer, "pre_tokenizer", spec, byte_level_seen);
  if (!byte_level_seen)
    file.fail("pre_tokenizer", fmt::format("has no ByteLevel step; {}", kOnlyByteLevel));

  if (const json* decoder = file.find_non_null(root, "", "decoder")) {
    const std::string& type = file.string(file.member(*decoder, "decoder", "type"), "decoder.type");
    if (type != "ByteLevel") {
      file.fail("decoder.type", fmt::format("'{}' is not supported; only ByteLevel or null", type));
    }
  }

  const std::map<int32_t, AddedEntry> added = read_added_tokens(file, root);

  // model.vocab: {"token in the byte alphabet": id}. An added token may be in it too, under
  // its content (GPT-2's "<|endoftext|>").
  const json& vocab = file.object(file.member(model, "model", "vocab"), "model.vocab");
  std::unordered_map<std::string, int32_t> vocab_ids;  // alphabet string -> id
  vocab_ids.reserve(vocab.size());
  int32_t max_id = added.empty() ? -1 : added.rbegin()->first;
  std::unordered_map<int32_t, std::string> id_owner;  // to name both tokens of a duplicate id
  id_owner.reserve(vocab.size());
  for (const auto& [token, value] : vocab.items()) {
    const std::string where = fmt::format("model.vocab[\"{}\"]", token);
    const int32_t id = file.id(value, where);
    if (auto [it, inserted] = id_owner.emplace(id, token); !inserted) {
      file.fail(where,
                fmt::format("has id {}, as does \"{}\"; ids must be unique", id, it->second));
    }
    max_id = std::max(max_id, id);
    vocab_ids.emplace(token, id);
  }
  id_owner.clear();
  if (max_id < 0) file.fail("model.vocab", "is empty");
  spec.token_bytes.assign(static_cast<size_t>(max_id) + 1, std::string());
  std::vector<const std::string*> vocab_token(spec.token_bytes.size(), nullptr);  // id -> token
  std::string bytes;
  for (const auto& [token, id] : vocab_ids) {
    const std::string where = fmt::format("model.vocab[\"{}\"]", token);
    vocab_token[id] = &token;
    auto added_it = added.find(id);
    if (added_it != added.end() && (added_it->second.content == token)) {
      spec.token_bytes[id] = token;  // the added token under its own text
      continue;
    }
    if (!alphabet_to_bytes(token, bytes)) {
      file.fail(where, "is not in the byte-level alphabet (GPT-2's bytes_to_unicode)");
    }
    if (added_it != added.end() && added_it->second.content != bytes) {
      file.fail(index_path("added_tokens", added_it->second.index),
                fmt::format("has id {}, which model.vocab gives to \"{}\"", id, token));
    }
    spec.token_bytes[id] = bytes;
  }
  for (const auto& [id, entry] : added) {
    const bool in_model_vocab = vocab_token[id] != nullptr;
    if (!in_model_vocab) spec.token_bytes[id] = entry.content;
    spec.added_tokens.push_back(AddedToken{id, entry.content, entry.special, in_model_vocab});
  }
  for (size_t id = 0; id < spec.token_bytes.size(); ++id) {
    if (vocab_token[id] == nullptr && !added.contains(static_cast<int32_t>(id))) {
      file.fail("model.vocab", fmt::format("has no token with id {}, nor has added_tokens; ids "
                                           "must run 0..{} without gaps",
                                           id, max_id));
    }
  }

  // model.merges: "left right" (tokenizers before 0.20) or ["left", "right"], in rank order.
  const json& merges = file.array(file.member(model, "model", "merges"), "model.merges");
  spec.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string where = index_path("model.merges", i) + ":";
    const json& merge = merges[i];
    std::string left, right;
    if (merge.is_string()) {
      const std::string& text = merge.get_ref<const std::string&>();
      const size_t space = text.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == text.size() ||
          text.find(' ', space + 1) != std::string::npos) {
        file.fail(where,
                  fmt::format("{}: expected two tokens separated by one space", shown(merge)));
      }
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      file.fail(where,
                fmt::format("{}: expected \"left right\" or [\"left\", \"right\"]", shown(merge)));
    }
    auto left_it = vocab_ids.find(left);
    auto right_it = vocab_ids.find(right);
    for (const auto& [token, it] : {std::pair{&left, left_it}, std::pair{&right, right_it}}) {
      if (it == vocab_ids.end()) {
        file.fail(where, fmt::format("names \"{}\", which is not in model.vocab", *token));
      }
    }
    auto merged_it = vocab_ids.find(left + right);
    if (merged_it == vocab_ids.end()) {
      file.fail(where, fmt::format("makes \"{}\" from \"{}\" and \"{}\", which is not in "
                                   "model.vocab",
                                   left + right, left, right));
    }
    spec.merges.push_back(BpeMerge{left_it->second, right_it->second, merged_it->second});
  }
  return spec;
}

}  // namespace

BpeTokenizer load_tokenizer_json(const std::string& path) {
  std::error_code ec;
  const std::string file_path =
      std::filesystem::is_directory(path, ec) ? path + "/tokenizer.json" : path;
  const std::string text = read_file(file_path, "tokenizer file");
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    throw_input(fmt::format("{} is not valid JSON: {}", file_path, e.what()));
  }
  return BpeTokenizer(read_spec(JsonFile(file_path), root));
}

}  // namespace zt
