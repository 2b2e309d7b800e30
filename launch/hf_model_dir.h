// Hugging Face model directories in and out (what `from_pretrained` reads and `save_pretrained`
// writes), for the models of model_zoo/:
//   config.json          the model's shape: GPT2Config's fields (model_type "gpt2") today; the
//                        Llama family (llama, qwen2, mistral) is refused by name until
//                        model_zoo/ has it
//   model.safetensors    the weights, or past `max_shard_size` bytes a sharded set
//                        model-0000k-of-0000n.safetensors with model.safetensors.index.json
//   tokenizer files      copied as they are from the directory the run started from
// Reading weights (any of the three safetensors layouts, any of F32/F16/BF16 per tensor) is
// launch/weights_io.h's load_weights over runtime/formats/safetensors_set.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "model_zoo/gpt2.h"
#include "zero/engine.h"

namespace zt {

inline constexpr const char* kHfConfigName = "config.json";

// True when `path` is a directory holding config.json.
bool is_hf_model_dir(const std::string& path);

// The model dir/config.json describes. kInput naming the file and the key for a file that is
// not JSON, a model_type other than "gpt2" (the Llama family named as not supported yet), a
// missing or non-positive n_layer, n_head, n_embd, vocab_size or n_positions.
Gpt2Config read_hf_config(const std::string& dir);

struct SavePretrainedOptions {
  std::string dir;
  DType dtype = DType::kF32;  // the weights' dtype in the files (rounded from the fp32 master)
  uint64_t max_shard_size = 5'000'000'000;  // Hugging Face's default "5GB"
  // A Hugging Face directory whose tokenizer files are copied along (empty: none).
  std::string tokenizer_from;
};

// What a save wrote (rank 0; other ranks: zeros).
struct SavePretrainedResult {
  int files = 0;          // safetensors files
  uint64_t bytes = 0;     // tensor bytes in them
  int tokenizer_files = 0;
};

// Writes `options.dir` as a Hugging Face model directory: config.json (GPT2LMHeadModel, the
// dtype as torch_dtype), the weights with GPT2LMHeadModel's state-dict names ("transformer."
// prefixed; the tied lm_head left out, as transformers saves it) and the tokenizer files.
// Collective (stage 3 gathers each unit); rank 0 writes, holding one unit at a time. The
// directory appears whole or not at all: everything is written into `<dir>.partial` first, then
// renamed over `dir` (an earlier save there is replaced only once the new one is complete).
SavePretrainedResult save_pretrained(Engine& engine, const Gpt2Config& model,
                                     const SavePretrainedOptions& options);

}  // namespace zt
