// Safetensors reader (validate the header on open, pread one entry at a time) and writer
// (temporary file, fsync, rename). POSIX file I/O only; no mmap, no buffering of whole files.
#include "runtime/formats/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <source_location>
#include <utility>

#include "runtime/dtype.h"
#include "runtime/file_io.h"
#include "runtime/status.h"

namespace zt {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swaps");

namespace {

using OrderedJson = nlohmann::ordered_json;  // keeps header keys in file order

// The reference implementation refuses headers above 100 MB; we allow 100 MiB.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
// 16-bit entries are converted through a staging buffer of this many elements (512 KiB).
constexpr size_t kStagingElements = size_t{1} << 18;

// A name from a file, JSON-quoted so that control characters cannot break the one-line message.
std::string quote_name(std::string_view text) {
  return OrderedJson(std::string(text)).dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

[[noreturn]] void throw_bad_file(const std::string& path, std::string_view problem,
                                 std::source_location where = std::source_location::current()) {
  throw_input(fmt::format("safetensors file '{}': {}", path, problem), where);
}

// Non-negative JSON integer that fits int64, or false. Rejects 2.0, -1, "3" and 2^64.
bool as_size(const OrderedJson& value, uint64_t* out) {
  if (!value.is_number_unsigned()) return false;
  uint64_t v = value.get<uint64_t>();
  if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
  *out = v;
  return true;
}

// Parses the header text; a duplicate key in any object is an error (JSON would keep the last).
OrderedJson parse_header(const std::string& path, const std::string& text) {
  if (text.empty() || text.front() != '{') {
    throw_bad_file(path, "header does not start with '{': not a safetensors file?");
  }
  std::vector<std::set<std::string>> open_objects;  // keys seen in each object being parsed
  std::string duplicate;
  auto check_keys = [&](int, OrderedJson::parse_event_t event, OrderedJson& parsed) {
    switch (event) {
      case OrderedJson::parse_event_t::object_start: open_objects.emplace_back(); break;
      case OrderedJson::parse_event_t::object_end: open_objects.pop_back(); break;
      case OrderedJson::parse_event_t::key:
        if (!open_objects.back().insert(parsed.get<std::string>()).second && duplicate.empty()) {
          duplicate = parsed.get<std::string>();
        }
        break;
      default: break;
    }
    return true;
  };
  OrderedJson header;
  try {
    header = OrderedJson::parse(text, check_keys);
  } catch (const OrderedJson::parse_error& e) {
    throw_bad_file(path, fmt::format("header is not valid JSON: {}", e.what()));
  }
  if (!duplicate.empty())
    throw_bad_file(path, fmt::format("header repeats the key {}", quote_name(duplicate)));
  if (!header.is_object()) throw_bad_file(path, "header is not a JSON object");
  return header;
}

// Checks one header entry against the buffer and returns it.
SafetensorsEntry parse_entry(const std::string& path, const std::string& name,
                             const OrderedJson& value, uint64_t buffer_bytes) {
  auto bad = [&](std::string_view problem) {
    throw_bad_file(path, fmt::format("entry {}: {}", quote_name(name), problem));
  };
  if (!value.is_object()) bad("expected an object with dtype, shape and data_offsets");
  SafetensorsEntry entry;
  entry.name = name;

  auto dtype = value.find("dtype");
  if (dtype == value.end() || !dtype->is_string()) bad("dtype is missing or not a string");
  entry.dtype = dtype->get<std::string>();

  auto shape = value.find("shape");
  if (shape == value.end() || !shape->is_array()) bad("shape is missing or not an array");
  uint64_t numel = 1;
  for (const OrderedJson& dim : *shape) {
    uint64_t d = 0;
    if (!as_size(dim, &d))
      bad(fmt::format("shape {} has a dim that is not an integer >= 0", shape->dump()));
    if (__builtin_mul_overflow(numel, d, &numel))
      bad(fmt::format("shape {} overflows 64 bits", shape->dump()));
    entry.shape.push_back(static_cast<int64_t>(d));
  }

  auto offsets = value.find("data_offsets");
  if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 ||
      !as_size((*offsets)[0], &entry.begin) || !as_size((*offsets)[1], &entry.end)) {
    bad("data_offsets is missing or not two integers [begin, end] >= 0");
  }
  if (entry.begin > entry.end) bad(fmt::format("data_offsets {} has begin > end", offsets->dump()));
  if (entry.end > buffer_bytes) {
    bad(fmt::format("data_offsets {} end past the {}-byte buffer (file truncated?)",
                    offsets->dump(), buffer_bytes));
  }
  if (size_t element = safetensors_dtype_size(entry.dtype); element != 0) {
    uint64_t expected = 0;
    if (__builtin_mul_overflow(numel, element, &expected) || expected != entry.bytes()) {
      bad(fmt::format("{} shape {} needs {} x {} bytes but data_offsets {} hold {}", entry.dtype,
                      shape->dump(), numel, element, offsets->dump(), entry.bytes()));
    }
  }
  return entry;
}

// Two non-empty byte ranges may not share a byte.
void check_no_overlap(const std::string& path, const std::vector<SafetensorsEntry>& entries) {
  std::vector<const SafetensorsEntry*> by_begin;
  for (const SafetensorsEntry& e : entries) {
    if (e.bytes() > 0) by_begin.push_back(&e);
  }
  std::sort(
      by_begin.begin(), by_begin.end(),
      [](const SafetensorsEntry* a, const SafetensorsEntry* b) { return a->begin < b->begin; });
  const SafetensorsEntry* reaching = nullptr;  // the entry seen so far that ends furthest
  for (const SafetensorsEntry* e : by_begin) {
    if (reaching && e->begin < reaching->end) {
      throw_bad_file(path, fmt::format("entries {} [{}, {}) and {} [{}, {}) overlap",
                                       quote_name(reaching->name), reaching->begin, reaching->end,
                                       quote_name(e->name), e->begin, e->end));
    }
    if (!reaching || e->end > reaching->end) reaching = e;
  }
}

}  // namespace

uint64_t SafetensorsEntry::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

size_t safetensors_dtype_size(std::string_view dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" ||
      dtype == "F8_E5M2") {
    return 1;
  }
  return 0;
}

