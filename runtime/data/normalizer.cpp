// Normalizer: reading a tokenizer.json normalizer into a flat list of steps, and applying it.
#include "runtime/data/normalizer.h"

#include "runtime/data/regex.h"
#include "runtime/data/unicode_text.h"
#include "runtime/status.h"

namespace zt {

using json = nlohmann::json;

struct Normalizer::Step {
  enum class Kind { kForm, kLowercase, kStrip, kStripAccents, kPrepend, kReplace };
  Kind kind;
  NormalForm form = NormalForm::kNFC;
  bool left = false, right = false;  // Strip
  std::string text;                  // Prepend: the prefix; Replace: the content
  Pattern pattern;                   // Replace: what is replaced
};

Normalizer::Normalizer() = default;
Normalizer::~Normalizer() = default;
Normalizer::Normalizer(Normalizer&&) noexcept = default;
Normalizer& Normalizer::operator=(Normalizer&&) noexcept = default;

namespace {

using Step = Normalizer::Step;

std::string strip(std::string_view text, bool left, bool right) {
  int32_t cp = 0;
  size_t begin = 0, end = text.size();
  if (left) {
    while (begin < end) {
      const size_t length = utf8_char(text, begin, cp);
      if (!is_whitespace(cp)) break;
      begin += length;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;  // back to the start of the last character
      while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
      if (utf8_char(text, start, cp) != end - start || !is_whitespace(cp)) break;
      end = start;
    }
  }
  return std::string(text.substr(begin, end - begin));
}

std::string strip_accents(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  int32_t cp = 0;
  for (size_t pos = 0; pos < text.size();) {
    const size_t length = utf8_char(text, pos, cp);
    if (!is_mark(cp)) out.append(text.substr(pos, length));
    pos += length;
  }
  return out;
}

std::string apply_step(const Step& step, std::string_view text) {
  switch (step.kind) {
    case Step::Kind::kForm: return normalize_unicode(text, step.form);
    case Step::Kind::kLowercase: return lowercase(text);
    case Step::Kind::kStrip: return strip(text, step.left, step.right);
    case Step::Kind::kStripAccents: return strip_accents(text);
    case Step::Kind::kPrepend: return text.empty() ? std::string() : step.text + std::string(text);
    case Step::Kind::kReplace: return step.pattern.replace_all(text, step.text);
  }
  return std::string(text);
}

constexpr std::string_view kSupported =
    "only NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, Prepend, Replace and Sequence";

void read_step(const JsonFile& file, const json& value, const std::string& where,
               std::vector<Step>& steps) {
  const std::string& type = file.type(value, where);
  Step step;
  if (type == "Sequence") {
    const std::string list_where = member_path(where, "normalizers");
    const json& list = file.array(file.member(value, where, "normalizers"), list_where);
    for (size_t i = 0; i < list.size(); ++i) {
      read_step(file, list[i], index_path(list_where, i), steps);
    }
    return;
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    step.kind = Step::Kind::kForm;
    step.form = type == "NFC"    ? NormalForm::kNFC
                : type == "NFD"  ? NormalForm::kNFD
                : type == "NFKC" ? NormalForm::kNFKC
                                 : NormalForm::kNFKD;
  } else if (type == "Lowercase") {
    step.kind = Step::Kind::kLowercase;
  } else if (type == "StripAccents") {
    step.kind = Step::Kind::kStripAccents;
  } else if (type == "Strip") {
    step.kind = Step::Kind::kStrip;
    step.left = file.optional_boolean(value, where, "strip_left", false);
    step.right = file.optional_boolean(value, where, "strip_right", false);
  } else if (type == "Prepend") {
    step.kind = Step::Kind::kPrepend;
    step.text = file.string(file.member(value, where, "prepend"), member_path(where, "prepend"));
  } else if (type == "Replace") {
    step.kind = Step::Kind::kReplace;
    step.text = file.string(file.member(value, where, "content"), member_path(where, "content"));
    step.pattern =
        Pattern::read(file, file.member(value, where, "pattern"), member_path(where, "pattern"));
  } else {
    file.fail(member_path(where, "type"),
              fmt::format("'{}' is not supported; {}", type, kSupported));
  }
  steps.push_back(std::move(step));
}

}  // namespace

std::string Normalizer::normalize(std::string_view text) const {
  std::string out(text);
  for (const Step& step : steps_) out = apply_step(step, out);
  return out;
}

Normalizer read_normalizer(const JsonFile& file, const json& value, const std::string& where) {
  Normalizer normalizer;
  if (!value.is_null()) read_step(file, value, where, normalizer.steps_);
  return normalizer;
}

}  // namespace zt
