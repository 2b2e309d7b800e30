// The Jinja lexer (internal to runtime/data/jinja*.cpp): template source -> tokens, with
// Jinja2's whitespace rules as transformers configures them: trim_blocks (the first newline
// after a block or comment tag is dropped), lstrip_blocks (spaces and tabs before a block or
// comment tag alone on its line are dropped), `-` on a tag side strips all whitespace on that
// side, `+` keeps it; newlines are normalised to "\n" and one trailing newline is dropped
// (keep_trailing_newline false). {% raw %} ... {% endraw %} is text.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace zt::jinja {

enum class Tok {
  kText,        // template data
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // text holds the unescaped value
  kInt,
  kFloat,
  kOp,  // text holds the operator: + - * / // % ** ~ ( ) [ ] { } , . : | = == != < <= > >=
  kEnd,
};

struct Token {
  Tok type;
  std::string text;
  int line;
};

// Throws zt::Error (kInput) naming `name` and the line on an unterminated tag or string or an
// unexpected character.
std::vector<Token> lex(std::string_view source, const std::string& name);

}  // namespace zt::jinja
