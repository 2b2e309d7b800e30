// Hugging Face config.json for the models of model_zoo/ (what `from_pretrained` reads and
// `save_pretrained` writes): GPT2Config's fields (model_type "gpt2"), LlamaConfig's ("llama":
// Llama 2/3/3.1/3.2, TinyLlama, SmolLM; rope_scaling linear or llama3), Qwen2Config's ("qwen2"),
// MistralConfig's ("mistral": sliding_window), Qwen3Config's ("qwen3": q_norm/k_norm, head_dim)
// and Phi3Config's ("phi3": fused qkv_proj/gate_up_proj, sliding_window); what the model would
// compute differently (other rope_scaling types such as longrope, su, yarn or dynamic, Qwen2's
// and Qwen3's per-layer use_sliding_window, Phi's partial_rotary_factor, another activation)
// is refused by name. Weights and whole directories: pretrained/save_pretrained.h and
// pretrained/weights_io.h.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "model_zoo/model_spec.h"
#include "runtime/dtype.h"

namespace zt {

inline constexpr const char* kHfConfigName = "config.json";

// transformers' name of a dtype in config.json's "torch_dtype": "float32", "bfloat16", ...
const char* hf_torch_dtype(DType dtype);

// True when `path` is a directory holding config.json.
bool is_hf_model_dir(const std::string& path);

// The model a config.json's object describes (also a zt.model object with a model_type),
// validated. kInput naming `source` and the key: a model_type other than gpt2, llama, qwen2,
// mistral, qwen3 or phi3, a missing or non-positive size, a value of a key the model does not
// compute (a rope_scaling type other than linear or llama3, use_sliding_window,
// partial_rotary_factor other than 1, hidden_act other than silu, ...).
ModelSpec model_spec_from_hf_config(const nlohmann::json& config, const std::string& source);
// model_spec_from_hf_config of dir/config.json (kInput naming the file: not JSON, ...).
ModelSpec read_hf_config(const std::string& dir);
// The config.json save_pretrained writes for `spec` with weights in `dtype` (GPT2LMHeadModel,
// LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM, Qwen3ForCausalLM or Phi3ForCausalLM,
// transformers' key names).
nlohmann::ordered_json hf_config_json(const ModelSpec& spec, DType dtype);
// A parameter's name in transformers' state dict: GPT-2's body under "transformer.", the Llama
// family's names as the model has them.
std::string hf_tensor_name(const ModelSpec& spec, const std::string& name);

}  // namespace zt
