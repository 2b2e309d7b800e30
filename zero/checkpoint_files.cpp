// Shard files (append-only writer, validating pread reader), manifest.json, and the step
// directory protocol (temporary directory, atomic rename, `latest`, pruning) over POSIX calls
// and std::filesystem. No communication, no threads, no mmap.
#include "zero/checkpoint_files.h"

#include <sys/mman.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <source_location>
#include <utility>

#include "offload/crc32c.h"
#include "runtime/status.h"

namespace zt {

static_assert(std::endian::native == std::endian::little,
              "shard files hold little-endian data as it is in memory");

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kHeaderMagic[8] = {'Z', 'T', 'S', 'H', 'A', 'R', 'D', '\0'};
constexpr char kTrailerMagic[8] = {'Z', 'T', 'S', 'H', 'E', 'N', 'D', '\0'};
constexpr size_t kHeaderBytes = 16;   // magic, u32 version, u32 rank
constexpr size_t kTrailerBytes = 32;  // u64 index offset, u64 index bytes, u32 crc, u32 0, magic
// Whole-file checksums and the parts of records outside a read range go through a buffer of at
// most this many bytes.
constexpr size_t kStagingBytes = size_t{1} << 20;

void put_u32(unsigned char* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}
void put_u64(unsigned char* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint32_t get_u32(const unsigned char* in) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | in[i];
  return v;
}
uint64_t get_u64(const unsigned char* in) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | in[i];
  return v;
}

// A name from a file, JSON-quoted so that control characters cannot break the one-line message.
std::string quote_name(std::string_view text) {
  return json(std::string(text)).dump(-1, ' ', false, json::error_handler_t::replace);
}

[[noreturn]] void bad_checkpoint(const std::string& path, std::string_view problem,
                                 std::source_location where = std::source_location::current()) {
  throw_input(fmt::format("checkpoint {}: {}", path, problem), where);
}

// A file name that stays inside the directory it is joined to: not empty, no '/', not "." or
// "..", no NUL.
bool is_plain_name(std::string_view name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of(std::string_view("/\0", 2)) == std::string_view::npos;
}

std::string step_name(int64_t step) { return fmt::format("step{}", step); }

// "step<digits>" -> the step; anything else -> -1.
int64_t parse_step_name(std::string_view name) {
  if (name.size() <= 4 || name.size() > 4 + 18 || name.substr(0, 4) != "step") return -1;
  int64_t step = 0;
  for (char c : name.substr(4)) {
    if (c < '0' || c > '9') return -1;
    step = step * 10 + (c - '0');
  }
  return step;
}

// ---- JSON fields with messages naming the file and the key ----------------------------------

// Reads keys of one JSON object; `at` is its place in the document ("units[2]", "" at the top).
class Fields {
 public:
  Fields(const json& object, std::string at, const std::string& source)
      : object_(object), at_(std::move(at)), source_(source) {
    if (!object_.is_object())
      bad_checkpoint(source_, fmt::format("{} is not a JSON object", at_.empty() ? "the top level"
                                                                                 : at_));
  }

  std::string key(std::string_view name) const {
    return at_.empty() ? std::string(name) : fmt::format("{}.{}", at_, name);
  }
  [[noreturn]] void bad(std::string_view name, std::string_view problem) const {
    bad_checkpoint(source_, fmt::format("{} {}", key(name), problem));
  }
  bool has(std::string_view name) const { return object_.contains(name); }
  const json& get(std::string_view name) const {
    auto it = object_.find(name);
    if (it == object_.end()) bad(name, "is missing");
    return *it;
  }
  // An integer >= 0 that fits int64, whether it was parsed (unsigned) or built (signed).
  int64_t count(std::string_view name) const {
    const json& v = get(name);
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return static_cast<int64_t>(v.get<uint64_t>());
    }
    if (v.is_number_integer() && v.get<int64_t>() >= 0) return v.get<int64_t>();
    bad(name, fmt::format("is {}, not an integer >= 0", v.dump()));
  }
  uint32_t crc(std::string_view name) const {
    const int64_t v = count(name);
    if (v > std::numeric_limits<uint32_t>::max())
      bad(name, fmt::format("is {}, not a 32-bit CRC", v));
    return static_cast<uint32_t>(v);
  }
  std::string string(std::string_view name) const {
    const json& v = get(name);
    if (!v.is_string() || v.get_ref<const std::string&>().empty())
      bad(name, fmt::format("is {}, not a non-empty string", v.dump()));
    return v.get<std::string>();
  }
  DType dtype(std::string_view name) const {
    const std::string text = string(name);
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
      if (dtype_name(t) == text) return t;
    }
    bad(name, fmt::format("is {}, not a dtype (fp32, fp16, bf16)", quote_name(text)));
  }
  const json& array(std::string_view name) const {
    const json& v = get(name);
    if (!v.is_array()) bad(name, "is not an array");
    return v;
  }

 private:
  const json& object_;
  std::string at_;
  const std::string& source_;
};

