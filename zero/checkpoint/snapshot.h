// ShardSnapshot: a rank's records in host memory, for a save written in the background.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "zero/checkpoint/shard_writer.h"

namespace zt {

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

}  // namespace zt
