// zt-ckpt's three jobs, as library calls (tests/tools/zt_ckpt_test.cpp drives them in process):
//   inspect      a checkpoint's manifest, its shard files and records, every checksum verified;
//   consolidate  a sharded checkpoint (any world size and stage) to one safetensors file with
//                the model's (Hugging Face GPT-2) tensor names and exported shapes, fp32 or 16-bit;
//   import       a safetensors weights file to a step-0 checkpoint that zt-train --resume accepts
//                (world size 1, stage 0 layout, zero optimizer state): fine-tuning from weights.
// Memory: consolidate and import stream one unit at a time through one unit-sized buffer (plus
// a small conversion buffer), never the whole model; the safetensors header, which needs every
// offset first, comes from the manifest's tables before any data is read.
// One process, no communication, no device: file formats are zero/checkpoint/'s and
// runtime/formats/safetensors.h's. Errors: kInput (one line naming the file) for any bad input.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/model.h"
#include "zero/checkpoint/reader.h"
#include "zero/optimizer.h"

namespace zt {

// ---- inspect --------------------------------------------------------------------------------

// A checkpoint read back whole: the manifest summary, every shard file (its size and CRC32C,
// checked by CheckpointReader on open) and every record (read back on its own and its CRC32C
// checked). Throws kInput naming the file on the first problem.
struct InspectReport {
  std::string dir;  // the step directory (a root's `latest` followed)
  CheckpointManifest manifest;
  std::vector<CheckpointReader::RecordInfo> records;  // every one verified
  int64_t record_bytes = 0;
};
InspectReport inspect_checkpoint(const std::string& path);
// The report as zt-ckpt inspect prints it (ends in "ok: ..." naming what was verified).
std::string format_inspect_report(const InspectReport& report);

// ---- consolidate ----------------------------------------------------------------------------

// Resident memory of this process from /proc/self/status (bytes; 0 where it cannot be read).
struct ProcessMemory {
  int64_t rss = 0;  // VmRSS: now
  int64_t hwm = 0;  // VmHWM: the peak since start, or since reset_peak_rss()
};
ProcessMemory process_memory();
// Resets VmHWM to the current RSS (writes "5" to /proc/self/clear_refs, Linux 4.0+); false
// where the kernel does not allow it (the peak then covers the whole process).
bool reset_peak_rss();

struct ConsolidateResult {
  std::string dir;  // the step directory read
  int64_t step = 0;
  std::string source_kind;    // "master" (fp32) or "working" (pure 16-bit checkpoints)
  DType dtype = DType::kF32;  // of the file's tensors
  int64_t tensors = 0;
  int64_t file_bytes = 0;
  std::string largest_unit;        // by elements
  int64_t largest_unit_bytes = 0;  // its numel x 4 (fp32)
  int64_t buffer_peak_bytes = 0;   // the most bytes this call's own buffers held at once
  ProcessMemory before;            // after opening the checkpoint, before the first unit
  int64_t peak_rss = 0;            // VmHWM after the file is written
  bool peak_reset = false;         // peak_rss counts from `before` (reset_peak_rss() worked)
};

// Writes `out` (atomically: runtime/file_io.h AtomicFile) from the checkpoint at `path` (a root
// or a step directory): per unit, every tensor of the manifest under its name, dim 0 trimmed to
// its used_rows, from the unit's "master" records (or, in a pure 16-bit checkpoint, "working",
// widened or rounded as `dtype` needs; fp32 -> 16-bit rounds to nearest even as the engine
// does), in unit then tensor order, metadata {"format": "pt"}: the bytes zt-train's
// zt.save_weights writes for the same weights. `model_units`, when given (checkpoint_unit() of a
// model's layouts), are checked against the manifest (CheckpointReader::check_model) and their
// used_rows used: for checkpoints whose manifest predates used_rows.
ConsolidateResult consolidate_checkpoint(const std::string& path, const std::string& out,
                                         DType dtype,
                                         const std::vector<CheckpointUnit>* model_units = nullptr);
// "wrote out.safetensors: 149 tensors, 497.8 MiB fp32 from step 3 (master)" and the memory line:
// peak RSS against the largest unit.
std::string format_consolidate_result(const ConsolidateResult& result, const std::string& out);

// ---- import ---------------------------------------------------------------------------------

// What the trainer state of an imported checkpoint says: the run it is meant for. zt-train
// --resume maps the data position (0) to any world, micro-batch and sequence length, and notes
// a micro_batch, seq_len or seed other than its own; the optimizer must be the run's (its state
// names are checked), so pass the fine-tuning config's.
struct ImportOptions {
  OptimizerOptions optimizer;  // its state records: optimizer_state_names(optimizer), zeros
  int64_t micro_batch = 1;
  int64_t seq_len = 1;
  uint64_t seed = 1337;
  std::string config_source;  // recorded in trainer_state.config.source
};

struct ImportResult {
  std::string dir;  // <root>/step0
  int64_t params = 0;
  int64_t file_bytes = 0;
  std::vector<std::string> optimizer_state;
  int64_t buffer_peak_bytes = 0;
  int64_t largest_unit_bytes = 0;
};

// Writes the checkpoint <root>/step0 (and `latest`) with the directory protocol of
// zero/checkpoint/format.h: one shard file rank0.zts holding, per unit of `model`, the "master"
// (fp32, the file's tensors at their offsets, padding rows and alignment zero) and one record of
// zeros per optimizer state; the manifest of world size 1, stage 0, fp32, step 0; trainer_state
// as a zt-train checkpoint's (step 0, data positions 0, engine optimizer_steps 0, no loss
// scaler). The file is checked as load_weights checks it (names, shapes, nothing unexpected;
// F32, F16 or BF16 tensors). `root` must not exist or be empty (kInput otherwise).
ImportResult import_weights(const std::string& weights, const std::string& root, Model& model,
                            const ImportOptions& options);

}  // namespace zt
