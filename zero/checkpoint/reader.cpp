// CheckpointReader: opens and validates every shard file (header, index, trailer, checksums)
// against the manifest with pread, then serves global flat ranges from any world size.
#include "zero/checkpoint/reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <utility>

#include "offload/crc32c.h"
#include "runtime/file_io.h"
#include "zero/checkpoint/detail.h"

namespace zt {

using namespace checkpoint_detail;
namespace fs = std::filesystem;
using nlohmann::json;

// ---- CheckpointReader -------------------------------------------------------------------------

CheckpointReader::CheckpointReader(const std::string& path) {
  std::error_code ec;
  const fs::path given(path);
  if (fs::exists(given / "manifest.json", ec)) {
    dir_ = given.string();
  } else if (const fs::path latest = given / "latest"; fs::exists(latest, ec)) {
    std::string name = read_file(latest.string(), "checkpoint pointer");
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    if (!is_plain_name(name) || parse_step_name(name) < 0)
      bad_checkpoint(latest.string(), fmt::format("holds {}, not a step directory name like "
                                                  "\"step100\"",
                                                  quote_name(name)));
    fs::path step_dir = given / name;
    // A crash while commit_checkpoint replaced this step without RENAME_EXCHANGE.
    if (!fs::exists(step_dir, ec) && fs::exists(given / (name + ".old") / "manifest.json", ec))
      step_dir = given / (name + ".old");
    if (!fs::exists(step_dir / "manifest.json", ec))
      bad_checkpoint(latest.string(),
                     fmt::format("names {}, which has no manifest.json", step_dir.string()));
    dir_ = step_dir.string();
  } else {
    bad_checkpoint(path,
                   "is neither a step directory (no manifest.json) nor a checkpoint root "
                   "(no latest)");
  }

  const std::string manifest_path = (fs::path(dir_) / "manifest.json").string();
  json j;
  try {
    j = json::parse(read_file(manifest_path, "checkpoint manifest"));
  } catch (const json::parse_error& e) {
    bad_checkpoint(manifest_path, fmt::format("is not valid JSON: {}", e.what()));
  }
  manifest_ = manifest_from_json(j, manifest_path);

  for (size_t u = 0; u < manifest_.units.size(); ++u) {
    if (!unit_index_.emplace(manifest_.units[u].name, u).second) {
      bad_checkpoint(manifest_path,
                     fmt::format("lists the unit {} twice", quote_name(manifest_.units[u].name)));
    }
  }
  const size_t nfiles = manifest_.files.size();
  if (nfiles != static_cast<size_t>(manifest_.world_size)) {
    bad_checkpoint(manifest_path, fmt::format("lists {} shard files for world size {}", nfiles,
                                              manifest_.world_size));
  }
  for (size_t f = 0; f < nfiles; ++f) {
    const std::string& name = manifest_.files[f].name;
    if (!is_plain_name(name)) {
      bad_checkpoint(manifest_path,
                     fmt::format("shard file name {} is not a plain file name inside {} (a name "
                                 "pointing elsewhere is refused)",
                                 quote_name(name), dir_));
    }
    for (size_t g = 0; g < f; ++g) {
      if (manifest_.files[g].name == name)
        bad_checkpoint(manifest_path,
                       fmt::format("lists the shard file {} twice", quote_name(name)));
    }
  }

  try {
    for (size_t f = 0; f < nfiles; ++f) open_shard_file(static_cast<int>(f));
    check_records();
  } catch (...) {
    close_all();
    throw;
  }
}

CheckpointReader::~CheckpointReader() { close_all(); }

CheckpointReader::CheckpointReader(CheckpointReader&& other) noexcept
    : dir_(std::move(other.dir_)), manifest_(std::move(other.manifest_)),
      fds_(std::exchange(other.fds_, {})), records_(std::move(other.records_)),
      unit_index_(std::move(other.unit_index_)) {}

CheckpointReader& CheckpointReader::operator=(CheckpointReader&& other) noexcept {
  if (this != &other) {
    close_all();
    dir_ = std::move(other.dir_);
    manifest_ = std::move(other.manifest_);
    fds_ = std::exchange(other.fds_, {});
    records_ = std::move(other.records_);
    unit_index_ = std::move(other.unit_index_);
  }
  return *this;
}

void CheckpointReader::close_all() {
  for (int fd : fds_) {
    if (fd >= 0) ::close(fd);
  }
  fds_.clear();
}

std::string CheckpointReader::file_path(int f) const {
  return (fs::path(dir_) / manifest_.files[f].name).string();
}

void CheckpointReader::read_exact(int f, int64_t offset, void* dst, size_t bytes) const {
  auto* out = static_cast<char*>(dst);
  while (bytes > 0) {
    const ssize_t got = ::pread(fds_[f], out, bytes, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw_system(fmt::format("checkpoint {}: reading byte {} failed: {}", file_path(f), offset,
                               std::strerror(errno)));
    }
    if (got == 0) {
      bad_checkpoint(file_path(f), fmt::format("ends at byte {}; was it truncated after it was "
                                               "opened?",
                                               offset));
    }
    out += got;
    offset += got;
    bytes -= static_cast<size_t>(got);
  }
}

void CheckpointReader::open_shard_file(int f) {
  const ShardFileInfo& listed = manifest_.files[f];
  const std::string path = file_path(f);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) {
      bad_checkpoint(
          path, fmt::format("missing (the manifest lists {} shard files)", manifest_.files.size()));
    }
    bad_checkpoint(path, fmt::format("cannot open: {}", std::strerror(errno)));
  }
  fds_.push_back(fd);  // closed by close_all from here on
  struct stat info {};
  if (::fstat(fd, &info) != 0)
    throw_system(fmt::format("checkpoint {}: fstat failed: {}", path, std::strerror(errno)));
  if (!S_ISREG(info.st_mode)) bad_checkpoint(path, "is not a regular file");
  const int64_t size = info.st_size;
  if (size < listed.bytes) {
    bad_checkpoint(path,
                   fmt::format("is truncated: {} bytes, the manifest says {}", size, listed.bytes));
  }
  if (size > listed.bytes)
    bad_checkpoint(path, fmt::format("is {} bytes, the manifest says {}", size, listed.bytes));

  // The whole file once: nothing below reads a byte the checksum has not covered.
  std::vector<char> staging(static_cast<size_t>(std::min<int64_t>(size, kStagingBytes)));
  uint32_t crc = 0;
  for (int64_t done = 0; done < size;) {
    const size_t piece = static_cast<size_t>(std::min<int64_t>(size - done, kStagingBytes));
    read_exact(f, done, staging.data(), piece);
    crc = crc32c(staging.data(), piece, crc);
    done += static_cast<int64_t>(piece);
  }
  if (crc != listed.crc32c) {
    bad_checkpoint(path, fmt::format("fails its checksum: CRC32C {:08x}, the manifest says {:08x} "
                                     "(the file is damaged or from another save)",
                                     crc, listed.crc32c));
  }

  if (size < static_cast<int64_t>(kHeaderBytes + kTrailerBytes))
    bad_checkpoint(path, fmt::format("is {} bytes, too short for a shard file", size));
  unsigned char header[kHeaderBytes];
  read_exact(f, 0, header, sizeof header);
  if (std::memcmp(header, kHeaderMagic, 8) != 0)
    bad_checkpoint(path, "is not a ZeroTrain shard file (no ZTSHARD magic)");
  if (get_u32(header + 8) != kCheckpointFormatVersion) {
    bad_checkpoint(path, fmt::format("has format version {}; this build reads version {}",
                                     get_u32(header + 8), kCheckpointFormatVersion));
  }
  if (get_u32(header + 12) != static_cast<uint32_t>(f)) {
    bad_checkpoint(path, fmt::format("holds rank {}'s shard; the manifest lists it for rank {}",
                                     get_u32(header + 12), f));
  }
  unsigned char trailer[kTrailerBytes];
  read_exact(f, size - static_cast<int64_t>(kTrailerBytes), trailer, sizeof trailer);
  if (std::memcmp(trailer + 24, kTrailerMagic, 8) != 0)
    bad_checkpoint(path, "has no ZTSHEND trailer (not a finished shard file)");
  const uint64_t index_offset = get_u64(trailer);
  const uint64_t index_bytes = get_u64(trailer + 8);
  const uint64_t index_end = static_cast<uint64_t>(size) - kTrailerBytes;
  if (index_offset < kHeaderBytes || index_offset > index_end ||
      index_bytes != index_end - index_offset) {
    bad_checkpoint(path, fmt::format("trailer puts the index at [{}, +{}), not ending at byte {}",
                                     index_offset, index_bytes, index_end));
  }
  std::string index_text(index_bytes, '\0');
  read_exact(f, static_cast<int64_t>(index_offset), index_text.data(), index_text.size());
  if (crc32c(index_text.data(), index_text.size()) != get_u32(trailer + 16))
    bad_checkpoint(path, "index fails its checksum");
  json index;
  try {
    index = json::parse(index_text);
  } catch (const json::parse_error& e) {
    bad_checkpoint(path, fmt::format("index is not valid JSON: {}", e.what()));
  }

  const std::string where = fmt::format("{} (index)", path);
  const json& records = Fields(index, "", where).array("records");
  for (size_t i = 0; i < records.size(); ++i) {
    const Fields rf(records[i], fmt::format("records[{}]", i), where);
    const std::string unit = rf.string("unit");
    const std::string kind = rf.string("kind");
    Record r;
    r.file = f;
    r.dtype = rf.dtype("dtype");
    r.global_begin = rf.count("global_begin");
    r.count = rf.count("count");
    r.offset = rf.count("offset");
    r.bytes = rf.count("bytes");
    r.crc32c = rf.crc("crc32c");
    const std::string what =
        fmt::format("record {} (unit {} kind {} elements [{}, +{}))", i, quote_name(unit),
                    quote_name(kind), r.global_begin, r.count);
    auto u = unit_index_.find(unit);
    if (u == unit_index_.end())
      bad_checkpoint(path, fmt::format("{}: the manifest has no such unit", what));
    const int64_t padded = manifest_.units[u->second].padded_numel;
    if (r.count > padded || r.global_begin > padded - r.count) {
      bad_checkpoint(path, fmt::format("{}: outside the unit's {} padded elements", what, padded));
    }
    if (r.bytes != r.count * static_cast<int64_t>(dtype_size(r.dtype))) {
      bad_checkpoint(path, fmt::format("{}: {} bytes for {} {} elements", what, r.bytes, r.count,
                                       dtype_name(r.dtype)));
    }
    if (r.offset < static_cast<int64_t>(kHeaderBytes) ||
        r.offset > static_cast<int64_t>(index_offset) - r.bytes) {
      bad_checkpoint(path, fmt::format("{}: bytes [{}, +{}) lie outside the data [{}, {})", what,
                                       r.offset, r.bytes, kHeaderBytes, index_offset));
    }
    records_[{unit, kind}].push_back(r);
  }
}