std::string dump_json(const json& j, int indent) {
  try {
    return j.dump(indent);
  } catch (const json::exception& e) {
    throw_internal(fmt::format("checkpoint JSON cannot be written: {}", e.what()));
  }
}

[[noreturn]] void fail_fs(std::string_view what, const fs::path& path, const std::error_code& ec) {
  throw_system(fmt::format("cannot {} {}: {}", what, path.string(), ec.message()));
}

void remove_tree(const fs::path& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) fail_fs("remove", path, ec);
}

void rename_path(const fs::path& from, const fs::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    throw_system(fmt::format("cannot rename {} to {}: {}", from.string(), to.string(),
                             std::strerror(errno)));
  }
}

}  // namespace

std::string shard_file_name(int rank) { return fmt::format("rank{}.zts", rank); }

std::string checkpoint_step_dir(const std::string& root, int64_t step) {
  return (fs::path(root) / step_name(step)).string();
}

CheckpointUnit checkpoint_unit(std::string name, const FlatLayout& layout, int64_t padded_numel) {
  ZT_ASSERT(padded_numel >= layout.numel(), "unit {}: padded numel {} < numel {}", name,
            padded_numel, layout.numel());
  CheckpointUnit unit{std::move(name), layout.numel(), padded_numel, {}};
  for (const FlatLayout::Entry& e : layout.entries())
    unit.tensors.push_back(CheckpointTensor{e.spec.name, e.spec.shape, e.offset,
                                            std::max<int64_t>(e.spec.used_rows, -1)});
  return unit;
}

// ---- manifest.json ----------------------------------------------------------------------------

json manifest_to_json(const CheckpointManifest& m) {
  json units = json::array();
  for (const CheckpointUnit& u : m.units) {
    json tensors = json::array();
    for (const CheckpointTensor& t : u.tensors) {
      json tensor = {{"name", t.name}, {"shape", t.shape}, {"offset", t.offset}};
      if (t.used_rows >= 0) tensor["used_rows"] = t.used_rows;
      tensors.push_back(std::move(tensor));
    }
    units.push_back({{"name", u.name},
                     {"numel", u.numel},
                     {"padded_numel", u.padded_numel},
                     {"tensors", std::move(tensors)}});
  }
  json files = json::array();
  for (const ShardFileInfo& f : m.files)
    files.push_back({{"name", f.name}, {"bytes", f.bytes}, {"crc32c", f.crc32c}});
  return json{{"format_version", m.format_version},
              {"step", m.step},
              {"world_size", m.world_size},
              {"zero_stage", m.zero_stage},
              {"compute_dtype", std::string(dtype_name(m.compute_dtype))},
              {"grad_dtype", std::string(dtype_name(m.grad_dtype))},
              {"units", std::move(units)},
              {"files", std::move(files)},
              {"trainer_state", m.trainer_state}};
}

