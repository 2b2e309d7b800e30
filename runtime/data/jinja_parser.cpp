// The Jinja parser: tokens -> statement and expression trees, with Jinja2's operator
// precedence (loosest first): `x if c else y`, or, and, not, comparisons and in, + -, ~,
// * / // %, **, unary - +, then postfix access, calls, filters and tests.
#include <fmt/format.h>

#include "runtime/data/jinja.h"
#include "runtime/data/jinja_ast.h"
#include "runtime/status.h"

namespace zt::jinja {
namespace {

ExprPtr make(ExprKind kind, int line) {
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

// ---- expressions ----

ExprPtr Parser::parse_expression(bool with_cond) {
  Deeper guard(*this);
  if (!with_cond) return parse_or();
  ExprPtr node = parse_or();
  while (is_name("if")) {
    const int line = cur().line;
    advance();
    auto c = make(ExprKind::kCond, line);
    c->args.push_back(std::move(node));
    c->args.push_back(parse_or());
    c->args.push_back(skip_name("else") ? parse_expression() : nullptr);
    node = std::move(c);
  }
  return node;
}

ExprPtr Parser::parse_or() {
  ExprPtr left = parse_and();
  while (is_name("or")) {
    const int line = cur().line;
    advance();
    left = binary("or", std::move(left), parse_and(), line);
  }
  return left;
}

ExprPtr Parser::parse_and() {
  ExprPtr left = parse_not();
  while (is_name("and")) {
    const int line = cur().line;
    advance();
    left = binary("and", std::move(left), parse_not(), line);
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    Deeper guard(*this);
    auto e = make(ExprKind::kUnary, cur().line);
    advance();
    e->name = "not";
    e->args.push_back(parse_not());
    return e;
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  const int line = cur().line;
  ExprPtr first = parse_math1();
  ExprPtr cmp;
  while (true) {
    std::string op;
    if (cur().type == Tok::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                   cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
      op = cur().text;
      advance();
    } else if (is_name("in")) {
      op = "in";
      advance();
    } else if (is_name("not") && peek().type == Tok::kName && peek().text == "in") {
      op = "notin";
      advance();
      advance();
    } else {
      break;
    }
    if (!cmp) {
      cmp = make(ExprKind::kCompare, line);
      cmp->args.push_back(std::move(first));
    }
    cmp->ops.push_back(op);
    cmp->args.push_back(parse_math1());
  }
  return cmp ? std::move(cmp) : std::move(first);
}

ExprPtr Parser::parse_math1() {
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    const std::string op = cur().text;
    const int line = cur().line;
    advance();
    left = binary(op, std::move(left), parse_concat(), line);
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  ExprPtr left = parse_math2();
  while (is_op("~")) {
    const int line = cur().line;
    advance();
    left = binary("~", std::move(left), parse_math2(), line);
  }
  return left;
}

ExprPtr Parser::parse_math2() {
  ExprPtr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const std::string op = cur().text;
    const int line = cur().line;
    advance();
    left = binary(op, std::move(left), parse_pow(), line);
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  ExprPtr left = parse_unary();
  while (is_op("**")) {
    const int line = cur().line;
    advance();
    left = binary("**", std::move(left), parse_unary(), line);
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  Deeper guard(*this);
  ExprPtr node;
  if (is_op("-") || is_op("+")) {
    node = make(ExprKind::kUnary, cur().line);
    node->name = cur().text;
    advance();
    node->args.push_back(parse_unary(false));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr Parser::parse_primary() {
  const Token& t = cur();
  if (t.type == Tok::kName) {
    ExprPtr e = make(ExprKind::kLiteral, t.line);
    if (t.text == "true" || t.text == "True")
      e->value = Value::boolean(true);
    else if (t.text == "false" || t.text == "False")
      e->value = Value::boolean(false);
    else if (t.text == "none" || t.text == "None")
      e->value = Value::none();
    else {
      e->kind = ExprKind::kName;
      e->name = t.text;
    }
    advance();
    return e;
  }
  if (t.type == Tok::kString) {
    ExprPtr e = make(ExprKind::kLiteral, t.line);
    std::string s;
    while (cur().type == Tok::kString) {
      s += cur().text;
      advance();
    }
    e->value = Value::string(std::move(s));
    return e;
  }
  if (t.type == Tok::kInt || t.type == Tok::kFloat) {
    ExprPtr e = make(ExprKind::kLiteral, t.line);
    try {
      e->value = t.type == Tok::kInt ? Value::integer(std::stoll(t.text))
                                     : Value::floating(std::stod(t.text));
    } catch (const std::exception&) {
      error(fmt::format("the number {} is out of range", t.text));
    }
    advance();
    return e;
  }
  if (skip_op("(")) {
    if (skip_op(")")) return make(ExprKind::kList, t.line);
    ExprPtr e = parse_tuple();
    expect_op(")");
    return e;
  }
  if (is_op("[") || is_op("{")) {
    const bool is_list = is_op("[");
    ExprPtr e = make(is_list ? ExprKind::kList : ExprKind::kDict, t.line);
    advance();
    const char* close = is_list ? "]" : "}";
    while (!is_op(close)) {
      if (!e->args.empty()) expect_op(",");
      if (is_op(close)) break;
      e->args.push_back(parse_expression());
      if (!is_list) {
        expect_op(":");
        e->args.push_back(parse_expression());
      }
    }
    advance();
    return e;
  }
  error(fmt::format("unexpected {}", describe(t)));
}

// Expressions separated by commas: one alone is itself, several (or a trailing comma) a tuple.
ExprPtr Parser::parse_tuple(bool with_cond) {
  const int line = cur().line;
  std::vector<ExprPtr> items;
  bool tuple = false;
  while (true) {
    if (!items.empty()) {
      if (!skip_op(",")) break;
      tuple = true;
      if (cur().type == Tok::kVarEnd || cur().type == Tok::kBlockEnd || is_op(")") ||
          is_name("if") || is_name("recursive"))
        break;
    }
    items.push_back(parse_expression(with_cond));
  }
  if (!tuple) return std::move(items[0]);
  ExprPtr e = make(ExprKind::kList, line);
  e->args = std::move(items);
  return e;
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is_op(".")) {
      const int line = cur().line;
      advance();
      if (cur().type == Tok::kInt) {
        auto e = make(ExprKind::kGetItem, line);
        e->args.push_back(std::move(node));
        auto index = make(ExprKind::kLiteral, line);
        index->value = Value::integer(std::stoll(cur().text));
        e->args.push_back(std::move(index));
        advance();
        node = std::move(e);
        continue;
      }
      auto e = make(ExprKind::kGetAttr, line);
      e->name = expect_name();
      e->args.push_back(std::move(node));
      node = std::move(e);
    } else if (is_op("[")) {
      node = parse_subscript(std::move(node));
    } else if (is_op("(")) {
      auto e = make(ExprKind::kCall, cur().line);
      e->args.push_back(std::move(node));
      parse_call_args(*e);
      node = std::move(e);
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (is_op("|")) {
      advance();
      node = parse_filter(std::move(node));
    } else if (is_name("is")) {
      node = parse_test(std::move(node));
    } else if (is_op("(")) {
      auto e = make(ExprKind::kCall, cur().line);
      e->args.push_back(std::move(node));
      parse_call_args(*e);
      node = std::move(e);
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr node) {
  const int line = cur().line;
  advance();  // [
  ExprPtr parts[3];
  int part = 0;
  bool slice = false;
  while (!is_op("]")) {
    if (is_op(":")) {
      advance();
      slice = true;
      if (++part > 2) error("a slice has at most three parts");
      continue;
    }
    if (parts[part]) error(fmt::format("expected ']', found {}", describe(cur())));
    parts[part] = parse_expression();
  }
  advance();
  if (!slice) {
    if (!parts[0]) error("an empty subscript '[]'");
    auto e = make(ExprKind::kGetItem, line);
    e->args.push_back(std::move(node));
    e->args.push_back(std::move(parts[0]));
    return e;
  }
  auto e = make(ExprKind::kSlice, line);
  e->args.push_back(std::move(node));
  for (auto& p : parts) e->args.push_back(std::move(p));
  return e;
}

ExprPtr Parser::parse_filter(ExprPtr node) {
  auto e = make(ExprKind::kFilter, cur().line);
  e->name = expect_name();
  if (!has_filter(e->name)) error(fmt::format("unknown or unsupported filter '{}'", e->name));
  e->args.push_back(std::move(node));
  if (is_op("(")) parse_call_args(*e);
  return e;
}

ExprPtr Parser::parse_test(ExprPtr node) {
  auto e = make(ExprKind::kTest, cur().line);
  advance();  // is
  e->negated = skip_name("not");
  e->name = expect_name();
  if (!has_test(e->name)) error(fmt::format("unknown or unsupported test '{}'", e->name));
  e->args.push_back(std::move(node));
  if (is_op("(")) {
    parse_call_args(*e);
  } else if ((cur().type == Tok::kName || cur().type == Tok::kString || cur().type == Tok::kInt ||
              cur().type == Tok::kFloat || is_op("[") || is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) error("tests cannot be chained with 'is'");
    e->args.push_back(parse_postfix(parse_primary()));
  }
  return e;
}

void Parser::parse_call_args(Expr& call) {
  expect_op("(");
  bool first = true;
  while (!is_op(")")) {
    if (!first) expect_op(",");
    first = false;
    if (is_op(")")) break;
    if (is_op("*") || is_op("**")) error("*args and **kwargs in calls are not supported");
    if (cur().type == Tok::kName && peek().type == Tok::kOp && peek().text == "=") {
      std::string key = cur().text;
      advance();
      advance();
      call.kwargs.emplace_back(std::move(key), parse_expression());
    } else {
      if (!call.kwargs.empty()) error("a positional argument follows a keyword argument");
      call.args.push_back(parse_expression());
    }
  }
  advance();
}

}  // namespace

Body parse(const std::vector<Token>& tokens, const std::string& name, const Limits& limits) {
  return Parser(tokens, name, limits).parse_template();
}

}  // namespace zt::jinja
