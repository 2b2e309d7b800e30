// Gpt2Tokenizer: GPT-2's byte-level BPE, loaded from the official encoder.json (token string ->
// id) and vocab.bpe (merges in rank order) in one directory. The engine (encode, decode,
// token_id) is BpeTokenizer (bpe_tokenizer.h); this class reads and checks the two files and
// splits with GPT-2's pattern. Hugging Face's tokenizer.json: tokenizer_json.h.
//
// "<|endoftext|>" is a special added token: encode() leaves it as ordinary text unless asked
// (SpecialTokens::kMatch), as GPT-2's encoder.py does; callers insert eot() themselves.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/data/bpe_tokenizer.h"

namespace zt {

class Gpt2Tokenizer : public BpeTokenizer {
 public:
  // Reads DIR/encoder.json and DIR/vocab.bpe. Missing or malformed files throw kInput naming
  // the file. Every merge must join two tokens of encoder.json into a third, and every single
  // byte must be a token (true of the official files).
  explicit Gpt2Tokenizer(const std::string& dir);

  int32_t eot() const { return eot_; }  // "<|endoftext|>", 50256 in GPT-2

 private:
  int32_t eot_ = -1;
};

}  // namespace zt
