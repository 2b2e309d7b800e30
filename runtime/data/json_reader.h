// JsonFile: typed access to one parsed JSON file for the tokenizer.json reader
// (tokenizer_json.cpp, normalizer.cpp, pre_tokenizer.cpp, decoder.cpp). Every failure throws one
// kInput line naming the file and the key path ("pre_tokenizer.pretokenizers[0].behavior").
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace zt {

// "where.key", or "key" at the top level.
std::string member_path(const std::string& where, std::string_view key);
// "where[index]".
std::string index_path(const std::string& where, size_t index);
// A JSON value for an error message, cut short.
std::string shown(const nlohmann::json& value);

class JsonFile {
 public:
  using json = nlohmann::json;
  explicit JsonFile(std::string path) : path_(std::move(path)) {}
  const std::string& path() const { return path_; }

  // Throws kInput "PATH: WHERE WHAT".
  [[noreturn]] void fail(const std::string& where, std::string_view what) const;

  // object[key]; missing (or object not an object) throws.
  const json& member(const json& object, const std::string& where, std::string_view key) const;
  // object[key], or nullptr when it is absent.
  const json* find(const json& object, const std::string& where, std::string_view key) const;
  // object[key], or nullptr when it is absent or null.
  const json* find_non_null(const json& object, const std::string& where,
                            std::string_view key) const;

  const std::string& string(const json& value, const std::string& where) const;
  bool boolean(const json& value, const std::string& where) const;
  int32_t id(const json& value, const std::string& where) const;
  const json& array(const json& value, const std::string& where) const;
  const json& object(const json& value, const std::string& where) const;
  // object[key] as a bool; `fallback` when absent or null.
  bool optional_boolean(const json& object, const std::string& where, std::string_view key,
                        bool fallback) const;
  // object[key] as a string; `fallback` when absent or null.
  std::string optional_string(const json& object, const std::string& where, std::string_view key,
                              std::string_view fallback) const;
  // object[key] as a count (an integer >= 0); `fallback` when absent or null.
  size_t optional_count(const json& object, const std::string& where, std::string_view key,
                        size_t fallback) const;
  // object["type"], a string.
  const std::string& type(const json& object, const std::string& where) const {
    return string(member(object, where, "type"), member_path(where, "type"));
  }
  // object[key], a string holding exactly one character (UTF-8).
  std::string character(const json& object, const std::string& where, std::string_view key) const;

 private:
  std::string path_;
};

}  // namespace zt
