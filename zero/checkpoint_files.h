// Sharded checkpoints on disk (docs/architecture.md, "Checkpoints"): one shard file per rank,
// the manifest, the step directories and the `latest` pointer, and the reader that validates a
// checkpoint whole before serving any of it and reads any global flat range back, so that a
// checkpoint written with one world size loads into any other (resharding).
//
// What it does not do: communication (the caller, the trainer, puts the barriers and gathers
// between ranks; every call here is per process, so one process can play every rank in a test),
// deciding what is saved (units, kinds, trainer state), converting dtypes, threads, mmap.
//
// A checkpoint root holds
//   <root>/step<N>/manifest.json   the CheckpointManifest (JSON)
//   <root>/step<N>/rank<R>.zts     rank R's shard file
//   <root>/latest                  "step<N>\n": the newest complete checkpoint
// Save protocol (rank 0 does the directory steps; the barriers are the trainer's):
//   rank 0: dir = prepare_checkpoint_dir(root, N)           -> barrier
//   every rank: ShardFileWriter(dir, rank) ... finish()     -> gather the ShardFileInfos on rank 0
//   rank 0: commit_checkpoint(root, N, manifest, keep_last)
// A crash at any point leaves `latest` naming a complete checkpoint (or no `latest` at all
// before the first commit): the step directory only gets its final name once every file in it
// is written and fsync'd, and `latest` is replaced atomically after that.
//
// Shard file layout (all integers little-endian):
//   [16 bytes header]  "ZTSHARD\0", u32 format version (kCheckpointFormatVersion), u32 rank
//   [record bytes]     the records' data, one after another in the order they were added
//   [index]            JSON {"rank": R, "records": [{"unit", "kind", "dtype", "global_begin",
//                      "count", "offset", "bytes", "crc32c"}, ...]}; offset is in the file
//   [32 bytes trailer] u64 index offset, u64 index bytes, u32 crc32c of the index, u32 zero,
//                      "ZTSHEND\0"
// The writer only appends (it never seeks back); the manifest holds each file's size and the
// CRC32C of all its bytes. Element ranges (global_begin, count) are in elements of the unit's
// padded flat buffer (zero/zero_policy.h ShardLayout), whatever the world size.
// Tests: tests/zero/checkpoint_files_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/file_io.h"
#include "runtime/flat_layout.h"

namespace zt {

// The version of both the manifest and the shard files; a reader refuses any other.
constexpr int kCheckpointFormatVersion = 1;

// "rank3.zts": the shard file of rank 3 inside a step directory.
std::string shard_file_name(int rank);
// "<root>/step<N>": the directory of a committed checkpoint.
std::string checkpoint_step_dir(const std::string& root, int64_t step);

// One shard file as the manifest lists it.
struct ShardFileInfo {
  std::string name;     // plain file name inside the step directory ("rank0.zts")
  int64_t bytes = 0;    // the whole file
  uint32_t crc32c = 0;  // CRC32C of every byte of the file
};

// A tensor of a unit: a view of `shape` at `offset` elements into the unit's flat buffer.
// used_rows: the rows of dim 0 that hold real values (ParamSpec::used_rows: the vocabulary padded
// to a multiple of 128), -1 for all; what zt-ckpt exports. Stored as "used_rows" only when >= 0;
// manifests without it read as -1. check_model does not compare it.
struct CheckpointTensor {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;
  int64_t used_rows = -1;
};

// A unit as the checkpoint saw it. numel is the FlatLayout's (model-defined); padded_numel the
// ShardLayout's of the saving world (it changes with the world size, so check_model ignores it).
struct CheckpointUnit {
  std::string name;
  int64_t numel = 0;
  int64_t padded_numel = 0;
  std::vector<CheckpointTensor> tensors;
};

// The unit `name` with the tensors of `layout`, padded to `padded_numel` (>= layout.numel()).
CheckpointUnit checkpoint_unit(std::string name, const FlatLayout& layout, int64_t padded_numel);

// manifest.json. Units and files in order (units: the model's unit order; files: by rank).
struct CheckpointManifest {
  int format_version = kCheckpointFormatVersion;
  int64_t step = 0;
  int world_size = 1;
  int zero_stage = 0;
  DType compute_dtype = DType::kF32;
  DType grad_dtype = DType::kF32;
  std::vector<CheckpointUnit> units;
  std::vector<ShardFileInfo> files;
  // Scheduler, loss scaler, RNG, data position: the trainer's, stored and returned as is.
  nlohmann::json trainer_state = nlohmann::json::object();
};

nlohmann::json manifest_to_json(const CheckpointManifest& manifest);
// The manifest in `j`; any missing key, wrong type or bad value is a kInput error naming
// `source` (the file it came from) and the key ("units[2].numel is missing or not an integer
// >= 0"). The format version is checked here: any other version is refused.
CheckpointManifest manifest_from_json(const nlohmann::json& j, const std::string& source);

// Writes one rank's shard file, `<dir>/rank<R>.zts`, record by record:
//   writer.begin_record("h0", "exp_avg", DType::kF32, shard.begin(), shard.shard);
//   writer.append(chunk, chunk_bytes);   // as often as needed: a shard streams through a
//   ...                                  // buffer of any size
//   writer.end_record();                 // checks count * dtype_size bytes were appended
//   ShardFileInfo info = writer.finish();
// Each record's data and the whole file are checksummed (CRC32C) as they are written. Every
// write is checked (runtime/file_io.h CheckedFile: errors name the file and the OS error).
// Calls out of order (append outside a record, finish inside one) are internal errors.
// Destroyed without finish() (an exception on the way), the partial file is removed. Neither
// copied nor moved (it owns the file under its name until finish()).
// Where a rank's records go, one after another: a shard file (ShardFileWriter) or host memory
// (ShardSnapshot, for a save written in the background). Engine::save_state writes to either.
class RecordSink {
 public:
  virtual ~RecordSink() = default;
  // A record of `count` elements of `dtype`: elements [global_begin, global_begin + count) of
  // the unit's padded flat buffer, of kind `kind` ("master", "exp_avg", "exp_avg_sq",
  // "working", ...). count may be 0 (a rank whose shard of a small unit is empty).
  virtual void begin_record(std::string unit, std::string kind, DType dtype, int64_t global_begin,
                            int64_t count) = 0;
  virtual void append(const void* data, size_t bytes) = 0;
  virtual void end_record() = 0;
  // The next `bytes` of the open record as memory the caller fills (counted as appended), so a
  // device copy can land there directly; null when the sink takes bytes through append() only.
  virtual std::byte* append_space(size_t bytes) { return nullptr; }
};

class ShardFileWriter final : public RecordSink {
 public:
  ShardFileWriter(const std::string& dir, int rank);
  ~ShardFileWriter();
  ShardFileWriter(const ShardFileWriter&) = delete;
  ShardFileWriter& operator=(const ShardFileWriter&) = delete;

