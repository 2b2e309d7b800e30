// zt-ckpt's jobs: inspect, consolidate (checkpoint -> safetensors) and import (safetensors ->
// step-0 checkpoint), each streaming one unit at a time (tools/checkpoint_tool.h).
#include "tools/checkpoint_tool.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "pretrained/weights_io.h"
#include "runtime/byte_count.h"
#include "runtime/formats/safetensors.h"
#include "runtime/status.h"
#include "zero/checkpoint/directory.h"
#include "zero/checkpoint/shard_writer.h"
#include "zero/precision.h"
#include "zero/zero_policy.h"

namespace zt {

namespace {

namespace fs = std::filesystem;

constexpr const char* kMasterKind = "master";
constexpr const char* kWorkingKind = "working";
// Elements converted at once between dtypes (4 MiB of fp32): the only buffer besides the unit's.
constexpr int64_t kConvertElements = int64_t{1} << 20;

// The bytes this tool's buffers hold, and the most they held at once: the figure the peak RSS
// is compared with (tests/tools/zt_ckpt_test.cpp, ConsolidatePeakStaysNearOneUnit).
class BufferBudget {
 public:
  void hold(int64_t bytes) {
    held_ += bytes;
    peak_ = std::max(peak_, held_);
  }
  void drop(int64_t bytes) { held_ -= bytes; }
  int64_t peak() const { return peak_; }

 private:
  int64_t held_ = 0, peak_ = 0;
};

// Zeroed bytes of their own anonymous mapping, counted in a BufferBudget while they live. Mapped
// and unmapped rather than taken from the heap, so that each one's pages leave the process when
// it does and the RSS figures of a second consolidation in one process (the tests) start clean.
class CountedBuffer {
 public:
  CountedBuffer(BufferBudget& budget, size_t bytes) : budget_(budget), bytes_(bytes) {
    if (bytes_ > 0) {
      void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED)
        throw_system(fmt::format("cannot map a {}-byte buffer: {}", bytes_, std::strerror(errno)));
      data_ = static_cast<std::byte*>(p);
    }
    budget_.hold(static_cast<int64_t>(bytes_));
  }
  ~CountedBuffer() {
    if (data_) ::munmap(data_, bytes_);
    budget_.drop(static_cast<int64_t>(bytes_));
  }
  CountedBuffer(const CountedBuffer&) = delete;
  CountedBuffer& operator=(const CountedBuffer&) = delete;
  std::byte* data() { return data_; }

 private:
  BufferBudget& budget_;
  size_t bytes_;
  std::byte* data_ = nullptr;
};

int64_t product(const std::vector<int64_t>& dims, size_t from = 0) {
  int64_t n = 1;
  for (size_t i = from; i < dims.size(); ++i) n *= dims[i];
  return n;
}

// The shape a tensor is exported with: dim 0 trimmed to its used rows.
std::vector<int64_t> exported_shape(const CheckpointTensor& t) {
  std::vector<int64_t> shape = t.shape;
  if (t.used_rows >= 0 && !shape.empty()) shape[0] = t.used_rows;
  return shape;
}

// `count` elements of `from` at `src` as `to` at `dst` (widened exactly, or rounded to nearest
// even as the engine rounds its master into working parameters).
void convert(const std::byte* src, DType from, std::byte* dst, DType to, int64_t count) {
  visit_codec(from, [&](auto in_codec) {
    using In = decltype(in_codec);
    visit_codec(to, [&](auto out_codec) {
      using Out = decltype(out_codec);
      const auto* in = reinterpret_cast<const typename In::Storage*>(src);
      auto* out = reinterpret_cast<typename Out::Storage*>(dst);
      for (int64_t i = 0; i < count; ++i) out[i] = Out::narrow(In::widen(in[i]));
    });
  });
}

int64_t read_status_kib(const std::string& status, const char* key) {
  const size_t at = status.find(key);
  if (at == std::string::npos) return 0;
  return std::strtoll(status.c_str() + at + std::strlen(key), nullptr, 10);
}

std::string mib(int64_t bytes) { return fmt::format("{:.1f} MiB", bytes / 1048576.0); }

}  // namespace

// ---- inspect --------------------------------------------------------------------------------

