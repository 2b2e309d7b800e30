// Hugging Face model directories out (what `save_pretrained` writes), for the models of
// model_zoo/:
//   config.json          model_zoo/hf_config.h's hf_config_json, or the one the run started from
//   model.safetensors    the weights, or past `max_shard_size` bytes a sharded set
//                        model-0000k-of-0000n.safetensors with model.safetensors.index.json
//   tokenizer files      copied as they are from the directory the run started from
// Reading a directory back is model_zoo/hf_config.h's read_hf_config and pretrained/weights_io.h's
// load_weights (any of the three safetensors layouts, any of F32/F16/BF16 per tensor).
#pragma once

#include <cstdint>
#include <string>

#include "model_zoo/hf_config.h"
#include "model_zoo/model_spec.h"
#include "zero/engine.h"

namespace zt {

struct SavePretrainedOptions {
  std::string dir;
  DType dtype = DType::kF32;  // the weights' dtype in the files (rounded from the fp32 master)
  uint64_t max_shard_size = 5'000'000'000;  // Hugging Face's default "5GB"
  // A Hugging Face directory whose tokenizer files are copied along and whose config.json is
  // the base of the new one (empty: none); it must describe the saved model.
  std::string tokenizer_from;
  // A LoRA model's directory: each adapted weight merged, W + s·B·A (pretrained/adapter_io.h's
  // merge_adapter), rounded once to `dtype`; false: the base weights as they are. Adapter
  // tensors are never written (they are no transformers model's).
  bool merge_adapters = false;
};

// What a save wrote (rank 0; other ranks: zeros).
struct SavePretrainedResult {
  int files = 0;       // safetensors files
  uint64_t bytes = 0;  // tensor bytes in them
  int tokenizer_files = 0;
  int merged = 0;  // weights written merged with their adapters
};

// Writes `options.dir` as a Hugging Face model directory: config.json (hf_config_json, or the
// one of `tokenizer_from` with the dtype as torch_dtype), the weights with transformers'
// state-dict names (hf_tensor_name; a tied lm_head left out, as transformers saves it; a LoRA
// model's base weights, merged with their adapters under merge_adapters) and the tokenizer files.
// Collective (stage 3 gathers each unit); rank 0 writes, holding one unit at a time. The
// directory appears whole or not at all: everything is written into `<dir>.partial` first, then
// renamed over `dir` (an earlier save there is replaced only once the new one is complete).
SavePretrainedResult save_pretrained(Engine& engine, const ModelSpec& model,
                                     const SavePretrainedOptions& options);

}  // namespace zt