  void begin_record(std::string unit, std::string kind, DType dtype, int64_t global_begin,
                    int64_t count) override;
  void append(const void* data, size_t bytes) override;
  void end_record() override;
  // begin_record, one append of count * dtype_size(dtype) bytes, end_record.
  void add_record(std::string unit, std::string kind, DType dtype, int64_t global_begin,
                  int64_t count, const void* data);

  // Writes the index and the trailer, fsyncs and closes; the file's name, size and CRC32C.
  ShardFileInfo finish();

  const std::string& path() const { return file_.path(); }

 private:
  struct Record {
    std::string unit, kind;
    DType dtype = DType::kF32;
    int64_t global_begin = 0, count = 0;
    int64_t offset = 0, bytes = 0;  // in the file
    uint32_t crc32c = 0;
  };
  void write(const void* data, size_t bytes);  // to the file, into the file's CRC

  CheckedFile file_;
  int rank_ = 0;
  uint32_t file_crc_ = 0;
  std::vector<Record> records_;
  int64_t record_written_ = 0;  // bytes appended to the open record
  bool in_record_ = false;
  bool finished_ = false;
};

// A rank's records held in host memory: what an asynchronous save copies out of the device,
// the host tier and the swap files while training waits, to write later, on another thread,
// with write_to. Owns its bytes (one allocation per record), kept for the next save (rewind):
// a snapshot taken again reuses memory whose pages are already mapped, so the copy runs at
// memory speed. Not tracked by any device.
class ShardSnapshot final : public RecordSink {
 public:
  void begin_record(std::string unit, std::string kind, DType dtype, int64_t global_begin,
                    int64_t count) override;
  void append(const void* data, size_t bytes) override;
  void end_record() override;
  std::byte* append_space(size_t bytes) override;
  // Forgets the records, keeping their memory for the next snapshot.
  void rewind();
  // Every record, in order, into `writer` (which the caller finishes). `before_record(unit)`,
  // when given, runs before each record with its unit's name (tests inject faults through it).
  void write_to(ShardFileWriter& writer,
                const std::function<void(const std::string& unit)>& before_record = {}) const;
  int64_t bytes() const { return bytes_; }
  size_t records() const { return used_; }

 private:
  struct Record {
    std::string unit, kind;
    DType dtype = DType::kF32;
    int64_t global_begin = 0, count = 0;
    // Pages mapped when first written; large records on 2 MiB boundaries, advised to use huge
    // pages (far fewer faults when the first snapshot touches them).
    std::unique_ptr<std::byte, void (*)(void*)> data{nullptr, &std::free};
    size_t size = 0, capacity = 0;
  };
  std::vector<Record> records_;  // [0, used_) are this snapshot's
  size_t used_ = 0;
  bool open_ = false;
  int64_t bytes_ = 0;
};

// Makes `<root>/step<N>.tmp/` (and root, if needed), removing a stale one left by a save that
// crashed, and returns its path: every rank writes its shard file there. Rank 0 only.
std::string prepare_checkpoint_dir(const std::string& root, int64_t step);

// Turns `<root>/step<N>.tmp/` into the checkpoint `<root>/step<N>/` (rank 0, after every rank's
// finish()): checks each file of manifest.files is there with its size; writes manifest.json
// atomically (which fsyncs the directory); renames the directory to step<N> (an existing
// step<N> from an earlier run is exchanged with it atomically, or, where the file system cannot
// exchange, moved to step<N>.old first, and deleted only once the new one is in place); fsyncs
// root; replaces `<root>/latest` atomically with "step<N>\n"; then deletes committed step
// directories beyond the keep_last newest by step number (keep_last <= 0: keep all) and leftover
// step*.tmp / step*.old directories, never step<N> itself (a run resumed from an earlier step
// keeps its new step<N> beside the keep_last newer ones). manifest.step must be `step`.
// Not safe while another save into the same root is under way.
void commit_checkpoint(const std::string& root, int64_t step, const CheckpointManifest& manifest,
                       int keep_last);

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