InspectReport inspect_checkpoint(const std::string& path) {
  const CheckpointReader reader(path);  // every file's size and CRC32C, the indexes, coverage
  InspectReport report{reader.dir(), reader.manifest(), reader.list_records(), 0};
  // Each record read back on its own: read_range passes every record it touches through its
  // CRC32C, so this checks each record's checksum once.
  std::vector<std::byte> buffer;
  for (const CheckpointReader::RecordInfo& r : report.records) {
    buffer.resize(static_cast<size_t>(r.bytes));
    reader.read_range(r.unit, r.kind, r.global_begin, r.count, r.dtype, buffer.data());
    report.record_bytes += r.bytes;
  }
  return report;
}

std::string format_inspect_report(const InspectReport& report) {
  const CheckpointManifest& m = report.manifest;
  std::ostringstream out;
  out << fmt::format("checkpoint {}\n", report.dir);
  out << fmt::format(
      "  step {} | world size {} | ZeRO stage {} | compute {} | gradients {} | "
      "format version {}\n",
      m.step, m.world_size, m.zero_stage, dtype_name(m.compute_dtype), dtype_name(m.grad_dtype),
      m.format_version);
  const nlohmann::json& t = m.trainer_state;
  if (const auto engine = t.find("engine"); engine != t.end() && engine->is_object()) {
    out << fmt::format("  trainer: optimizer steps {} | optimizer state {} | precision {}",
                       engine->value("optimizer_steps", nlohmann::json()).dump(),
                       engine->value("optimizer_state", nlohmann::json()).dump(),
                       engine->value("precision", nlohmann::json()).dump());
    for (const char* key : {"train_position", "micro_batch", "seq_len", "seed"})
      if (t.contains(key)) out << fmt::format(" | {} {}", key, t[key].dump());
    out << "\n";
  }
  // Each unit's kinds and dtypes, from the records.
  std::map<std::string, std::map<std::string, DType>> kinds;
  for (const auto& r : report.records) kinds[r.unit][r.kind] = r.dtype;
  int64_t elements = 0;
  for (const CheckpointUnit& u : m.units) elements += u.numel;
  out << fmt::format("  units: {}, {} elements\n", m.units.size(), group_digits(elements));
  for (const CheckpointUnit& u : m.units) {
    std::string held;
    for (const auto& [kind, dtype] : kinds[u.name])
      held += fmt::format("{}{} {}", held.empty() ? "" : ", ", kind, dtype_name(dtype));
    out << fmt::format("    {:<10} numel {:>12} padded {:>12} | {} tensors | {}\n", u.name,
                       group_digits(u.numel), group_digits(u.padded_numel), u.tensors.size(), held);
  }
  int64_t file_bytes = 0;
  for (const ShardFileInfo& f : m.files) file_bytes += f.bytes;
  out << fmt::format("  files: {}, {}\n", m.files.size(), mib(file_bytes));
  for (const ShardFileInfo& f : m.files) {
    int records = 0;
    for (const auto& r : report.records) records += r.file == f.name;
    out << fmt::format("    {:<10} {:>14} bytes | crc32c {:08x} ok | {} records\n", f.name,
                       group_digits(f.bytes), f.crc32c, records);
  }
  out << fmt::format("  records: {}\n", report.records.size());
  for (const auto& r : report.records) {
    out << fmt::format("    {:<10} {:<10} {:<11} {:<4} [{}, {}) {:>12} bytes | crc32c {:08x} ok\n",
                       r.file, r.unit, r.kind, dtype_name(r.dtype), r.global_begin,
                       r.global_begin + r.count, group_digits(r.bytes), r.crc32c);
  }
  out << fmt::format("ok: {} shard file{} ({}) and {} records ({}) match their CRC32C\n",
                     m.files.size(), m.files.size() == 1 ? "" : "s", mib(file_bytes),
                     report.records.size(), mib(report.record_bytes));
  return out.str();
}

// ---- consolidate ----------------------------------------------------------------------------

ProcessMemory process_memory() {
  std::ifstream in("/proc/self/status");
  std::stringstream text;
  text << in.rdbuf();
  const std::string status = text.str();
  return ProcessMemory{read_status_kib(status, "VmRSS:") * 1024,
                       read_status_kib(status, "VmHWM:") * 1024};
}