// ---- SafetensorsReader ----------------------------------------------------------------------

SafetensorsReader SafetensorsReader::open(const std::string& path) {
  SafetensorsReader reader;  // owns the descriptor from here on: every throw below closes it
  reader.path_ = path;
  // O_NONBLOCK: a FIFO passed by mistake fails the regular-file check instead of blocking.
  reader.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (reader.fd_ < 0) throw_bad_file(path, fmt::format("cannot open: {}", std::strerror(errno)));
  struct stat info {};
  if (::fstat(reader.fd_, &info) != 0) {
    throw_system(
        fmt::format("safetensors file '{}': fstat failed: {}", path, std::strerror(errno)));
  }
  if (!S_ISREG(info.st_mode)) throw_bad_file(path, "not a regular file");
  const uint64_t file_bytes = static_cast<uint64_t>(info.st_size);
  if (file_bytes < 8) {
    throw_bad_file(
        path, fmt::format("file is {} bytes, shorter than the 8-byte header length", file_bytes));
  }

  unsigned char length_bytes[8];
  reader.read_exact(0, length_bytes, 8, "the header length");
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | length_bytes[i];
  if (header_bytes > file_bytes - 8) {
    throw_bad_file(path, fmt::format("header length {} runs past the end of the {}-byte file",
                                     header_bytes, file_bytes));
  }
  if (header_bytes > kMaxHeaderBytes) {
    throw_bad_file(path, fmt::format("header length {} is above the {}-byte limit", header_bytes,
                                     kMaxHeaderBytes));
  }
  reader.buffer_offset_ = 8 + header_bytes;
  reader.buffer_bytes_ = file_bytes - reader.buffer_offset_;

  std::string text(header_bytes, '\0');
  reader.read_exact(8, text.data(), text.size(), "the header");
  OrderedJson header = parse_header(path, text);

  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (value.is_null()) continue;
      if (!value.is_object()) throw_bad_file(path, "__metadata__ is not an object");
      for (const auto& [meta_key, meta_value] : value.items()) {
        if (!meta_value.is_string()) {
          throw_bad_file(
              path, fmt::format("__metadata__ value of {} is not a string", quote_name(meta_key)));
        }
        reader.metadata_[meta_key] = meta_value.get<std::string>();
      }
      continue;
    }
    reader.index_.emplace(key, reader.entries_.size());
    reader.entries_.push_back(parse_entry(path, key, value, reader.buffer_bytes_));
  }
  check_no_overlap(path, reader.entries_);
  return reader;
}