CheckpointManifest manifest_from_json(const json& j, const std::string& source) {
  const Fields top(j, "", source);
  CheckpointManifest m;
  // The version first: a later format may have changed every other key.
  const int64_t version = top.count("format_version");
  if (version != kCheckpointFormatVersion) {
    bad_checkpoint(source, fmt::format("has format version {}; this build reads version {}",
                                       version, kCheckpointFormatVersion));
  }
  m.format_version = static_cast<int>(version);
  m.step = top.count("step");
  const int64_t world = top.count("world_size");
  if (world < 1 || world > (1 << 24)) top.bad("world_size", fmt::format("is {}", world));
  m.world_size = static_cast<int>(world);
  const int64_t stage = top.count("zero_stage");
  if (stage > 3) top.bad("zero_stage", fmt::format("is {}, not 0..3", stage));
  m.zero_stage = static_cast<int>(stage);
  m.compute_dtype = top.dtype("compute_dtype");
  m.grad_dtype = top.dtype("grad_dtype");

  const json& units = top.array("units");
  for (size_t u = 0; u < units.size(); ++u) {
    const Fields unit(units[u], fmt::format("units[{}]", u), source);
    CheckpointUnit out;
    out.name = unit.string("name");
    out.numel = unit.count("numel");
    out.padded_numel = unit.count("padded_numel");
    if (out.padded_numel < out.numel) {
      unit.bad("padded_numel",
               fmt::format("is {}, less than numel {}", out.padded_numel, out.numel));
    }
    const json& tensors = unit.array("tensors");
    for (size_t t = 0; t < tensors.size(); ++t) {
      const Fields tensor(tensors[t], fmt::format("units[{}].tensors[{}]", u, t), source);
      CheckpointTensor ct;
      ct.name = tensor.string("name");
      ct.offset = tensor.count("offset");
      const json& shape = tensor.array("shape");
      for (const json& dim : shape) {
        if (!dim.is_number_integer() || dim.get<int64_t>() < 0)
          tensor.bad("shape", fmt::format("{} has a dim that is not an integer >= 0", shape.dump()));
        ct.shape.push_back(dim.get<int64_t>());
      }
      if (tensor.has("used_rows")) {
        ct.used_rows = tensor.count("used_rows");
        if (ct.shape.empty() || ct.used_rows > ct.shape[0]) {
          tensor.bad("used_rows", fmt::format("is {}, more than the {} rows of shape {}",
                                              ct.used_rows, ct.shape.empty() ? 0 : ct.shape[0],
                                              shape.dump()));
        }
      }
      out.tensors.push_back(std::move(ct));
    }
    m.units.push_back(std::move(out));
  }

  const json& files = top.array("files");
  for (size_t f = 0; f < files.size(); ++f) {
    const Fields file(files[f], fmt::format("files[{}]", f), source);
    m.files.push_back(ShardFileInfo{file.string("name"), file.count("bytes"), file.crc("crc32c")});
  }
  m.trainer_state = top.get("trainer_state");
  return m;
}

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

// ---- the directory protocol ----------------------------------------------------------------------

std::string prepare_checkpoint_dir(const std::string& root, int64_t step) {
  ZT_ASSERT(step >= 0, "checkpoint step {}", step);
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) fail_fs("create the checkpoint directory", root, ec);
  const fs::path temp = fs::path(root) / (step_name(step) + ".tmp");
  remove_tree(temp);  // a save of this step that crashed before its commit
  fs::create_directory(temp, ec);
  if (ec) fail_fs("create the checkpoint directory", temp, ec);
  sync_parent_directory(temp.string());
  return temp.string();
}

namespace {

// Deletes committed step directories beyond the keep_last newest by step number (keep_last <= 0:
// none) and every leftover step*.tmp / step*.old directory; never `keep` (the step just
// committed, which `latest` names), even when keep_last newer steps exist (a run resumed from an
// earlier step: then keep_last + 1 directories remain).
void prune_checkpoints(const fs::path& root, const std::string& keep, int keep_last) {
  std::vector<std::pair<int64_t, fs::path>> committed;
  std::vector<fs::path> leftovers;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_directory(ec) || ec) continue;
    const std::string name = it->path().filename().string();
    if (const int64_t step = parse_step_name(name); step >= 0) {
      committed.emplace_back(step, it->path());
    } else if (name.ends_with(".tmp") || name.ends_with(".old")) {
      if (parse_step_name(std::string_view(name).substr(0, name.size() - 4)) >= 0)
        leftovers.push_back(it->path());
    }
  }
  if (ec) fail_fs("list the checkpoint directory", root, ec);
  for (const fs::path& p : leftovers) remove_tree(p);
  if (keep_last <= 0) return;
  std::sort(committed.begin(), committed.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = static_cast<size_t>(keep_last); i < committed.size(); ++i) {
    if (committed[i].second.filename() != keep) remove_tree(committed[i].second);
  }
}

}  // namespace

