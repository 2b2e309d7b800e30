// The tiny Llama the tests share: 2 layers 32 wide, 4 query heads over 2 key/value heads of
// head_dim 16 (not hidden / heads = 8, so head_dim is exercised), a 48-wide SwiGLU MLP; the
// vocabulary, positions, head and biases as each test needs them.
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

}  // namespace zt
