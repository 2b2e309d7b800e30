// load_tokenizer_json: reading and checking a tokenizer.json (and the tokenizer_config.json
// beside it) into a BpeSpec. The normalizer, pre-tokenizer and decoder are read by
// normalizer.cpp, pre_tokenizer.cpp and decoder.cpp; the model, added tokens and
// post-processor here. Reads the files once; no state kept.
#include "runtime/data/tokenizer_json.h"

#include <filesystem>
#include <map>
#include <unordered_map>

#include "runtime/data/byte_alphabet.h"
#include "runtime/data/json_reader.h"
#include "runtime/file_io.h"
#include "runtime/status.h"

namespace zt {

namespace {

using nlohmann::json;

using VocabIds = std::unordered_map<std::string, int32_t>;  // as the file spells tokens

struct AddedEntry {
  AddedToken token;
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
    const json& entry = (*list)[i];
    AddedToken token{};
    token.id = file.id(file.member(entry, where, "id"), member_path(where, "id"));
    token.content =
        file.string(file.member(entry, where, "content"), member_path(where, "content"));
    if (token.content.empty()) file.fail(member_path(where, "content"), "is empty");
    token.special =
        file.boolean(file.member(entry, where, "special"), member_path(where, "special"));
    token.normalized = file.optional_boolean(entry, where, "normalized", !token.special);
    token.lstrip = file.optional_boolean(entry, where, "lstrip", false);
    token.rstrip = file.optional_boolean(entry, where, "rstrip", false);
    token.single_word = file.optional_boolean(entry, where, "single_word", false);
    const int32_t id = token.id;
    auto [it, inserted] = added.emplace(id, AddedEntry{std::move(token), i});
    if (!inserted) {
      file.fail(member_path(where, "id"),
                fmt::format("{} is also added_tokens[{}]'s id", id, it->second.index));
    }
  }
  return added;
}

// model's options other than vocab and merges. `bytes`: a byte-level pre-tokenizer, so the
// affixes are read back from the byte alphabet.
void read_model_options(const JsonFile& file, const json& model, bool bytes, BpeSpec& spec) {
  const std::string& type = file.type(model, "model");
  if (type != "BPE") {
    file.fail("model.type", fmt::format("'{}' is not supported; only BPE (Unigram, WordPiece "
                                        "and WordLevel models are not read)",
                                        type));
  }
  if (const json* dropout = file.find_non_null(model, "model", "dropout")) {
    if (!dropout->is_number() || dropout->get<double>() != 0.0) {
      file.fail("model.dropout", fmt::format("{} is not supported; only null (BPE dropout is "
                                             "random; prepared data must be reproducible)",
                                             shown(*dropout)));
    }
  }
  std::string bytes_form;
  for (auto [key, affix] : {std::pair{"continuing_subword_prefix", &spec.continuing_subword_prefix},
                            std::pair{"end_of_word_suffix", &spec.end_of_word_suffix}}) {
    *affix = file.optional_string(model, "model", key, "");
    if (bytes && !affix->empty()) {
      if (!alphabet_to_bytes(*affix, bytes_form)) {
        file.fail(member_path("model", key), "is not in the byte-level alphabet");
      }
      *affix = bytes_form;
    }
  }
  spec.byte_fallback = file.optional_boolean(model, "model", "byte_fallback", false);
  spec.fuse_unk = file.optional_boolean(model, "model", "fuse_unk", false);
  spec.ignore_merges = file.optional_boolean(model, "model", "ignore_merges", false);
}

// model.vocab into spec.token_bytes (and the added tokens into spec.added_tokens); returns the
// vocabulary as the file spells it. With `bytes`, tokens are read back from the byte alphabet
// unless they are an added token's own content (GPT-2's "<|endoftext|>").
VocabIds read_vocab(const JsonFile& file, const json& model, bool bytes,
                    const std::map<int32_t, AddedEntry>& added, BpeSpec& spec) {
  const json& vocab = file.object(file.member(model, "model", "vocab"), "model.vocab");
  VocabIds vocab_ids;
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
  std::vector<bool> in_vocab(spec.token_bytes.size(), false);
  std::string text;
  for (const auto& [token, id] : vocab_ids) {
    in_vocab[id] = true;
    auto added_it = added.find(id);
    const bool own_content = added_it != added.end() && added_it->second.token.content == token;
    if (!bytes || own_content) {
      text = token;
    } else if (!alphabet_to_bytes(token, text)) {
      file.fail(fmt::format("model.vocab[\"{}\"]", token),
                "is not in the byte-level alphabet (GPT-2's bytes_to_unicode)");
    }
    if (added_it != added.end() && added_it->second.token.content != text) {
      file.fail(index_path("added_tokens", added_it->second.index),
                fmt::format("has id {}, which model.vocab gives to \"{}\"", id, token));
    }
    spec.token_bytes[id] = text;
  }
  for (const auto& [id, entry] : added) {
    AddedToken token = entry.token;
    token.in_model_vocab = in_vocab[id];
    if (!token.in_model_vocab) spec.token_bytes[id] = token.content;
    spec.added_tokens.push_back(std::move(token));
  }
  for (size_t id = 0; id < spec.token_bytes.size(); ++id) {
    if (!in_vocab[id] && !added.contains(static_cast<int32_t>(id))) {
      file.fail("model.vocab", fmt::format("has no token with id {}, nor has added_tokens; ids "
                                           "must run 0..{} without gaps",
                                           id, max_id));
    }
  }
  return vocab_ids;
}

// model.merges: "left right" (tokenizers before 0.20) or ["left", "right"], in rank order. The
// merged token is left + right, less right's continuing_subword_prefix.
void read_merges(const JsonFile& file, const json& model, const VocabIds& vocab_ids,
                 size_t prefix_length, BpeSpec& spec) {
  const json& merges = file.array(file.member(model, "model", "merges"), "model.merges");
  spec.merges.reserve(merges.size());
  std::string left, right;
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string where = index_path("model.merges", i) + ":";
    const json& merge = merges[i];
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
    const std::string merged = left + right.substr(std::min(prefix_length, right.size()));
    auto merged_it = vocab_ids.find(merged);
    if (merged_it == vocab_ids.end()) {
      file.fail(where, fmt::format("makes \"{}\" from \"{}\" and \"{}\", which is not in "
                                   "model.vocab",
                                   merged, left, right));
    }
    spec.merges.push_back(BpeMerge{left_it->second, right_it->second, merged_it->second});
  }
}

