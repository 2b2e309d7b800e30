// Hugging Face config.json: the model it describes and the config save_pretrained writes.
#include "model_zoo/hf_config.h"

#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/file_io.h"
#include "runtime/status.h"

namespace zt {

namespace fs = std::filesystem;

namespace {

// The double a float's shortest decimal form reads as: 1e-06 rather than 9.99999997e-07.
double shortest(float x) { return std::stod(fmt::format("{}", x)); }

}  // namespace

const char* hf_torch_dtype(DType d) {
  switch (d) {
    case DType::kF32: return "float32";
    case DType::kBF16: return "bfloat16";
    case DType::kF16: return "float16";
  }
  return "float32";
}

bool is_hf_model_dir(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / kHfConfigName, ec);
}

namespace {

// One config.json (or zt.model object) read as the family its model_type names; every error
// names `source` and the key.
class HfConfigReader {
 public:
  HfConfigReader(const nlohmann::json& j, std::string source) : j_(j), source_(std::move(source)) {}

  int positive(const char* key) const {
    const auto it = j_.find(key);
    if (it == j_.end() || !it->is_number_integer() || it->get<int64_t>() <= 0 ||
        it->get<int64_t>() > (int64_t{1} << 30))
      throw_input(fmt::format("{}: \"{}\" must be a positive integer{}", source_, key,
                              it == j_.end() ? " (missing)" : fmt::format(", not {}", it->dump())));
    return static_cast<int>(it->get<int64_t>());
  }
  int positive_or(const char* key, int fallback) const {
    return present(key) ? positive(key) : fallback;
  }
  float number_or(const char* key, float fallback) const {
    if (!present(key)) return fallback;
    const nlohmann::json& v = j_.at(key);
    if (!v.is_number() || !(v.get<double>() > 0.0))
      throw_input(
          fmt::format("{}: \"{}\" must be a positive number, not {}", source_, key, v.dump()));
    return static_cast<float>(v.get<double>());
  }
  bool boolean_or(const char* key, bool fallback) const {
    if (!present(key)) return fallback;
    const nlohmann::json& v = j_.at(key);
    if (!v.is_boolean())
      throw_input(fmt::format("{}: \"{}\" must be true or false, not {}", source_, key, v.dump()));
    return v.get<bool>();
  }
  std::string string_or(const char* key, const std::string& fallback) const {
    if (!present(key)) return fallback;
    const nlohmann::json& v = j_.at(key);
    if (!v.is_string())
      throw_input(fmt::format("{}: \"{}\" must be a string, not {}", source_, key, v.dump()));
    return v.get<std::string>();
  }
  // A key (not null) whose every value but `accepted` changes the model in a way this one
  // does not compute: refused rather than trained differently.
  void refuse_unless(const char* key, const nlohmann::json& accepted,
                     const std::string& why) const {
    if (present(key) && j_.at(key) != accepted)
      throw_input(fmt::format("{}: \"{}\": {} is not supported ({})", source_, key,
                              j_.at(key).dump(), why));
  }
  // A sub-object (rope_scaling), read by a reader of its own whose errors name "source: key".
  HfConfigReader object(const char* key) const {
    const nlohmann::json& v = j_.at(key);
    if (!v.is_object())
      throw_input(
          fmt::format("{}: \"{}\" must be an object or null, not {}", source_, key, v.dump()));
    return HfConfigReader(v, fmt::format("{}: \"{}\"", source_, key));
  }
  bool present(const char* key) const {
    const auto it = j_.find(key);
    return it != j_.end() && !it->is_null();
  }
  // The key is there, null or not.
  bool has(const char* key) const { return j_.contains(key); }
  const std::string& source() const { return source_; }

