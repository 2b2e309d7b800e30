// SafetensorsSet: one file, model.safetensors, or an index and its shards.
#include "runtime/formats/safetensors_set.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/file_io.h"
#include "runtime/status.h"

namespace zt {

namespace fs = std::filesystem;

namespace {

// A shard name an index may give: a plain file name, so that no index reaches outside its
// directory.
bool plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

}  // namespace

SafetensorsSet SafetensorsSet::open(const std::string& path) {
  SafetensorsSet set;
  set.path_ = path;
  std::error_code ec;
  auto add_file = [&](const std::string& file) {
    set.files_.push_back(std::make_unique<SafetensorsReader>(SafetensorsReader::open(file)));
    for (const SafetensorsEntry& e : set.files_.back()->entries()) {
      set.file_index_[&e] = set.files_.size() - 1;
      set.entries_.push_back(&e);
      set.by_name_[e.name] = &e;
    }
  };
  if (!fs::is_directory(path, ec)) {
    add_file(path);
    return set;
  }
  const fs::path dir(path);
  const fs::path index_path = dir / kSafetensorsIndexName;
  if (!fs::exists(index_path, ec)) {
    if (!fs::exists(dir / kSafetensorsSingleName, ec))
      throw_input(fmt::format("{}: a model directory needs {} or {}; neither is there", path,
                              kSafetensorsSingleName, kSafetensorsIndexName));
    add_file((dir / kSafetensorsSingleName).string());
    return set;
  }

  const std::string index_name = index_path.string();
  const nlohmann::json index =
      nlohmann::json::parse(read_file(index_name, "the weights index"), nullptr, false);
  if (index.is_discarded() || !index.is_object())
    throw_input(fmt::format("{}: not a JSON object", index_name));
  const auto map = index.find("weight_map");
  if (map == index.end() || !map->is_object() || map->empty())
    throw_input(
        fmt::format("{}: no \"weight_map\" object naming the file of each tensor", index_name));
  // The shards in order of first appearance, and where the index places each tensor.
  std::vector<std::string> shards;
  std::map<std::string, std::string> placed;
  for (const auto& [tensor, file] : map->items()) {
    if (!file.is_string() || !plain_file_name(file.get<std::string>()))
      throw_input(fmt::format("{}: weight_map[\"{}\"] = {} is not a file name inside {}",
                              index_name, tensor, file.dump(), path));
    const std::string name = file.get<std::string>();
    if (std::find(shards.begin(), shards.end(), name) == shards.end()) shards.push_back(name);
    placed[tensor] = name;
  }
  for (const std::string& shard : shards) {
    const fs::path file = dir / shard;
    if (!fs::is_regular_file(file, ec))
      throw_input(fmt::format("{}: missing (listed in {})", file.string(), index_name));
    const size_t before = set.entries_.size();
    add_file(file.string());
    for (size_t i = before; i < set.entries_.size(); ++i) {
      const std::string& tensor = set.entries_[i]->name;
      const auto where = placed.find(tensor);
      if (where == placed.end())
        throw_input(fmt::format("{}: tensor '{}' is not in {}'s weight_map", file.string(), tensor,
                                index_name));
      if (where->second != shard)
        throw_input(fmt::format("{}: tensor '{}' is also here, but {} places it in {}",
                                file.string(), tensor, index_name, where->second));
    }
  }
  for (const auto& [tensor, shard] : placed) {
    const SafetensorsEntry* e = set.find(tensor);
    if (e == nullptr || set.file_of(*e) != (dir / shard).string())
      throw_input(fmt::format("{}: tensor '{}' is missing ({} places it in this file)",
                              (dir / shard).string(), tensor, index_name));
  }
  return set;
}

const SafetensorsEntry* SafetensorsSet::find(std::string_view name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const SafetensorsReader& SafetensorsSet::reader_of(const SafetensorsEntry& entry) const {
  const auto it = file_index_.find(&entry);
  ZT_ASSERT(it != file_index_.end(), "tensor '{}' is not an entry of {}", entry.name, path_);
  return *files_[it->second];
}

const std::string& SafetensorsSet::file_of(const SafetensorsEntry& entry) const {
  return reader_of(entry).path();
}

void SafetensorsSet::read_as_f32(const SafetensorsEntry& entry, float* dst) const {
  reader_of(entry).read_as_f32(entry, dst);
}

}  // namespace zt