// An id the post-processor names, checked against the vocabulary.
int32_t checked_id(const JsonFile& file, const json& value, const std::string& where,
                   const BpeSpec& spec) {
  const int32_t id = file.id(value, where);
  if (static_cast<size_t>(id) >= spec.token_bytes.size()) {
    file.fail(where, fmt::format("{} is not a token id (the vocabulary has {})", id,
                                 spec.token_bytes.size()));
  }
  return id;
}

// TemplateProcessing's "single" template: the special tokens before $A go to `prefix`, those
// after to `suffix`.
void read_template(const JsonFile& file, const json& value, const std::string& where,
                   const BpeSpec& spec, std::vector<int32_t>& prefix,
                   std::vector<int32_t>& suffix) {
  const std::string single_where = member_path(where, "single");
  const json& single = file.member(value, where, "single");
  if (single.is_string()) {
    // "<s> $A" is a shorthand of the TemplateProcessing constructors in tokenizers' API; they
    // write the list, and tokenizers' reader (Rust and JavaScript) refuses the string.
    file.fail(single_where, fmt::format("is a string ({}); a tokenizer.json spells the template "
                                        "as a list of {{\"SpecialToken\"}} and {{\"Sequence\"}} "
                                        "pieces, and Hugging Face's tokenizers refuse it too",
                                        shown(single)));
  }
  file.array(single, single_where);
  const std::string specials_where = member_path(where, "special_tokens");
  const json* specials = file.find_non_null(value, where, "special_tokens");
  bool sequence_seen = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const std::string item_where = index_path(single_where, i);
    if (const json* sequence = file.find(single[i], item_where, "Sequence")) {
      const std::string id_where = member_path(item_where, "Sequence.id");
      const std::string& name = file.string(file.member(*sequence, item_where, "id"), id_where);
      if (name != "A" || sequence_seen) {
        file.fail(id_where, fmt::format("'{}' is not supported; \"single\" takes $A once", name));
      }
      sequence_seen = true;
      continue;
    }
    const json* special = file.find(single[i], item_where, "SpecialToken");
    if (special == nullptr) file.fail(item_where, "holds neither Sequence nor SpecialToken");
    const std::string name_where = member_path(item_where, "SpecialToken.id");
    const std::string& name = file.string(file.member(*special, name_where, "id"), name_where);
    const json* entry = specials == nullptr ? nullptr : file.find(*specials, specials_where, name);
    if (entry == nullptr) file.fail(name_where, fmt::format("'{}' is not in special_tokens", name));
    const std::string ids_where = member_path(specials_where, name) + ".ids";
    const json& ids = file.array(file.member(*entry, specials_where, "ids"), ids_where);
    for (size_t k = 0; k < ids.size(); ++k) {
      (sequence_seen ? suffix : prefix)
          .push_back(checked_id(file, ids[k], index_path(ids_where, k), spec));
    }
  }
  if (!sequence_seen) file.fail(single_where, "has no $A (Sequence A)");
}

