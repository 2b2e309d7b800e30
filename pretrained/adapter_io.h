// LoRA adapters in and out as Hugging Face PEFT's adapter directories, for the adapters of
// model_zoo/lora.h:
//   adapter_config.json        PEFT LoraConfig's keys as PEFT's save_pretrained writes them
//                              (sorted, indent 2), readable back by zt.lora's file form
//   adapter_model.safetensors  every adapter tensor in fp32 under PEFT's saved name,
//                              "base_model.model." + its name
//                              (base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight),
//                              metadata {"format": "pt"}; with bias "all" or "lora_only" also the
//                              biases that train (a targeted module's as
//                              "<module>.base_layer.bias", where PEFT's wrapped layer keeps it)
// and the merge of the adapters into their base weights that save_pretrained's merged export
// writes. Reads and writes the engine's unit buffers through the model's FlatLayouts; knows no
// model class. Not here: which modules carry adapters (model_zoo/), the LoRA math in training.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model_zoo/model_spec.h"
#include "zero/engine.h"

namespace zt {

inline constexpr const char* kAdapterConfigName = "adapter_config.json";
inline constexpr const char* kAdapterWeightsName = "adapter_model.safetensors";

// The name adapter_model.safetensors gives the model's tensor `spec` (an adapter, or a bias
// that trains beside them under `lora`).
std::string peft_saved_name(const LoraConfig& lora, const ParamSpec& spec);

// adapter_config.json for `model`'s LoRA (model.tuning.lora, resolved): PEFT 0.17's keys with
// their default values where ZeroTrain has no setting, inference_mode true, target_modules
// sorted ("all-linear" written as the module names it adapted, as PEFT writes it).
// `base_model_name_or_path` empty: null. No peft_version (this is not PEFT).
nlohmann::json adapter_config_json(const ModelSpec& model, Model& built,
                                   const std::string& base_model_name_or_path);

struct SaveAdapterResult {  // rank 0; other ranks: zeros
  int tensors = 0;
  uint64_t bytes = 0;  // tensor bytes in adapter_model.safetensors
};

// Writes `dir`/adapter_model.safetensors then `dir`/adapter_config.json, each atomically (temp
// file, fsync, rename), creating `dir` if missing; other files there are left alone. The
// values are the fp32 master (the working parameters where there is none). Collective (stage 3
// gathers each unit holding adapters); rank 0 writes. model.tuning.lora must be enabled.
SaveAdapterResult save_adapter(Engine& engine, const ModelSpec& model,
                               const std::string& base_model_name_or_path, const std::string& dir);

// The checks of load_adapter without loading, for validating a job before allocating a model:
// `dir`/adapter_config.json read by zt.lora's file rules, its r, lora_alpha, use_rslora, bias
// and target_modules those of model.tuning.lora; `dir`/adapter_model.safetensors holding every
// adapter tensor of `built` (build_model(model)) with its shape, in F32, F16 or BF16, and
// nothing else but the biases that train (optional: PEFT releases with its issue 3306 leave
// lora_only's out). Each refusal is one kInput line naming the file.
void check_adapter_dir(const std::string& dir, const ModelSpec& model, Model& built);

// Sets the adapters (and the biases that train, where the file has them) from `dir`, after
// check_adapter_dir's checks, which refuse before anything changes. Collective under stage 3
// (each unit holding adapters is read, its adapter entries overwritten, written back); every rank
// reads the file.
void load_adapter(Engine& engine, const ModelSpec& model, const std::string& dir);

// One adapted module's tensors (fp32), for the merge: A (r, in), B (out, r).
struct ModuleAdapter {
  std::vector<float> a, b;
  int64_t r = 0, in = 0, out = 0;
};
// Every adapted module's A and B by module name ("model.layers.0.self_attn.q_proj"), as
// save_adapter reads them. Collective; only rank 0's map is filled.
std::map<std::string, ModuleAdapter> read_adapters(Engine& engine);
// merged (out, in) = W + scale·(B·A), all in fp32: each element's B·A summed over k = 0..r-1 in
// order, then times scale, then added to W's element (the fixed order tests pin bit for bit).
// `merged` may be `w`.
void merge_adapter(const ModuleAdapter& m, float scale, const float* w, float* merged);

}  // namespace zt
