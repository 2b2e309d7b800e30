// load_tokenizer_json: Hugging Face's tokenizer.json with a BPE model (GPT-2, Llama 2 and 3,
// TinyLlama, Mistral, Qwen2/3, ...), read as Hugging Face's `tokenizers` reads it into a
// BpeTokenizer (bpe_tokenizer.h). What is read:
//   normalizer: normalizer.h (NFC/NFD/NFKC/NFKD, Lowercase, Strip, StripAccents, Prepend,
//     Replace, Sequence). pre_tokenizer: pre_tokenizer.h (Split, Digits, Punctuation,
//     Whitespace, WhitespaceSplit, Metaspace, ByteLevel, Sequence); a ByteLevel step makes the
//     model work on bytes, and its vocabulary is then read back from GPT-2's byte alphabet.
//     decoder: decoder.h (ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence).
//   model: type "BPE" (Unigram, WordPiece, WordLevel are refused by name); vocab; merges in
//     rank order, as "left right" strings or [left, right] pairs; byte_fallback, unk_token,
//     fuse_unk, continuing_subword_prefix, end_of_word_suffix, ignore_merges. dropout other
//     than null or 0 is refused (it is random).
//   added_tokens: {id, content, special, normalized, lstrip, rstrip, single_word}. Special ones
//     are matched in the text only under SpecialTokens::kMatch, the others always.
//   post_processor: TemplateProcessing ("single": the special tokens around $A, a list of
//     pieces; the string shorthand "<s> $A" is refused, as tokenizers' own readers refuse it),
//     BertProcessing and RobertaProcessing (cls before, sep after), ByteLevel (nothing), or a
//     Sequence of them: what encode(..., AddSpecialTokens::kYes) puts around a text.
//   tokenizer_config.json beside the file: clean_up_tokenization_spaces (default false, as in
//     transformers) for decode_for_display(); when its tokenizer_class is transformers' Llama,
//     CodeLlama or Gemma tokenizer, add_bos_token (default true) and add_eos_token (default
//     false) with bos_token and eos_token replace the post-processor, as transformers does.
// Every problem (unreadable file, not JSON, a missing key or a wrong type, an unsupported
// choice, a merge naming or making a token missing from the vocabulary, duplicate ids, an id
// with no token, a bad regex) throws one kInput line naming the file and the key path
// ("model.merges[12]"). Pinned by tests/runtime/data/tokenizer_json_test.cpp and
// tokenizer_parts_test.cpp, decoding by tokenizer_decode_test.cpp; tests/e2e/hf_tokenizers.sh
// compares ids and decodings with Hugging Face's.
#pragma once

#include <string>

#include "runtime/data/bpe_tokenizer.h"

namespace zt {

// `path` is a tokenizer.json file or a directory holding one.
BpeTokenizer load_tokenizer_json(const std::string& path);

}  // namespace zt
