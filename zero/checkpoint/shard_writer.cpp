// ShardFileWriter: one rank's shard file, appended record by record with its checksums.
#include "zero/checkpoint/shard_writer.h"

#include <filesystem>
#include <utility>

#include "offload/crc32c.h"
#include "zero/checkpoint/detail.h"

namespace zt {

using namespace checkpoint_detail;
namespace fs = std::filesystem;
using nlohmann::json;

// ---- ShardFileWriter ---------------------------------------------------------------------------

ShardFileWriter::ShardFileWriter(const std::string& dir, int rank)
    : file_((fs::path(dir) / shard_file_name(rank)).string(), CheckedFile::Mode::kTruncate),
      rank_(rank) {
  ZT_ASSERT(rank >= 0, "shard file of rank {}", rank);
  unsigned char header[kHeaderBytes];
  std::memcpy(header, kHeaderMagic, 8);
  put_u32(header + 8, kCheckpointFormatVersion);
  put_u32(header + 12, static_cast<uint32_t>(rank));
  try {
    write(header, sizeof header);
  } catch (...) {  // the destructor does not run for a constructor that throws
    const std::string path = file_.path();
    file_ = CheckedFile();
    ::unlink(path.c_str());
    throw;
  }
}

ShardFileWriter::~ShardFileWriter() {
  if (finished_) return;
  const std::string path = file_.path();
  file_ = CheckedFile();  // closes
  ::unlink(path.c_str());
}

void ShardFileWriter::write(const void* data, size_t bytes) {
  file_.write(data, bytes);
  file_crc_ = crc32c(data, bytes, file_crc_);
}

void ShardFileWriter::begin_record(std::string unit, std::string kind, DType dtype,
                                   int64_t global_begin, int64_t count) {
  ZT_ASSERT(!finished_ && !in_record_, "{}: begin_record({}, {}) inside a record or after finish",
            path(), unit, kind);
  ZT_ASSERT(!unit.empty() && !kind.empty(), "{}: record without a unit or kind name", path());
  int64_t bytes = 0;
  ZT_ASSERT(global_begin >= 0 && count >= 0 &&
                !__builtin_mul_overflow(count, static_cast<int64_t>(dtype_size(dtype)), &bytes),
            "{}: record {}/{} of [{}, +{})", path(), unit, kind, global_begin, count);
  records_.push_back(Record{std::move(unit), std::move(kind), dtype, global_begin, count,
                            file_.bytes_written(), bytes, 0});
  record_written_ = 0;
  in_record_ = true;
}

void ShardFileWriter::append(const void* data, size_t bytes) {
  ZT_ASSERT(in_record_, "{}: append outside a record", path());
  Record& r = records_.back();
  ZT_ASSERT(record_written_ + static_cast<int64_t>(bytes) <= r.bytes,
            "{}: record {}/{} of {} {} elements holds {} bytes; {} appended", path(), r.unit,
            r.kind, r.count, dtype_name(r.dtype), r.bytes, record_written_ + bytes);
  if (bytes == 0) return;
  write(data, bytes);
  r.crc32c = crc32c(data, bytes, r.crc32c);
  record_written_ += static_cast<int64_t>(bytes);
}

void ShardFileWriter::end_record() {
  ZT_ASSERT(in_record_, "{}: end_record outside a record", path());
  const Record& r = records_.back();
  ZT_ASSERT(record_written_ == r.bytes,
            "{}: record {}/{} of {} {} elements ends after {} of its {} bytes", path(), r.unit,
            r.kind, r.count, dtype_name(r.dtype), record_written_, r.bytes);
  in_record_ = false;
}

void ShardFileWriter::add_record(std::string unit, std::string kind, DType dtype,
                                 int64_t global_begin, int64_t count, const void* data) {
  begin_record(std::move(unit), std::move(kind), dtype, global_begin, count);
  append(data, static_cast<size_t>(records_.back().bytes));
  end_record();
}

ShardFileInfo ShardFileWriter::finish() {
  ZT_ASSERT(!finished_ && !in_record_, "{}: finish inside a record or twice", path());
  json records = json::array();
  for (const Record& r : records_) {
    records.push_back({{"unit", r.unit},
                       {"kind", r.kind},
                       {"dtype", std::string(dtype_name(r.dtype))},
                       {"global_begin", r.global_begin},
                       {"count", r.count},
                       {"offset", r.offset},
                       {"bytes", r.bytes},
                       {"crc32c", r.crc32c}});
  }
  const std::string index = dump_json(json{{"rank", rank_}, {"records", std::move(records)}}, -1);
  const int64_t index_offset = file_.bytes_written();
  write(index.data(), index.size());

  unsigned char trailer[kTrailerBytes];
  put_u64(trailer, static_cast<uint64_t>(index_offset));
  put_u64(trailer + 8, index.size());
  put_u32(trailer + 16, crc32c(index.data(), index.size()));
  put_u32(trailer + 20, 0);
  std::memcpy(trailer + 24, kTrailerMagic, 8);
  write(trailer, sizeof trailer);

  file_.sync();
  file_.close();
  finished_ = true;
  return ShardFileInfo{shard_file_name(rank_), file_.bytes_written(), file_crc_};
}

}  // namespace zt
