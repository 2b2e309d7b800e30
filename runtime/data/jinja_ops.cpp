// Python semantics of iteration, `in`, len(), arithmetic and `%` formatting, as Jinja2
// applies them to template values.
#include <cmath>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

#include "runtime/data/jinja_eval.h"

namespace zt::jinja {

List iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return v.as_list();
    case Value::Kind::kDict: {
      List keys;
      for (const auto& [k, e] : v.as_dict().items) keys.push_back(Value::string(k));
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      for (char32_t c : decode_utf8(v.as_string())) {
        std::string s;
        append_utf8(s, c);
        chars.push_back(Value::string(std::move(s)));
      }
      return chars;
    }
    default: fail(fmt::format("'{}' object is not iterable", v.type_name()));
  }
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (item.is_undefined()) fail(item.hint());
      if (!item.is_string())
        fail(
            fmt::format("'in <string>' requires string as left operand, not {}", item.type_name()));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.as_list())
        if (equals(v, item)) return true;
      return false;
    case Value::Kind::kDict: return item.is_string() && container.as_dict().find(item.as_string());
    default: fail(fmt::format("argument of type '{}' is not iterable", container.type_name()));
  }
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return static_cast<int64_t>(decode_utf8(v.as_string()).size());
    case Value::Kind::kList: return static_cast<int64_t>(v.as_list().size());
    case Value::Kind::kDict: return static_cast<int64_t>(v.as_dict().items.size());
    default: fail(fmt::format("object of type '{}' has no len()", v.type_name()));
  }
}

namespace {

[[noreturn]] void bad_operands(const std::string& op, const Value& a, const Value& b) {
  fail(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(),
                   b.type_name()));
}

// `v`, or the overflow error.
int64_t checked(bool overflow, int64_t v) {
  if (overflow) fail("integer overflow (values beyond 64 bits are not supported)");
  return v;
}

Value repeat(const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty() && n > static_cast<int64_t>((1u << 30) / s.size()))
      fail("a repeated string is over the size limit");
    std::string out;
    out.reserve(s.size() * n);
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value::string(std::move(out));
  }
  const List& l = seq.as_list();
  if (!l.empty() && n > static_cast<int64_t>((1u << 24) / l.size()))
    fail("a repeated list is over the size limit");
  List out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), l.begin(), l.end());
  return Value::list(std::move(out));
}

double py_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

}  // namespace

Value arith(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail(a.hint());
  if (b.is_undefined()) fail(b.hint());
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value::string(a.as_string() + b.as_string());
    if (a.is_list() && b.is_list()) {
      List out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return Value::list(std::move(out));
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int());
  }
  if (op == "%" && a.is_string()) return Value::string(percent_format(a.as_string(), b));
  if (!a.is_number() || !b.is_number()) bad_operands(op, a, b);
  const bool ints = !a.is_float() && !b.is_float();
  if (ints) {
    const int64_t x = a.as_int(), y = b.as_int();
    int64_t r = 0;
    bool overflow = false;
    if (op == "+")
      overflow = __builtin_add_overflow(x, y, &r);
    else if (op == "-")
      overflow = __builtin_sub_overflow(x, y, &r);
    else if (op == "*")
      overflow = __builtin_mul_overflow(x, y, &r);
    if (op == "+" || op == "-" || op == "*") return Value::integer(checked(overflow, r));
    if (op == "//" || op == "%") {
      if (y == 0) fail("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) fail("integer overflow");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return Value::integer(op == "//" ? q : m);
    }
    if (op == "**" && y >= 0) {
      if (x == 0) return Value::integer(y == 0 ? 1 : 0);
      if (x == 1) return Value::integer(1);
      if (x == -1) return Value::integer(y % 2 ? -1 : 1);
      int64_t result = 1;  // |x| >= 2 overflows within 63 steps
      for (int64_t i = 0; i < y; ++i)
        if (__builtin_mul_overflow(result, x, &result)) checked(true, 0);
      return Value::integer(result);
    }
  }
  const double x = a.as_double(), y = b.as_double();
  if (op == "+") return Value::floating(x + y);
  if (op == "-") return Value::floating(x - y);
  if (op == "*") return Value::floating(x * y);
  if (op == "/") {
    if (y == 0) fail("division by zero");
    return Value::floating(x / y);
  }
  if (op == "//" || op == "%") {
    if (y == 0) fail("float division or modulo by zero");
    return Value::floating(op == "//" ? std::floor(x / y) : py_fmod(x, y));
  }
  if (op == "**") {
    if (x == 0 && y < 0) fail("0.0 cannot be raised to a negative power");
    return Value::floating(std::pow(x, y));
  }
  bad_operands(op, a, b);
}

// printf-style formatting: %s %r %d %i %f %e %g %x %o %%, with flags, width and precision.
std::string percent_format(const std::string& fmt_str, const Value& args) {
  List values = args.is_list() ? args.as_list() : List{args};
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt_str.size(); ++i) {
    if (fmt_str[i] != '%') {
      out += fmt_str[i];
      continue;
    }
    size_t j = i + 1;
    while (j < fmt_str.size() && std::string_view("-+ #0").find(fmt_str[j]) != std::string::npos)
      ++j;
    while (j < fmt_str.size() && std::isdigit(static_cast<unsigned char>(fmt_str[j]))) ++j;
    if (j < fmt_str.size() && fmt_str[j] == '.') {
      ++j;
      while (j < fmt_str.size() && std::isdigit(static_cast<unsigned char>(fmt_str[j]))) ++j;
    }
    if (j >= fmt_str.size()) fail("incomplete format");
    const char conv = fmt_str[j];
    const std::string spec = fmt_str.substr(i + 1, j - i - 1);
    i = j;
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (next >= values.size()) fail("not enough arguments for format string");
    const Value& v = values[next++];
    if (spec.size() > 8) fail("a format specification is too long");
    char buf[512];
    const std::string c_fmt = "%" + spec;
    if (conv == 's' || conv == 'r') {
      const std::string s = conv == 's' ? to_str(v) : to_repr(v);
      std::snprintf(buf, sizeof buf, (c_fmt + "s").c_str(), "");
      const std::string pad(std::strlen(buf) > s.size() ? std::strlen(buf) - s.size() : 0, ' ');
      out += spec.find('-') != std::string::npos ? s + pad : pad + s;
    } else if (conv == 'd' || conv == 'i' || conv == 'x' || conv == 'X' || conv == 'o') {
      if (!v.is_number())
        fail(fmt::format("%{} format: a number is required, not {}", conv, v.type_name()));
      const long long n = v.is_float() ? static_cast<long long>(v.as_double()) : v.as_int();
      std::snprintf(buf, sizeof buf, (c_fmt + "ll" + (conv == 'i' ? 'd' : conv)).c_str(), n);
      out += buf;
    } else if (conv == 'f' || conv == 'F' || conv == 'e' || conv == 'E' || conv == 'g' ||
               conv == 'G') {
      if (!v.is_number())
        fail(fmt::format("%{} format: a number is required, not {}", conv, v.type_name()));
      std::snprintf(buf, sizeof buf, (c_fmt + conv).c_str(), v.as_double());
      out += buf;
    } else {
      fail(fmt::format("unsupported format character '{}'", conv));
    }
  }
  if (next < values.size() && args.is_list())
    fail("not all arguments converted during string formatting");
  return out;
}

}  // namespace zt::jinja