// post_processor: the special tokens AddSpecialTokens::kYes puts around a text.
void read_post_processor(const JsonFile& file, const json& value, const std::string& where,
                         BpeSpec& spec) {
  if (value.is_null()) return;
  const std::string& type = file.type(value, where);
  std::vector<int32_t> prefix, suffix;
  if (type == "Sequence") {
    const std::string list_where = member_path(where, "processors");
    const json& list = file.array(file.member(value, where, "processors"), list_where);
    for (size_t i = 0; i < list.size(); ++i) {
      read_post_processor(file, list[i], index_path(list_where, i), spec);
    }
    return;
  } else if (type == "TemplateProcessing") {
    read_template(file, value, where, spec, prefix, suffix);
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    for (auto [key, ids] : {std::pair{"cls", &prefix}, std::pair{"sep", &suffix}}) {
      const std::string key_where = member_path(where, key);
      const json& pair = file.array(file.member(value, where, key), key_where);
      if (pair.size() != 2) file.fail(key_where, "must be [token, id]");
      ids->push_back(checked_id(file, pair[1], index_path(key_where, 1), spec));
    }
  } else if (type != "ByteLevel") {
    file.fail(member_path(where, "type"),
              fmt::format("'{}' is not supported; only TemplateProcessing, BertProcessing, "
                          "RobertaProcessing, ByteLevel and Sequence",
                          type));
  }
  // A later processor wraps what the earlier ones made.
  spec.prefix_ids.insert(spec.prefix_ids.begin(), prefix.begin(), prefix.end());
  spec.suffix_ids.insert(spec.suffix_ids.end(), suffix.begin(), suffix.end());
}

