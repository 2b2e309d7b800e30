// TokenDecoder: reading a tokenizer.json decoder into a flat list of steps, and applying it to
// token strings.
#include "runtime/data/decoder.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include "runtime/data/byte_alphabet.h"
#include "runtime/data/regex.h"
#include "runtime/data/unicode_text.h"
#include "runtime/status.h"

namespace zt {

using json = nlohmann::json;

struct TokenDecoder::Step {
  enum class Kind { kByteLevel, kMetaspace, kByteFallback, kFuse, kStrip, kReplace };
  Kind kind;
  bool map_alphabet = false;   // kByteLevel: tokens are in GPT-2's alphabet
  std::string character;       // kMetaspace: the replacement; kStrip: the content
  bool first_dropped = true;   // kMetaspace: prepend_scheme is not "never"
  size_t start = 0, stop = 0;  // kStrip
  std::string content;         // kReplace: the replacement
  Pattern pattern;             // kReplace: what is replaced
};

TokenDecoder::TokenDecoder() = default;
TokenDecoder::~TokenDecoder() = default;
TokenDecoder::TokenDecoder(TokenDecoder&&) noexcept = default;
TokenDecoder& TokenDecoder::operator=(TokenDecoder&&) noexcept = default;

namespace {

using Step = TokenDecoder::Step;
using Tokens = std::vector<std::string>;

std::string joined(const Tokens& tokens) {
  std::string text;
  for (const std::string& token : tokens) text += token;
  return text;
}

// Every occurrence of `from` in `text` replaced by `to`.
std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  size_t done = 0;
  for (size_t at = text.find(from); at != std::string_view::npos; at = text.find(from, done)) {
    out.append(text.substr(done, at - done));
    out.append(to);
    done = at + from.size();
  }
  out.append(text.substr(done));
  return out;
}

// The byte an "<0xNN>" token stands for, or -1.
int fallback_byte(std::string_view token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return -1;
  int value = 0;
  for (char c : token.substr(3, 2)) {
    const int digit = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                             : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

// Runs of <0xNN> tokens become the text their bytes spell; a run that is not valid UTF-8
// becomes one U+FFFD per byte, its valid characters too (tokenizers' ByteFallback, unlike
// String::from_utf8_lossy: "<0xF0><0x9F>" gives two).
Tokens byte_fallback(Tokens tokens) {
  Tokens out;
  out.reserve(tokens.size());
  std::string bytes;
  auto flush = [&] {
    if (bytes.empty()) return;
    if (is_valid_utf8(bytes)) {
      out.push_back(bytes);
    } else {
      for (size_t i = 0; i < bytes.size(); ++i) out.push_back("\xEF\xBF\xBD");  // U+FFFD
    }
    bytes.clear();
  };
  for (std::string& token : tokens) {
    const int byte = fallback_byte(token);
    if (byte >= 0) {
      bytes.push_back(static_cast<char>(byte));
    } else {
      flush();
      out.push_back(std::move(token));
    }
  }
  flush();
  return out;
}

std::string strip(const std::string& token, const Step& step) {
  size_t begin = 0, end = token.size();
  const size_t width = step.character.size();
  for (size_t n = 0; n < step.start && token.compare(begin, width, step.character) == 0; ++n) {
    begin += width;
  }
  for (size_t n = 0; n < step.stop && end >= begin + width &&
                     token.compare(end - width, width, step.character) == 0;
       ++n) {
    end -= width;
  }
  return token.substr(begin, end - begin);
}

Tokens apply_step(const Step& step, Tokens tokens) {
  switch (step.kind) {
    case Step::Kind::kByteLevel: {
      // One text; bytes that do not make UTF-8 become U+FFFD as String::from_utf8_lossy
      // makes them (a generation cut inside a character).
      if (!step.map_alphabet) return Tokens{utf8_lossy(joined(tokens))};
      std::string text, bytes;
      for (const std::string& token : tokens)
        text += alphabet_to_bytes(token, bytes) ? bytes : token;
      return Tokens{utf8_lossy(text)};
    }
    case Step::Kind::kFuse: return Tokens{joined(tokens)};
    case Step::Kind::kByteFallback: return byte_fallback(std::move(tokens));
    case Step::Kind::kMetaspace:
      for (size_t i = 0; i < tokens.size(); ++i) {
        tokens[i] = replace_all(tokens[i], step.character, i == 0 && step.first_dropped ? "" : " ");
      }
      return tokens;
    case Step::Kind::kStrip:
      for (std::string& token : tokens) token = strip(token, step);
      return tokens;
    case Step::Kind::kReplace:
      for (std::string& token : tokens) token = step.pattern.replace_all(token, step.content);
      return tokens;
  }
  return tokens;
}

constexpr std::string_view kSupported =
    "only ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace and Sequence";

void read_step(const JsonFile& file, const json& value, const std::string& where,
               bool byte_level_model, std::vector<Step>& steps) {
  const std::string& type = file.type(value, where);
  Step step;
  if (type == "Sequence") {
    const std::string list_where = member_path(where, "decoders");
    const json& list = file.array(file.member(value, where, "decoders"), list_where);
    for (size_t i = 0; i < list.size(); ++i) {
      read_step(file, list[i], index_path(list_where, i), byte_level_model, steps);
    }
    return;
  } else if (type == "ByteLevel") {
    step.kind = Step::Kind::kByteLevel;
    step.map_alphabet = !byte_level_model;
  } else if (type == "Fuse") {
    step.kind = Step::Kind::kFuse;
  } else if (type == "ByteFallback") {
    step.kind = Step::Kind::kByteFallback;
  } else if (type == "Metaspace") {
    step.kind = Step::Kind::kMetaspace;
    step.character = file.find_non_null(value, where, "replacement")
                         ? file.character(value, where, "replacement")
                         : std::string("\xE2\x96\x81");
    const std::string scheme = file.optional_string(value, where, "prepend_scheme", "");
    step.first_dropped = scheme.empty()
                             ? file.optional_boolean(value, where, "add_prefix_space", true)
                             : scheme != "never";
  } else if (type == "Strip") {
    step.kind = Step::Kind::kStrip;
    step.character = file.character(value, where, "content");
    step.start = file.optional_count(value, where, "start", 0);
    step.stop = file.optional_count(value, where, "stop", 0);
  } else if (type == "Replace") {
    step.kind = Step::Kind::kReplace;
    step.content = file.string(file.member(value, where, "content"), member_path(where, "content"));
    step.pattern =
        Pattern::read(file, file.member(value, where, "pattern"), member_path(where, "pattern"));
  } else {
    file.fail(member_path(where, "type"),
              fmt::format("'{}' is not supported; {}", type, kSupported));
  }
  steps.push_back(std::move(step));
}

}  // namespace

std::string TokenDecoder::decode(std::vector<std::string> tokens) const {
  for (const Step& step : steps_) tokens = apply_step(step, std::move(tokens));
  return joined(tokens);
}

std::string clean_up_tokenization(std::string_view text) {
  // transformers' order; each replacement runs over the result of the one before.
  static constexpr std::pair<std::string_view, std::string_view> kReplacements[] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
  };
  std::string out(text);
  for (const auto& [from, to] : kReplacements) out = replace_all(out, from, to);
  return out;
}

bool TokenDecoder::concatenates() const {
  return std::all_of(steps_.begin(), steps_.end(), [](const Step& step) {
    return step.kind == Step::Kind::kFuse ||
           (step.kind == Step::Kind::kByteLevel && !step.map_alphabet);
  });
}

TokenDecoder read_decoder(const JsonFile& file, const json& value, const std::string& where,
                          bool byte_level_model) {
  TokenDecoder decoder;
  if (!value.is_null()) read_step(file, value, where, byte_level_model, decoder.steps_);
  return decoder;
}

}  // namespace zt
