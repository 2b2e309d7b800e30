// ModelSpec: the zoo's models behind one type.
#include "model_zoo/model_spec.h"

#include "runtime/status.h"

namespace zt {

namespace {

// Dispatches on the spec's model: gpt2(config) or llama(config).
template <class Gpt2Fn, class LlamaFn>
auto visit_model(const ModelSpec& spec, Gpt2Fn gpt2, LlamaFn llama) {
  return spec.is_gpt2() ? gpt2(spec.gpt2()) : llama(spec.llama());
}

}  // namespace

std::string ModelSpec::model_type() const {
  if (is_gpt2()) return "gpt2";
  const LlamaConfig& c = llama();
  switch (c.family) {
    case LlamaFamily::kMistral: return "mistral";
    case LlamaFamily::kQwen3: return "qwen3";
    case LlamaFamily::kPhi3: return "phi3";
    case LlamaFamily::kLlama: break;
  }
  return c.attention_bias && !c.attention_out_bias ? "qwen2" : "llama";
}

int ModelSpec::layers() const {
  return visit_model(
      *this, [](const Gpt2Config& c) { return c.n_layer; },
      [](const LlamaConfig& c) { return c.num_hidden_layers; });
}

int ModelSpec::hidden_size() const {
  return visit_model(
      *this, [](const Gpt2Config& c) { return c.n_embd; },
      [](const LlamaConfig& c) { return c.hidden_size; });
}

int ModelSpec::vocab_size() const {
  return visit_model(
      *this, [](const Gpt2Config& c) { return c.vocab_size; },
      [](const LlamaConfig& c) { return c.vocab_size; });
}

int ModelSpec::max_positions() const {
  return visit_model(
      *this, [](const Gpt2Config& c) { return c.n_positions; },
      [](const LlamaConfig& c) { return c.max_position_embeddings; });
}

ModelSpec zoo_model_spec(const std::string& name) {
  if (name.starts_with("gpt2")) return ModelSpec{gpt2_zoo_config(name)};
  if (name.starts_with("llama") || name.starts_with("qwen") || name.starts_with("mistral") ||
      name.starts_with("phi3"))
    return ModelSpec{llama_zoo_config(name)};
  // Neither family's prefix: the message lists both zoos.
  std::string gpt2_names, llama_names;
  try {
    gpt2_zoo_config(name);
  } catch (const Error& e) {
    gpt2_names = e.message();
  }
  try {
    llama_zoo_config(name);
  } catch (const Error& e) {
    llama_names = e.message();
  }
  throw_input(fmt::format("{}; {}", gpt2_names, llama_names.substr(llama_names.find(';') + 2)));
}

void validate_model_spec(const ModelSpec& spec, const std::string& source) {
  if (spec.is_gpt2())
    validate_gpt2_config(spec.gpt2(), source);
  else
    validate_llama_config(spec.llama(), source);
}

Tuning resolve_tuning(const ModelSpec& spec, Tuning tuning) {
  LoraConfig& lora = tuning.lora;
  if (lora.enabled && lora.target_modules.empty())
    lora.target_modules = !spec.is_gpt2() && spec.llama().family == LlamaFamily::kPhi3
                              ? std::vector<std::string>{"qkv_proj"}
                              : std::vector<std::string>{"q_proj", "v_proj"};
  return tuning;
}

std::unique_ptr<Model> build_model(const ModelSpec& spec) {
  if (spec.is_gpt2()) return std::make_unique<Gpt2>(spec.gpt2(), spec.tuning);
  return std::make_unique<Llama>(spec.llama(), spec.tuning);
}

}  // namespace zt