SafetensorsReader::SafetensorsReader(SafetensorsReader&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)),
      buffer_offset_(other.buffer_offset_), buffer_bytes_(other.buffer_bytes_),
      entries_(std::move(other.entries_)), index_(std::move(other.index_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsReader& SafetensorsReader::operator=(SafetensorsReader&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    buffer_offset_ = other.buffer_offset_;
    buffer_bytes_ = other.buffer_bytes_;
    entries_ = std::move(other.entries_);
    index_ = std::move(other.index_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

const SafetensorsEntry* SafetensorsReader::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

void SafetensorsReader::read_exact(uint64_t offset, void* dst, size_t bytes,
                                   std::string_view what) const {
  auto* out = static_cast<char*>(dst);
  while (bytes > 0) {
    ssize_t got = ::pread(fd_, out, bytes, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw_system(fmt::format("safetensors file '{}': reading {} at byte {} failed: {}", path_,
                               what, offset, std::strerror(errno)));
    }
    if (got == 0) {
      throw_bad_file(path_, fmt::format("file ends at byte {} while reading {}; was it truncated "
                                        "after it was opened?",
                                        offset, what));
    }
    out += got;
    offset += static_cast<uint64_t>(got);
    bytes -= static_cast<size_t>(got);
  }
}

void SafetensorsReader::read_as_f32(const SafetensorsEntry& entry, float* dst) const {
  const bool is_f32 = entry.dtype == "F32";
  const bool is_f16 = entry.dtype == "F16";
  const bool is_bf16 = entry.dtype == "BF16";
  if (!is_f32 && !is_f16 && !is_bf16) {
    throw_bad_file(path_, fmt::format("entry {} has dtype {}; read_as_f32 reads F32, F16 and "
                                      "BF16 only",
                                      quote_name(entry.name), quote_name(entry.dtype)));
  }
  // The entry must be one open() validated (a hand-made one could point anywhere).
  const uint64_t numel = entry.numel();
  ZT_ASSERT(entry.begin <= entry.end && entry.end <= buffer_bytes_ &&
                entry.bytes() == numel * safetensors_dtype_size(entry.dtype),
            "entry {} [{}, {}) is not an entry of '{}'", quote_name(entry.name), entry.begin,
            entry.end, path_);
  const std::string what = fmt::format("entry {}", quote_name(entry.name));
  const uint64_t first = buffer_offset_ + entry.begin;
  if (is_f32) {  // little-endian fp32 on a little-endian host: straight into dst
    read_exact(first, dst, entry.bytes(), what);
    return;
  }
  std::vector<uint16_t> staging(std::min<uint64_t>(numel, kStagingElements));
  for (uint64_t done = 0; done < numel;) {
    const size_t count = static_cast<size_t>(std::min<uint64_t>(numel - done, staging.size()));
    read_exact(first + done * 2, staging.data(), count * 2, what);
    for (size_t i = 0; i < count; ++i) {
      dst[done + i] = is_f16 ? fp16_to_fp32(staging[i]) : bf16_to_fp32(staging[i]);
    }
    done += count;
  }
}

// ---- SafetensorsStreamWriter and SafetensorsWriter -------------------------------------------

namespace {

// True when `text` survives JSON serialization (valid UTF-8).
bool is_valid_utf8(const std::string& text) {
  try {
    (void)OrderedJson(text).dump();
    return true;
  } catch (const OrderedJson::type_error&) {
    return false;
  }
}

const char* header_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
  }
  throw_internal("safetensors: a DType without a safetensors name");
}

// The writers' tensor table, checked (see SafetensorsStreamWriter).
std::vector<SafetensorsTensorSpec> checked_specs(std::vector<SafetensorsTensorSpec> tensors) {
  std::set<std::string> names;
  for (const SafetensorsTensorSpec& t : tensors) {
    if (t.name == "__metadata__")
      throw_internal("safetensors tensor name \"__metadata__\" is reserved");
    if (!is_valid_utf8(t.name))
      throw_internal(
          fmt::format("safetensors tensor name {} is not valid UTF-8", quote_name(t.name)));
    if (!names.insert(t.name).second)
      throw_internal(fmt::format("safetensors tensor {} added twice", quote_name(t.name)));
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0 || __builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel) ||
          numel > std::numeric_limits<uint64_t>::max() / 4) {
        throw_internal(
            fmt::format("safetensors tensor {}: bad shape (dim {})", quote_name(t.name), d));
      }
    }
  }
  return tensors;
}

