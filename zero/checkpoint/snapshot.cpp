// ShardSnapshot: records kept in host memory, written to a shard file later.
#include "zero/checkpoint/snapshot.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "zero/checkpoint/detail.h"

namespace zt {

using namespace checkpoint_detail;
namespace fs = std::filesystem;
using nlohmann::json;

void ShardSnapshot::begin_record(std::string unit, std::string kind, DType dtype,
                                 int64_t global_begin, int64_t count) {
  ZT_ASSERT(!open_, "snapshot: begin_record({}, {}) inside a record", unit, kind);
  ZT_ASSERT(count >= 0 && global_begin >= 0, "snapshot: record {} {} at {} of {} elements", unit,
            kind, global_begin, count);
  if (used_ == records_.size()) records_.emplace_back();
  Record& r = records_[used_++];
  r.unit = std::move(unit);
  r.kind = std::move(kind);
  r.dtype = dtype;
  r.global_begin = global_begin;
  r.count = count;
  const size_t need = static_cast<size_t>(count) * dtype_size(dtype);
  if (r.capacity < need) {  // else the memory of an earlier snapshot, pages already mapped
    constexpr size_t kHuge = size_t{2} << 20;
    const size_t align = need >= kHuge ? kHuge : 64;
    const size_t bytes = (std::max<size_t>(need, 1) + align - 1) / align * align;
    r.data.reset(static_cast<std::byte*>(std::aligned_alloc(align, bytes)));
    if (!r.data)
      throw_system(
          fmt::format("cannot allocate {} bytes of host memory for a "
                      "checkpoint snapshot",
                      bytes));
    if (align == kHuge) ::madvise(r.data.get(), bytes, MADV_HUGEPAGE);  // advice only
    r.capacity = need;
  }
  r.size = 0;
  open_ = true;
}

std::byte* ShardSnapshot::append_space(size_t bytes) {
  ZT_ASSERT(open_, "snapshot: append outside a record");
  Record& r = records_[used_ - 1];
  const size_t need = static_cast<size_t>(r.count) * dtype_size(r.dtype);
  ZT_ASSERT(r.size + bytes <= need, "snapshot: record {} {} given {} bytes past its {}", r.unit,
            r.kind, r.size + bytes, need);
  std::byte* at = r.data.get() + r.size;
  r.size += bytes;
  bytes_ += static_cast<int64_t>(bytes);
  return at;
}

void ShardSnapshot::append(const void* data, size_t bytes) {
  if (bytes > 0) std::memcpy(append_space(bytes), data, bytes);
}

void ShardSnapshot::end_record() {
  ZT_ASSERT(open_, "snapshot: end_record outside a record");
  const Record& r = records_[used_ - 1];
  ZT_ASSERT(r.size == static_cast<size_t>(r.count) * dtype_size(r.dtype),
            "snapshot: record {} {} holds {} bytes of {}", r.unit, r.kind, r.size,
            static_cast<size_t>(r.count) * dtype_size(r.dtype));
  open_ = false;
}

void ShardSnapshot::rewind() {
  ZT_ASSERT(!open_, "snapshot rewound with a record open");
  used_ = 0;
  bytes_ = 0;
}

void ShardSnapshot::write_to(
    ShardFileWriter& writer,
    const std::function<void(const std::string& unit)>& before_record) const {
  ZT_ASSERT(!open_, "snapshot written with a record open");
  for (size_t i = 0; i < used_; ++i) {
    const Record& r = records_[i];
    if (before_record) before_record(r.unit);
    writer.add_record(r.unit, r.kind, r.dtype, r.global_begin, r.count, r.data.get());
  }
}

}  // namespace zt
