// Safetensors I/O: our own reader and writer of the published safetensors format, the file
// format of model weights (GPT-2 import/export) and of consolidated checkpoints.
//
//   [8 bytes: N, little-endian u64] [N bytes: UTF-8 JSON header, may end in spaces] [buffer]
//   header = {"__metadata__": {str: str} (optional),
//             name: {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]}, ...}
//   offsets are byte offsets into the buffer (the bytes after the header), end exclusive;
//   tensors are row-major and little-endian.
//
// The reader validates the whole header on open() and then reads one entry at a time with
// pread(): it never maps or loads the buffer, so a multi-GB file costs only its header in memory.
// The writers write F32, F16 and BF16 tensors through a temporary file that is fsynced and
// renamed over the target, so the target is either the old file or the complete new one.
// SafetensorsWriter takes every tensor's memory and writes at the end; SafetensorsStreamWriter
// takes the tensors' names, dtypes and shapes first (the header needs every offset), then their
// bytes in order, so a file larger than memory streams through a buffer of the caller's size.
// Both write the same bytes for the same tensors and metadata.
// Not here: sharded files (model.safetensors.index.json), name mapping (model_zoo/ knows GPT-2's
// names), and reading into fp16/bf16 (read_as_f32 then convert with runtime/dtype.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/file_io.h"

namespace zt {

// One tensor of a safetensors file, as its header describes it.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;           // as in the file: "F32", "F16", "BF16", "I64", ... (maybe unknown)
  std::vector<int64_t> shape;  // every dim >= 0; [] is a scalar (one element)
  uint64_t begin = 0;          // byte range [begin, end) in the buffer (after the header)
  uint64_t end = 0;

  uint64_t bytes() const { return end - begin; }
  // Product of the dims (1 for a scalar). open() checked it does not overflow.
  uint64_t numel() const;
};

// Bytes per element of a safetensors dtype name ("F32" -> 4, "BOOL" -> 1), or 0 when we do not
// know the name (sub-byte and future dtypes). Known: F64 F32 F16 BF16 F8_E4M3 F8_E5M2 I64 I32 I16
// I8 U64 U32 U16 U8 BOOL.
size_t safetensors_dtype_size(std::string_view dtype);

// A validated safetensors file, open for reading. Move-only; owns the file descriptor.
// Every problem with the file is a kInput error whose one-line message names the file and the
// entry or the problem (tests/runtime/formats/safetensors_test.cpp pins each case).
class SafetensorsReader {
 public:
  // Opens `path` and validates the header: size >= 8, N <= size - 8 and N <= 100 MiB, the header
  // is a JSON object (no duplicate keys), "__metadata__" maps strings to strings, every entry has
  // a dtype string, a shape of non-negative ints and data_offsets [begin, end] with
  // begin <= end <= buffer size, end - begin == numel * element size for known dtypes, and no two
  // non-empty ranges overlap. Entries of unknown dtypes are kept (their size cannot be checked).
  // Gaps in the buffer are allowed.
  static SafetensorsReader open(const std::string& path);

  SafetensorsReader(SafetensorsReader&& other) noexcept;
  SafetensorsReader& operator=(SafetensorsReader&& other) noexcept;
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;
  ~SafetensorsReader();

  const std::string& path() const { return path_; }
  // Entries in header (file) order, i.e. the order the writer added them.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  // The entry called `name`, or nullptr. The pointer lives as long as the reader.
  const SafetensorsEntry* find(std::string_view name) const;
  // "__metadata__" (empty when the file has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Reads `entry` (one of entries()) and converts F32, F16 or BF16 to fp32 into dst, which must
  // hold entry.numel() floats. Reads in chunks; never holds more than one chunk extra. Any other
  // dtype is a kInput error naming the entry and the dtype; a failing read is kSystem; a file
  // that shrank since open() is kInput.
  void read_as_f32(const SafetensorsEntry& entry, float* dst) const;

 private:
  SafetensorsReader() = default;
  // Reads exactly `bytes` bytes at absolute file offset `offset`; `what` names them in errors.
  void read_exact(uint64_t offset, void* dst, size_t bytes, std::string_view what) const;

