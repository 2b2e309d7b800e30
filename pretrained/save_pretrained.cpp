// Hugging Face model directories out: config.json, sharded safetensors, tokenizer files.
#include "pretrained/save_pretrained.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "pretrained/adapter_io.h"
#include "pretrained/weights_io.h"
#include "runtime/file_io.h"
#include "runtime/formats/safetensors.h"
#include "runtime/formats/safetensors_set.h"
#include "runtime/status.h"

namespace zt {

namespace fs = std::filesystem;

namespace {

// The tokenizer files transformers' AutoTokenizer looks for, and the generation defaults.
constexpr const char* kTokenizerFiles[] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
    "merges.txt",     "added_tokens.json",     "generation_config.json",
};

uint64_t numel_of(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

// fp32 values rounded into `dtype` (copied as they are for fp32).
void convert(const float* src, uint64_t n, DType dtype, std::byte* dst) {
  if (dtype == DType::kF32) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  auto* out = reinterpret_cast<uint16_t*>(dst);
  for (uint64_t i = 0; i < n; ++i)
    out[i] = dtype == DType::kBF16 ? fp32_to_bf16(src[i]) : fp32_to_fp16(src[i]);
}

void write_text(const fs::path& path, const std::string& text) {
  AtomicFile f(path.string());
  f.write(text);
  f.commit();
}

}  // namespace

SavePretrainedResult save_pretrained(Engine& engine, const ModelSpec& model,
                                     const SavePretrainedOptions& o) {
  ZT_ASSERT(o.max_shard_size > 0, "max_shard_size 0");
  const bool writes = engine.comm().rank() == 0;
  auto units = engine.model().units();
  const size_t element = dtype_size(o.dtype);

  // Every tensor in model order, and the shards: consecutive tensors while they fit
  // max_shard_size (a tensor larger than it gets a file of its own), as transformers shards.
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    int64_t offset;  // in its unit's flat buffer
    int shard;
    std::string module;  // the linear module whose weight this is ("" for any other tensor)
  };
  std::vector<std::vector<Tensor>> tensors(units.size());
  std::vector<uint64_t> shard_bytes;
  for (size_t u = 0; u < units.size(); ++u)
    for (const auto& e : units[u]->layout().entries()) {
      if (e.spec.adapter) continue;  // adapter files' (adapter_io.h), or merged below
      const std::string& name = e.spec.name;
      Tensor t{hf_tensor_name(model, name), exported_shape(e.spec), e.offset, 0,
               name.ends_with(".weight") ? name.substr(0, name.size() - 7) : std::string()};
      const uint64_t bytes = numel_of(t.shape) * element;
      if (shard_bytes.empty() || shard_bytes.back() + bytes > o.max_shard_size)
        if (shard_bytes.empty() || shard_bytes.back() > 0) shard_bytes.push_back(0);
      shard_bytes.back() += bytes;
      t.shard = static_cast<int>(shard_bytes.size()) - 1;
      tensors[u].push_back(std::move(t));
    }
  const int shards = static_cast<int>(shard_bytes.size());
  auto shard_name = [&](int s) {
    return shards == 1 ? std::string(kSafetensorsSingleName)
                       : fmt::format("model-{:05}-of-{:05}.safetensors", s + 1, shards);
  };

