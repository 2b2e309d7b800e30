// SafetensorsSet: a model's weights as Hugging Face saves them, read through one interface:
//   - one .safetensors file;
//   - a model directory holding model.safetensors;
//   - a model directory holding a sharded set: model.safetensors.index.json, whose "weight_map"
//     names for every tensor the file of the directory that holds it
//     ({"metadata": {...}, "weight_map": {"h.0.attn.c_attn.weight":
//     "model-00001-of-00002.safetensors", ...}}).
// Every file is validated on open (SafetensorsReader::open) and the index is held against the
// files: a shard name that is not a plain file name in the directory, a shard that is missing,
// a tensor the index places in a file that does not hold it, a tensor a file holds that the
// index does not list (or places elsewhere) are each a kInput error naming the file and tensor.
// Each tensor keeps the dtype its file holds (F32, F16, BF16 mixed freely); read_as_f32
// converts on read. Nothing is loaded beyond the headers.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/formats/safetensors.h"

namespace zt {

inline constexpr const char* kSafetensorsIndexName = "model.safetensors.index.json";
inline constexpr const char* kSafetensorsSingleName = "model.safetensors";

class SafetensorsSet {
 public:
  // `path`: a safetensors file, or a directory with an index (which wins when a directory has
  // both) or model.safetensors. A directory with neither is a kInput error naming it.
  static SafetensorsSet open(const std::string& path);

  SafetensorsSet(SafetensorsSet&&) noexcept = default;
  SafetensorsSet& operator=(SafetensorsSet&&) noexcept = default;

  // What was opened, as given.
  const std::string& path() const { return path_; }
  // Every tensor of every file: files in index order (first appearance), each file's tensors in
  // its header's order.
  const std::vector<const SafetensorsEntry*>& entries() const { return entries_; }
  // The tensor called `name`, or nullptr.
  const SafetensorsEntry* find(std::string_view name) const;
  // The file holding `entry` (one of entries()): for naming it in errors.
  const std::string& file_of(const SafetensorsEntry& entry) const;
  // SafetensorsReader::read_as_f32 on the file holding `entry`.
  void read_as_f32(const SafetensorsEntry& entry, float* dst) const;
  size_t files() const { return files_.size(); }

 private:
  SafetensorsSet() = default;
  const SafetensorsReader& reader_of(const SafetensorsEntry& entry) const;

  std::string path_;
  std::vector<std::unique_ptr<SafetensorsReader>> files_;
  std::vector<const SafetensorsEntry*> entries_;
  std::map<std::string, const SafetensorsEntry*, std::less<>> by_name_;
  std::map<const SafetensorsEntry*, size_t> file_index_;
};

}  // namespace zt
