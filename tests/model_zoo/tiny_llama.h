// The tiny Llama the tests share: 2 layers 32 wide, 4 query heads over 2 key/value heads of
// head_dim 16 (not hidden / heads = 8, so head_dim is exercised), a 48-wide SwiGLU MLP; the
// vocabulary, positions, head and biases as each test needs them. Also the tiny model of each
// family past Llama (tiny_family_config).
#pragma once

#include "model_zoo/llama.h"

namespace zt {

// attention_bias on q/k/v (and on o_proj too with out_bias, Llama's rather than Qwen2's).
inline LlamaConfig tiny_llama_config(int vocab, int positions, bool tied, bool qkv_bias,
                                     bool mlp_bias, bool out_bias = false) {
  LlamaConfig c;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.vocab_size = vocab;
  c.max_position_embeddings = positions;
  c.rope_theta = 10000.0f;
  c.rms_norm_eps = 1e-5f;
  c.tie_word_embeddings = tied;
  c.attention_bias = qkv_bias;
  c.attention_out_bias = out_bias;
  c.mlp_bias = mlp_bias;
  return c;
}

// The tiny Llama as `family`: Mistral with a sliding window of 3 (shorter than the tests'
// sequences), Qwen3 tied, its q_norm and k_norm over head_dim 16, Phi-3 untied with fused
// projections and a window of 5. No biases (Mistral and Phi-3 have none).
inline LlamaConfig tiny_family_config(LlamaFamily family, int vocab, int positions) {
  LlamaConfig c = tiny_llama_config(vocab, positions, family == LlamaFamily::kQwen3, false, false);
  c.family = family;
  if (family == LlamaFamily::kMistral) c.sliding_window = 3;
  if (family == LlamaFamily::kPhi3) c.sliding_window = 5;
  return c;
}

inline const char* family_name(LlamaFamily family) {
  switch (family) {
    case LlamaFamily::kLlama: return "llama";
    case LlamaFamily::kMistral: return "mistral";
    case LlamaFamily::kQwen3: return "qwen3";
    case LlamaFamily::kPhi3: return "phi3";
  }
  return "?";
}

inline constexpr LlamaFamily kNewFamilies[] = {LlamaFamily::kMistral, LlamaFamily::kQwen3,
                                               LlamaFamily::kPhi3};

}  // namespace zt
