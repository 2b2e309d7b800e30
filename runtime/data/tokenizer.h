// Gpt2Tokenizer: GPT-2's byte-level BPE. Loads the official encoder.json (token string -> id)
// and vocab.bpe (merges in rank order) from one directory; encodes UTF-8 text to token ids and
// decodes ids back to bytes. Pre-tokenisation uses GPT-2's regular expression through PCRE2.
//
// What it does not do: no special-token parsing ("<|endoftext|>" in the text is encoded as
// ordinary text, as GPT-2's encoder.py does; callers insert eot() themselves), no
// normalisation, no threads. encode() fills a per-word cache, so one tokenizer must not be
// shared between threads.
//
// Internally every token is held as its raw bytes: the printable-unicode alphabet of
// encoder.json (GPT-2's bytes_to_unicode) is undone once at load time, so BPE runs on byte
// strings and token ids, and decode() is a concatenation.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace zt {

class Gpt2Tokenizer {
 public:
  // Reads DIR/encoder.json and DIR/vocab.bpe. Missing or malformed files throw kInput naming
  // the file. Every merge must join two tokens of encoder.json into a third, and every single
  // byte must be a token (true of the official files).
  explicit Gpt2Tokenizer(const std::string& dir);
  ~Gpt2Tokenizer();
  Gpt2Tokenizer(Gpt2Tokenizer&&) noexcept;
  Gpt2Tokenizer& operator=(Gpt2Tokenizer&&) noexcept;

  // Text to ids, appending nothing else (no eot). Any byte string is accepted: bytes that are
  // not valid UTF-8 are not matched by the pattern and are encoded byte-level on their own, so
  // decode(encode(x)) == x for every x.
  std::vector<int32_t> encode(std::string_view text);
  // Same, appending to `out` (saves a copy when building one long stream).
  void encode_append(std::string_view text, std::vector<int32_t>& out);
  // Ids to bytes. An id outside [0, vocab_size()) throws kInput naming it.
  std::string decode(std::span<const int32_t> ids) const;

  int32_t eot() const { return eot_; }  // "<|endoftext|>", 50256 in GPT-2
  size_t vocab_size() const { return token_bytes_.size(); }  // 50257 in GPT-2

 private:
  struct Impl;  // PCRE2 handles, merge table and word cache (keeps pcre2.h out of this header)

  std::unique_ptr<Impl> impl_;
  std::vector<std::string> token_bytes_;  // id -> raw bytes
  int32_t eot_ = -1;
};

}  // namespace zt
