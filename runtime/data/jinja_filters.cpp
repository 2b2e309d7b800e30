// Jinja filters and tests, as Jinja2 defines them (tojson as transformers redefines it).
#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "runtime/data/jinja_eval.h"

namespace zt::jinja {
namespace {

using Filter = Value (*)(Evaluator&, const Value&, CallArgs&);

std::string map_chars(const std::string& s, char32_t (*f)(char32_t)) {
  std::u32string u = decode_utf8(s);
  for (char32_t& c : u) c = f(c);
  return encode_utf8(u);
}

const std::string& need_string(const Value& v, const char* what) {
  if (v.is_undefined()) fail(v.hint());
  if (!v.is_string()) fail(fmt::format("{} needs a string, not '{}'", what, v.type_name()));
  return v.as_string();
}

// Sort key: the attribute (dotted path) of an item, lowercased when not case-sensitive.
Value sort_key(Evaluator& ev, const Value& item, const Value& attribute, bool case_sensitive) {
  Value v = item;
  if (attribute.is_string()) {
    std::string path = attribute.as_string();
    size_t start = 0;
    while (true) {
      const size_t dot = path.find('.', start);
      const std::string part = path.substr(start, dot - start);
      const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
      v = numeric ? ev.getitem(v, Value::integer(std::stoll(part)))
                  : ev.getitem(v, Value::string(part));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
  } else if (attribute.is_int()) {
    v = ev.getitem(v, attribute);
  }
  if (!case_sensitive && v.is_string()) return Value::string(map_chars(v.as_string(), to_lower));
  return v;
}

Value f_default(Evaluator&, const Value& v, CallArgs& a) {
  a.check(2, {"default_value", "boolean"});
  const Value dflt = a.get(0, "default_value", Value::string(""));
  if (v.is_undefined() || (a.get(1, "boolean", Value::boolean(false)).truthy() && !v.truthy()))
    return dflt;
  return v;
}

Value f_length(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  return Value::integer(length(v));
}

Value f_trim(Evaluator&, const Value& v, CallArgs& a) {
  a.check(1, {"chars"});
  const Value chars = a.get(0, "chars", Value::none());
  std::u32string s = decode_utf8(to_str(v));
  const std::u32string set = chars.is_string() ? decode_utf8(chars.as_string()) : U"";
  auto strip = [&](char32_t c) {
    return chars.is_string() ? set.find(c) != set.npos : is_space(c);
  };
  size_t b = 0, e = s.size();
  while (b < e && strip(s[b])) ++b;
  while (e > b && strip(s[e - 1])) --e;
  return Value::string(encode_utf8(s.substr(b, e - b)));
}

Value f_upper(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  return Value::string(map_chars(to_str(v), to_upper));
}

Value f_lower(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  return Value::string(map_chars(to_str(v), to_lower));
}

Value f_capitalize(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  std::u32string s = decode_utf8(to_str(v));
  for (size_t i = 0; i < s.size(); ++i) s[i] = i == 0 ? to_upper(s[i]) : to_lower(s[i]);
  return Value::string(encode_utf8(s));
}

Value f_title(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  std::u32string s = decode_utf8(to_str(v));
  bool word_start = true;
  for (char32_t& c : s) {
    const bool sep = is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (sep) {
      word_start = true;
      continue;
    }
    c = word_start ? to_upper(c) : to_lower(c);
    word_start = false;
  }
  return Value::string(encode_utf8(s));
}

Value f_first(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  const List items = iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  if (v.is_undefined()) fail(v.hint());
  const List items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value f_join(Evaluator& ev, const Value& v, CallArgs& a) {
  a.check(2, {"d", "attribute"});
  const std::string sep = to_str(a.get(0, "d", Value::string("")));
  const Value attribute = a.get(1, "attribute", Value::none());
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(attribute.is_none() ? item : sort_key(ev, item, attribute, true));
    ev.check_size(out.size(), "a joined string");
  }
  return Value::string(std::move(out));
}

Value f_list(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  return Value::list(iterate(v));
}

Value f_string(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  return Value::string(to_str(v));
}

Value f_int(Evaluator&, const Value& v, CallArgs& a) {
  a.check(2, {"default", "base"});
  const Value dflt = a.get(0, "default", Value::integer(0));
  const int base = static_cast<int>(a.get(1, "base", Value::integer(10)).as_int());
  if (v.is_bool() || v.is_int()) return Value::integer(v.as_int());
  if (v.is_float()) {
    const double d = v.as_double();
    if (!std::isfinite(d) || std::fabs(d) > 9.2e18) return dflt;
    return Value::integer(static_cast<int64_t>(d));
  }
  if (!v.is_string()) return dflt;
  std::u32string u = decode_utf8(v.as_string());
  while (!u.empty() && is_space(u.back())) u.pop_back();
  size_t lead = 0;
  while (lead < u.size() && is_space(u[lead])) ++lead;
  std::string s = encode_utf8(u.substr(lead));
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  try {
    size_t used = 0;
    const long long n = std::stoll(s, &used, base);
    if (used == s.size()) return Value::integer(n);
  } catch (const std::exception&) {
  }
  try {
    size_t used = 0;
    const double d = std::stod(s, &used);
    if (used == s.size() && std::isfinite(d) && std::fabs(d) < 9.2e18)
      return Value::integer(static_cast<int64_t>(d));
  } catch (const std::exception&) {
  }
  return dflt;
}

Value f_float(Evaluator&, const Value& v, CallArgs& a) {
  a.check(1, {"default"});
  const Value dflt = a.get(0, "default", Value::floating(0.0));
  if (v.is_number()) return Value::floating(v.as_double());
  if (!v.is_string()) return dflt;
  try {
    size_t used = 0;
    const double d = std::stod(v.as_string(), &used);
    if (used == v.as_string().size()) return Value::floating(d);
  } catch (const std::exception&) {
  }
  return dflt;
}

Value f_replace(Evaluator& ev, const Value& v, CallArgs& a) {
  a.check(3, {"old", "new", "count"});
  const std::string s = to_str(v);
  const std::string from = to_str(a.get(0, "old")), to = to_str(a.get(1, "new"));
  const Value count_v = a.get(2, "count", Value::none());
  int64_t count = count_v.is_none() ? -1 : count_v.as_int();
  std::string out;
  if (from.empty()) {  // Python inserts `to` around every character
    const std::u32string u = decode_utf8(s);
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count != 0) {
        out += to;
        if (count > 0) --count;
      }
      if (i < u.size()) append_utf8(out, u[i]);
      ev.check_size(out.size(), "a replaced string");
    }
    return Value::string(std::move(out));
  }
  size_t pos = 0;
  while (count != 0) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
    if (count > 0) --count;
    ev.check_size(out.size(), "a replaced string");
  }
  out.append(s, pos);
  return Value::string(std::move(out));
}

