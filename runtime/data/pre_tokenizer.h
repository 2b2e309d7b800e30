// PreTokenizer: a tokenizer.json "pre_tokenizer", which cuts normalised text into the words BPE
// runs on. What is read (a Sequence's steps run in order, each on every piece the previous one
// left; empty pieces are dropped):
//   Split           pattern {"Regex": r} or {"String": s}; behavior Isolated (matches and the
//                   text between are pieces), Removed (matches dropped), MergedWithPrevious (a
//                   match joins the piece before it), MergedWithNext (joins the piece after),
//                   Contiguous (adjacent matches form one piece); invert (the text between
//                   matches is what the behavior applies to)
//   Digits          individual_digits: each numeric character alone, else runs of them
//   Punctuation     behavior (default Isolated), each punctuation character a match
//   Whitespace      runs of word characters and runs of other non-space characters; spaces go
//   WhitespaceSplit pieces between White_Space characters
//   Metaspace       spaces become `replacement` (default U+2581), which is prepended (unless
//                   there) by prepend_scheme always, first (only the piece that starts the text)
//                   or never (older files: add_prefix_space true/false); split: each piece cut
//                   before every replacement
//   ByteLevel       add_prefix_space: a space before a piece that lacks one; use_regex (default
//                   true): GPT-2's pattern splits each piece. It must be the last step: the model
//                   then works on bytes (bpe_tokenizer.h), which is what its alphabet stands for.
//   Sequence        pretokenizers: the steps in order
// Other types (BertPreTokenizer, UnicodeScripts, ...) are refused by name with one kInput line
// naming the file and the key path. Holds compiled regexes with their match data: one
// PreTokenizer must not be used by two threads at once.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/data/json_reader.h"

namespace zt {

// GPT-2's pre-tokeniser: contractions, letter runs, number runs, other-symbol runs (each with
// an optional leading space), then whitespace. `\s+(?!\S)` leaves the last space of a run for
// the next word, so " world" stays one piece after "a  ". Hugging Face's ByteLevel pre-tokenizer
// with use_regex uses the same expression.
inline constexpr std::string_view kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// The words of one text: spans of `text`.
struct Words {
  struct Span {
    size_t begin, end;
    bool at_start;  // begins the whole input (Metaspace's "first")
  };
  std::string text;
  std::vector<Span> spans;
  std::string_view word(size_t i) const {
    return std::string_view(text).substr(spans[i].begin, spans[i].end - spans[i].begin);
  }
};

class PreTokenizer {
 public:
  PreTokenizer();
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  // GPT-2's: ByteLevel with use_regex and no prefix space.
  static PreTokenizer gpt2(const std::string& source);

  // Whether the last step is ByteLevel (BPE then runs on bytes).
  bool byte_level() const { return byte_level_; }
  // The words of `text` into `out` (replacing what it held). `at_start`: `text` begins the
  // input (no added token before it).
  void split(std::string_view text, bool at_start, Words& out) const;

  struct Step;  // one non-Sequence step (pre_tokenizer.cpp)

 private:
  friend PreTokenizer read_pre_tokenizer(const JsonFile&, const nlohmann::json&,
                                         const std::string&);
  std::vector<Step> steps_;
  bool byte_level_ = false;
  mutable Words scratch_;
};

// Reads the pre-tokenizer `value` found at key path `where` of `file` (null: each text one word).
PreTokenizer read_pre_tokenizer(const JsonFile& file, const nlohmann::json& value,
                                const std::string& where);

}  // namespace zt
