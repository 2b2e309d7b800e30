// CheckpointReader: a checkpoint validated whole before any of it is served, and any global flat
// range read back, so that a checkpoint written with one world size loads into any other
// (resharding). format.h has the layout it validates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "runtime/dtype.h"
#include "zero/checkpoint/format.h"

namespace zt {

// A validated checkpoint, open for reading. Move-only; owns one descriptor per shard file.
// Every problem is a kInput error of one line naming the file and the problem.
class CheckpointReader {
 public:
  // `path`: a checkpoint root (follows `latest`) or a step directory (holds manifest.json).
  // Validates everything before returning, so that nothing is ever loaded partially: the
  // manifest parses and has kCheckpointFormatVersion; its file names are plain names (no '/',
  // no "..") and there is one per rank of world_size; each file exists, has the listed size and
  // CRC32C (each file is read once, whole), its header, trailer and index parse, its records lie
  // inside its data and name units of the manifest with ranges inside their padded buffers;
  // records of one unit and kind do not overlap, have one dtype, and cover the unit's real
  // elements [0, numel).
  explicit CheckpointReader(const std::string& path);
  ~CheckpointReader();
  CheckpointReader(CheckpointReader&& other) noexcept;
  CheckpointReader& operator=(CheckpointReader&& other) noexcept;
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const std::string& dir() const { return dir_; }  // the step directory
  const CheckpointManifest& manifest() const { return manifest_; }

  // Refuses (kInput, naming the manifest and the first difference) a model whose units differ
  // from the checkpoint's in count, order, name, numel, or tensor names, shapes and offsets.
  // padded_numel is not compared: it follows the world size.
  void check_model(std::span<const CheckpointUnit> units) const;

  // One record as the shard files' indexes list it (records of no elements left out).
  struct RecordInfo {
    std::string unit, kind;
    std::string file;  // the shard file's name ("rank1.zts")
    DType dtype = DType::kF32;
    int64_t global_begin = 0, count = 0;
    int64_t bytes = 0;
    uint32_t crc32c = 0;
  };
  // Every record: units in the manifest's order, then kinds by name, then by global_begin.
  std::vector<RecordInfo> list_records() const;
  // The kinds `unit` has records of, by name ("exp_avg", "exp_avg_sq", "master").
  std::vector<std::string> kinds(const std::string& unit) const;

  // True when the checkpoint has records of `kind` for `unit`.
  bool has(const std::string& unit, const std::string& kind) const;
  // The dtype of `unit`'s `kind` records; kInput when there are none (records all empty, of a
  // unit without elements: fp32).
  DType dtype(const std::string& unit, const std::string& kind) const;

  // Elements [global_begin, global_begin + count) of `unit`'s `kind` into dst (count elements
  // of `dtype`), from whichever records cover them, in any rank's file. Elements at or past the
  // unit's numel that no record covers are padding and read as zeros (a larger world pads
  // further). Errors (kInput) name the unit, kind and range: a dtype other than the records',
  // elements below numel in no record, a record whose CRC32C no longer matches (the file changed
  // since it was opened). Whole records are read to check their CRC32C: the part in the range
  // straight into dst, the rest through a small buffer.
  void read_range(const std::string& unit, const std::string& kind, int64_t global_begin,
                  int64_t count, DType dtype, void* dst) const;

 private:
  struct Record {
    int file = 0;  // index into manifest_.files / fds_
    DType dtype = DType::kF32;
    int64_t global_begin = 0, count = 0;
    int64_t offset = 0, bytes = 0;
    uint32_t crc32c = 0;
  };
  void open_shard_file(int f);  // validates files[f], adds its records to records_
  void check_records();
  void read_exact(int f, int64_t offset, void* dst, size_t bytes) const;
  const std::vector<Record>& records(const std::string& unit, const std::string& kind) const;
  std::string file_path(int f) const;
  void close_all();

  std::string dir_;
  CheckpointManifest manifest_;
  std::vector<int> fds_;  // one per manifest_.files entry
  // (unit, kind) -> its records sorted by global_begin
  std::map<std::pair<std::string, std::string>, std::vector<Record>> records_;
  std::map<std::string, size_t> unit_index_;  // name -> index into manifest_.units
};

}  // namespace zt
