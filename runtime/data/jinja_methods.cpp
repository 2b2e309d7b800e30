// Jinja tests, the Python methods templates call on strings, dicts and lists, and the globals
// transformers' environment defines (range, namespace, dict, raise_exception, strftime_now).
#include <algorithm>
#include <ctime>
#include <map>

#include <fmt/format.h>

#include "runtime/data/jinja_eval.h"

namespace zt::jinja {
namespace {

using Test = bool (*)(Evaluator&, const Value&, CallArgs&);

Value arg1(const CallArgs& a, const char* name) {
  a.check(1, {name});
  const Value v = a.get(0, name);
  if (v.is_undefined()) fail(fmt::format("{} needs an argument", a.what));
  return v;
}

bool t_defined(Evaluator&, const Value& v, CallArgs&) { return !v.is_undefined(); }
bool t_undefined(Evaluator&, const Value& v, CallArgs&) { return v.is_undefined(); }
bool t_none(Evaluator&, const Value& v, CallArgs&) { return v.is_none(); }
bool t_boolean(Evaluator&, const Value& v, CallArgs&) { return v.is_bool(); }
bool t_true(Evaluator&, const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); }
bool t_false(Evaluator&, const Value& v, CallArgs&) { return v.is_bool() && !v.as_bool(); }
bool t_integer(Evaluator&, const Value& v, CallArgs&) { return v.is_int(); }
bool t_float(Evaluator&, const Value& v, CallArgs&) { return v.is_float(); }
bool t_number(Evaluator&, const Value& v, CallArgs&) { return v.is_number(); }
bool t_string(Evaluator&, const Value& v, CallArgs&) { return v.is_string(); }
bool t_mapping(Evaluator&, const Value& v, CallArgs&) { return v.is_dict(); }
bool t_callable(Evaluator&, const Value& v, CallArgs&) { return v.is_callable(); }
bool t_iterable(Evaluator&, const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
}
bool t_sequence(Evaluator& ev, const Value& v, CallArgs& a) { return t_iterable(ev, v, a); }
bool t_even(Evaluator&, const Value& v, CallArgs&) {
  if (!v.is_int() && !v.is_bool())
    fail(fmt::format("test 'even' needs an integer, not '{}'", v.type_name()));
  return v.as_int() % 2 == 0;
}
bool t_odd(Evaluator& ev, const Value& v, CallArgs& a) { return !t_even(ev, v, a); }
bool t_divisibleby(Evaluator&, const Value& v, CallArgs& a) {
  const Value n = arg1(a, "num");
  const Value m = arith("%", v, n);
  return m.is_float() ? m.as_double() == 0 : m.as_int() == 0;
}
bool t_sameas(Evaluator&, const Value& v, CallArgs& a) {
  const Value o = arg1(a, "other");
  return v.kind() == o.kind() && equals(v, o);
}
bool t_eq(Evaluator&, const Value& v, CallArgs& a) { return equals(v, arg1(a, "b")); }
bool t_ne(Evaluator&, const Value& v, CallArgs& a) { return !equals(v, arg1(a, "b")); }
bool t_lt(Evaluator&, const Value& v, CallArgs& a) { return less(v, arg1(a, "b")); }
bool t_gt(Evaluator&, const Value& v, CallArgs& a) { return less(arg1(a, "b"), v); }
bool t_le(Evaluator&, const Value& v, CallArgs& a) { return !less(arg1(a, "b"), v); }
bool t_ge(Evaluator&, const Value& v, CallArgs& a) { return !less(v, arg1(a, "b")); }
bool t_in(Evaluator&, const Value& v, CallArgs& a) { return contains(arg1(a, "seq"), v); }
bool t_lower(Evaluator&, const Value& v, CallArgs&) {
  const std::u32string s = decode_utf8(to_str(v));
  return std::all_of(s.begin(), s.end(), [](char32_t c) { return to_lower(c) == c; });
}
bool t_upper(Evaluator&, const Value& v, CallArgs&) {
  const std::u32string s = decode_utf8(to_str(v));
  return std::all_of(s.begin(), s.end(), [](char32_t c) { return to_upper(c) == c; });
}

const std::map<std::string, Test>& tests() {
  static const std::map<std::string, Test> table = {
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"boolean", t_boolean},
      {"true", t_true},
      {"false", t_false},
      {"integer", t_integer},
      {"float", t_float},
      {"number", t_number},
      {"string", t_string},
      {"mapping", t_mapping},
      {"iterable", t_iterable},
      {"sequence", t_sequence},
      {"callable", t_callable},
      {"even", t_even},
      {"odd", t_odd},
      {"divisibleby", t_divisibleby},
      {"sameas", t_sameas},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"==", t_eq},
      {"ne", t_ne},
      {"!=", t_ne},
      {"lt", t_lt},
      {"lessthan", t_lt},
      {"<", t_lt},
      {"le", t_le},
      {"<=", t_le},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {">", t_gt},
      {"ge", t_ge},
      {">=", t_ge},
      {"in", t_in},
      {"lower", t_lower},
      {"upper", t_upper},
  };
  return table;
}

