// TokenDecoder: a tokenizer.json "decoder", which turns the token strings of ids back into text.
// What is read (a Sequence's steps run in order over the list of token strings):
//   ByteLevel     joins the tokens into one; when the model works on bytes (a ByteLevel
//                 pre-tokenizer) its tokens already are the bytes, else each token's characters
//                 are read back through GPT-2's byte alphabet (a token outside it is kept);
//                 bytes that are not UTF-8 become U+FFFD (utf8_lossy: one per maximal subpart)
//   Metaspace     replacement (default U+2581) becomes a space, except in the first token
//                 where it is dropped (unless prepend_scheme is never)
//   ByteFallback  runs of <0xNN> tokens become the text their bytes spell, or one U+FFFD per
//                 byte of the run when it is not valid UTF-8 (as tokenizers' Rust code does;
//                 its JavaScript port gives one per maximal subpart)
//   Fuse          joins the tokens into one
//   Strip         content (one character): up to `start` of it removed from the front of each
//                 token and up to `stop` from the back
//   Replace       pattern {"String"} or {"Regex"} in each token replaced by content
//   Sequence      decoders: the steps in order
// The tokens are then concatenated; no decoder (null) concatenates them as they are. Other
// types (WordPiece, BPEDecoder, CTC) are refused by name with one kInput line naming the file
// and the key path.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/data/json_reader.h"

namespace zt {

class TokenDecoder {
 public:
  TokenDecoder();
  ~TokenDecoder();
  TokenDecoder(TokenDecoder&&) noexcept;
  TokenDecoder& operator=(TokenDecoder&&) noexcept;

  std::string decode(std::vector<std::string> tokens) const;
  // Whether decode() is a plain concatenation (no steps, or only Fuse and a byte-level model's
  // ByteLevel).
  bool concatenates() const;

  struct Step;  // one non-Sequence step (decoder.cpp)

 private:
  friend TokenDecoder read_decoder(const JsonFile&, const nlohmann::json&, const std::string&,
                                   bool);
  std::vector<Step> steps_;
};

// transformers' clean_up_tokenization, which its decode() applies after the decoder when
// tokenizer_config.json's clean_up_tokenization_spaces is true: " ." " ?" " !" " ," become
// "." "?" "!" ",", " ' " becomes "'", and the space before n't 'm 's 've 're is dropped, each
// replacement in that order over the whole text.
std::string clean_up_tokenization(std::string_view text);

// Reads the decoder `value` found at key path `where` of `file` (null: concatenation).
// `byte_level_model`: the model's tokens are raw bytes (a ByteLevel pre-tokenizer).
TokenDecoder read_decoder(const JsonFile& file, const nlohmann::json& value,
                          const std::string& where, bool byte_level_model);

}  // namespace zt