void CheckpointReader::check_records() {
  for (auto& [key, list] : records_) {
    const auto& [unit, kind] = key;
    const int64_t numel = manifest_.units[unit_index_.at(unit)].numel;
    std::erase_if(list, [](const Record& r) { return r.count == 0; });  // serve no element
    std::sort(list.begin(), list.end(),
              [](const Record& a, const Record& b) { return a.global_begin < b.global_begin; });
    int64_t covered = 0;  // [0, covered) is in some record
    for (size_t i = 0; i < list.size(); ++i) {
      const Record& r = list[i];
      if (r.dtype != list[0].dtype) {
        bad_checkpoint(dir_,
                       fmt::format("unit {} kind {} is {} in {} and {} in {}", quote_name(unit),
                                   quote_name(kind), dtype_name(list[0].dtype),
                                   manifest_.files[list[0].file].name, dtype_name(r.dtype),
                                   manifest_.files[r.file].name));
      }
      if (i > 0 && r.global_begin < list[i - 1].global_begin + list[i - 1].count) {
        bad_checkpoint(dir_,
                       fmt::format("unit {} kind {}: records [{}, +{}) in {} and [{}, +{}) "
                                   "in {} overlap",
                                   quote_name(unit), quote_name(kind), list[i - 1].global_begin,
                                   list[i - 1].count, manifest_.files[list[i - 1].file].name,
                                   r.global_begin, r.count, manifest_.files[r.file].name));
      }
      if (r.global_begin > covered && covered < numel) break;
      covered = std::max(covered, r.global_begin + r.count);
    }
    if (covered < numel) {
      int64_t gap_end = numel;
      for (const Record& r : list) {
        if (r.global_begin > covered) {
          gap_end = std::min(gap_end, r.global_begin);
          break;
        }
      }
      bad_checkpoint(dir_, fmt::format("unit {} kind {}: elements [{}, {}) are in no shard file "
                                       "(the checkpoint is incomplete)",
                                       quote_name(unit), quote_name(kind), covered, gap_end));
    }
  }
}

