// The Jinja lexer: see jinja_lexer.h.
#include "runtime/data/jinja_lexer.h"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/data/jinja_value.h"
#include "runtime/status.h"

namespace zt::jinja {
namespace {

// One UTF-8 code point of `s` at `pos`; `len` receives its byte count.
char32_t code_point_at(std::string_view s, size_t pos, size_t* len) {
  const std::u32string one = decode_utf8(s.substr(pos, std::min<size_t>(4, s.size() - pos)));
  char32_t c = one.empty() ? 0 : one[0];
  size_t n = 1;
  const unsigned char b = s[pos];
  if (b >= 0xf0)
    n = 4;
  else if (b >= 0xe0)
    n = 3;
  else if (b >= 0xc0)
    n = 2;
  *len = std::min(n, s.size() - pos);
  return c;
}

size_t skip_space(std::string_view s, size_t pos) {
  while (pos < s.size()) {
    size_t n;
    if (!is_space(code_point_at(s, pos, &n))) break;
    pos += n;
  }
  return pos;
}

std::string rstrip_space(std::string_view s) {
  std::u32string u = decode_utf8(s);
  while (!u.empty() && is_space(u.back())) u.pop_back();
  return encode_utf8(u);
}

bool all_space(std::string_view s) {
  for (char32_t c : decode_utf8(s))
    if (!is_space(c)) return false;
  return !s.empty();
}

class Lexer {
 public:
  Lexer(std::string source, const std::string& name) : src_(std::move(source)), name_(name) {}

  std::vector<Token> run();

 private:
  [[noreturn]] void error(size_t pos, const std::string& what) {
    throw_input(fmt::format("template {} line {}: {}", name_, line_at(pos), what));
  }
  int line_at(size_t pos) {
    pos = std::min(pos, src_.size());
    if (pos < line_pos_) line_pos_ = 0, line_ = 1;
    line_ += static_cast<int>(std::count(src_.begin() + line_pos_, src_.begin() + pos, '\n'));
    line_pos_ = pos;
    return line_;
  }
  void text(std::string data, char sign, bool lstrip_applies);
  size_t comment(size_t pos);
  size_t raw(size_t pos, size_t after_begin);
  size_t tag(size_t pos, bool block);
  size_t string_literal(size_t pos);
  size_t number(size_t pos);
  // After an end marker: "-" strips whitespace, "+" keeps it, none drops one newline when
  // `trim` (blocks and comments).
  size_t after_end(size_t pos, char sign, bool trim) {
    if (sign == '-')
      pos = skip_space(src_, pos);
    else if (sign != '+' && trim && pos < src_.size() && src_[pos] == '\n')
      ++pos;
    line_starting_ = pos > 0 && src_[pos - 1] == '\n';
    return pos;
  }

