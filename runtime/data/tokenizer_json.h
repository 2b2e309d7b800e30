// load_tokenizer_json: Hugging Face's tokenizer.json, byte-level BPE only (GPT-2, Llama 3,
// ...), read into a BpeTokenizer (bpe_tokenizer.h). What is read:
//   model: type "BPE"; vocab (token in the byte alphabet -> id); merges in rank order, either
//     as "left right" strings or as [left, right] pairs; ignore_merges. Refused, naming the key:
//     dropout, a non-empty continuing_subword_prefix or end_of_word_suffix, byte_fallback true
//     (each changes what BPE produces). unk_token and fuse_unk are ignored: every byte is a
//     token, so nothing is unknown.
//   pre_tokenizer: ByteLevel (use_regex: GPT-2's pattern; add_prefix_space honoured), or a
//     Sequence of Split steps (pattern Regex or String, behavior Isolated, invert false) ending
//     in ByteLevel, as Llama 3 ships. Any other step type is refused by name.
//   normalizer: null only; any normaliser (NFC for Qwen2 included) is refused by name, since
//     this runtime does no Unicode normalisation.
//   decoder: null or ByteLevel; others refused by name. post_processor: ignored (no BOS/EOS
//     is added; callers insert separators).
//   added_tokens: {id, content, special, ...}; single_word, lstrip and rstrip true are refused.
//     Special ones are matched in the text only under SpecialTokens::kMatch, the others always.
// Every problem (unreadable file, not JSON, a missing key or a wrong type, an unsupported
// choice, a merge naming or making a token missing from the vocabulary, duplicate ids, an id
// with no token, a bad regex) throws one kInput line naming the file and the key path
// ("model.merges[12]"). Pinned by tests/runtime/data/tokenizer_json_test.cpp.
#pragma once

#include <string>

#include "runtime/data/bpe_tokenizer.h"

namespace zt {

// `path` is a tokenizer.json file or a directory holding one.
BpeTokenizer load_tokenizer_json(const std::string& path);

}  // namespace zt
