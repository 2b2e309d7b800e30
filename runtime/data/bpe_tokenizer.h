// BpeTokenizer: the byte-level BPE engine behind every tokenizer ZeroTrain loads (GPT-2's
// encoder.json + vocab.bpe in tokenizer.h, Hugging Face's tokenizer.json in tokenizer_json.h).
// Encodes UTF-8 text to token ids and decodes ids back to bytes:
//   1. added tokens: non-special ones always, special ones only when the caller asks
//      (SpecialTokens::kMatch), are cut out of the text as whole tokens, leftmost-longest;
//   2. each remaining segment gets a leading space if add_prefix_space and it has none;
//   3. pre-tokenisation: the split patterns (PCRE2) are applied in order, each to every piece
//      the previous one left ("Isolated": matches and the text between them are pieces);
//   4. BPE on each piece's bytes by merge rank (or, with ignore_merges, a piece that is itself
//      a vocabulary token is that one token).
//
// What it does not do: no file parsing (the loaders build a BpeSpec and check it), no
// normalisation, no post-processing (no BOS/EOS is added; callers insert separators), no
// threads. encode() fills a per-word cache, so one tokenizer must not be shared between
// threads.
//
// Every token is held as its raw bytes: the loaders undo the printable-unicode alphabet of the
// vocabulary files (GPT-2's bytes_to_unicode, byte_alphabet.h), so BPE runs on byte strings and
// token ids, and decode() is a concatenation.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace zt {

// GPT-2's pre-tokeniser: contractions, letter runs, number runs, other-symbol runs (each with
// an optional leading space), then whitespace. `\s+(?!\S)` leaves the last space of a run for
// the next word, so " world" stays one piece after "a  ". Hugging Face's ByteLevel pre-tokenizer
// with use_regex uses the same expression.
inline constexpr std::string_view kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Whether encode() matches special added tokens ("<|endoftext|>") in the text. kAsText is
// GPT-2's encoder.py behaviour: the text is encoded as ordinary characters.
enum class SpecialTokens : bool { kAsText, kMatch };

// A token matched in the text as a whole before pre-tokenisation (Hugging Face's added_tokens).
struct AddedToken {
  int32_t id;
  std::string content;  // raw text
  bool special;         // matched only under SpecialTokens::kMatch
  bool in_model_vocab;  // also a BPE vocabulary token (ignore_merges may produce it)
};

// One merge, in ids: left followed by right becomes merged. Rank is the position in
// BpeSpec::merges.
struct BpeMerge {
  int32_t left, right, merged;
};

// One pre-tokenisation step: a PCRE2 pattern (UTF and Unicode properties on) or a literal.
struct SplitPattern {
  std::string pattern;
  bool literal = false;
  std::string where;  // names it in errors: "pre_tokenizer.pretokenizers[0].pattern.Regex"
};

// What a loader hands the engine. The loader has checked the ids (0..n-1, each once), that
// every merge joins two tokens into a third with the concatenated bytes, and that every single
// byte is a token; the engine checks the patterns (a bad regex throws kInput naming `source`
// and the pattern's `where`).
struct BpeSpec {
  std::string source;                    // the file(s), for error messages
  std::vector<std::string> token_bytes;  // (vocab_size,) id -> raw bytes (content for added)
  std::vector<BpeMerge> merges;          // in rank order: lower merges first
  std::vector<AddedToken> added_tokens;
  std::vector<SplitPattern> split_patterns;  // applied in order; none: each segment is a word
  bool add_prefix_space = false;
  bool ignore_merges = false;
};

class BpeTokenizer {
 public:
  explicit BpeTokenizer(BpeSpec spec);
  ~BpeTokenizer();
  BpeTokenizer(BpeTokenizer&&) noexcept;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept;

  // Text to ids, appending nothing else (no BOS/EOS). Any byte string is accepted: bytes that
  // are not valid UTF-8 are not matched by the patterns and are encoded byte-level on their
  // own, so decode(encode(x)) == x for every x (without add_prefix_space).
  std::vector<int32_t> encode(std::string_view text,
                              SpecialTokens special = SpecialTokens::kAsText);
  // Same, appending to `out` (saves a copy when building one long stream).
  void encode_append(std::string_view text, std::vector<int32_t>& out,
                     SpecialTokens special = SpecialTokens::kAsText);
  // Ids to bytes; added tokens decode to their content. An id outside [0, vocab_size())
  // throws kInput naming it.
  std::string decode(std::span<const int32_t> ids) const;

  // The id of the token whose text is `content` (an added token's content, or a vocabulary
  // token's raw bytes: " world", "<|endoftext|>"); nullopt when there is none.
  std::optional<int32_t> token_id(std::string_view content) const;
  size_t vocab_size() const { return token_bytes_.size(); }
  const std::string& source() const { return source_; }

 private:
  struct Impl;  // PCRE2 handles, merge table, added-token index and word cache (keeps pcre2.h
                // out of this header)

  std::unique_ptr<Impl> impl_;
  std::vector<std::string> token_bytes_;  // id -> raw bytes
  std::string source_;
};

}  // namespace zt
