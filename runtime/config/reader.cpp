// The typed JSON reader: key paths, suggestions for misspelt keys and values, typed access whose
// errors are one line "<source>: <message naming the key path>" thrown as kInput. No block's
// keys are known here.
#include "runtime/config/reader.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>

#include "runtime/byte_count.h"
#include "runtime/status.h"

namespace zt::config_detail {

std::string join(std::string_view parent, std::string_view key) {
  return parent.empty() ? std::string(key) : fmt::format("{}.{}", parent, key);
}

namespace {

char lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

// Levenshtein distance, case-insensitive: "Stage" is distance 0 from "stage".
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      size_t substitute = diagonal + (lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1);
      row[j] = std::min({above + 1, row[j - 1] + 1, substitute});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// True when `a` can be made from `b` by deleting characters (case-insensitive).
bool is_subsequence(std::string_view a, std::string_view b) {
  size_t i = 0;
  for (char c : b) {
    if (i < a.size() && lower(a[i]) == lower(c)) ++i;
  }
  return i == a.size();
}

}  // namespace

bool equal_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [](char x, char y) { return lower(x) == lower(y); });
}

// Close means within a third of the word's length (at least one edit). Among close options, one
// that differs only by dropped characters wins ("warmup_steps" -> "warmup_num_steps", not
// "warmup_type"), then the smallest edit distance.
// "zero_optimisation" -> "zero_optimization"; "learning_rate" suggests nothing.
std::optional<std::string_view> nearest(std::string_view word,
                                        std::span<const std::string_view> options) {
  const size_t limit = std::max<size_t>(1, word.size() / 3);
  std::optional<std::string_view> best;
  std::pair<bool, size_t> best_score;  // (not related by dropped characters, distance)
  for (std::string_view option : options) {
    size_t d = edit_distance(word, option);
    if (d > limit) continue;
    bool related = is_subsequence(word, option) || is_subsequence(option, word);
    std::pair<bool, size_t> score{!related, d};
    if (!best || score < best_score) best = option, best_score = score;
  }
  return best;
}

std::string describe_value(const json& v) {
  std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  switch (v.type()) {
    case json::value_t::string: return "string " + text;
    case json::value_t::boolean: return "boolean " + text;
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer " + text;
    case json::value_t::number_float: return "number " + text;
    case json::value_t::array: return "array " + text;
    case json::value_t::object: return "object " + text;
    case json::value_t::null: return "null";
    default: return text;
  }
}

void Reader::fail(const std::string& message) const {
  throw_input(fmt::format("{}: {}", source_, message));
}

void Reader::type_error(const json& v, const std::string& path, std::string_view expected) const {
  if (is_auto(v)) {
    fail(
        fmt::format("'{}' is \"auto\", a value the Hugging Face Trainer fills in for some keys, "
                    "but not this one; give {}",
                    path, expected));
  }
  fail(fmt::format("'{}' must be {}, got {}", path, expected, describe_value(v)));
}

const json* Reader::find(const json& obj, std::string_view key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

const json& Reader::require(const json& obj, std::string_view path, std::string_view key) const {
  if (const json* v = find(obj, key)) return *v;
  fail(fmt::format("missing required key '{}'", join(path, key)));
}

void Reader::expect_object(const json& v, const std::string& path) const {
  if (!v.is_object()) type_error(v, path, "an object");
}

void Reader::check_keys(const json& obj, std::string_view path,
                        std::span<const std::string_view> allowed, std::string_view note) const {
  for (const auto& item : obj.items()) {
    const std::string& key = item.key();
    if (is_comment_key(key)) continue;
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    std::string message = fmt::format("unknown key '{}'{}", join(path, key), note);
    if (auto near = nearest(key, allowed))
      message += fmt::format(" (did you mean '{}'?)", join(path, *near));
    fail(message);
  }
}

bool Reader::boolean(const json& v, const std::string& path) const {
  if (!v.is_boolean()) type_error(v, path, "a boolean (true or false)");
  return v.get<bool>();
}

double Reader::number(const json& v, const std::string& path) const {
  if (!v.is_number()) type_error(v, path, "a number");
  return v.get<double>();
}

std::string Reader::string(const json& v, const std::string& path) const {
  if (!v.is_string()) type_error(v, path, "a string");
  return v.get<std::string>();
}

int64_t Reader::integer(const json& v, const std::string& path) const {
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) {
    fail(fmt::format("'{}' must be <= {}, got {}", path, INT64_MAX, v.dump()));
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (d == std::trunc(d) && std::fabs(d) < 9.2e18) return static_cast<int64_t>(d);
  }
  type_error(v, path, "an integer");
}