  std::string path_;
  int fd_ = -1;
  uint64_t buffer_offset_ = 0;  // 8 + N: where the buffer starts in the file
  uint64_t buffer_bytes_ = 0;   // file size - 8 - N
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in entries_
  std::map<std::string, std::string> metadata_;
};

// A tensor as a writer's header describes it: row-major, every dim >= 0.
struct SafetensorsTensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;

  uint64_t bytes() const;  // numel * dtype_size(dtype)
};

// Writes one safetensors file whose tensors are declared before any of their data:
//   SafetensorsStreamWriter out(path, specs, {{"format", "pt"}});  // writes the header
//   out.write(chunk, bytes);   // the tensors' bytes in the order of `specs`, pieces of any size
//   ...
//   out.commit();              // every declared byte written? fsync, rename over `path`
// The header (padded with spaces to a multiple of 8 bytes) gives the tensors back-to-back
// offsets from 0 in declaration order. A duplicate or reserved name ("__metadata__"), a name
// that is not UTF-8 or a negative dim is a kInternal error (names and shapes come from a
// model's table), as are more bytes than declared and commit() before all of them. Destroyed
// without commit(), the temporary file is removed and `path` is untouched (runtime/file_io.h
// AtomicFile; its errors, kSystem, name the path). Memory: the header text only.
class SafetensorsStreamWriter {
 public:
  SafetensorsStreamWriter(const std::string& path, std::vector<SafetensorsTensorSpec> tensors,
                          const std::map<std::string, std::string>& metadata = {});
  SafetensorsStreamWriter(const SafetensorsStreamWriter&) = delete;
  SafetensorsStreamWriter& operator=(const SafetensorsStreamWriter&) = delete;

  void write(const void* data, size_t bytes);
  void commit();

  uint64_t file_bytes() const { return file_bytes_; }  // 8 + header + every tensor's bytes
  // The tensor the next write() starts in (tensors().size() once every byte is written).
  size_t next_tensor() const { return next_; }
  const std::vector<SafetensorsTensorSpec>& tensors() const { return tensors_; }

 private:
  void advance_past_written();  // moves next_ past the tensors written whole (or empty)

  std::vector<SafetensorsTensorSpec> tensors_;
  AtomicFile file_;
  uint64_t file_bytes_ = 0;
  uint64_t tensor_bytes_ = 0;  // every tensor's bytes: what write() must be given in all
  uint64_t written_ = 0;       // tensor bytes written so far
  uint64_t tensor_begin_ = 0;  // where tensor next_ starts in the buffer
  size_t next_ = 0;
  bool committed_ = false;
};

// Collects tensors (F32, F16, BF16) and metadata, then writes one safetensors file.
// add / add_f32 do NOT copy: `data` must stay valid and unchanged until write() returns.
class SafetensorsWriter {
 public:
  // Adds a tensor of shape `shape` (row-major, every dim >= 0) read from `data` at write().
  // A duplicate name, the reserved name "__metadata__" or a negative dim is a kInternal error:
  // the names and shapes come from a model's parameter table, so these are bugs.
  void add(std::string name, DType dtype, std::vector<int64_t> shape, const void* data);
  void add_f32(std::string name, std::vector<int64_t> shape, const float* data) {
    add(std::move(name), DType::kF32, std::move(shape), data);
  }
  // Sets "__metadata__"[key] = value; a later call with the same key replaces the value.
  void set_metadata(std::string key, std::string value);

  // Writes path + ".tmp" through SafetensorsStreamWriter (header padded with spaces to a
  // multiple of 8 bytes, tensors in the order added, back to back from offset 0), fsyncs it,
  // renames it over `path` and fsyncs the directory. On any failure the temporary file is
  // removed, `path` is untouched and a kSystem error names the path. Two writers must not target
  // the same path at once.
  void write(const std::string& path) const;

 private:
  struct Tensor {
    SafetensorsTensorSpec spec;
    const void* data;
  };
  std::vector<Tensor> tensors_;  // in the order added = file order
  std::map<std::string, std::string> metadata_;
};

}  // namespace zt
