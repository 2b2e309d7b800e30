// BpeTokenizer: the BPE engine behind every tokenizer ZeroTrain loads (GPT-2's encoder.json +
// vocab.bpe in tokenizer.h, Hugging Face's tokenizer.json in tokenizer_json.h). Encodes UTF-8
// text to token ids as Hugging Face's `tokenizers` does, and decodes ids back to text:
//   1. added tokens: those not `normalized` are cut out of the raw text as whole tokens,
//      leftmost-longest (special ones only when the caller asks, SpecialTokens::kMatch), with
//      lstrip/rstrip taking the whitespace beside them and single_word matching only between
//      non-word characters;
//   2. the normalizer (normalizer.h) runs on each remaining segment, then the `normalized`
//      added tokens are cut out of its result the same way;
//   3. the pre-tokenizer (pre_tokenizer.h) cuts each segment into words;
//   4. BPE on each word: a word that is itself a vocabulary token is that token under
//      ignore_merges; otherwise it starts as its bytes (a byte-level pre-tokenizer: GPT-2,
//      Llama 3, Qwen) or its characters, each a vocabulary token (continuing_subword_prefix
//      before all but the first, end_of_word_suffix after the last), else its <0xNN> byte
//      tokens (byte_fallback), else the unknown token (consecutive ones fused under fuse_unk),
//      else nothing; then the adjacent pair of lowest merge rank is merged, leftmost first,
//      until no pair has a merge (a heap keeps long words, such as Llama 2's whole
//      documents, from going quadratic);
//   5. with AddSpecialTokens::kYes, the post-processor's special tokens go around the text
//      (Llama 2's <s> before it).
// decode() maps ids to their tokens' text (special added tokens dropped under
// SkipSpecialTokens::kYes) and runs the decoder (decoder.h), as tokenizers' decode does; its
// result is always valid UTF-8, bytes that are not (a byte-level token sequence cut inside a
// character) having become U+FFFD. decode_for_display() is transformers' decode: the same, then
// clean_up_tokenization when tokenizer_config.json asks for it.
//
// No file parsing (the loaders build and check a BpeSpec) and no threads: encode() fills a
// per-word cache, and the steps hold regex match data, so one tokenizer must not be shared
// between threads.
//
// With a byte-level pre-tokenizer every token is held as its raw bytes: the loaders undo the
// printable-unicode alphabet of the vocabulary files (GPT-2's bytes_to_unicode,
// byte_alphabet.h), so BPE runs on byte strings, and decoding is a concatenation.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/data/decoder.h"
#include "runtime/data/normalizer.h"
#include "runtime/data/pre_tokenizer.h"