bool reset_peak_rss() {
  const int fd = ::open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, "5", 1) == 1;
  ::close(fd);
  return ok;
}

ConsolidateResult consolidate_checkpoint(const std::string& path, const std::string& out,
                                         DType dtype,
                                         const std::vector<CheckpointUnit>* model_units) {
  const CheckpointReader reader(path);
  const CheckpointManifest& manifest = reader.manifest();
  if (model_units) reader.check_model(*model_units);
  const std::vector<CheckpointUnit>& units = model_units ? *model_units : manifest.units;
  ConsolidateResult result;
  result.dir = reader.dir();
  result.step = manifest.step;
  result.dtype = dtype;

  // Where each unit's parameters come from: the fp32 master, or a pure 16-bit run's working
  // parameters (the engine saves one or the other, never both).
  std::vector<const char*> source(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    const std::string& name = units[u].name;
    source[u] = reader.has(name, kMasterKind) ? kMasterKind : kWorkingKind;
    if (!reader.has(name, source[u]))
      throw_input(fmt::format("checkpoint {}: unit {} has no master and no working parameters",
                              reader.dir(), name));
    if (u == 0) result.source_kind = source[u];
    if (result.source_kind != source[u]) result.source_kind = "master and working";
    if (u == 0 || units[u].numel * 4 > result.largest_unit_bytes) {
      result.largest_unit = name;
      result.largest_unit_bytes = units[u].numel * 4;
    }
  }

  // The header first: every tensor's name, dtype and exported shape, from the tables alone.
  std::vector<SafetensorsTensorSpec> specs;
  for (const CheckpointUnit& u : units)
    for (const CheckpointTensor& t : u.tensors)
      specs.push_back(SafetensorsTensorSpec{t.name, dtype, exported_shape(t)});
  result.tensors = static_cast<int64_t>(specs.size());

  result.peak_reset = reset_peak_rss();
  result.before = process_memory();
  BufferBudget budget;
  SafetensorsStreamWriter writer(out, std::move(specs), {{"format", "pt"}});
  const size_t out_element = dtype_size(dtype);
  for (size_t u = 0; u < units.size(); ++u) {
    const CheckpointUnit& unit = units[u];
    const DType from = reader.dtype(unit.name, source[u]);
    const size_t element = dtype_size(from);
    // The unit's real elements [0, numel), whichever ranks' records hold them.
    CountedBuffer full(budget, static_cast<size_t>(unit.numel) * element);
    reader.read_range(unit.name, source[u], 0, unit.numel, from, full.data());
    for (const CheckpointTensor& t : unit.tensors) {
      const int64_t count = product(exported_shape(t));
      const std::byte* first = full.data() + static_cast<size_t>(t.offset) * element;
      if (from == dtype) {
        writer.write(first, static_cast<size_t>(count) * element);
        continue;
      }
      CountedBuffer converted(budget,
                              static_cast<size_t>(std::min(count, kConvertElements)) * out_element);
      for (int64_t at = 0; at < count; at += kConvertElements) {
        const int64_t n = std::min(kConvertElements, count - at);
        convert(first + static_cast<size_t>(at) * element, from, converted.data(), dtype, n);
        writer.write(converted.data(), static_cast<size_t>(n) * out_element);
      }
    }
  }
  writer.commit();
  result.file_bytes = static_cast<int64_t>(writer.file_bytes());
  result.buffer_peak_bytes = budget.peak();
  result.peak_rss = process_memory().hwm;
  return result;
}

std::string format_consolidate_result(const ConsolidateResult& r, const std::string& out) {
  std::string text =
      fmt::format("wrote {}: {} tensors, {} {} from step {} of {} ({})\n", out, r.tensors,
                  mib(r.file_bytes), dtype_name(r.dtype), r.step, r.dir, r.source_kind);
  const double largest = static_cast<double>(std::max<int64_t>(r.largest_unit_bytes, 1));
  text += fmt::format(
      "memory: peak RSS {} (VmHWM{}) = {:.2f} x the largest unit ({}, {} in fp32); RSS before "
      "the first unit {}, growth {:.2f} x; buffers held at most {} ({:.2f} x)\n",
      mib(r.peak_rss), r.peak_reset ? ", reset before the first unit" : " since the process began",
      r.peak_rss / largest, r.largest_unit, mib(r.largest_unit_bytes), mib(r.before.rss),
      (r.peak_rss - r.before.rss) / largest, mib(r.buffer_peak_bytes),
      r.buffer_peak_bytes / largest);
  return text;
}