  std::string src_;
  const std::string& name_;
  std::vector<Token> out_;
  bool line_starting_ = true;
  size_t line_pos_ = 0;  // line_at's cache: the line of this position
  int line_ = 1;
};

void Lexer::text(std::string data, char sign, bool lstrip_applies) {
  if (sign == '-') {
    data = rstrip_space(data);
  } else if (sign != '+' && lstrip_applies) {
    const size_t l_pos = data.rfind('\n') + 1;  // npos + 1 == 0
    if ((l_pos > 0 || line_starting_) && all_space(std::string_view(data).substr(l_pos)))
      data.resize(l_pos);
  }
  if (!data.empty()) out_.push_back({Tok::kText, std::move(data), 0});
}

std::vector<Token> Lexer::run() {
  size_t pos = 0;
  while (pos < src_.size()) {
    size_t start = pos;
    while (true) {
      start = src_.find('{', start);
      if (start == std::string::npos || start + 1 >= src_.size()) break;
      const char c = src_[start + 1];
      if (c == '{' || c == '%' || c == '#') break;
      ++start;
    }
    if (start == std::string::npos || start + 1 >= src_.size()) {
      out_.push_back({Tok::kText, src_.substr(pos), line_at(pos)});
      break;
    }
    const char kind = src_[start + 1];
    const char sign = start + 2 < src_.size() && (src_[start + 2] == '-' || src_[start + 2] == '+')
                          ? src_[start + 2]
                          : 0;
    const size_t text_line = line_at(pos);
    const size_t before = out_.size();
    text(src_.substr(pos, start - pos), sign, kind != '{');
    if (out_.size() > before) out_.back().line = static_cast<int>(text_line);
    const size_t body = start + 2 + (sign ? 1 : 0);
    if (kind == '#') {
      pos = comment(body);
    } else {
      const size_t after_raw = kind == '%' ? raw(start, body) : std::string::npos;
      pos = after_raw != std::string::npos ? after_raw : tag(body, kind == '%');
    }
  }
  out_.push_back({Tok::kEnd, "", line_at(src_.size())});
  return std::move(out_);
}

size_t Lexer::comment(size_t body) {
  const size_t end = src_.find("#}", body);
  if (end == std::string::npos) error(body, "a comment '{#' is never closed with '#}'");
  const char sign =
      end > body && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
  line_starting_ = false;
  return after_end(end + 2, sign, true);
}

// A {% raw %} block at `start`: its body is text. Returns npos when the tag is not "raw".
size_t Lexer::raw(size_t start, size_t body) {
  size_t p = skip_space(src_, body);
  if (src_.compare(p, 3, "raw") != 0) return std::string::npos;
  p = skip_space(src_, p + 3);
  char sign = 0;
  if (p < src_.size() && src_[p] == '-') sign = src_[p++];
  if (src_.compare(p, 2, "%}") != 0) return std::string::npos;
  p = after_end(p + 2, sign, false);
  out_.push_back({Tok::kBlockBegin, "", line_at(start)});
  out_.push_back({Tok::kName, "raw", line_at(start)});
  out_.push_back({Tok::kBlockEnd, "", line_at(start)});
  for (size_t q = src_.find("{%", p); q != std::string::npos; q = src_.find("{%", q + 1)) {
    size_t r = skip_space(src_, q + 2);
    const char open_sign = r < src_.size() && (src_[r] == '-' || src_[r] == '+') ? src_[r] : 0;
    if (open_sign) r = skip_space(src_, r + 1);
    if (src_.compare(r, 6, "endraw") != 0) continue;
    r = skip_space(src_, r + 6);
    char close_sign = 0;
    if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) close_sign = src_[r++];
    if (src_.compare(r, 2, "%}") != 0) continue;
    text(src_.substr(p, q - p), open_sign, true);
    out_.push_back({Tok::kBlockBegin, "", line_at(q)});
    out_.push_back({Tok::kName, "endraw", line_at(q)});
    out_.push_back({Tok::kBlockEnd, "", line_at(q)});
    return after_end(r + 2, close_sign, true);
  }
  error(start, "'{% raw %}' is never closed with '{% endraw %}'");
}

size_t Lexer::tag(size_t pos, bool block) {
  const size_t open = pos;
  out_.push_back({block ? Tok::kBlockBegin : Tok::kVarBegin, "", line_at(open)});
  std::vector<char> brackets;
  const std::string end = block ? "%}" : "}}";
  while (true) {
    pos = skip_space(src_, pos);
    if (pos >= src_.size())
      error(open, fmt::format("a '{}' tag is never closed with '{}'", block ? "{%" : "{{", end));
    if (brackets.empty()) {
      for (char sign : {'-', '+', '\0'}) {
        const std::string marker = sign ? std::string(1, sign) + end : end;
        if (src_.compare(pos, marker.size(), marker) == 0) {
          out_.push_back({block ? Tok::kBlockEnd : Tok::kVarEnd, "", line_at(pos)});
          return after_end(pos + marker.size(), sign, block);
        }
      }
    }
    const char c = src_[pos];
    if (c == '\'' || c == '"') {
      pos = string_literal(pos);
    } else if (c >= '0' && c <= '9') {
      pos = number(pos);
    } else if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      size_t e = pos;
      while (e < src_.size() &&
             (src_[e] == '_' || std::isalnum(static_cast<unsigned char>(src_[e]))))
        ++e;
      out_.push_back({Tok::kName, src_.substr(pos, e - pos), line_at(pos)});
      pos = e;
    } else {
      static const char* const kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                         "/",  "%",  "~",  "(",  ")",  "[",  "]", "{", "}",
                                         ",",  ".",  ":",  "|",  "=",  "<",  ">", ";"};
      const char* op = nullptr;
      for (const char* o : kOps)
        if (src_.compare(pos, std::char_traits<char>::length(o), o) == 0) {
          op = o;
          break;
        }
      if (!op) error(pos, fmt::format("unexpected character '{}'", src_.substr(pos, 1)));
      const std::string s = op;
      if (s == "(" || s == "[" || s == "{") {
        brackets.push_back(s == "(" ? ')' : s == "[" ? ']' : '}');
      } else if (s == ")" || s == "]" || s == "}") {
        if (brackets.empty()) error(pos, fmt::format("unexpected '{}'", s));
        if (brackets.back() != s[0])
          error(pos, fmt::format("unexpected '{}', expected '{}'", s, brackets.back()));
        brackets.pop_back();
      }
      out_.push_back({Tok::kOp, s, line_at(pos)});
      pos += s.size();
    }
  }
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