uint64_t Reader::unsigned_integer(const json& v, const std::string& path) const {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  int64_t x = integer(v, path);
  if (x < 0) fail(fmt::format("'{}' must be >= 0, got {}", path, v.dump()));
  return static_cast<uint64_t>(x);
}

int Reader::int32(const json& v, const std::string& path) const {
  int64_t x = integer(v, path);
  if (x > INT_MAX || x < INT_MIN) {
    fail(fmt::format("'{}' must be between {} and {}, got {}", path, INT_MIN, INT_MAX, v.dump()));
  }
  return static_cast<int>(x);
}

uint64_t Reader::byte_size(const json& v, const std::string& path) const {
  constexpr std::string_view expected =
      "a byte count: an integer, or a string such as \"6GB\" (10^9 bytes) or \"512MiB\" (2^20 "
      "bytes)";
  if (v.is_string() && !is_auto(v)) {
    const ParsedByteCount parsed = parse_byte_count(v.get_ref<const std::string&>());
    if (!parsed.problem.empty())
      fail(fmt::format("'{}' is {}: {}", path, describe_value(v), parsed.problem));
    return parsed.bytes;
  }
  if (!v.is_number()) type_error(v, path, expected);
  uint64_t bytes = 0;
  if (v.is_number_unsigned()) {
    bytes = v.get<uint64_t>();
  } else if (v.is_number_integer()) {
    bytes = v.get<int64_t>() > 0 ? static_cast<uint64_t>(v.get<int64_t>()) : 0;
  } else {
    const double d = v.get<double>();
    if (d >= 0x1p64)
      fail(fmt::format("'{}' is {}: more than 2^64 - 1 bytes", path, describe_value(v)));
    if (d != std::trunc(d))
      fail(fmt::format("'{}' is {}: not a whole number of bytes", path, describe_value(v)));
    bytes = d > 0 ? static_cast<uint64_t>(d) : 0;
  }
  if (bytes == 0) fail(fmt::format("'{}' must be > 0, got {}", path, v.dump()));
  return bytes;
}

void Reader::check_bound(const json& v, Bound bound, const std::string& path) const {
  double x = v.get<double>();
  bool ok = bound == Bound::kAny || (bound == Bound::kPositive && x > 0) ||
            (bound == Bound::kNonNegative && x >= 0) ||
            (bound == Bound::kUnitInterval && x >= 0 && x <= 1);
  if (ok) return;
  const char* rule = bound == Bound::kPositive      ? "> 0"
                     : bound == Bound::kNonNegative ? ">= 0"
                                                    : "between 0 and 1";
  fail(fmt::format("'{}' must be {}, got {}", path, rule, v.dump()));
}

void Reader::check_range(int64_t x, int64_t lo, int64_t hi, const std::string& path) const {
  if (x < lo || x > hi)
    fail(fmt::format("'{}' must be between {} and {}, got {}", path, lo, hi, x));
}

const json* find_block(const Reader& r, const json& parent, std::string_view path,
                       std::string_view key) {
  const json* block = Reader::find(parent, key);
  if (block) r.expect_object(*block, join(path, key));
  return block;
}

}  // namespace zt::config_detail