// ---- import ---------------------------------------------------------------------------------

ImportResult import_weights(const std::string& weights, const std::string& root, Model& model,
                            const ImportOptions& options) {
  std::error_code ec;
  if (fs::exists(root, ec) && !(fs::is_directory(root, ec) && fs::is_empty(root, ec)))
    throw_input(
        fmt::format("{} exists and is not an empty directory: import writes a new "
                    "checkpoint root",
                    root));
  for (Unit* unit : model.units())  // a checkpoint of a LoRA or frozen run holds no base
    if (unit->frozen())
      throw_input(
          "zt-ckpt import writes a checkpoint that trains every parameter; this config freezes "
          "some (zt.freeze or zt.lora): its runs start from the weights (zt.init_from) instead");
  const SafetensorsSet file = SafetensorsSet::open(weights);
  const auto matched = match_weight_entries(file, model);  // every check before any write
  const std::vector<std::string> kinds = optimizer_state_names(options.optimizer);
  auto units = model.units();

  ImportResult result;
  result.optimizer_state = kinds;
  BufferBudget budget;
  const std::string dir = prepare_checkpoint_dir(root, 0);
  ShardFileWriter shard(dir, 0);
  CheckpointManifest manifest;
  manifest.step = 0;
  manifest.world_size = 1;
  manifest.zero_stage = 0;
  const std::vector<std::byte> zeros(static_cast<size_t>(kConvertElements) * sizeof(float));
  for (size_t u = 0; u < units.size(); ++u) {
    const FlatLayout& layout = units[u]->layout();
    // Stage 0 on one rank: the whole buffer is rank 0's shard (padded as ShardLayout pads it).
    const ShardLayout shape(layout.numel(), 1, 0);
    manifest.units.push_back(checkpoint_unit(units[u]->name(), layout, shape.padded));
    result.params += layout.param_count();
    result.largest_unit_bytes = std::max(result.largest_unit_bytes, shape.padded * 4);
    {
      CountedBuffer full(budget, static_cast<size_t>(shape.padded) * sizeof(float));  // zeros
      auto* master = reinterpret_cast<float*>(full.data());
      const auto entries = layout.entries();
      for (size_t i = 0; i < entries.size(); ++i)
        file.read_as_f32(*matched[u][i], master + entries[i].offset);
      shard.add_record(units[u]->name(), kMasterKind, DType::kF32, 0, shape.padded, master);
    }
    for (const std::string& kind : kinds) {  // fresh optimizer state: zeros
      shard.begin_record(units[u]->name(), kind, DType::kF32, 0, shape.padded);
      for (int64_t at = 0; at < shape.padded; at += kConvertElements)
        shard.append(
            zeros.data(),
            static_cast<size_t>(std::min(kConvertElements, shape.padded - at)) * sizeof(float));
      shard.end_record();
    }
  }
  const ShardFileInfo info = shard.finish();
  manifest.files.push_back(info);
  result.file_bytes = info.bytes;
  // What zt-train's save_checkpoint writes, for a run that has not taken a step yet.
  manifest.trainer_state = {
      {"step", 0},
      {"train_position", 0},
      {"val_position", 0},
      {"world", 1},
      {"micro_batch", options.micro_batch},
      {"seq_len", options.seq_len},
      {"gradient_accumulation_steps", 1},
      {"seed", options.seed},
      {"config", {{"source", options.config_source}, {"zero_stage", 0}, {"precision", "fp32"}}},
      {"imported_from", weights},
      {"engine",
       {{"optimizer_steps", 0},
        {"optimizer_state", kinds},
        {"precision", precision_name(Precision{})},
        {"loss_scaler", nullptr}}}};
  commit_checkpoint(root, 0, manifest, 0);
  result.dir = checkpoint_step_dir(root, 0);
  result.buffer_peak_bytes = budget.peak() + static_cast<int64_t>(zeros.size());
  return result;
}

}  // namespace zt
