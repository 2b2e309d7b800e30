// Which model of the zoo a job trains, and its shape: GPT-2 or a Llama-family decoder (Llama,
// Qwen2, Mistral, Qwen3, Phi-3). What train/ passes around from the config (zt.model, a Hugging
// Face config.json) to the tools that build, plan, checkpoint and export the model, so that none
// of them names a model class.
#pragma once

#include <memory>
#include <string>
#include <variant>

#include "model_zoo/gpt2.h"
#include "model_zoo/llama.h"

namespace zt {

struct ModelSpec {
  std::variant<Gpt2Config, LlamaConfig> shape;
  // What trains: zt.freeze's frozen tensors, zt.lora's adapters (runtime/tuning.h). Default:
  // every parameter, no adapters. The default member initialiser lets ModelSpec{shape} leave it
  // out without -Wmissing-field-initializers.
  Tuning tuning = {};

  bool is_gpt2() const { return std::holds_alternative<Gpt2Config>(shape); }
  const Gpt2Config& gpt2() const { return std::get<Gpt2Config>(shape); }
  const LlamaConfig& llama() const { return std::get<LlamaConfig>(shape); }
  // Hugging Face's model_type: "gpt2", "llama", "qwen2" (a Llama with q/k/v-only biases,
  // Qwen2Config's shape), or the LlamaConfig's family: "mistral", "qwen3", "phi3".
  std::string model_type() const;
  int layers() const;
  int hidden_size() const;
  int vocab_size() const;
  int max_positions() const;  // n_positions, max_position_embeddings
};

// A name of either zoo (gpt2_zoo_config, llama_zoo_config); unknown names are input errors
// listing both zoos' names.
ModelSpec zoo_model_spec(const std::string& name);
// validate_gpt2_config or validate_llama_config, errors naming `source`.
void validate_model_spec(const ModelSpec& spec, const std::string& source);
// `tuning` as this model takes it: LoRA's target_modules, when empty, PEFT's default for the
// model type (q_proj and v_proj; Phi-3's qkv_proj).
Tuning resolve_tuning(const ModelSpec& spec, Tuning tuning);
// The model with spec.tuning's frozen units and adapters, holding its tables only (the engine
// binds its memory).
std::unique_ptr<Model> build_model(const ModelSpec& spec);

}  // namespace zt
