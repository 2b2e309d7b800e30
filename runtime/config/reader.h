// The typed JSON reader every config block is read through: typed access (boolean, number,
// integer, string, one-of choices) whose errors are one line naming the key path and the file,
// unknown-key checks with "did you mean" suggestions, table-driven blocks (a row per key: the
// member it fills, its bound, DeepSpeed's other spelling of it), and the start-up notes the
// blocks collect. Knows no block's keys: those live in deepspeed_blocks.cpp, optimizer_blocks.cpp
// and zt_block.cpp. Internal to runtime/config; the public interface is runtime/config.h.
#pragma once

#include <fmt/format.h>

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace zt::config_detail {

using nlohmann::json;

// "parent.key", or "key" at the top level.
std::string join(std::string_view parent, std::string_view key);

bool equal_ignoring_case(std::string_view a, std::string_view b);

// The option nearest to `word` when it is close (see reader.cpp), else nullopt.
std::optional<std::string_view> nearest(std::string_view word,
                                        std::span<const std::string_view> options);

// "string \"fast\"", "integer -1", "number 1.5", "boolean true", "array [1,2]", "null".
std::string describe_value(const json& v);

// Keys beginning with '_' are comments, ignored at any level ("_comment": "...").
inline bool is_comment_key(std::string_view key) { return !key.empty() && key.front() == '_'; }

// True for the Hugging Face Trainer's placeholder string "auto".
inline bool is_auto(const json& v) {
  return v.is_string() && v.get_ref<const std::string&>() == "auto";
}

enum class Bound { kAny, kPositive, kNonNegative, kUnitInterval };
enum class Case { kSensitive, kInsensitive };

template <class E>
struct Choice {
  std::string_view name;
  E value;
};

class Reader {
 public:
  // `notes` collects the start-up notes (one line each); the reader never prints.
  Reader(const std::string& source, std::vector<std::string>& notes)
      : source_(source), notes_(notes) {}

  const std::string& source() const { return source_; }

  [[noreturn]] void fail(const std::string& message) const;
  // "'path' must be <expected>, got <value>"; for the string "auto" it says where "auto" is
  // filled in instead.
  [[noreturn]] void type_error(const json& v, const std::string& path,
                               std::string_view expected) const;

  // One start-up line, printed by rank 0 (train/trainer.cpp).
  void note(std::string line) const { notes_.push_back(std::move(line)); }

  // obj[key], or nullptr when absent or null (null means "use the default", as in DeepSpeed).
  static const json* find(const json& obj, std::string_view key);
  const json& require(const json& obj, std::string_view path, std::string_view key) const;
  void expect_object(const json& v, const std::string& path) const;

  // Every key of `obj` must be in `allowed` (comment keys aside); `note` follows the key in the
  // message.
  void check_keys(const json& obj, std::string_view path, std::span<const std::string_view> allowed,
                  std::string_view note = {}) const;

  bool boolean(const json& v, const std::string& path) const;
  double number(const json& v, const std::string& path) const;
  std::string string(const json& v, const std::string& path) const;
  // Integers; an integral float such as 5e8 is accepted (DeepSpeed configs write bucket sizes
  // that way), 1.5 is not.
  int64_t integer(const json& v, const std::string& path) const;
  uint64_t unsigned_integer(const json& v, const std::string& path) const;
  int int32(const json& v, const std::string& path) const;
  // A byte count > 0: an integer (5e9 too, as integer() reads it) or a string with a unit
  // ("6GB", "512 MiB", "1.5GiB": runtime/byte_count.h's rules, GB = 10^9, GiB = 2^30 bytes).
  uint64_t byte_size(const json& v, const std::string& path) const;

  void check_bound(const json& v, Bound bound, const std::string& path) const;
  void check_range(int64_t x, int64_t lo, int64_t hi, const std::string& path) const;

  // One of a fixed set of strings: `'optimizer.type' must be one of "Adam", ... got "Adamm"`.
  template <class E, size_t N>
  E choice(const json& v, const std::string& path, const Choice<E> (&choices)[N],
           Case match) const {
    std::vector<std::string_view> names;
    for (const Choice<E>& c : choices) names.push_back(c.name);
    std::string quoted = fmt::format("\"{}\"", fmt::join(names, "\", \""));
    if (!v.is_string()) type_error(v, path, "one of " + quoted);
    std::string s = v.get<std::string>();
    for (const Choice<E>& c : choices) {
      if (match == Case::kSensitive ? s == c.name : equal_ignoring_case(s, c.name)) return c.value;
    }
    if (is_auto(v)) type_error(v, path, "one of " + quoted);
    std::string message =
        fmt::format("'{}' must be one of {}, got {}", path, quoted, describe_value(v));
    if (auto near = nearest(s, names)) message += fmt::format(" (did you mean \"{}\"?)", *near);
    fail(message);
  }

 private:
  const std::string& source_;
  std::vector<std::string>& notes_;
};

// ---- table-driven blocks ---------------------------------------------------------------------

// One row: a key, the member it fills, the bound its value must meet, and DeepSpeed's other
// spelling of the same key (zero_optimization's "stage3_" keys are also accepted without the
// prefix); giving both spellings is an error.
template <class T>
struct Field {
  std::string_view key;
  std::variant<bool T::*, int T::*, int64_t T::*, uint64_t T::*, double T::*, std::string T::*>
      member;
  Bound bound = Bound::kAny;
  std::string_view alias = {};
};

// The keys of `fields` (and their aliases) plus `extra`: a block's allowed keys.
template <class T, size_t N>
std::vector<std::string_view> keys_of(const Field<T> (&fields)[N],
                                      std::initializer_list<std::string_view> extra = {}) {
  std::vector<std::string_view> keys(extra);
  for (const Field<T>& f : fields) {
    keys.push_back(f.key);
    if (!f.alias.empty()) keys.push_back(f.alias);
  }
  return keys;
}

template <class T>
void read_field(const Reader& r, const json& v, const std::string& path, const Field<T>& field,
                T& out) {
  std::visit(
      [&](auto member) {
        using V = std::remove_reference_t<decltype(out.*member)>;
        if constexpr (std::is_same_v<V, bool>) {
          out.*member = r.boolean(v, path);
        } else if constexpr (std::is_same_v<V, std::string>) {
          out.*member = r.string(v, path);
        } else {
          if constexpr (std::is_same_v<V, double>) out.*member = r.number(v, path);
          if constexpr (std::is_same_v<V, int>) out.*member = r.int32(v, path);
          if constexpr (std::is_same_v<V, int64_t>) out.*member = r.integer(v, path);
          if constexpr (std::is_same_v<V, uint64_t>) out.*member = r.unsigned_integer(v, path);
          r.check_bound(v, field.bound, path);
        }
      },
      field.member);
}

// The value of a row's key or of its alias (nullptr when neither is present); both present is
// an error naming the two.
template <class T>
const json* find_field(const Reader& r, const json& obj, std::string_view path, const Field<T>& f,
                       std::string_view* used) {
  const json* v = Reader::find(obj, f.key);
  const json* a = f.alias.empty() ? nullptr : Reader::find(obj, f.alias);
  if (v && a) {
    r.fail(fmt::format("'{}' and '{}' are two spellings of the same key; give only one",
                       join(path, f.key), join(path, f.alias)));
  }
  if (used) *used = v ? f.key : f.alias;
  return v ? v : a;
}

// Reads every row whose key (or alias) is present in `obj`; absent rows keep their defaults.
// Errors name the spelling the file used.
template <class T, size_t N>
void read_fields(const Reader& r, const json& obj, std::string_view path,
                 const Field<T> (&fields)[N], T& out) {
  for (const Field<T>& f : fields) {
    std::string_view used;
    if (const json* v = find_field(r, obj, path, f, &used))
      read_field(r, *v, join(path, used), f, out);
  }
}

// `a` followed by `b`: a block's table keys and its rule keys.
inline std::vector<std::string_view> concat(std::vector<std::string_view> a,
                                            const std::vector<std::string_view>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// An optional sub-block: nullptr when absent, else checked to be an object.
const json* find_block(const Reader& r, const json& parent, std::string_view path,
                       std::string_view key);

}  // namespace zt::config_detail