namespace zt {

// Whether encode() matches special added tokens ("<|endoftext|>") in the text. kAsText is
// GPT-2's encoder.py behaviour: the text is encoded as ordinary characters. kMatch is Hugging
// Face's default.
enum class SpecialTokens : bool { kAsText, kMatch };
// Whether encode() adds the special tokens the post-processor puts around a text (Hugging
// Face's add_special_tokens): Llama 2's <s> before it; none for GPT-2.
enum class AddSpecialTokens : bool { kNo, kYes };
// Whether decode() drops the added tokens marked special (Hugging Face's skip_special_tokens):
// Llama 2's <s>, Qwen's <|im_end|>; not Qwen3's <think>, an added token that is not special.
enum class SkipSpecialTokens : bool { kNo, kYes };

// A token matched in the text as a whole before pre-tokenisation (Hugging Face's added_tokens).
struct AddedToken {
  int32_t id;
  std::string content;       // raw text
  bool special;              // matched only under SpecialTokens::kMatch
  bool in_model_vocab;       // also a BPE vocabulary token (ignore_merges may produce it)
  bool normalized = false;   // matched in the normalised text (its content normalised too)
  bool lstrip = false;       // takes the whitespace before it
  bool rstrip = false;       // takes the whitespace after it
  bool single_word = false;  // matched only with no word character on either side
};

// One merge, in ids: left followed by right becomes merged. Rank is the position in
// BpeSpec::merges.
struct BpeMerge {
  int32_t left, right, merged;
};

// What a loader hands the engine. The loader has checked the ids (0..n-1, each once) and that
// every merge joins two tokens into a third; with a byte-level pre-tokenizer the engine checks
// that every single byte is a token.
struct BpeSpec {
  std::string source;                    // the file(s), for error messages
  std::vector<std::string> token_bytes;  // (vocab_size,) id -> the token's text (raw bytes for
                                         // a byte-level pre-tokenizer; content for added ones)
  std::vector<BpeMerge> merges;          // in rank order: lower merges first
  std::vector<AddedToken> added_tokens;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;  // byte_level(): words start as bytes, else as characters
  TokenDecoder decoder;
  bool ignore_merges = false;
  bool byte_fallback = false;             // a character outside the vocabulary: its <0xNN> tokens
  std::optional<int32_t> unk_id;          // else this token, or nothing
  bool fuse_unk = false;                  // consecutive unknown characters: one unknown token
  std::string continuing_subword_prefix;  // in the words' terms (raw bytes when byte-level)
  std::string end_of_word_suffix;
  std::vector<int32_t> prefix_ids, suffix_ids;  // the post-processor's, around a text
  bool clean_up_tokenization_spaces = false;    // tokenizer_config.json's, for display
};

class BpeTokenizer {
 public:
  explicit BpeTokenizer(BpeSpec spec);
  ~BpeTokenizer();
  BpeTokenizer(BpeTokenizer&&) noexcept;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept;

  // Text to ids. Any byte string is accepted: bytes that are not valid UTF-8 are characters of
  // their own that no pattern matches and no normalizer changes, so with a byte-level
  // pre-tokenizer decode(encode(x)) == x for every valid UTF-8 x (without add_prefix_space).
  std::vector<int32_t> encode(std::string_view text, SpecialTokens special = SpecialTokens::kAsText,
                              AddSpecialTokens add = AddSpecialTokens::kNo);
  // Same, appending to `out` (saves a copy when building one long stream).
  void encode_append(std::string_view text, std::vector<int32_t>& out,
                     SpecialTokens special = SpecialTokens::kAsText,
                     AddSpecialTokens add = AddSpecialTokens::kNo);
  // Ids to text through the decoder, as tokenizers' decode(ids, skip_special_tokens): valid
  // UTF-8, whatever the ids (U+FFFD where their bytes are not). An id outside
  // [0, vocab_size()) throws kInput naming it.
  std::string decode(std::span<const int32_t> ids,
                     SkipSpecialTokens skip = SkipSpecialTokens::kNo) const;
  // What transformers' tokenizer.decode(ids, skip_special_tokens) shows: decode(), then
  // clean_up_tokenization (decoder.h) when tokenizer_config.json's clean_up_tokenization_spaces
  // is true (Llama 3's file; false, its default, for Llama 2 and Qwen3).
  std::string decode_for_display(std::span<const int32_t> ids,
                                 SkipSpecialTokens skip = SkipSpecialTokens::kNo) const;
  bool cleans_up_spaces() const { return clean_up_tokenization_spaces_; }

  // What AddSpecialTokens::kYes puts before and after a text.
  const std::vector<int32_t>& prefix_ids() const { return prefix_ids_; }
  const std::vector<int32_t>& suffix_ids() const { return suffix_ids_; }

  // The id of the token whose text is `content` (an added token's content, or a vocabulary
  // token's text: " world" for GPT-2, "▁world" for Llama 2); nullopt when there is none.
  std::optional<int32_t> token_id(std::string_view content) const;
  size_t vocab_size() const { return token_bytes_.size(); }
  const std::string& source() const { return source_; }

 private:
  struct Impl;  // the pipeline's steps, merge table, added-token index and word cache

  std::unique_ptr<Impl> impl_;
  std::vector<std::string> token_bytes_;  // id -> text
  std::vector<int32_t> prefix_ids_, suffix_ids_;
  std::vector<bool> special_;  // (vocab_size,) an added token marked special
  bool clean_up_tokenization_spaces_ = false;
  std::string source_;
};

}  // namespace zt