// ---- str methods ----

std::u32string strip_set(const CallArgs& a, bool* by_space) {
  a.check(1, {"chars"});
  const Value chars = a.get(0, "chars", Value::none());
  *by_space = chars.is_none();
  if (!chars.is_none() && !chars.is_string())
    fail(fmt::format("strip arg must be None or str, not '{}'", chars.type_name()));
  return chars.is_string() ? decode_utf8(chars.as_string()) : U"";
}

Value strip(const std::string& str, const CallArgs& a, bool left, bool right) {
  bool by_space;
  const std::u32string set = strip_set(a, &by_space);
  const std::u32string s = decode_utf8(str);
  auto drop = [&](char32_t c) { return by_space ? is_space(c) : set.find(c) != set.npos; };
  size_t b = 0, e = s.size();
  while (left && b < e && drop(s[b])) ++b;
  while (right && e > b && drop(s[e - 1])) --e;
  return Value::string(encode_utf8(s.substr(b, e - b)));
}

Value split(Evaluator& ev, const std::string& s, const CallArgs& a) {
  a.check(2, {"sep", "maxsplit"});
  const Value sep = a.get(0, "sep", Value::none());
  int64_t maxsplit = a.get(1, "maxsplit", Value::integer(-1)).as_int();
  List out;
  if (sep.is_none()) {
    const std::u32string u = decode_utf8(s);
    size_t i = 0;
    while (true) {
      while (i < u.size() && is_space(u[i])) ++i;
      if (i >= u.size()) break;
      if (maxsplit == 0) {
        size_t e = u.size();
        while (e > i && is_space(u[e - 1])) --e;
        out.push_back(Value::string(encode_utf8(u.substr(i, e - i))));
        break;
      }
      size_t j = i;
      while (j < u.size() && !is_space(u[j])) ++j;
      out.push_back(Value::string(encode_utf8(u.substr(i, j - i))));
      if (maxsplit > 0) --maxsplit;
      i = j;
    }
  } else {
    if (!sep.is_string()) fail(fmt::format("must be str or None, not {}", sep.type_name()));
    const std::string& d = sep.as_string();
    if (d.empty()) fail("empty separator");
    size_t pos = 0;
    while (maxsplit != 0) {
      const size_t hit = s.find(d, pos);
      if (hit == std::string::npos) break;
      out.push_back(Value::string(s.substr(pos, hit - pos)));
      pos = hit + d.size();
      if (maxsplit > 0) --maxsplit;
    }
    out.push_back(Value::string(s.substr(pos)));
  }
  ev.charge(static_cast<int64_t>(out.size()));
  return Value::list(std::move(out));
}

bool affix(const std::string& s, const CallArgs& a, bool prefix) {
  a.check(1, {});
  const Value p = a.get(0, "prefix");
  List options = p.is_list() ? p.as_list() : List{p};
  for (const Value& o : options) {
    if (!o.is_string())
      fail(fmt::format("{} arg must be str or a tuple of str, not {}",
                       prefix ? "startswith" : "endswith", o.type_name()));
    const std::string& x = o.as_string();
    if (x.size() > s.size()) continue;
    if (prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0)
      return true;
  }
  return false;
}

