// Hugging Face model directories in and out (what `from_pretrained` reads and `save_pretrained`
// writes), for the models of model_zoo/:
//   config.json          the model's shape: GPT2Config's fields (model_type "gpt2"), or
//                        LlamaConfig's ("llama": Llama 2/3/3.1/3.2, TinyLlama, SmolLM; rope_scaling
//                        linear or llama3) and Qwen2Config's ("qwen2"); what the model would
//                        compute differently (other rope_scaling types, sliding windows, another
//                        activation) is refused by name
//   model.safetensors    the weights, or past `max_shard_size` bytes a sharded set
//                        model-0000k-of-0000n.safetensors with model.safetensors.index.json
//   tokenizer files      copied as they are from the directory the run started from
// Reading weights (any of the three safetensors layouts, any of F32/F16/BF16 per tensor) is
// launch/weights_io.h's load_weights over runtime/formats/safetensors_set.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "model_zoo/model_spec.h"
#include "zero/engine.h"

namespace zt {

inline constexpr const char* kHfConfigName = "config.json";

// True when `path` is a directory holding config.json.
bool is_hf_model_dir(const std::string& path);

// The model a config.json's object describes (also a zt.model object with a model_type),
// validated. kInput naming `source` and the key: a model_type other than gpt2/llama/qwen2, a
// missing or non-positive size, a value of a key the model does not compute (a rope_scaling
// type other than linear or llama3, use_sliding_window, hidden_act other than silu, ...).
ModelSpec model_spec_from_hf_config(const nlohmann::json& config, const std::string& source);
// model_spec_from_hf_config of dir/config.json (kInput naming the file: not JSON, ...).
ModelSpec read_hf_config(const std::string& dir);
// The config.json save_pretrained writes for `spec` with weights in `dtype` (GPT2LMHeadModel,
// LlamaForCausalLM or Qwen2ForCausalLM, transformers' key names).
nlohmann::ordered_json hf_config_json(const ModelSpec& spec, DType dtype);
// A parameter's name in transformers' state dict: GPT-2's body under "transformer.", the Llama
// family's names as the model has them.
std::string hf_tensor_name(const ModelSpec& spec, const std::string& name);

struct SavePretrainedOptions {
  std::string dir;
  DType dtype = DType::kF32;  // the weights' dtype in the files (rounded from the fp32 master)
  uint64_t max_shard_size = 5'000'000'000;  // Hugging Face's default "5GB"
  // A Hugging Face directory whose tokenizer files are copied along and whose config.json is
  // the base of the new one (empty: none); it must describe the saved model.
  std::string tokenizer_from;
};

// What a save wrote (rank 0; other ranks: zeros).
struct SavePretrainedResult {
  int files = 0;       // safetensors files
  uint64_t bytes = 0;  // tensor bytes in them
  int tokenizer_files = 0;
};

// Writes `options.dir` as a Hugging Face model directory: config.json (hf_config_json, or the
// one of `tokenizer_from` with the dtype as torch_dtype), the weights with transformers'
// state-dict names (hf_tensor_name; a tied lm_head left out, as transformers saves it) and the
// tokenizer files.
// Collective (stage 3 gathers each unit); rank 0 writes, holding one unit at a time. The
// directory appears whole or not at all: everything is written into `<dir>.partial` first, then
// renamed over `dir` (an earlier save there is replaced only once the new one is complete).
SavePretrainedResult save_pretrained(Engine& engine, const ModelSpec& model,
                                     const SavePretrainedOptions& options);

}  // namespace zt