void CheckpointReader::check_model(std::span<const CheckpointUnit> units) const {
  const std::string source = (fs::path(dir_) / "manifest.json").string();
  auto differs = [&](std::string_view what) {
    bad_checkpoint(source, fmt::format("was written for a different model: {}", what));
  };
  const auto& saved = manifest_.units;
  if (units.size() != saved.size())
    differs(fmt::format("{} units in the checkpoint, {} in the model", saved.size(), units.size()));
  for (size_t u = 0; u < units.size(); ++u) {
    const CheckpointUnit& a = saved[u];
    const CheckpointUnit& b = units[u];
    if (a.name != b.name) {
      differs(fmt::format("unit {} is {} in the checkpoint, {} in the model", u, quote_name(a.name),
                          quote_name(b.name)));
    }
    if (a.numel != b.numel) {
      differs(fmt::format("unit {} has {} elements in the checkpoint, {} in the model",
                          quote_name(a.name), a.numel, b.numel));
    }
    if (a.tensors.size() != b.tensors.size()) {
      differs(fmt::format("unit {} has {} tensors in the checkpoint, {} in the model",
                          quote_name(a.name), a.tensors.size(), b.tensors.size()));
    }
    for (size_t t = 0; t < a.tensors.size(); ++t) {
      const CheckpointTensor& x = a.tensors[t];
      const CheckpointTensor& y = b.tensors[t];
      if (x.name != y.name) {
        differs(fmt::format("unit {} tensor {} is {} in the checkpoint, {} in the model",
                            quote_name(a.name), t, quote_name(x.name), quote_name(y.name)));
      }
      if (x.shape != y.shape) {
        differs(fmt::format("unit {} tensor {} has shape {} in the checkpoint, {} in the model",
                            quote_name(a.name), quote_name(x.name), json(x.shape).dump(),
                            json(y.shape).dump()));
      }
      if (x.offset != y.offset) {
        differs(fmt::format("unit {} tensor {} is at offset {} in the checkpoint, {} in the model",
                            quote_name(a.name), quote_name(x.name), x.offset, y.offset));
      }
    }
  }
}