void check_metadata(const std::map<std::string, std::string>& metadata) {
  for (const auto& [key, value] : metadata) {
    if (!is_valid_utf8(key) || !is_valid_utf8(value)) {
      throw_input(fmt::format("safetensors metadata {} = {} is not valid UTF-8", quote_name(key),
                              quote_name(value)));
    }
  }
}

// The 8-byte little-endian length, then the header: `tensors` back to back from offset 0 in
// their order, padded with spaces to a multiple of 8 bytes so that the buffer starts 8-byte
// aligned in the file.
std::string length_and_header(const std::vector<SafetensorsTensorSpec>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  OrderedJson header = OrderedJson::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const SafetensorsTensorSpec& t : tensors) {
    header[t.name] = OrderedJson{{"dtype", header_dtype(t.dtype)},
                                 {"shape", t.shape},
                                 {"data_offsets", {offset, offset + t.bytes()}}};
    offset += t.bytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + text;
}

}  // namespace

uint64_t SafetensorsTensorSpec::bytes() const {
  uint64_t numel = 1;
  for (int64_t d : shape) numel *= static_cast<uint64_t>(d);
  return numel * dtype_size(dtype);
}

SafetensorsStreamWriter::SafetensorsStreamWriter(const std::string& path,
                                                 std::vector<SafetensorsTensorSpec> tensors,
                                                 const std::map<std::string, std::string>& metadata)
    : tensors_(checked_specs(std::move(tensors))), file_(path) {
  check_metadata(metadata);  // a throw here removes the temporary (AtomicFile)
  const std::string header = length_and_header(tensors_, metadata);
  file_.write(header.data(), header.size());
  file_bytes_ = header.size();
  for (const SafetensorsTensorSpec& t : tensors_) file_bytes_ += t.bytes();
  tensor_bytes_ = file_bytes_ - header.size();
  advance_past_written();
}

void SafetensorsStreamWriter::advance_past_written() {
  while (next_ < tensors_.size() && written_ >= tensor_begin_ + tensors_[next_].bytes()) {
    tensor_begin_ += tensors_[next_].bytes();
    ++next_;
  }
}

void SafetensorsStreamWriter::write(const void* data, size_t bytes) {
  ZT_ASSERT(!committed_ && bytes <= tensor_bytes_ - written_,
            "safetensors file '{}': {} bytes written with {} of the declared {} left{}",
            file_.path(), bytes, tensor_bytes_ - written_, tensor_bytes_,
            committed_ ? " (after commit)" : "");
  file_.write(data, bytes);
  written_ += bytes;
  advance_past_written();
}

void SafetensorsStreamWriter::commit() {
  ZT_ASSERT(!committed_ && written_ == tensor_bytes_,
            "safetensors file '{}': commit after {} of the declared {} tensor bytes", file_.path(),
            written_, tensor_bytes_);
  file_.commit();
  committed_ = true;
}

void SafetensorsWriter::add(std::string name, DType dtype, std::vector<int64_t> shape,
                            const void* data) {
  SafetensorsTensorSpec spec{std::move(name), dtype, std::move(shape)};
  std::vector<SafetensorsTensorSpec> one;
  one.push_back(spec);
  checked_specs(std::move(one));  // the name and shape on their own
  for (const Tensor& t : tensors_) {
    if (t.spec.name == spec.name)
      throw_internal(fmt::format("safetensors tensor {} added twice", quote_name(spec.name)));
  }
  const uint64_t bytes = spec.bytes();
  ZT_ASSERT(data != nullptr || bytes == 0, "safetensors tensor {}: null data",
            quote_name(spec.name));
  tensors_.push_back(Tensor{std::move(spec), data});
}

void SafetensorsWriter::set_metadata(std::string key, std::string value) {
  check_metadata({{key, value}});
  metadata_[std::move(key)] = std::move(value);
}

void SafetensorsWriter::write(const std::string& path) const {
  std::vector<SafetensorsTensorSpec> specs;
  for (const Tensor& t : tensors_) specs.push_back(t.spec);
  SafetensorsStreamWriter out(path, std::move(specs), metadata_);
  for (const Tensor& t : tensors_) out.write(t.data, t.spec.bytes());
  out.commit();
}

}  // namespace zt
