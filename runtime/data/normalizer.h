// Normalizer: a tokenizer.json "normalizer", applied to the text between added tokens before
// pre-tokenisation. What is read (a Sequence's steps run in order):
//   NFC, NFD, NFKC, NFKD   Unicode normal forms (utf8proc)
//   Lowercase              each character lowercased (as Rust's char::to_lowercase)
//   Strip                  strip_left / strip_right: White_Space characters at either end
//   StripAccents           every combining mark (general category M) removed; the tokenizers
//                          that use it put NFD before it, so accents are marks by then
//   Prepend                prepend: a string put before non-empty text
//   Replace                pattern {"String": s} or {"Regex": r}, content: each match, left to
//                          right, replaced by the content (taken literally)
//   Sequence               normalizers: the steps in order
// Any other type (BertNormalizer, Precompiled, ByteLevel, ...) is refused by name with one
// kInput line naming the file and the key path. The steps hold compiled regexes with their
// match data: one Normalizer must not be used by two threads at once.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/data/json_reader.h"

namespace zt {

class Regex;

class Normalizer {
 public:
  Normalizer();
  ~Normalizer();
  Normalizer(Normalizer&&) noexcept;
  Normalizer& operator=(Normalizer&&) noexcept;

  bool empty() const { return steps_.empty(); }
  std::string normalize(std::string_view text) const;

  struct Step;  // one non-Sequence step (normalizer.cpp)

 private:
  friend Normalizer read_normalizer(const JsonFile&, const nlohmann::json&, const std::string&);
  std::vector<Step> steps_;
};

// Reads the normalizer `value` found at key path `where` of `file` (null: no steps).
Normalizer read_normalizer(const JsonFile& file, const nlohmann::json& value,
                           const std::string& where);

}  // namespace zt