// tokenizer_config.json beside the tokenizer.json, when there is one: clean_up_tokenization_spaces
// (transformers' default false) for every class; transformers' Llama, CodeLlama and Gemma
// tokenizers rebuild the post-processor from add_bos_token (default true) and add_eos_token
// (default false) with bos_token and eos_token; other classes keep tokenizer.json's.
void read_tokenizer_config(const std::string& path, const VocabIds& vocab_ids, BpeSpec& spec) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return;
  json root;
  try {
    root = json::parse(read_file(path, "tokenizer config"));
  } catch (const json::exception& e) {
    throw_input(fmt::format("{} is not valid JSON: {}", path, e.what()));
  }
  const JsonFile file(path);
  file.object(root, "the top level");
  spec.clean_up_tokenization_spaces =
      file.optional_boolean(root, "", "clean_up_tokenization_spaces", false);
  const std::string class_name = file.optional_string(root, "", "tokenizer_class", "");
  bool rebuilds = false;
  for (std::string_view family : {"LlamaTokenizer", "CodeLlamaTokenizer", "GemmaTokenizer"}) {
    rebuilds = rebuilds || class_name == family || class_name == std::string(family) + "Fast";
  }
  if (!rebuilds) return;
  // The id of bos_token or eos_token (a string, or an AddedToken object with "content").
  auto token_named = [&](std::string_view key) -> int32_t {
    const json* value = file.find_non_null(root, "", key);
    if (value == nullptr) file.fail(std::string(key), "is null but its add_ key is true");
    const std::string& content = value->is_object()
                                     ? file.string(file.member(*value, std::string(key), "content"),
                                                   member_path(std::string(key), "content"))
                                     : file.string(*value, std::string(key));
    for (const AddedToken& token : spec.added_tokens) {
      if (token.content == content) return token.id;
    }
    if (auto it = vocab_ids.find(content); it != vocab_ids.end()) return it->second;
    file.fail(std::string(key), fmt::format("'{}' is not a token of the tokenizer", content));
  };
  spec.prefix_ids.clear();
  spec.suffix_ids.clear();
  if (file.optional_boolean(root, "", "add_bos_token", true)) {
    spec.prefix_ids.push_back(token_named("bos_token"));
  }
  if (file.optional_boolean(root, "", "add_eos_token", false)) {
    spec.suffix_ids.push_back(token_named("eos_token"));
  }
}

BpeSpec read_spec(const JsonFile& file, const json& root, const std::string& config_path) {
  BpeSpec spec;
  spec.source = file.path();
  file.object(root, "the top level");
  const json null_value;
  auto component = [&](std::string_view key) -> const json& {
    const json* value = file.find_non_null(root, "", key);
    return value == nullptr ? null_value : *value;
  };

  spec.normalizer = read_normalizer(file, component("normalizer"), "normalizer");
  spec.pre_tokenizer = read_pre_tokenizer(file, component("pre_tokenizer"), "pre_tokenizer");
  const bool bytes = spec.pre_tokenizer.byte_level();
  spec.decoder = read_decoder(file, component("decoder"), "decoder", bytes);

  const json& model = file.member(root, "", "model");
  read_model_options(file, model, bytes, spec);
  const std::map<int32_t, AddedEntry> added = read_added_tokens(file, root);
  const VocabIds vocab_ids = read_vocab(file, model, bytes, added, spec);
  if (const json* unk = file.find_non_null(model, "model", "unk_token")) {
    const std::string& name = file.string(*unk, "model.unk_token");
    auto it = vocab_ids.find(name);
    if (it == vocab_ids.end()) {
      file.fail("model.unk_token", fmt::format("'{}' is not in model.vocab", name));
    }
    spec.unk_id = it->second;
  }
  // The file spells the prefix in the alphabet; its length there is what merges drop.
  const std::string prefix_spelling =
      file.optional_string(model, "model", "continuing_subword_prefix", "");
  read_merges(file, model, vocab_ids, prefix_spelling.size(), spec);

  read_post_processor(file, component("post_processor"), "post_processor", spec);
  read_tokenizer_config(config_path, vocab_ids, spec);
  return spec;
}

}  // namespace

BpeTokenizer load_tokenizer_json(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path file_path = std::filesystem::is_directory(path, ec)
                                              ? std::filesystem::path(path) / "tokenizer.json"
                                              : std::filesystem::path(path);
  const std::string text = read_file(file_path.string(), "tokenizer file");
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    throw_input(fmt::format("{} is not valid JSON: {}", file_path.string(), e.what()));
  }
  const std::string config_path = (file_path.parent_path() / "tokenizer_config.json").string();
  return BpeTokenizer(read_spec(JsonFile(file_path.string()), root, config_path));
}

}  // namespace zt