Value f_indent(Evaluator&, const Value& v, CallArgs& a) {
  a.check(3, {"width", "first", "blank"});
  const Value width = a.get(0, "width", Value::integer(4));
  const std::string pad = width.is_string()
                              ? width.as_string()
                              : std::string(std::clamp<int64_t>(width.as_int(), 0, 1024), ' ');
  const bool first = a.get(1, "first", Value::boolean(false)).truthy();
  const bool blank = a.get(2, "blank", Value::boolean(false)).truthy();
  std::vector<std::string> lines;
  const std::string s = need_string(v, "filter 'indent'") + "\n";
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      lines.push_back(s.substr(start, i - start));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += "\n";
    if (i > 0 && (blank || !lines[i].empty())) out += pad;
    out += lines[i];
  }
  return Value::string(first ? pad + out : out);
}

Value f_tojson(Evaluator&, const Value& v, CallArgs& a) {
  a.check(4, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonStyle st;
  st.ensure_ascii = a.get(0, "ensure_ascii", Value::boolean(false)).truthy();
  const Value indent = a.get(1, "indent", Value::none());
  if (indent.is_string() || indent.is_int()) {
    st.indent = true;
    st.indent_str = indent.is_string()
                        ? indent.as_string()
                        : std::string(std::clamp<int64_t>(indent.as_int(), 0, 1024), ' ');
    st.item_sep = std::string(1, ',');
  } else if (!indent.is_none()) {
    fail(fmt::format("tojson: indent must be an int or a string, not '{}'", indent.type_name()));
  }
  const Value seps = a.get(2, "separators", Value::none());
  if (!seps.is_none()) {
    const List parts = iterate(seps);
    if (parts.size() != 2 || !parts[0].is_string() || !parts[1].is_string())
      fail("tojson: separators must be two strings");
    st.item_sep = parts[0].as_string();
    st.key_sep = parts[1].as_string();
  }
  st.sort_keys = a.get(3, "sort_keys", Value::boolean(false)).truthy();
  return Value::string(to_json(v, st));
}

Value f_items(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) fail(fmt::format("filter 'items' needs a mapping, not '{}'", v.type_name()));
  List out;
  for (const auto& [k, e] : v.as_dict().items) out.push_back(Value::tuple({Value::string(k), e}));
  return Value::list(std::move(out));
}

