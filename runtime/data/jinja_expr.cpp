// The Jinja evaluator's expressions: names, literals, access, slices, calls, operators.
#include <fmt/format.h>

#include "runtime/data/jinja_eval.h"
#include "runtime/status.h"

namespace zt::jinja {
namespace {

bool is_unsafe_method(const Value& obj, const std::string& name) {
  static const char* const kList[] = {"append", "extend",  "insert", "pop", "remove",
                                      "sort",   "reverse", "clear",  "copy"};
  static const char* const kDict[] = {"update", "pop", "popitem", "setdefault", "clear", "copy"};
  if (obj.is_list())
    for (const char* m : kList)
      if (name == m) return true;
  if (obj.is_dict())
    for (const char* m : kDict)
      if (name == m) return true;
  return false;
}

// Python's slice indices for a sequence of `n` items.
std::vector<int64_t> slice_indices(int64_t n, const Value& start, const Value& stop,
                                   const Value& step) {
  auto idx = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_none()) return std::nullopt;
    if (v.is_bool() || v.is_int()) return v.as_int();
    fail(fmt::format("slice indices must be integers or None, not '{}'", v.type_name()));
  };
  const int64_t st = idx(step).value_or(1);
  if (st == 0) fail("slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) x += n;
    if (st > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t b = clamp(idx(start), st > 0 ? 0 : n - 1);
  const int64_t e = clamp(idx(stop), st > 0 ? n : -1);
  std::vector<int64_t> out;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) out.push_back(i);
  return out;
}

}  // namespace

Value Evaluator::eval(const Expr& e) {
  try {
    charge(1);
    const Nest nest(*this);
    return eval_inner(e);
  } catch (const EvalError& err) {
    error(e.line, err.message);
  }
}

CallArgs Evaluator::eval_args(const Expr& e, size_t first, const std::string& what) {
  CallArgs args;
  args.line = e.line;
  args.what = what;
  for (size_t i = first; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i]));
  for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, eval(*v));
  return args;
}

Value Evaluator::eval_inner(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kLiteral: return e.value;
    case ExprKind::kName: return lookup(e.name);
    case ExprKind::kList: {
      List items;
      for (const auto& a : e.args) items.push_back(eval(*a));
      return e.name == "tuple" ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
    case ExprKind::kDict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        const Value k = eval(*e.args[i]);
        if (!k.is_string())
          fail(fmt::format("dict keys must be strings here, not '{}'", k.type_name()));
        d.set(k.as_string(), eval(*e.args[i + 1]));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::kGetAttr: return getattr(eval(*e.args[0]), e.name);
    case ExprKind::kGetItem: return getitem(eval(*e.args[0]), eval(*e.args[1]));
    case ExprKind::kSlice: return eval_slice(e);
    case ExprKind::kCall: {
      const Value fn = eval(*e.args[0]);
      CallArgs args = eval_args(e, 1, fn.is_callable() ? fn.as_callable().name + "()" : "call");
      return call(fn, args);
    }
    case ExprKind::kFilter: {
      Value operand = e.args[0] ? eval(*e.args[0]) : *block_operand_;
      CallArgs args = eval_args(e, 1, "filter '" + e.name + "'");
      return filter(e.name, operand, args);
    }
    case ExprKind::kTest: {
      const Value operand = eval(*e.args[0]);
      CallArgs args = eval_args(e, 1, "test '" + e.name + "'");
      return Value::boolean(test(e.name, operand, args) != e.negated);
    }
    case ExprKind::kUnary: {
      const Value v = eval(*e.args[0]);
      if (e.name == "not") return Value::boolean(!v.truthy());
      if (v.is_undefined()) fail(v.hint());
      if (!v.is_number())
        fail(fmt::format("bad operand type for unary {}: '{}'", e.name, v.type_name()));
      if (e.name == "+") return v.is_bool() ? Value::integer(v.as_int()) : v;
      if (v.is_float()) return Value::floating(-v.as_double());
      if (v.as_int() == INT64_MIN) fail("integer overflow");
      return Value::integer(-v.as_int());
    }
    case ExprKind::kBinary: return eval_binary(e);
    case ExprKind::kCompare: return eval_compare(e);
    case ExprKind::kCond:
      if (eval(*e.args[1]).truthy()) return eval(*e.args[0]);
      if (e.args[2]) return eval(*e.args[2]);
      return Value::undefined(fmt::format(
          "the inline if-expression on line {} evaluated to false and no else section was defined",
          e.line));
  }
  fail("unknown expression");
}

