// Regex: one PCRE2 pattern as the tokenizer uses it (Split pre-tokenizers, Replace normalizers
// and decoders, GPT-2's pattern): UTF-8 with Unicode properties (\p{L}, and \s, \w, \d with
// their Unicode meaning, as Hugging Face's Oniguruma has them), JIT-compiled when PCRE2 can.
// Bytes that are not valid UTF-8 are never part of a match. Holds its match data, so one Regex
// must not be used by two threads at once.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace zt {

class Regex {
 public:
  // `literal`: the pattern is plain text. A pattern PCRE2 rejects throws kInput
  // "SOURCE: WHERE: PCRE2 rejects the pattern at offset N: why".
  Regex(std::string_view pattern, bool literal, const std::string& source,
        const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // The first non-empty match starting at or after `from`: sets [begin, end) and returns true,
  // or returns false when there is none. Empty matches are skipped.
  bool find(std::string_view text, size_t from, size_t& begin, size_t& end) const;

 private:
  struct Impl;  // PCRE2 handles (keeps pcre2.h out of this header)
  std::unique_ptr<Impl> impl_;
};

class JsonFile;

// What a tokenizer.json pattern matches: a Regex, or a non-empty text matched literally. Split
// pre-tokenizers and the Replace normalizer and decoder share it.
class Pattern {
 public:
  Pattern() = default;
  explicit Pattern(std::unique_ptr<Regex> regex) : regex_(std::move(regex)) {}
  explicit Pattern(std::string literal) : literal_(std::move(literal)) {}

  // The pattern object at `where` in `file`: {"Regex": "..."} or {"String": "..."}. Neither key,
  // an empty String or a Regex PCRE2 rejects: kInput naming the file and the key path.
  static Pattern read(const JsonFile& file, const nlohmann::json& pattern,
                      const std::string& where);

  // As Regex::find; a literal's next occurrence at or after `from`. False for an empty pattern.
  bool find(std::string_view text, size_t from, size_t& begin, size_t& end) const;
  // `text` with every match, left to right and not overlapping, replaced by `content`.
  std::string replace_all(std::string_view text, std::string_view content) const;

 private:
  std::unique_ptr<Regex> regex_;
  std::string literal_;
};

}  // namespace zt