Value f_map(Evaluator& ev, const Value& v, CallArgs& a) {
  List out;
  if (a.positional.empty()) {
    a.check(0, {"attribute", "default"});
    const Value attribute = a.get(99, "attribute");
    const Value dflt = a.get(99, "default");
    for (const Value& item : iterate(v)) {
      Value r = sort_key(ev, item, attribute, true);
      out.push_back(r.is_undefined() && !dflt.is_undefined() ? dflt : r);
    }
    return Value::list(std::move(out));
  }
  const std::string name = to_str(a.positional[0]);
  if (!has_filter(name)) fail(fmt::format("map: no filter named '{}'", name));
  CallArgs rest = a;
  rest.positional.erase(rest.positional.begin());
  rest.what = "filter '" + name + "'";
  for (const Value& item : iterate(v)) out.push_back(ev.filter(name, item, rest));
  return Value::list(std::move(out));
}

// select/reject (by_attr false) and selectattr/rejectattr (true).
Value select_items(Evaluator& ev, const Value& v, CallArgs& a, bool by_attr, bool keep) {
  size_t i = 0;
  Value attribute;
  if (by_attr) {
    if (a.positional.empty()) fail(fmt::format("{} needs an attribute", a.what));
    attribute = a.positional[i++];
  }
  std::string test_name = i < a.positional.size() ? to_str(a.positional[i++]) : "";
  if (!test_name.empty() && !has_test(test_name))
    fail(fmt::format("no test named '{}'", test_name));
  CallArgs rest;
  rest.what = "test '" + test_name + "'";
  rest.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(i), a.positional.end());
  List out;
  for (const Value& item : iterate(v)) {
    const Value x = by_attr ? sort_key(ev, item, attribute, true) : item;
    const bool pass = test_name.empty() ? x.truthy() : ev.test(test_name, x, rest);
    if (pass == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_select(Evaluator& ev, const Value& v, CallArgs& a) {
  return select_items(ev, v, a, false, true);
}
Value f_reject(Evaluator& ev, const Value& v, CallArgs& a) {
  return select_items(ev, v, a, false, false);
}
Value f_selectattr(Evaluator& ev, const Value& v, CallArgs& a) {
  return select_items(ev, v, a, true, true);
}
Value f_rejectattr(Evaluator& ev, const Value& v, CallArgs& a) {
  return select_items(ev, v, a, true, false);
}

Value f_reverse(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  if (v.is_string()) {
    std::u32string s = decode_utf8(v.as_string());
    std::reverse(s.begin(), s.end());
    return Value::string(encode_utf8(s));
  }
  List items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_sort(Evaluator& ev, const Value& v, CallArgs& a) {
  a.check(3, {"reverse", "case_sensitive", "attribute"});
  const bool reverse = a.get(0, "reverse", Value::boolean(false)).truthy();
  const bool cs = a.get(1, "case_sensitive", Value::boolean(false)).truthy();
  const Value attribute = a.get(2, "attribute", Value::none());
  List items = iterate(v);
  ev.charge(static_cast<int64_t>(items.size()) * 8);
  std::vector<std::pair<Value, size_t>> keyed;
  for (size_t i = 0; i < items.size(); ++i)
    keyed.emplace_back(sort_key(ev, items[i], attribute, cs), i);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? less(y.first, x.first) : less(x.first, y.first);
  });
  List out;
  for (const auto& [k, i] : keyed) out.push_back(items[i]);
  return Value::list(std::move(out));
}

Value f_dictsort(Evaluator& ev, const Value& v, CallArgs& a) {
  a.check(3, {"case_sensitive", "by", "reverse"});
  const bool cs = a.get(0, "case_sensitive", Value::boolean(false)).truthy();
  const std::string by = to_str(a.get(1, "by", Value::string("key")));
  const bool reverse = a.get(2, "reverse", Value::boolean(false)).truthy();
  if (by != "key" && by != "value") fail("dictsort: by must be 'key' or 'value'");
  CallArgs none;
  const Value pairs = f_items(ev, v, none);
  CallArgs sort_args;
  sort_args.keyword = {{"reverse", Value::boolean(reverse)},
                       {"case_sensitive", Value::boolean(cs)},
                       {"attribute", Value::integer(by == "key" ? 0 : 1)}};
  return f_sort(ev, pairs, sort_args);
}

Value f_unique(Evaluator& ev, const Value& v, CallArgs& a) {
  a.check(2, {"case_sensitive", "attribute"});
  const bool cs = a.get(0, "case_sensitive", Value::boolean(false)).truthy();
  const Value attribute = a.get(1, "attribute", Value::none());
  List out, seen;
  for (const Value& item : iterate(v)) {
    const Value k = sort_key(ev, item, attribute, cs);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); }))
      continue;
    ev.charge(static_cast<int64_t>(seen.size()));
    seen.push_back(k);
    out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value min_max(Evaluator& ev, const Value& v, CallArgs& a, bool want_max) {
  a.check(2, {"case_sensitive", "attribute"});
  const bool cs = a.get(0, "case_sensitive", Value::boolean(false)).truthy();
  const Value attribute = a.get(1, "attribute", Value::none());
  const List items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = sort_key(ev, items[0], attribute, cs);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = sort_key(ev, items[i], attribute, cs);
    if (want_max ? less(best_key, k) : less(k, best_key)) best = i, best_key = std::move(k);
  }
  return items[best];
}

