// Hugging Face model directories: config.json, sharded safetensors, tokenizer files.
#include "launch/hf_model_dir.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "launch/weights_io.h"
#include "runtime/file_io.h"
#include "runtime/formats/safetensors.h"
#include "runtime/formats/safetensors_set.h"
#include "runtime/status.h"

namespace zt {

namespace fs = std::filesystem;

namespace {

// The tokenizer files transformers' AutoTokenizer looks for, and the generation defaults.
constexpr const char* kTokenizerFiles[] = {
    "tokenizer.json",  "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
    "merges.txt",      "added_tokens.json",     "generation_config.json",
};

const char* torch_dtype(DType d) {
  switch (d) {
    case DType::kF32: return "float32";
    case DType::kBF16: return "bfloat16";
    case DType::kF16: return "float16";
  }
  return "float32";
}

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

bool is_hf_model_dir(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / kHfConfigName, ec);
}

Gpt2Config read_hf_config(const std::string& dir) {
  const std::string file = (fs::path(dir) / kHfConfigName).string();
  const nlohmann::json j = nlohmann::json::parse(read_file(file, "the model config"), nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw_input(fmt::format("{}: not a JSON object", file));
  const auto type = j.find("model_type");
  if (type == j.end() || !type->is_string())
    throw_input(fmt::format("{}: no \"model_type\" string", file));
  const std::string model_type = type->get<std::string>();
  if (model_type != "gpt2") {
    const bool llama_family =
        model_type == "llama" || model_type == "qwen2" || model_type == "mistral";
    throw_input(fmt::format("{}: model_type '{}' is not supported{}; supported: gpt2", file,
                            model_type,
                            llama_family ? " yet (the Llama family needs model_zoo/llama)" : ""));
  }
  Gpt2Config c;
  auto field = [&](const char* key, int& out) {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer() || it->get<int64_t>() <= 0 ||
        it->get<int64_t>() > (int64_t{1} << 30))
      throw_input(fmt::format("{}: \"{}\" must be a positive integer{}", file, key,
                              it == j.end() ? " (missing)" : fmt::format(", not {}", it->dump())));
    out = static_cast<int>(it->get<int64_t>());
  };
  field("n_layer", c.n_layer);
  field("n_head", c.n_head);
  field("n_embd", c.n_embd);
  field("vocab_size", c.vocab_size);
  field("n_positions", c.n_positions);
  // What this GPT-2 does not have: refused rather than trained differently.
  if (const auto act = j.find("activation_function");
      act != j.end() && act->is_string() && act->get<std::string>() != "gelu_new" &&
      act->get<std::string>() != "gelu_pytorch_tanh")
    throw_input(fmt::format("{}: activation_function '{}' is not supported (GPT-2 here uses the "
                            "tanh GELU, gelu_new)", file, act->get<std::string>()));
  if (const auto tie = j.find("tie_word_embeddings");
      tie != j.end() && tie->is_boolean() && !tie->get<bool>())
    throw_input(fmt::format("{}: tie_word_embeddings false is not supported for gpt2 (its head is "
                            "tied to wte)", file));
  validate_gpt2_config(c, file);
  return c;
}

SavePretrainedResult save_pretrained(Engine& engine, const Gpt2Config& model,
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
  };
  std::vector<std::vector<Tensor>> tensors(units.size());
  std::vector<uint64_t> shard_bytes;
  for (size_t u = 0; u < units.size(); ++u)
    for (const auto& e : units[u]->layout().entries()) {
      Tensor t{"transformer." + e.spec.name, exported_shape(e.spec), e.offset, 0};
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
    if (ec)
      throw_system(fmt::format("cannot create {}: {}", partial.string(), ec.message()));
  }
  std::vector<float> full;
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
      converted.resize(n * element);
      convert(full.data() + t.offset, n, o.dtype, converted.data());
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
  const nlohmann::ordered_json config = {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"n_layer", model.n_layer},
      {"n_head", model.n_head},
      {"n_embd", model.n_embd},
      {"vocab_size", model.vocab_size},
      {"n_positions", model.n_positions},
      {"n_ctx", model.n_positions},
      {"n_inner", nullptr},
      {"activation_function", "gelu_new"},
      {"layer_norm_epsilon", 1e-5},
      {"initializer_range", 0.02},
      {"resid_pdrop", 0.0},
      {"embd_pdrop", 0.0},
      {"attn_pdrop", 0.0},
      {"bos_token_id", model.vocab_size - 1},
      {"eos_token_id", model.vocab_size - 1},
      {"tie_word_embeddings", true},
      {"torch_dtype", torch_dtype(o.dtype)},
  };
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
  if (ec) throw_system(fmt::format("cannot rename {} to {}: {}", partial.string(), o.dir, ec.message()));
  sync_parent_directory(final_dir.string());
  fs::remove_all(old, ec);
  return result;
}

}  // namespace zt