 private:
  const nlohmann::json& j_;
  std::string source_;
};

Gpt2Config gpt2_from_hf(const HfConfigReader& r) {
  Gpt2Config c;
  c.n_layer = r.positive("n_layer");
  c.n_head = r.positive("n_head");
  c.n_embd = r.positive("n_embd");
  c.vocab_size = r.positive("vocab_size");
  c.n_positions = r.positive("n_positions");
  const std::string act = r.string_or("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    throw_input(
        fmt::format("{}: activation_function '{}' is not supported (GPT-2 here uses the "
                    "tanh GELU, gelu_new)",
                    r.source(), act));
  if (!r.boolean_or("tie_word_embeddings", true))
    throw_input(
        fmt::format("{}: tie_word_embeddings false is not supported for gpt2 (its head is "
                    "tied to wte)",
                    r.source()));
  validate_gpt2_config(c, r.source());
  return c;
}

// rope_scaling's "linear" and "llama3" (Llama 3.1/3.2); the others (dynamic, yarn, longrope)
// change the frequencies with the sequence length or the attention's scale: refused by name.
RopeScaling rope_scaling_from_hf(const HfConfigReader& r) {
  const std::string type =
      r.present("rope_type") ? r.string_or("rope_type", "") : r.string_or("type", "");
  RopeScaling s;
  if (type == "default") return s;
  s.factor = r.number_or("factor", 1.0f);
  if (type == "linear") {
    s.type = RopeScalingType::kLinear;
  } else if (type == "llama3") {
    s.type = RopeScalingType::kLlama3;
    s.low_freq_factor = r.number_or("low_freq_factor", 1.0f);
    s.high_freq_factor = r.number_or("high_freq_factor", 4.0f);
    s.original_max_position = r.positive("original_max_position_embeddings");
  } else {
    throw_input(
        fmt::format("{}: rope_type '{}' is not supported (supported: default, linear, "
                    "llama3)",
                    r.source(), type));
  }
  return s;
}

// A Llama-family model_type and its config class's defaults for the keys that may be absent.
struct FamilyDefaults {
  const char* model_type;
  LlamaFamily family;
  bool qwen2;         // Qwen2's q/k/v-only biases
  int max_positions;  // max_position_embeddings
  int head_dim;       // 0: hidden_size / num_attention_heads
  float rms_norm_eps;
  int sliding_window;  // when the key is absent (MistralConfig: 4096); null is none
};

const FamilyDefaults kFamilies[] = {
    {"llama", LlamaFamily::kLlama, false, 2048, 0, 1e-6f, 0},
    {"qwen2", LlamaFamily::kLlama, true, 32768, 0, 1e-6f, 0},
    {"mistral", LlamaFamily::kMistral, false, 4096 * 32, 0, 1e-6f, 4096},
    {"qwen3", LlamaFamily::kQwen3, false, 32768, 128, 1e-6f, 0},
    {"phi3", LlamaFamily::kPhi3, false, 4096, 0, 1e-5f, 0},
};

// Mistral's and Phi-3's sliding_window: a positive integer, or null (none); absent, the
// family's default. Read as transformers' masking_utils reads it: query i reads key j when
// i - sliding_window < j <= i (runtime/kernel_entries.h).
int sliding_window_from_hf(const HfConfigReader& r, int fallback) {
  if (!r.has("sliding_window")) return fallback;
  return r.present("sliding_window") ? r.positive("sliding_window") : 0;
}

// The family's keys beyond Llama's shared ones: biases, windows, what is refused.
void family_keys_from_hf(const HfConfigReader& r, const FamilyDefaults& f, LlamaConfig& c) {
  switch (f.family) {
    case LlamaFamily::kLlama:
      if (f.qwen2) {  // Qwen2: biases on q/k/v always, on nothing else
        c.attention_bias = true;
        c.attention_out_bias = false;
        // Qwen2's window applies to the layers from max_window_layers on only (its
        // layer_types), which this model does not build.
        r.refuse_unless("use_sliding_window", false, "per-layer sliding-window attention");
      } else {  // Llama: attention_bias puts biases on q, k, v and o
        c.attention_bias = r.boolean_or("attention_bias", false);
        c.mlp_bias = r.boolean_or("mlp_bias", false);
      }
      return;
    case LlamaFamily::kMistral:  // no biases
      c.sliding_window = sliding_window_from_hf(r, f.sliding_window);
      return;
    case LlamaFamily::kQwen3:  // attention_bias on q, k, v and o; q_norm and k_norm
      c.attention_bias = r.boolean_or("attention_bias", false);
      r.refuse_unless("use_sliding_window", false, "per-layer sliding-window attention");
      return;
    case LlamaFamily::kPhi3:  // fused projections, no biases
      c.sliding_window = sliding_window_from_hf(r, f.sliding_window);
      // Phi-3.5/Phi-4-mini rotate part of each head only.
      r.refuse_unless("partial_rotary_factor", 1.0, "rotary embeddings on part of each head");
      return;
  }
}

// LlamaConfig's, Qwen2Config's, MistralConfig's, Qwen3Config's and Phi3Config's keys, with
// transformers' defaults where a key may be absent. Dropout probabilities (attention_dropout,
// Phi-3's resid_pdrop and embd_pdrop) are not read: training here uses none.
LlamaConfig llama_from_hf(const HfConfigReader& r, const FamilyDefaults& f) {
  LlamaConfig c;
  c.family = f.family;
  c.hidden_size = r.positive("hidden_size");
  c.intermediate_size = r.positive("intermediate_size");
  c.num_hidden_layers = r.positive("num_hidden_layers");
  c.num_attention_heads = r.positive("num_attention_heads");
  c.num_key_value_heads = r.positive_or("num_key_value_heads", c.num_attention_heads);
  c.head_dim = r.positive_or("head_dim", f.head_dim);
  c.vocab_size = r.positive("vocab_size");
  c.max_position_embeddings = r.positive_or("max_position_embeddings", f.max_positions);
  c.rms_norm_eps = r.number_or("rms_norm_eps", f.rms_norm_eps);
  c.rope_theta = r.number_or("rope_theta", 10000.0f);
  c.tie_word_embeddings = r.boolean_or("tie_word_embeddings", false);
  c.attention_out_bias = true;
  family_keys_from_hf(r, f, c);
  const std::string act = r.string_or("hidden_act", "silu");
  if (act != "silu")
    throw_input(fmt::format("{}: hidden_act '{}' is not supported (the SwiGLU MLP here uses silu)",
                            r.source(), act));
  if (r.present("rope_scaling")) c.rope_scaling = rope_scaling_from_hf(r.object("rope_scaling"));
  validate_llama_config(c, r.source());
  return c;
}

}  // namespace