Value f_min(Evaluator& ev, const Value& v, CallArgs& a) { return min_max(ev, v, a, false); }
Value f_max(Evaluator& ev, const Value& v, CallArgs& a) { return min_max(ev, v, a, true); }

Value f_sum(Evaluator& ev, const Value& v, CallArgs& a) {
  a.check(2, {"attribute", "start"});
  const Value attribute = a.get(0, "attribute", Value::none());
  Value total = a.get(1, "start", Value::integer(0));
  for (const Value& item : iterate(v))
    total = arith("+", total, attribute.is_none() ? item : sort_key(ev, item, attribute, true));
  return total;
}

Value f_abs(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  if (v.is_float()) return Value::floating(std::fabs(v.as_double()));
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) fail("integer overflow");
    return Value::integer(std::llabs(v.as_int()));
  }
  fail(fmt::format("bad operand type for abs(): '{}'", v.type_name()));
}

Value f_round(Evaluator&, const Value& v, CallArgs& a) {
  a.check(2, {"precision", "method"});
  const int64_t precision =
      std::clamp<int64_t>(a.get(0, "precision", Value::integer(0)).as_int(), -20, 20);
  const std::string method = to_str(a.get(1, "method", Value::string("common")));
  if (!v.is_number()) fail(fmt::format("filter 'round' needs a number, not '{}'", v.type_name()));
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_double() * scale;
  double r;
  if (method == "common")
    r = std::nearbyint(x);
  else if (method == "ceil")
    r = std::ceil(x);
  else if (method == "floor")
    r = std::floor(x);
  else
    fail("filter 'round': method must be 'common', 'ceil' or 'floor'");
  return Value::floating(r / scale);
}

Value f_format(Evaluator&, const Value& v, CallArgs& a) {
  if (!a.keyword.empty()) fail("filter 'format' with keyword arguments is not supported");
  return Value::string(percent_format(to_str(v), Value::list(a.positional)));
}

Value f_escape(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  std::string out;
  for (char c : to_str(v)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value::string(std::move(out));
}

Value f_attr(Evaluator& ev, const Value& v, CallArgs& a) {
  a.check(1, {});
  return ev.getattr(v, to_str(a.get(0, "name")));
}

Value f_wordcount(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : decode_utf8(to_str(v))) {
    const bool w = is_alpha(c) || (c >= '0' && c <= '9') || c == '_';
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

const std::map<std::string, Filter>& filters() {
  static const std::map<std::string, Filter> table = {
      {"abs", f_abs},
      {"attr", f_attr},
      {"capitalize", f_capitalize},
      {"count", f_length},
      {"d", f_default},
      {"default", f_default},
      {"dictsort", f_dictsort},
      {"e", f_escape},
      {"escape", f_escape},
      {"first", f_first},
      {"float", f_float},
      {"format", f_format},
      {"indent", f_indent},
      {"int", f_int},
      {"items", f_items},
      {"join", f_join},
      {"last", f_last},
      {"length", f_length},
      {"list", f_list},
      {"lower", f_lower},
      {"map", f_map},
      {"max", f_max},
      {"min", f_min},
      {"reject", f_reject},
      {"rejectattr", f_rejectattr},
      {"replace", f_replace},
      {"reverse", f_reverse},
      {"round", f_round},
      {"safe", f_string},
      {"select", f_select},
      {"selectattr", f_selectattr},
      {"sort", f_sort},
      {"string", f_string},
      {"sum", f_sum},
      {"title", f_title},
      {"tojson", f_tojson},
      {"trim", f_trim},
      {"unique", f_unique},
      {"upper", f_upper},
      {"wordcount", f_wordcount},
  };
  return table;
}

}  // namespace

bool has_filter(const std::string& name) { return filters().count(name) > 0; }

Value apply_filter(Evaluator& ev, const std::string& name, const Value& v, CallArgs& args) {
  const auto it = filters().find(name);
  if (it == filters().end()) fail(fmt::format("no filter named '{}'", name));
  return it->second(ev, v, args);
}

}  // namespace zt::jinja
