// One rank's records on their way to disk: the RecordSink the engine saves through, and the
// ShardFileWriter that appends them to the rank's shard file (format.h has the layout).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/file_io.h"
#include "zero/checkpoint/format.h"

namespace zt {

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

}  // namespace zt