const std::vector<CheckpointReader::Record>& CheckpointReader::records(
    const std::string& unit, const std::string& kind) const {
  if (!unit_index_.contains(unit))
    bad_checkpoint(dir_, fmt::format("has no unit {}", quote_name(unit)));
  auto it = records_.find({unit, kind});
  if (it == records_.end())
    bad_checkpoint(dir_,
                   fmt::format("has no {} records of unit {}", quote_name(kind), quote_name(unit)));
  return it->second;
}

std::vector<CheckpointReader::RecordInfo> CheckpointReader::list_records() const {
  std::vector<RecordInfo> out;
  for (const CheckpointUnit& u : manifest_.units) {
    for (auto it = records_.lower_bound({u.name, std::string()});
         it != records_.end() && it->first.first == u.name; ++it) {
      for (const Record& r : it->second)
        out.push_back(RecordInfo{u.name, it->first.second, manifest_.files[r.file].name, r.dtype,
                                 r.global_begin, r.count, r.bytes, r.crc32c});
    }
  }
  return out;
}

std::vector<std::string> CheckpointReader::kinds(const std::string& unit) const {
  std::vector<std::string> out;
  for (auto it = records_.lower_bound({unit, std::string()});
       it != records_.end() && it->first.first == unit; ++it)
    out.push_back(it->first.second);
  return out;
}

