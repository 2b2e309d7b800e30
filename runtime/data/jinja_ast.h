// The parsed form of a Jinja template (internal to runtime/data/jinja*.cpp): expression and
// statement trees, each node carrying its template line for errors.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/data/jinja_lexer.h"
#include "runtime/data/jinja_value.h"

namespace zt::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kLiteral,  // value
  kName,     // name
  kList,     // args: the items (also tuples)
  kDict,     // args: key, value, key, value, ...
  kGetAttr,  // args[0].name
  kGetItem,  // args[0][args[1]]
  kSlice,    // args[0][args[1]:args[2]:args[3]], absent parts null
  kCall,     // args[0](args[1:], kwargs)
  kFilter,   // args[0] | name(args[1:], kwargs)
  kTest,     // args[0] is name(args[1:], kwargs); negated: "is not"
  kUnary,    // op ("-", "+", "not") args[0]
  kBinary,   // args[0] op args[1]: + - * / // % ** ~ and or in "not in"
  kCompare,  // args[0] ops[0] args[1] ops[1] args[2] ... (== != < <= > >=)
  kCond,     // args[0] if args[1] else args[2] (args[2] may be null)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;                // kLiteral
  std::string name;           // kName, kGetAttr, kFilter, kTest; the operator otherwise
  std::vector<ExprPtr> args;  // see ExprKind
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare
  bool negated = false;          // kTest
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

enum class StmtKind {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // conds[i] -> bodies[i]; else_body
  kFor,          // for targets in expr [if cond] body [else else_body]
  kSet,          // set targets = expr, or set ns.attr = expr (attr), or block set (body)
  kMacro,        // macro name(params = defaults) body
  kCallBlock,    // call(params) expr body: expr called with caller() rendering body
  kFilterBlock,  // filter: expr is a kFilter chain whose innermost operand is null; body
  kWith,         // with targets[i] = values[i] body
  kBreak,
  kContinue,
  kBlock,  // body (generation blocks: rendered as is)
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;                  // kText; kSet: the attribute of a namespace target
  ExprPtr expr;                      // kOutput, kFor (iterable), kSet, kCallBlock, kFilterBlock
  ExprPtr cond;                      // kFor's filter
  std::vector<std::string> targets;  // kFor, kSet, kWith; kMacro/kCallBlock: parameter names
  std::vector<ExprPtr> values;       // kMacro/kCallBlock: defaults (null: none); kWith: values
  std::vector<ExprPtr> conds;        // kIf
  std::vector<Body> bodies;          // kIf
  Body body;
  Body else_body;
};

struct Limits;

// Parses `tokens` (from lex()); throws zt::Error (kInput) naming `name` and the line on a syntax
// error or a construct this engine does not implement.
Body parse(const std::vector<Token>& tokens, const std::string& name, const Limits& limits);

// True when `name` is a filter / test this engine implements (jinja_filters.cpp).
bool has_filter(const std::string& name);
bool has_test(const std::string& name);

}  // namespace zt::jinja
