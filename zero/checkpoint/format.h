// The checkpoint's description: the manifest (manifest.json) with its units, their tensors and
// the shard files it lists, and the names of a checkpoint's files and directories. The format on
// disk, as the checkpoint files write and read it:
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
// Tests: tests/zero/checkpoint/files_test.cpp.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/dtype.h"
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

}  // namespace zt
