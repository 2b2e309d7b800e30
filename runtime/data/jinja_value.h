// The values a Jinja template computes with (internal to runtime/data/jinja*.cpp), modelled on
// the Python objects Jinja2 hands around: undefined, none, bool, int, float, str, list, dict,
// plus namespace/loop objects and callables (macros, builtins, bound methods). Strings are
// UTF-8; lengths, indexes and slices count code points as Python does. Dicts keep insertion
// order (string keys only). Lists and dicts are shared and never modified after they are built
// (the sandbox is immutable); namespaces are the one mutable object, as in Jinja2.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace zt::jinja {

class Value;
struct CallArgs;
using List = std::vector<Value>;

// Insertion-ordered string-keyed map.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value value);
};

// A builtin, a macro or a bound method. `fn` receives the evaluated arguments.
struct Callable {
  std::string name;
  std::function<Value(CallArgs&)> fn;
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kObject, kCall };

  Value() = default;  // undefined
  static Value undefined(std::string hint) {
    Value v;
    v.str_ = std::move(hint);
    return v;
  }
  static Value none() { return Value(Kind::kNone); }
  static Value boolean(bool b) {
    Value v(Kind::kBool);
    v.int_ = b;
    return v;
  }
  static Value integer(int64_t i) {
    Value v(Kind::kInt);
    v.int_ = i;
    return v;
  }
  static Value floating(double d) {
    Value v(Kind::kFloat);
    v.float_ = d;
    return v;
  }
  static Value string(std::string s) {
    Value v(Kind::kString);
    v.str_ = std::move(s);
    return v;
  }
  static Value list(List items) {
    Value v(Kind::kList);
    v.list_ = std::make_shared<List>(std::move(items));
    return v;
  }
  // A tuple: a list that Python's repr writes in parentheses.
  static Value tuple(List items) {
    Value v = list(std::move(items));
    v.tuple_ = true;
    return v;
  }
  static Value dict(Dict d) {
    Value v(Kind::kDict);
    v.dict_ = std::make_shared<Dict>(std::move(d));
    return v;
  }
  // A namespace() or loop object: attributes only; `type` names it in messages.
  static Value object(Dict d, std::string type) {
    Value v(Kind::kObject);
    v.dict_ = std::make_shared<Dict>(std::move(d));
    v.str_ = std::move(type);
    return v;
  }
  static Value callable(std::string name, std::function<Value(CallArgs&)> fn) {
    Value v(Kind::kCall);
    v.call_ = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
    return v;
  }
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return is_bool() || is_int() || is_float(); }  // bool is an int
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_object() const { return kind_ == Kind::kObject; }
  bool is_callable() const { return kind_ == Kind::kCall; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }  // bool and int
  double as_double() const { return is_float() ? float_ : static_cast<double>(int_); }
  const std::string& as_string() const { return str_; }
  const List& as_list() const { return *list_; }
  const Dict& as_dict() const { return *dict_; }
  Dict& mutable_object() const { return *dict_; }  // namespaces only
  const Callable& as_callable() const { return *call_; }
  // The undefined value's description ("'x' is undefined") or an object's type name.
  const std::string& hint() const { return str_; }

  // Python's truth value.
  bool truthy() const;
  // Python's type name, for messages: "str", "list", "NoneType", ...
  std::string type_name() const;

 private:
  explicit Value(Kind k) : kind_(k) {}
  Kind kind_ = Kind::kUndefined;
  int64_t int_ = 0;
  double float_ = 0;
  bool tuple_ = false;
  std::string str_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Callable> call_;
};

// Arguments of one call: positional then keyword, already evaluated. `line` is the call's
// template line, for errors.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  int line = 0;
  std::string what;  // "filter 'join'", "method 'split'", for errors

  // Argument `index` (positional) or `name` (keyword), else `fallback`. Refuses a value given
  // both ways.
  Value get(size_t index, std::string_view name, Value fallback = Value()) const;
  // Refuses more than `max_positional` positional arguments or an unknown keyword.
  void check(size_t max_positional, std::initializer_list<std::string_view> names) const;
};

// Thrown by value code for an error the evaluator then reports with its template line.
struct EvalError {
  std::string message;
};
[[noreturn]] void fail(std::string message);

// Python's str() and repr() of a value (str of a string is itself; undefined is "").
std::string to_str(const Value& v);
std::string to_repr(const Value& v);
std::string float_repr(double d);
// json.dumps(v, ensure_ascii, indent (<0: none, else spaces) or indent_str, separators,
// sort_keys), as transformers' tojson filter calls it.
struct JsonStyle {
  bool ensure_ascii = false;
  bool indent = false;
  std::string indent_str;
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonStyle& style);

// Python ==, and <, (which refuses values of types that do not order).
bool equals(const Value& a, const Value& b);
bool less(const Value& a, const Value& b);

// UTF-8 helpers: code points of `s`, and back.
std::u32string decode_utf8(std::string_view s);
std::string encode_utf8(std::u32string_view s);
void append_utf8(std::string& out, char32_t c);
// Python's str.isspace for one code point.
bool is_space(char32_t c);
// Simple one-to-one case mapping (ASCII, Latin-1, Greek, Cyrillic); other letters unchanged.
char32_t to_upper(char32_t c);
char32_t to_lower(char32_t c);
// Python's str.isalpha, approximated by script ranges (letters, kana, CJK, Hangul).
bool is_alpha(char32_t c);

}  // namespace zt::jinja
