// JsonFile: the checks behind every key the tokenizer.json reader looks at. No state but the
// file's path.
#include "runtime/data/json_reader.h"

#include "runtime/status.h"

namespace zt {

using json = nlohmann::json;

std::string member_path(const std::string& where, std::string_view key) {
  return where.empty() ? std::string(key) : fmt::format("{}.{}", where, key);
}
std::string index_path(const std::string& where, size_t index) {
  return fmt::format("{}[{}]", where, index);
}
std::string shown(const json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

void JsonFile::fail(const std::string& where, std::string_view what) const {
  throw_input(fmt::format("{}: {} {}", path_, where, what));
}

const json& JsonFile::member(const json& object, const std::string& where,
                             std::string_view key) const {
  const json* value = find(object, where, key);
  if (value == nullptr) fail(member_path(where, key), "is missing");
  return *value;
}

const json* JsonFile::find(const json& object, const std::string& where,
                           std::string_view key) const {
  if (!object.is_object()) fail(where, fmt::format("must be an object; got {}", shown(object)));
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

const json* JsonFile::find_non_null(const json& object, const std::string& where,
                                    std::string_view key) const {
  const json* value = find(object, where, key);
  return value == nullptr || value->is_null() ? nullptr : value;
}

const std::string& JsonFile::string(const json& value, const std::string& where) const {
  if (!value.is_string()) fail(where, fmt::format("must be a string; got {}", shown(value)));
  return value.get_ref<const std::string&>();
}

bool JsonFile::boolean(const json& value, const std::string& where) const {
  if (!value.is_boolean()) fail(where, fmt::format("must be true or false; got {}", shown(value)));
  return value.get<bool>();
}

int32_t JsonFile::id(const json& value, const std::string& where) const {
  if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > INT32_MAX) {
    fail(where,
         fmt::format("must be a token id (an integer 0..{}); got {}", INT32_MAX, shown(value)));
  }
  return static_cast<int32_t>(value.get<int64_t>());
}

const json& JsonFile::array(const json& value, const std::string& where) const {
  if (!value.is_array()) fail(where, fmt::format("must be an array; got {}", shown(value)));
  return value;
}

const json& JsonFile::object(const json& value, const std::string& where) const {
  if (!value.is_object()) fail(where, fmt::format("must be an object; got {}", shown(value)));
  return value;
}

bool JsonFile::optional_boolean(const json& object, const std::string& where, std::string_view key,
                                bool fallback) const {
  const json* value = find_non_null(object, where, key);
  return value == nullptr ? fallback : boolean(*value, member_path(where, key));
}

std::string JsonFile::optional_string(const json& object, const std::string& where,
                                      std::string_view key, std::string_view fallback) const {
  const json* value = find_non_null(object, where, key);
  return value == nullptr ? std::string(fallback) : string(*value, member_path(where, key));
}

size_t JsonFile::optional_count(const json& object, const std::string& where, std::string_view key,
                                size_t fallback) const {
  const json* value = find_non_null(object, where, key);
  if (value == nullptr) return fallback;
  if (!value->is_number_integer() || value->get<int64_t>() < 0) {
    fail(member_path(where, key),
         fmt::format("must be an integer 0 or more; got {}", shown(*value)));
  }
  return static_cast<size_t>(value->get<int64_t>());
}

std::string JsonFile::character(const json& object, const std::string& where,
                                std::string_view key) const {
  const std::string key_where = member_path(where, key);
  const std::string& text = string(member(object, where, key), key_where);
  size_t length = 0;
  if (!text.empty()) {
    const auto lead = static_cast<unsigned char>(text[0]);
    length = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
  }
  if (text.empty() || length != text.size()) {
    fail(key_where, fmt::format("must be one character; got {}", shown(text)));
  }
  return text;
}

}  // namespace zt
