// The Jinja parser's class (internal to jinja_parser.cpp, statements, and
// jinja_parse_expr.cpp, expressions): tokens -> statement and expression trees, with Jinja2's
// operator precedence (loosest first): `x if c else y`, or, and, not, comparisons and in,
// + -, ~, * / // %, **, unary - +, then postfix access, calls, filters and tests.
#pragma once

#include <string>
#include <vector>

#include <fmt/format.h>

#include "runtime/data/jinja.h"
#include "runtime/data/jinja_ast.h"
#include "runtime/status.h"

namespace zt::jinja {

inline ExprPtr make(ExprKind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const std::string& name, const Limits& limits)
      : toks_(tokens), name_(name), limits_(limits) {}

  Body parse_template() {
    std::string end;
    Body body = parse_body({}, &end);
    return body;
  }

 private:
  // Nesting guard: blocks and sub-expressions deeper than limits.max_depth are refused.
  struct Deeper {
    explicit Deeper(Parser& p) : p(p) {
      if (++p.depth_ > p.limits_.max_depth)
        p.error(fmt::format("nested more than {} levels deep", p.limits_.max_depth));
    }
    ~Deeper() { --p.depth_; }
    Parser& p;
  };

  [[noreturn]] void error(const std::string& what) const {
    throw_input(fmt::format("template {} line {}: {}", name_, cur().line, what));
  }
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
  void advance() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool is_op(const char* op) const { return cur().type == Tok::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::kName && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    advance();
    return true;
  }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case Tok::kText: return "template text";
      case Tok::kVarBegin: return "'{{'";
      case Tok::kVarEnd: return "'}}'";
      case Tok::kBlockBegin: return "'{%'";
      case Tok::kBlockEnd: return "'%}'";
      case Tok::kEnd: return "the end of the template";
      case Tok::kString: return "a string";
      default: return "'" + t.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) error(fmt::format("expected '{}', found {}", op, describe(cur())));
  }
  std::string expect_name() {
    if (cur().type != Tok::kName) error(fmt::format("expected a name, found {}", describe(cur())));
    std::string n = cur().text;
    advance();
    return n;
  }
  void expect_block_end() {
    if (cur().type != Tok::kBlockEnd)
      error(fmt::format("expected the end of the statement '%}}', found {}", describe(cur())));
    advance();
  }

  Body parse_body(std::initializer_list<const char*> ends, std::string* end);
  std::unique_ptr<Stmt> parse_statement();
  std::unique_ptr<Stmt> parse_if(int line);
  std::unique_ptr<Stmt> parse_for(int line);
  std::unique_ptr<Stmt> parse_set(int line);
  std::unique_ptr<Stmt> parse_macro(int line, bool is_call);
  std::unique_ptr<Stmt> parse_filter_block(int line);
  std::unique_ptr<Stmt> parse_with(int line);
  std::vector<std::string> parse_targets();

  ExprPtr parse_expression(bool with_cond = true);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter = true);
  ExprPtr parse_primary();
  ExprPtr parse_tuple(bool with_cond = true);
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_filter(ExprPtr node);
  ExprPtr parse_test(ExprPtr node);
  void parse_call_args(Expr& call);
  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, int line) {
    auto e = make(ExprKind::kBinary, line);
    e->name = op;
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return e;
  }

  const std::vector<Token>& toks_;
  const std::string& name_;
  const Limits& limits_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;  // for break/continue
};

}  // namespace zt::jinja
