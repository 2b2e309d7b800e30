// What the checkpoint files share and no one else needs (zero/checkpoint/): the shard file's
// magic numbers and sizes, little-endian integers, names that stay inside their directory, step
// names, the one-line errors that name the file, and the typed reader of a JSON object's keys
// whose messages name the file and the key. Internal to zero/checkpoint/*.cpp.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <source_location>
#include <string>
#include <string_view>
#include <utility>

#include "runtime/dtype.h"
#include "runtime/status.h"

namespace zt::checkpoint_detail {

namespace fs = std::filesystem;
using nlohmann::json;

inline constexpr char kHeaderMagic[8] = {'Z', 'T', 'S', 'H', 'A', 'R', 'D', '\0'};
inline constexpr char kTrailerMagic[8] = {'Z', 'T', 'S', 'H', 'E', 'N', 'D', '\0'};
inline constexpr size_t kHeaderBytes = 16;  // magic, u32 version, u32 rank
inline constexpr size_t kTrailerBytes =
    32;  // u64 index offset, u64 index bytes, u32 crc, u32 0, magic
// Whole-file checksums and the parts of records outside a read range go through a buffer of at
// most this many bytes.
inline constexpr size_t kStagingBytes = size_t{1} << 20;

inline void put_u32(unsigned char* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline void put_u64(unsigned char* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline uint32_t get_u32(const unsigned char* in) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | in[i];
  return v;
}
inline uint64_t get_u64(const unsigned char* in) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | in[i];
  return v;
}

// A name from a file, JSON-quoted so that control characters cannot break the one-line message.
inline std::string quote_name(std::string_view text) {
  return json(std::string(text)).dump(-1, ' ', false, json::error_handler_t::replace);
}

[[noreturn]] inline void bad_checkpoint(
    const std::string& path, std::string_view problem,
    std::source_location where = std::source_location::current()) {
  throw_input(fmt::format("checkpoint {}: {}", path, problem), where);
}

// A file name that stays inside the directory it is joined to: not empty, no '/', not "." or
// "..", no NUL.
inline bool is_plain_name(std::string_view name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of(std::string_view("/\0", 2)) == std::string_view::npos;
}

inline std::string step_name(int64_t step) { return fmt::format("step{}", step); }

// "step<digits>" -> the step; anything else -> -1.
inline int64_t parse_step_name(std::string_view name) {
  if (name.size() <= 4 || name.size() > 4 + 18 || name.substr(0, 4) != "step") return -1;
  int64_t step = 0;
  for (char c : name.substr(4)) {
    if (c < '0' || c > '9') return -1;
    step = step * 10 + (c - '0');
  }
  return step;
}

// ---- JSON fields with messages naming the file and the key ----------------------------------

// Reads keys of one JSON object; `at` is its place in the document ("units[2]", "" at the top).
class Fields {
 public:
  Fields(const json& object, std::string at, const std::string& source)
      : object_(object), at_(std::move(at)), source_(source) {
    if (!object_.is_object())
      bad_checkpoint(source_,
                     fmt::format("{} is not a JSON object", at_.empty() ? "the top level" : at_));
  }

  std::string key(std::string_view name) const {
    return at_.empty() ? std::string(name) : fmt::format("{}.{}", at_, name);
  }
  [[noreturn]] void bad(std::string_view name, std::string_view problem) const {
    bad_checkpoint(source_, fmt::format("{} {}", key(name), problem));
  }
  bool has(std::string_view name) const { return object_.contains(name); }
  const json& get(std::string_view name) const {
    auto it = object_.find(name);
    if (it == object_.end()) bad(name, "is missing");
    return *it;
  }
  // An integer >= 0 that fits int64, whether it was parsed (unsigned) or built (signed).
  int64_t count(std::string_view name) const {
    const json& v = get(name);
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return static_cast<int64_t>(v.get<uint64_t>());
    }
    if (v.is_number_integer() && v.get<int64_t>() >= 0) return v.get<int64_t>();
    bad(name, fmt::format("is {}, not an integer >= 0", v.dump()));
  }
  uint32_t crc(std::string_view name) const {
    const int64_t v = count(name);
    if (v > std::numeric_limits<uint32_t>::max())
      bad(name, fmt::format("is {}, not a 32-bit CRC", v));
    return static_cast<uint32_t>(v);
  }
  std::string string(std::string_view name) const {
    const json& v = get(name);
    if (!v.is_string() || v.get_ref<const std::string&>().empty())
      bad(name, fmt::format("is {}, not a non-empty string", v.dump()));
    return v.get<std::string>();
  }
  DType dtype(std::string_view name) const {
    const std::string text = string(name);
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
      if (dtype_name(t) == text) return t;
    }
    bad(name, fmt::format("is {}, not a dtype (fp32, fp16, bf16)", quote_name(text)));
  }
  const json& array(std::string_view name) const {
    const json& v = get(name);
    if (!v.is_array()) bad(name, "is not an array");
    return v;
  }

 private:
  const json& object_;
  std::string at_;
  const std::string& source_;
};

inline std::string dump_json(const json& j, int indent) {
  try {
    return j.dump(indent);
  } catch (const json::exception& e) {
    throw_internal(fmt::format("checkpoint JSON cannot be written: {}", e.what()));
  }
}

[[noreturn]] inline void fail_fs(std::string_view what, const fs::path& path,
                                 const std::error_code& ec) {
  throw_system(fmt::format("cannot {} {}: {}", what, path.string(), ec.message()));
}

inline void remove_tree(const fs::path& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) fail_fs("remove", path, ec);
}

inline void rename_path(const fs::path& from, const fs::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    throw_system(fmt::format("cannot rename {} to {}: {}", from.string(), to.string(),
                             std::strerror(errno)));
  }
}

}  // namespace zt::checkpoint_detail
