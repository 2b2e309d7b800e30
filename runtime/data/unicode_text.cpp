// UTF-8 and Unicode helpers over utf8proc. No state.
#include "runtime/data/unicode_text.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "runtime/status.h"

namespace zt {

size_t utf8_char(std::string_view text, size_t pos, int32_t& code_point) {
  utf8proc_int32_t cp = -1;
  const utf8proc_ssize_t length =
      utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + pos),
                       static_cast<utf8proc_ssize_t>(text.size() - pos), &cp);
  if (length <= 0) {
    code_point = -1;
    return 1;
  }
  code_point = cp;
  return static_cast<size_t>(length);
}

void append_utf8(std::string& out, int32_t code_point) {
  utf8proc_uint8_t buffer[4];
  const utf8proc_ssize_t length = utf8proc_encode_char(code_point, buffer);
  out.append(reinterpret_cast<const char*>(buffer), static_cast<size_t>(length));
}

size_t utf8_length(std::string_view text) {
  size_t count = 0;
  int32_t cp = 0;
  for (size_t pos = 0; pos < text.size(); pos += utf8_char(text, pos, cp)) ++count;
  return count;
}

namespace {

// The length of the maximal subpart at text[pos] (pos < size): the bytes that follow the lead
// byte within the ranges of Unicode's table 3-7 of well-formed sequences, the lead included.
// `complete`: they make a whole character.
size_t utf8_subpart(std::string_view text, size_t pos, bool& complete) {
  const auto lead = static_cast<uint8_t>(text[pos]);
  complete = lead < 0x80;
  if (complete) return 1;
  size_t trailing = 0;
  uint8_t low = 0x80, high = 0xBF;  // the range of the byte after the lead
  if (lead >= 0xC2 && lead <= 0xDF) {
    trailing = 1;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    trailing = 2;
    if (lead == 0xE0) low = 0xA0;   // no overlong forms
    if (lead == 0xED) high = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    trailing = 3;
    if (lead == 0xF0) low = 0x90;   // no overlong forms
    if (lead == 0xF4) high = 0x8F;  // nothing past U+10FFFF
  } else {
    return 1;  // a continuation byte, C0, C1 or F5..FF: never starts a character
  }
  size_t length = 1;
  for (; length <= trailing && pos + length < text.size(); ++length) {
    const auto byte = static_cast<uint8_t>(text[pos + length]);
    if (byte < (length == 1 ? low : 0x80) || byte > (length == 1 ? high : 0xBF)) break;
  }
  complete = length == trailing + 1;
  return length;
}

}  // namespace

bool is_valid_utf8(std::string_view text) {
  bool complete = true;
  for (size_t pos = 0; pos < text.size() && complete;) pos += utf8_subpart(text, pos, complete);
  return complete;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  size_t copied = 0;  // bytes [0, copied) are in `out`
  bool complete = true;
  for (size_t pos = 0; pos < bytes.size();) {
    const size_t length = utf8_subpart(bytes, pos, complete);
    if (!complete) {
      out.append(bytes.substr(copied, pos - copied));
      out += "\xEF\xBF\xBD";  // U+FFFD
      copied = pos + length;
    }
    pos += length;
  }
  if (copied == 0) return std::string(bytes);
  out.append(bytes.substr(copied));
  return out;
}

bool is_whitespace(int32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

namespace {

utf8proc_category_t category(int32_t cp) {
  return cp < 0 ? UTF8PROC_CATEGORY_CN : utf8proc_category(cp);
}

}  // namespace

bool is_numeric(int32_t cp) {
  const utf8proc_category_t c = category(cp);
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool is_punctuation(int32_t cp) {
  if (cp >= 0 && cp < 0x80) {
    return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
           (cp >= 0x7B && cp <= 0x7E);
  }
  const utf8proc_category_t c = category(cp);
  return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

bool is_mark(int32_t cp) {
  const utf8proc_category_t c = category(cp);
  return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC || c == UTF8PROC_CATEGORY_ME;
}

bool is_word_char(int32_t cp) {
  const utf8proc_category_t c = category(cp);
  return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) || is_mark(cp) ||
         c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_PC;
}

namespace {

// Appends `run` (valid UTF-8) in normal form `form`.
void append_normalized(std::string& out, std::string_view run, NormalForm form) {
  int options = UTF8PROC_STABLE;
  if (form == NormalForm::kNFC || form == NormalForm::kNFKC) options |= UTF8PROC_COMPOSE;
  if (form == NormalForm::kNFD || form == NormalForm::kNFKD) options |= UTF8PROC_DECOMPOSE;
  if (form == NormalForm::kNFKC || form == NormalForm::kNFKD) options |= UTF8PROC_COMPAT;
  utf8proc_uint8_t* result = nullptr;
  const utf8proc_ssize_t length = utf8proc_map(
      reinterpret_cast<const utf8proc_uint8_t*>(run.data()),
      static_cast<utf8proc_ssize_t>(run.size()), &result, static_cast<utf8proc_option_t>(options));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(result, &std::free);
  if (length < 0) {
    throw_system(fmt::format("utf8proc could not normalise {} bytes: {}", run.size(),
                             utf8proc_errmsg(length)));
  }
  out.append(reinterpret_cast<const char*>(result), static_cast<size_t>(length));
}

}  // namespace

std::string normalize_unicode(std::string_view text, NormalForm form) {
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  size_t run_start = 0, pos = 0;
  int32_t cp = 0;
  while (pos < text.size()) {
    const size_t length = utf8_char(text, pos, cp);
    if (cp < 0) {
      if (pos > run_start) append_normalized(out, text.substr(run_start, pos - run_start), form);
      out.push_back(text[pos]);
      run_start = pos + 1;
    }
    pos += length;
  }
  if (pos > run_start) append_normalized(out, text.substr(run_start, pos - run_start), form);
  return out;
}

std::string lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  int32_t cp = 0;
  for (size_t pos = 0; pos < text.size();) {
    const size_t length = utf8_char(text, pos, cp);
    if (cp < 0) {
      out.push_back(text[pos]);
    } else if (cp == 0x130) {  // İ: the one unconditional lowercase of two characters
      out += "i\xCC\x87";
    } else {
      append_utf8(out, utf8proc_tolower(cp));
    }
    pos += length;
  }
  return out;
}

}  // namespace zt