  const fs::path final_dir(o.dir);
  const fs::path partial = final_dir.string() + ".partial";
  SavePretrainedResult result;
  std::unique_ptr<SafetensorsStreamWriter> writer;
  int open_shard = -1;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  if (writes) {
    std::error_code ec;
    fs::remove_all(partial, ec);
    fs::create_directories(partial, ec);
    if (ec) throw_system(fmt::format("cannot create {}: {}", partial.string(), ec.message()));
  }
  // Merged export: every adapter first (collective; small beside the model), each merged into
  // its weight as that is written.
  const std::map<std::string, ModuleAdapter> adapters =
      o.merge_adapters ? read_adapters(engine) : std::map<std::string, ModuleAdapter>{};
  const float scale = model.tuning.lora.scale();
  std::vector<float> full, merged;
  std::vector<std::byte> converted;
  for (size_t u = 0; u < units.size(); ++u) {
    full.assign(static_cast<size_t>(units[u]->layout().numel()), 0.0f);
    engine.read_unit_params(static_cast<int>(u), full.data());  // collective (stage 3)
    if (!writes) continue;
    for (const Tensor& t : tensors[u]) {
      if (t.shard != open_shard) {
        if (writer) writer->commit();
        std::vector<SafetensorsTensorSpec> specs;
        for (const auto& unit_tensors : tensors)
          for (const Tensor& s : unit_tensors)
            if (s.shard == t.shard) specs.push_back({s.name, o.dtype, s.shape});
        writer = std::make_unique<SafetensorsStreamWriter>(
            (partial / shard_name(t.shard)).string(), std::move(specs),
            std::map<std::string, std::string>{{"format", "pt"}});
        open_shard = t.shard;
        ++result.files;
      }
      const uint64_t n = numel_of(t.shape);
      const float* values = full.data() + t.offset;
      if (const auto adapter = adapters.find(t.module); adapter != adapters.end()) {
        const ModuleAdapter& m = adapter->second;
        ZT_ASSERT(t.shape == std::vector<int64_t>({m.out, m.in}), "{}: adapter of ({}, {})", t.name,
                  m.out, m.in);
        merged.resize(n);
        merge_adapter(m, scale, values, merged.data());
        values = merged.data();
        ++result.merged;
      }
      converted.resize(n * element);
      convert(values, n, o.dtype, converted.data());
      writer->write(converted.data(), converted.size());
      result.bytes += converted.size();
      weight_map[t.name] = shard_name(t.shard);
    }
  }
  if (!writes) return result;
  if (writer) writer->commit();
  if (shards > 1)
    write_text(partial / kSafetensorsIndexName,
               nlohmann::ordered_json{{"metadata", {{"total_size", result.bytes}}},
                                      {"weight_map", weight_map}}
                       .dump(2) +
                   "\n");
  // The config.json the run started from where there is one (it carries what the model does not
  // use, such as the token ids generation stops at), with the new dtype; else the model's own.
  nlohmann::ordered_json config = hf_config_json(model, o.dtype);
  if (!o.tokenizer_from.empty() && is_hf_model_dir(o.tokenizer_from)) {
    const std::string from = (fs::path(o.tokenizer_from) / kHfConfigName).string();
    config = nlohmann::ordered_json::parse(read_file(from, "the model config"));
    config["torch_dtype"] = hf_torch_dtype(o.dtype);
  }
  write_text(partial / kHfConfigName, config.dump(2) + "\n");
  if (!o.tokenizer_from.empty())
    for (const char* name : kTokenizerFiles) {
      const fs::path from = fs::path(o.tokenizer_from) / name;
      std::error_code ec;
      if (!fs::is_regular_file(from, ec)) continue;
      write_text(partial / name, read_file(from.string(), "a tokenizer file"));
      ++result.tokenizer_files;
    }
  sync_parent_directory((partial / kHfConfigName).string());
  // The new directory replaces an earlier save only now that it is complete.
  std::error_code ec;
  const fs::path old = final_dir.string() + ".old";
  fs::remove_all(old, ec);
  if (fs::exists(final_dir, ec)) {
    fs::rename(final_dir, old, ec);
    if (ec) throw_system(fmt::format("cannot move {} aside: {}", o.dir, ec.message()));
  }
  fs::rename(partial, final_dir, ec);
  if (ec)
    throw_system(fmt::format("cannot rename {} to {}: {}", partial.string(), o.dir, ec.message()));
  sync_parent_directory(final_dir.string());
  fs::remove_all(old, ec);
  return result;
}

}  // namespace zt