std::string py_title(const std::string& s) {
  std::u32string u = decode_utf8(s);
  bool prev_cased = false;
  for (char32_t& c : u) {
    const bool cased = to_upper(c) != c || to_lower(c) != c;
    if (cased) c = prev_cased ? to_lower(c) : to_upper(c);
    prev_cased = cased;
  }
  return encode_utf8(u);
}

Value str_method(Evaluator& ev, const std::string& s, const std::string& name, CallArgs& a) {
  if (name == "strip") return strip(s, a, true, true);
  if (name == "lstrip") return strip(s, a, true, false);
  if (name == "rstrip") return strip(s, a, false, true);
  if (name == "split") return split(ev, s, a);
  if (name == "startswith") return Value::boolean(affix(s, a, true));
  if (name == "endswith") return Value::boolean(affix(s, a, false));
  if (name == "title") return Value::string(py_title(s));
  if (name == "upper" || name == "lower" || name == "capitalize" || name == "replace") {
    return ev.filter(name, Value::string(s), a);
  }
  if (name == "find" || name == "rfind" || name == "count") {
    a.check(1, {});
    const std::string sub = to_str(arg1(a, "sub"));
    if (name == "count") {
      if (sub.empty()) return Value::integer(static_cast<int64_t>(decode_utf8(s).size()) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value::integer(n);
    }
    const size_t p = name == "find" ? s.find(sub) : s.rfind(sub);
    if (p == std::string::npos) return Value::integer(-1);
    return Value::integer(static_cast<int64_t>(decode_utf8(s.substr(0, p)).size()));
  }
  if (name == "join") {
    a.check(1, {});
    CallArgs ja;
    ja.positional = {Value::string(s)};
    return ev.filter("join", arg1(a, "iterable"), ja);
  }
  if (name == "splitlines") {
    a.check(0, {});
    List out;
    size_t start = 0;
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i] == '\n' || s[i] == '\r') {
        out.push_back(Value::string(s.substr(start, i - start)));
        if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        start = i + 1;
      }
    if (start < s.size()) out.push_back(Value::string(s.substr(start)));
    return Value::list(std::move(out));
  }
  const std::u32string u = decode_utf8(s);
  auto all = [&](auto pred) { return !u.empty() && std::all_of(u.begin(), u.end(), pred); };
  a.check(0, {});
  if (name == "isdigit")
    return Value::boolean(all([](char32_t c) { return c >= '0' && c <= '9'; }));
  if (name == "isalpha") return Value::boolean(all(is_alpha));
  if (name == "isspace") return Value::boolean(all(is_space));
  if (name == "isalnum")
    return Value::boolean(all([](char32_t c) { return is_alpha(c) || (c >= '0' && c <= '9'); }));
  fail(fmt::format("str method '{}' is not supported", name));
}

const char* const kStrMethods[] = {"strip",      "lstrip",  "rstrip",  "split",   "startswith",
                                   "endswith",   "title",   "upper",   "lower",   "capitalize",
                                   "replace",    "find",    "rfind",   "count",   "join",
                                   "splitlines", "isdigit", "isalpha", "isspace", "isalnum"};

Value dict_method(const Value& d, const std::string& name, CallArgs& a) {
  if (name == "get") {
    a.check(2, {});
    const Value key = arg1(CallArgs{{a.get(0, "key")}, {}, a.line, a.what}, "key");
    const Value* v = key.is_string() ? d.as_dict().find(key.as_string()) : nullptr;
    return v ? *v : a.get(1, "default", Value::none());
  }
  a.check(0, {});
  List out;
  for (const auto& [k, v] : d.as_dict().items) {
    if (name == "items")
      out.push_back(Value::tuple({Value::string(k), v}));
    else if (name == "keys")
      out.push_back(Value::string(k));
    else
      out.push_back(v);
  }
  return Value::list(std::move(out));
}

Value list_method(const Value& l, const std::string& name, CallArgs& a) {
  const Value x = arg1(a, "value");
  const List& items = l.as_list();
  if (name == "count")
    return Value::integer(
        std::count_if(items.begin(), items.end(), [&](const Value& v) { return equals(v, x); }));
  for (size_t i = 0; i < items.size(); ++i)
    if (equals(items[i], x)) return Value::integer(static_cast<int64_t>(i));
  fail(fmt::format("{} is not in list", to_repr(x)));
}