ModelSpec model_spec_from_hf_config(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) throw_input(fmt::format("{}: not a JSON object", source));
  const HfConfigReader r(j, source);
  if (!r.present("model_type")) throw_input(fmt::format("{}: no \"model_type\" string", source));
  const std::string model_type = r.string_or("model_type", "");
  if (model_type == "gpt2") return ModelSpec{gpt2_from_hf(r)};
  for (const FamilyDefaults& f : kFamilies)
    if (model_type == f.model_type) return ModelSpec{llama_from_hf(r, f)};
  throw_input(
      fmt::format("{}: model_type '{}' is not supported; supported: gpt2, llama, qwen2, mistral, "
                  "qwen3, phi3",
                  source, model_type));
}

ModelSpec read_hf_config(const std::string& dir) {
  const std::string file = (fs::path(dir) / kHfConfigName).string();
  const nlohmann::json j =
      nlohmann::json::parse(read_file(file, "the model config"), nullptr, false);
  if (j.is_discarded()) throw_input(fmt::format("{}: not a JSON object", file));
  return model_spec_from_hf_config(j, file);
}

namespace {

nlohmann::ordered_json rope_scaling_json(const RopeScaling& s) {
  switch (s.type) {
    case RopeScalingType::kNone: return nullptr;
    case RopeScalingType::kLinear: return {{"rope_type", "linear"}, {"factor", shortest(s.factor)}};
    case RopeScalingType::kLlama3:
      return {{"rope_type", "llama3"},
              {"factor", shortest(s.factor)},
              {"low_freq_factor", shortest(s.low_freq_factor)},
              {"high_freq_factor", shortest(s.high_freq_factor)},
              {"original_max_position_embeddings", s.original_max_position}};
  }
  return nullptr;
}

}  // namespace

nlohmann::ordered_json hf_config_json(const ModelSpec& spec, DType dtype) {
  if (spec.is_gpt2()) {
    const Gpt2Config& model = spec.gpt2();
    return {
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
        {"torch_dtype", hf_torch_dtype(dtype)},
    };
  }
  const LlamaConfig& c = spec.llama();
  const std::string type = spec.model_type();
  const char* architecture = type == "qwen2"     ? "Qwen2ForCausalLM"
                             : type == "mistral" ? "MistralForCausalLM"
                             : type == "qwen3"   ? "Qwen3ForCausalLM"
                             : type == "phi3"    ? "Phi3ForCausalLM"
                                                 : "LlamaForCausalLM";
  nlohmann::ordered_json j = {
      {"architectures", {architecture}},
      {"model_type", type},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_key_value_heads},
      {"head_dim", c.resolved_head_dim()},
      {"hidden_act", "silu"},
      {"max_position_embeddings", c.max_position_embeddings},
      {"rms_norm_eps", shortest(c.rms_norm_eps)},
      {"rope_theta", shortest(c.rope_theta)},
      {"rope_scaling", rope_scaling_json(c.rope_scaling)},
      {"vocab_size", c.vocab_size},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"initializer_range", 0.02},
      {"attention_dropout", 0.0},
      {"torch_dtype", hf_torch_dtype(dtype)},
  };
  const nlohmann::json window = c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nullptr;
  if (type == "qwen2") {
    j["use_sliding_window"] = false;
  } else if (type == "llama") {
    j["attention_bias"] = c.attention_bias;
    j["mlp_bias"] = c.mlp_bias;
  } else if (type == "mistral") {
    j["sliding_window"] = window;
  } else if (type == "qwen3") {
    j["attention_bias"] = c.attention_bias;
    j["use_sliding_window"] = false;
  } else if (type == "phi3") {
    j["sliding_window"] = window;
    j["partial_rotary_factor"] = 1.0;
    j["resid_pdrop"] = 0.0;
    j["embd_pdrop"] = 0.0;
  }
  return j;
}

std::string hf_tensor_name(const ModelSpec& spec, const std::string& name) {
  // GPT2LMHeadModel keeps the body under "transformer."; the Llama family's names are the
  // model's own (Phi-3's fused qkv_proj and gate_up_proj included: the model holds them fused).
  return spec.is_gpt2() ? "transformer." + name : name;
}

}  // namespace zt