Value Evaluator::eval_binary(const Expr& e) {
  const Value a = eval(*e.args[0]);
  if (e.name == "and") return a.truthy() ? eval(*e.args[1]) : a;
  if (e.name == "or") return a.truthy() ? a : eval(*e.args[1]);
  const Value b = eval(*e.args[1]);
  if (e.name == "~") {
    std::string s = to_str(a);
    s += to_str(b);
    check_size(s.size(), "a string");
    charge(static_cast<int64_t>(s.size() / 256));
    return Value::string(std::move(s));
  }
  Value r = arith(e.name, a, b);
  if (r.is_string()) {
    check_size(r.as_string().size(), "a string");
    charge(static_cast<int64_t>(r.as_string().size() / 256));
  } else if (r.is_list()) {
    check_size(r.as_list().size(), "a list");
    charge(static_cast<int64_t>(r.as_list().size()));
  }
  return r;
}

Value Evaluator::eval_compare(const Expr& e) {
  Value left = eval(*e.args[0]);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.args[i + 1]);
    const std::string& op = e.ops[i];
    bool ok;
    if (op == "==")
      ok = equals(left, right);
    else if (op == "!=")
      ok = !equals(left, right);
    else if (op == "in")
      ok = contains(right, left);
    else if (op == "notin")
      ok = !contains(right, left);
    else {
      if (left.is_undefined()) fail(left.hint());
      if (right.is_undefined()) fail(right.hint());
      if (op == "<")
        ok = less(left, right);
      else if (op == ">")
        ok = less(right, left);
      else if (op == "<=")
        ok = !less(right, left);
      else
        ok = !less(left, right);
    }
    if (!ok) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Evaluator::eval_slice(const Expr& e) {
  const Value obj = eval(*e.args[0]);
  Value parts[3];
  for (int i = 0; i < 3; ++i) parts[i] = e.args[i + 1] ? eval(*e.args[i + 1]) : Value::none();
  if (obj.is_undefined()) fail(obj.hint());
  if (obj.is_string()) {
    const std::u32string s = decode_utf8(obj.as_string());
    std::u32string out;
    for (int64_t i : slice_indices(static_cast<int64_t>(s.size()), parts[0], parts[1], parts[2]))
      out += s[i];
    charge(static_cast<int64_t>(out.size() / 256));
    return Value::string(encode_utf8(out));
  }
  if (obj.is_list()) {
    const List& l = obj.as_list();
    List out;
    for (int64_t i : slice_indices(static_cast<int64_t>(l.size()), parts[0], parts[1], parts[2]))
      out.push_back(l[i]);
    charge(static_cast<int64_t>(out.size()));
    return Value::list(std::move(out));
  }
  fail(fmt::format("'{}' object is not subscriptable", obj.type_name()));
}

Value Evaluator::getattr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail(obj.hint());
  if (!name.empty() && name[0] == '_')
    fail(fmt::format("access to attribute '{}' of '{}' object is unsafe", name, obj.type_name()));
  if (is_unsafe_method(obj, name))
    fail(
        fmt::format("access to attribute '{}' of '{}' object is unsafe (templates may not "
                    "modify their input)",
                    name, obj.type_name()));
  Value m = method(*this, obj, name);
  if (!m.is_undefined()) return m;
  if (obj.is_dict() || obj.is_object()) {
    if (const Value* v = obj.as_dict().find(name)) return *v;
  }
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", obj.type_name(), name));
}

Value Evaluator::getitem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail(obj.hint());
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      const List& l = obj.as_list();
      const int64_t n = static_cast<int64_t>(l.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return l[i];
    } else {
      const std::u32string s = decode_utf8(obj.as_string());
      const int64_t n = static_cast<int64_t>(s.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return Value::string(encode_utf8(s.substr(i, 1)));
    }
    return Value::undefined(
        fmt::format("'{} object' has no element {}", obj.type_name(), key.as_int()));
  }
  if (key.is_string()) {
    if (obj.is_dict() || obj.is_object()) {
      if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
    }
    return getattr(obj, key.as_string());
  }
  return Value::undefined(
      fmt::format("'{} object' has no element {}", obj.type_name(), to_repr(key)));
}

}  // namespace zt::jinja
