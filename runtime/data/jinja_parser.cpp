// The Jinja parser: statements (if, for, set, macro, call, filter, with, raw, generation,
// break, continue) and the refusals of what this engine does not implement. Expressions:
// jinja_parse_expr.cpp.
#include "runtime/data/jinja_parser.h"

namespace zt::jinja {

// Statements until one of `ends` ({% end %} names) opens a tag; its name is stored in `end`
// and consumed (the rest of that tag is the caller's). With no `ends`, until the end.
Body Parser::parse_body(std::initializer_list<const char*> ends, std::string* end) {
  Deeper guard(*this);
  Body body;
  while (true) {
    const Token& t = cur();
    if (t.type == Tok::kEnd) {
      if (ends.size() == 0) return body;
      std::string names;
      for (const char* e : ends) names += std::string(names.empty() ? "" : " or ") + "'" + e + "'";
      error(fmt::format("the template ends before {}", names));
    }
    if (t.type == Tok::kText) {
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kText;
      s->line = t.line;
      s->text = t.text;
      body.push_back(std::move(s));
      advance();
    } else if (t.type == Tok::kVarBegin) {
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kOutput;
      s->line = t.line;
      advance();
      s->expr = parse_tuple();
      if (cur().type != Tok::kVarEnd)
        error(fmt::format("expected '}}}}', found {}", describe(cur())));
      advance();
      body.push_back(std::move(s));
    } else if (t.type == Tok::kBlockBegin) {
      advance();
      if (cur().type == Tok::kName)
        for (const char* e : ends)
          if (cur().text == e) {
            *end = e;
            advance();
            return body;
          }
      body.push_back(parse_statement());
    } else {
      error(fmt::format("unexpected {}", describe(t)));
    }
  }
}

std::unique_ptr<Stmt> Parser::parse_statement() {
  const int line = cur().line;
  if (cur().type != Tok::kName)
    error(fmt::format("expected a tag name, found {}", describe(cur())));
  const std::string tag = cur().text;
  if (tag == "include" || tag == "import" || tag == "from" || tag == "extends")
    error(fmt::format("'{}' is not supported: a chat template may not load other templates", tag));
  if (tag == "block")
    error("'block' is not supported: a chat template may not use template inheritance");
  advance();
  if (tag == "if") return parse_if(line);
  if (tag == "for") return parse_for(line);
  if (tag == "set") return parse_set(line);
  if (tag == "macro") return parse_macro(line, false);
  if (tag == "call") return parse_macro(line, true);
  if (tag == "filter") return parse_filter_block(line);
  if (tag == "with") return parse_with(line);
  auto s = std::make_unique<Stmt>();
  s->line = line;
  if (tag == "break" || tag == "continue") {
    if (loop_depth_ == 0) error(fmt::format("'{}' outside a for loop", tag));
    s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
    expect_block_end();
    return s;
  }
  if (tag == "raw" || tag == "generation") {  // raw: the lexer made its body one text token
    s->kind = StmtKind::kBlock;
    expect_block_end();
    std::string end;
    const std::string end_tag = "end" + tag;
    s->body = parse_body({end_tag.c_str()}, &end);
    expect_block_end();
    return s;
  }
  error(fmt::format("unknown or unsupported tag '{}'", tag));
}

std::unique_ptr<Stmt> Parser::parse_if(int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::kIf;
  s->line = line;
  while (true) {
    s->conds.push_back(parse_expression(false));
    expect_block_end();
    std::string end;
    s->bodies.push_back(parse_body({"elif", "else", "endif"}, &end));
    if (end == "elif") continue;
    if (end == "else") {
      expect_block_end();
      s->else_body = parse_body({"endif"}, &end);
    }
    expect_block_end();
    return s;
  }
}

// Assignment targets: a name, or names separated by commas, optionally in parentheses.
std::vector<std::string> Parser::parse_targets() {
  std::vector<std::string> names;
  const bool paren = skip_op("(");
  do {
    if (paren && is_op(")")) break;
    names.push_back(expect_name());
  } while (skip_op(","));
  if (paren) expect_op(")");
  for (const auto& n : names)
    if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None")
      error(fmt::format("cannot assign to '{}'", n));
  return names;
}

std::unique_ptr<Stmt> Parser::parse_for(int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::kFor;
  s->line = line;
  s->targets = parse_targets();
  if (!skip_name("in")) error(fmt::format("expected 'in', found {}", describe(cur())));
  s->expr = parse_tuple(false);
  if (skip_name("if")) s->cond = parse_expression();
  if (is_name("recursive")) error("recursive for loops are not supported");
  expect_block_end();
  std::string end;
  ++loop_depth_;
  s->body = parse_body({"else", "endfor"}, &end);
  --loop_depth_;
  if (end == "else") {
    expect_block_end();
    s->else_body = parse_body({"endfor"}, &end);
  }
  expect_block_end();
  return s;
}

std::unique_ptr<Stmt> Parser::parse_set(int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::kSet;
  s->line = line;
  if (cur().type == Tok::kName && peek().type == Tok::kOp && peek().text == ".") {
    s->targets.push_back(expect_name());
    advance();
    s->text = expect_name();
  } else {
    s->targets = parse_targets();
  }
  if (skip_op("=")) {
    s->expr = parse_tuple();
    expect_block_end();
    return s;
  }
  if (!s->text.empty() || s->targets.size() != 1)
    error("a block set assigns one name: {% set name %}...{% endset %}");
  if (is_op("|")) error("filters on a block set are not supported");
  expect_block_end();
  std::string end;
  s->body = parse_body({"endset"}, &end);
  expect_block_end();
  return s;
}

// {% macro name(a, b=1) %} or {% call(a) expr %}: parameters and their defaults.
std::unique_ptr<Stmt> Parser::parse_macro(int line, bool is_call) {
  auto s = std::make_unique<Stmt>();
  s->kind = is_call ? StmtKind::kCallBlock : StmtKind::kMacro;
  s->line = line;
  if (!is_call) s->text = expect_name();
  if (!is_call || is_op("(")) {
    expect_op("(");
    while (!is_op(")")) {
      if (!s->targets.empty()) expect_op(",");
      if (is_op(")")) break;
      s->targets.push_back(expect_name());
      s->values.push_back(skip_op("=") ? parse_expression() : nullptr);
    }
    expect_op(")");
  }
  if (is_call) {
    s->expr = parse_expression();
    if (s->expr->kind != ExprKind::kCall) error("'call' needs a call expression: {% call m() %}");
  }
  expect_block_end();
  const int saved_loops = loop_depth_;
  loop_depth_ = 0;
  std::string end;
  s->body = parse_body({is_call ? "endcall" : "endmacro"}, &end);
  loop_depth_ = saved_loops;
  expect_block_end();
  return s;
}

std::unique_ptr<Stmt> Parser::parse_filter_block(int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::kFilterBlock;
  s->line = line;
  ExprPtr chain = parse_filter(nullptr);
  while (skip_op("|")) chain = parse_filter(std::move(chain));
  s->expr = std::move(chain);
  expect_block_end();
  std::string end;
  s->body = parse_body({"endfilter"}, &end);
  expect_block_end();
  return s;
}

std::unique_ptr<Stmt> Parser::parse_with(int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::kWith;
  s->line = line;
  while (cur().type != Tok::kBlockEnd) {
    if (!s->targets.empty()) expect_op(",");
    s->targets.push_back(expect_name());
    expect_op("=");
    s->values.push_back(parse_expression());
  }
  expect_block_end();
  std::string end;
  s->body = parse_body({"endwith"}, &end);
  expect_block_end();
  return s;
}

Body parse(const std::vector<Token>& tokens, const std::string& name, const Limits& limits) {
  return Parser(tokens, name, limits).parse_template();
}

}  // namespace zt::jinja