void commit_checkpoint(const std::string& root, int64_t step, const CheckpointManifest& manifest,
                       int keep_last) {
  ZT_ASSERT(manifest.step == step, "manifest of step {} committed as step {}", manifest.step, step);
  const fs::path root_path(root);
  const std::string name = step_name(step);
  const fs::path temp = root_path / (name + ".tmp");
  const fs::path final_dir = root_path / name;
  std::error_code ec;
  if (!fs::is_directory(temp, ec)) {
    throw_system(fmt::format("checkpoint {}: missing; prepare_checkpoint_dir makes it before the "
                             "ranks write their shard files",
                             temp.string()));
  }
  // Every file the manifest lists is there, as its rank reported it (a rank whose write went
  // elsewhere would otherwise surface only at the next load).
  for (const ShardFileInfo& f : manifest.files) {
    ZT_ASSERT(is_plain_name(f.name), "shard file name {}", quote_name(f.name));
    const fs::path p = temp / f.name;
    const auto bytes = fs::file_size(p, ec);
    if (ec) fail_fs("find the shard file", p, ec);
    if (static_cast<int64_t>(bytes) != f.bytes) {
      throw_system(fmt::format("checkpoint {}: {} bytes on disk, its rank wrote {}", p.string(),
                               bytes, f.bytes));
    }
  }

  // manifest.json last: its presence marks the directory complete. AtomicFile fsyncs the
  // directory after the rename, which also makes the shard files' names durable.
  AtomicFile manifest_file((temp / "manifest.json").string());
  manifest_file.write(dump_json(manifest_to_json(manifest), 2) + "\n");
  manifest_file.commit();

  // The step directory gets its final name. An existing one (an earlier run saved this step)
  // must not vanish before the new one is in place, since `latest` may name it.
  fs::path replaced;  // where the earlier directory went, deleted once the new one is in place
  if (fs::exists(final_dir, ec)) {
    if (::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
      replaced = temp;  // an atomic swap: step<N> was never missing
    } else if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) {
      // No RENAME_EXCHANGE on this file system: step<N> is missing between the two renames; a
      // reader following `latest` then opens step<N>.old (CheckpointReader).
      replaced = root_path / (name + ".old");
      remove_tree(replaced);
      rename_path(final_dir, replaced);
      rename_path(temp, final_dir);
    } else {
      throw_system(fmt::format("cannot exchange {} with {}: {}", temp.string(),
                               final_dir.string(), std::strerror(errno)));
    }
  } else {
    rename_path(temp, final_dir);
  }
  sync_parent_directory(final_dir.string());

  AtomicFile latest((root_path / "latest").string());
  latest.write(name + "\n");
  latest.commit();

  if (!replaced.empty()) remove_tree(replaced);
  prune_checkpoints(root_path, name, keep_last);
}

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
      bad_checkpoint(latest.string(), fmt::format("names {}, which has no manifest.json",
                                                  step_dir.string()));
    dir_ = step_dir.string();
  } else {
    bad_checkpoint(path, "is neither a step directory (no manifest.json) nor a checkpoint root "
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
        bad_checkpoint(manifest_path, fmt::format("lists the shard file {} twice", quote_name(name)));
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
    : dir_(std::move(other.dir_)),
      manifest_(std::move(other.manifest_)),
      fds_(std::exchange(other.fds_, {})),
      records_(std::move(other.records_)),
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
      bad_checkpoint(path, fmt::format("missing (the manifest lists {} shard files)",
                                       manifest_.files.size()));
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
    bad_checkpoint(path, fmt::format("is truncated: {} bytes, the manifest says {}", size,
                                     listed.bytes));
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
    const std::string what = fmt::format("record {} (unit {} kind {} elements [{}, +{}))", i,
                                         quote_name(unit), quote_name(kind), r.global_begin, r.count);
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
        bad_checkpoint(dir_, fmt::format("unit {} kind {} is {} in {} and {} in {}", quote_name(unit),
                                         quote_name(kind), dtype_name(list[0].dtype),
                                         manifest_.files[list[0].file].name, dtype_name(r.dtype),
                                         manifest_.files[r.file].name));
      }
      if (i > 0 && r.global_begin < list[i - 1].global_begin + list[i - 1].count) {
        bad_checkpoint(dir_, fmt::format("unit {} kind {}: records [{}, +{}) in {} and [{}, +{}) "
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
    bad_checkpoint(dir_, fmt::format("has no {} records of unit {}", quote_name(kind), quote_name(unit)));
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
  ZT_ASSERT(global_begin >= 0 && count >= 0, "read_range({}, {}, {}, {})", unit, kind,
            global_begin, count);
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
    if (!r.data) throw_system(fmt::format("cannot allocate {} bytes of host memory for a "
                                          "checkpoint snapshot", bytes));
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

void ShardSnapshot::write_to(ShardFileWriter& writer,
                             const std::function<void(const std::string& unit)>& before_record) const {
  ZT_ASSERT(!open_, "snapshot written with a record open");
  for (size_t i = 0; i < used_; ++i) {
    const Record& r = records_[i];
    if (before_record) before_record(r.unit);
    writer.add_record(r.unit, r.kind, r.dtype, r.global_begin, r.count, r.data.get());
  }
}

}  // namespace zt