// ---- globals ----

Value g_range(Evaluator& ev, CallArgs& a) {
  a.check(3, {});
  for (const Value& v : a.positional)
    if (!v.is_int() && !v.is_bool())
      fail(fmt::format("range() needs integers, not '{}'", v.type_name()));
  int64_t start = 0, stop, step = 1;
  if (a.positional.size() == 1)
    stop = a.positional[0].as_int();
  else if (a.positional.size() >= 2)
    start = a.positional[0].as_int(), stop = a.positional[1].as_int();
  else
    fail("range expected at least 1 argument");
  if (a.positional.size() == 3) step = a.positional[2].as_int();
  if (step == 0) fail("range() arg 3 must not be zero");
  const long double span = static_cast<long double>(stop) - static_cast<long double>(start);
  const long double count_ld = span / step;
  const int64_t count =
      count_ld <= 0 ? 0 : static_cast<int64_t>(std::ceil(static_cast<double>(count_ld)));
  ev.count_iterations(count);
  List out;
  for (int64_t i = 0; i < count; ++i) out.push_back(Value::integer(start + i * step));
  return Value::list(std::move(out));
}

Value g_namespace(CallArgs& a, const char* type) {
  Dict d;
  for (const Value& p : a.positional) {
    if (!p.is_dict()) fail(fmt::format("{}() takes keyword arguments or a dict", type));
    for (const auto& [k, v] : p.as_dict().items) d.set(k, v);
  }
  for (const auto& [k, v] : a.keyword) d.set(k, v);
  if (std::string(type) == "dict") return Value::dict(std::move(d));
  return Value::object(std::move(d), "Namespace");
}

Value g_strftime_now(const Evaluator& ev, CallArgs& a) {
  a.check(1, {"format"});
  const Value f = a.get(0, "format");
  if (!f.is_string()) fail("strftime_now() needs a format string");
  const std::time_t now = ev.options().now ? ev.options().now() : std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[1024];
  const size_t n = std::strftime(buf, sizeof buf, f.as_string().c_str(), &tm);
  if (n == 0 && !f.as_string().empty())
    fail("strftime_now(): the formatted date is empty or too long");
  return Value::string(std::string(buf, n));
}

}  // namespace

bool has_test(const std::string& name) { return tests().count(name) > 0; }

bool apply_test(Evaluator& ev, const std::string& name, const Value& v, CallArgs& args) {
  const auto it = tests().find(name);
  if (it == tests().end()) fail(fmt::format("no test named '{}'", name));
  return it->second(ev, v, args);
}

Value method(Evaluator& ev, const Value& obj, const std::string& name) {
  bool known = false;
  if (obj.is_string())
    known =
        std::find(std::begin(kStrMethods), std::end(kStrMethods), name) != std::end(kStrMethods);
  else if (obj.is_dict())
    known = name == "items" || name == "keys" || name == "values" || name == "get";
  else if (obj.is_list())
    known = name == "index" || name == "count";
  if (!known) return Value();
  const std::string type = obj.type_name();
  Evaluator* e = &ev;
  return Value::callable(type + "." + name, [e, obj, name, type](CallArgs& a) {
    a.what = fmt::format("{}.{}()", type, name);
    if (obj.is_string()) return str_method(*e, obj.as_string(), name, a);
    if (obj.is_dict()) return dict_method(obj, name, a);
    return list_method(obj, name, a);
  });
}

void add_globals(Evaluator& ev, std::unordered_map<std::string, Value>& frame) {
  Evaluator* e = &ev;
  frame["range"] = Value::callable("range", [e](CallArgs& a) { return g_range(*e, a); });
  frame["namespace"] =
      Value::callable("namespace", [](CallArgs& a) { return g_namespace(a, "namespace"); });
  frame["dict"] = Value::callable("dict", [](CallArgs& a) { return g_namespace(a, "dict"); });
  frame["raise_exception"] = Value::callable("raise_exception", [](CallArgs& a) -> Value {
    fail("the template raised an error: " + to_str(a.get(0, "message")));
  });
  frame["strftime_now"] =
      Value::callable("strftime_now", [e](CallArgs& a) { return g_strftime_now(*e, a); });
}

}  // namespace zt::jinja