size_t Lexer::string_literal(size_t pos) {
  const char quote = src_[pos];
  std::string value;
  size_t p = pos + 1;
  while (true) {
    if (p >= src_.size()) error(pos, "a string literal is never closed");
    const char c = src_[p];
    if (c == quote) break;
    if (c != '\\') {
      value += c;
      ++p;
      continue;
    }
    if (p + 1 >= src_.size()) error(pos, "a string literal is never closed");
    const char e = src_[p + 1];
    p += 2;
    switch (e) {
      case '\n': break;
      case '\\': value += '\\'; break;
      case '\'': value += '\''; break;
      case '"': value += '"'; break;
      case 'a': value += '\a'; break;
      case 'b': value += '\b'; break;
      case 'f': value += '\f'; break;
      case 'n': value += '\n'; break;
      case 'r': value += '\r'; break;
      case 't': value += '\t'; break;
      case 'v': value += '\v'; break;
      case 'x':
      case 'u':
      case 'U': {
        const int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        char32_t cp = 0;
        for (int k = 0; k < digits; ++k) {
          const int h = p + k < src_.size() ? hex_value(src_[p + k]) : -1;
          if (h < 0) error(pos, fmt::format("a truncated \\{} escape in a string literal", e));
          cp = cp * 16 + h;
        }
        if (cp > 0x10ffff) error(pos, "an escape beyond U+10FFFF in a string literal");
        append_utf8(value, cp);
        p += digits;
        break;
      }
      case 'N': error(pos, "\\N{...} escapes in string literals are not supported");
      default:
        if (e >= '0' && e <= '7') {
          char32_t cp = e - '0';
          for (int k = 0; k < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++k)
            cp = cp * 8 + (src_[p++] - '0');
          append_utf8(value, cp);
        } else {
          value += '\\';
          value += e;
        }
    }
  }
  out_.push_back({Tok::kString, std::move(value), line_at(pos)});
  return p + 1;
}

size_t Lexer::number(size_t pos) {
  auto digits = [&](size_t p) {  // \d+(_\d+)*
    if (p >= src_.size() || !std::isdigit(static_cast<unsigned char>(src_[p]))) return p;
    while (p < src_.size()) {
      if (std::isdigit(static_cast<unsigned char>(src_[p])))
        ++p;
      else if (src_[p] == '_' && p + 1 < src_.size() &&
               std::isdigit(static_cast<unsigned char>(src_[p + 1])))
        ++p;
      else
        break;
    }
    return p;
  };
  size_t p = digits(pos);
  bool is_float = false;
  if (p + 1 < src_.size() && src_[p] == '.' &&
      std::isdigit(static_cast<unsigned char>(src_[p + 1]))) {
    p = digits(p + 1);
    is_float = true;
  }
  if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
    size_t q = p + 1;
    if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
    const size_t r = digits(q);
    if (r > q) {
      p = r;
      is_float = true;
    }
  }
  std::string text = src_.substr(pos, p - pos);
  text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
  out_.push_back({is_float ? Tok::kFloat : Tok::kInt, text, line_at(pos)});
  return p;
}

}  // namespace

std::vector<Token> lex(std::string_view source, const std::string& name) {
  std::string normalised;
  normalised.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      normalised += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      normalised += source[i];
    }
  }
  if (!normalised.empty() && normalised.back() == '\n') normalised.pop_back();
  return Lexer(std::move(normalised), name).run();
}

}  // namespace zt::jinja