bool CheckpointReader::has(const std::string& unit, const std::string& kind) const {
  return records_.contains({unit, kind});
}

DType CheckpointReader::dtype(const std::string& unit, const std::string& kind) const {
  const auto& list = records(unit, kind);
  // A (unit, kind) whose records are all empty has no dtype to offer; its unit has no elements.
  return list.empty() ? DType::kF32 : list.front().dtype;
}

void CheckpointReader::read_range(const std::string& unit, const std::string& kind,
                                  int64_t global_begin, int64_t count, DType dtype,
                                  void* dst) const {
  ZT_ASSERT(global_begin >= 0 && count >= 0, "read_range({}, {}, {}, {})", unit, kind, global_begin,
            count);
  const std::vector<Record>& list = records(unit, kind);
  const int64_t end = global_begin + count;
  const std::string range = fmt::format("unit {} kind {} elements [{}, {})", quote_name(unit),
                                        quote_name(kind), global_begin, end);
  if (!list.empty() && list.front().dtype != dtype) {
    bad_checkpoint(dir_, fmt::format("{}: asked for as {}, the checkpoint holds {}", range,
                                     dtype_name(dtype), dtype_name(list.front().dtype)));
  }
  const int64_t numel = manifest_.units[unit_index_.at(unit)].numel;
  const size_t element = dtype_size(dtype);
  char* out = static_cast<char*>(dst);
  std::vector<char> staging;

  // Bytes [offset, offset + bytes) of file f through the staging buffer, into the CRC.
  auto checksum_only = [&](int f, int64_t offset, int64_t bytes, uint32_t crc) {
    while (bytes > 0) {
      const size_t piece = static_cast<size_t>(std::min<int64_t>(bytes, kStagingBytes));
      if (staging.size() < piece) staging.resize(piece);
      read_exact(f, offset, staging.data(), piece);
      crc = crc32c(staging.data(), piece, crc);
      offset += static_cast<int64_t>(piece);
      bytes -= static_cast<int64_t>(piece);
    }
    return crc;
  };
  // Elements [from, to) no record holds: padding reads as zeros, real elements are an error.
  auto fill_gap = [&](int64_t from, int64_t to) {
    if (from >= to) return;
    if (from < numel) {
      bad_checkpoint(dir_, fmt::format("{}: elements [{}, {}) are in no record", range, from,
                                       std::min(to, numel)));
    }
    std::memset(out + (from - global_begin) * element, 0, (to - from) * element);
  };

  int64_t pos = global_begin;  // [global_begin, pos) is filled
  for (const Record& r : list) {
    const int64_t r_end = r.global_begin + r.count;
    if (r_end <= pos) continue;
    if (r.global_begin >= end) break;
    fill_gap(pos, r.global_begin);
    const int64_t from = std::max(pos, r.global_begin);
    const int64_t to = std::min(end, r_end);
    // The whole record passes through the CRC: before the range, the range (into dst), after.
    uint32_t crc = checksum_only(r.file, r.offset, (from - r.global_begin) * element, 0);
    char* into = out + (from - global_begin) * element;
    const size_t bytes = static_cast<size_t>(to - from) * element;
    read_exact(r.file, r.offset + (from - r.global_begin) * element, into, bytes);
    crc = crc32c(into, bytes, crc);
    crc = checksum_only(r.file, r.offset + (to - r.global_begin) * element, (r_end - to) * element,
                        crc);
    if (crc != r.crc32c) {
      bad_checkpoint(file_path(r.file),
                     fmt::format("{}: the record [{}, {}) fails its checksum (the file changed "
                                 "since it was opened)",
                                 range, r.global_begin, r_end));
    }
    pos = to;
  }
  fill_gap(pos, end);
}

}  // namespace zt
