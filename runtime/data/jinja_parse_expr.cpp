// The Jinja parser's expressions, loosest binding first. See jinja_parser.h.
#include "runtime/data/jinja_parser.h"

namespace zt::jinja {

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
    if (skip_op(")")) {
      ExprPtr empty = make(ExprKind::kList, t.line);
      empty->name = "tuple";
      return empty;
    }
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
  e->name = "tuple";
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

}  // namespace zt::jinja
