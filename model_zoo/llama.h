// Llama-family decoder (Llama 2/3, Qwen2, Mistral, Qwen3, Phi-3 and kin) written against
// runtime's Model/Unit/Layer interface: token embedding without positions, pre-norm blocks of
// RMSNorm, grouped-query attention with rotary position embeddings (Hugging Face's rotate-half)
// and a SwiGLU MLP, final RMSNorm, LM head tied to the embedding or its own. Parameter names and
// shapes are LlamaForCausalLM's, or the family's (linear weights (out, in)), so weights move to and
// from transformers unchanged; the vocabulary is not padded (embed_tokens is (V, C), as
// transformers stores it). Units: 0 = root (embed_tokens, norm, lm_head when untied), 1..L =
// decoder layers. Layers: embedding (root), decoder layers, head (root: final norm, LM head,
// cross-entropy fused). The families differ in a few places (LlamaFamily): Mistral's and Phi-3's
// sliding-window attention, Qwen3's per-head RMSNorm of queries and keys (q_norm, k_norm, before
// RoPE), Phi-3's fused qkv_proj and gate_up_proj tensors (the same matrices the others' adjacent
// q/k/v and gate/up tensors form, under one name each).
// Forward and backward are explicit kernel calls; no autograd. Owns no tensor memory.
// Not here: reading a Hugging Face config.json (model_zoo/hf_config.h maps its keys, which
// LlamaConfig's fields are named after, onto LlamaConfig) or weights (pretrained/).
#pragma once

#include <string>

#include "model_zoo/decoder_model.h"
#include "runtime/tuning.h"
#include "runtime/rope.h"

namespace zt {

// Which transformers model the config describes, where the families' layers differ.
enum class LlamaFamily {
  kLlama,    // LlamaForCausalLM, or Qwen2ForCausalLM by its biases (ModelSpec::model_type)
  kMistral,  // MistralForCausalLM: Llama's layers, sliding_window, no biases
  kQwen3,    // Qwen3ForCausalLM: q_norm and k_norm (RMSNorm per head, before RoPE)
  kPhi3,     // Phi3ForCausalLM: qkv_proj and gate_up_proj fused, no biases
};

// config.json's keys of LlamaConfig (and Qwen2Config, MistralConfig, Qwen3Config, Phi3Config),
// the ones this model uses.
struct LlamaConfig {
  LlamaFamily family = LlamaFamily::kLlama;
  int hidden_size = 4096;
  int intermediate_size = 11008;
  int num_hidden_layers = 32;
  int num_attention_heads = 32;
  int num_key_value_heads = 32;  // == num_attention_heads: multi-head; fewer: grouped-query
  int head_dim = 0;              // 0: hidden_size / num_attention_heads
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;  // runtime/rope.h: none, linear or llama3
  int vocab_size = 32000;
  int max_position_embeddings = 2048;
  bool attention_bias = false;       // biases on q/k/v (and o_proj, below)
  bool attention_out_bias = true;    // with attention_bias, o_proj too (Llama); false: Qwen2's
                                     // q/k/v-only biases
  bool mlp_bias = false;             // biases on gate/up/down
  bool tie_word_embeddings = false;  // lm_head is embed_tokens (no lm_head.weight)
  // > 0: sliding-window attention, each query reads its last sliding_window keys, itself
  // included (kernel_entries.h's gqa_attention_forward); 0: plain causal attention. A window of
  // the sequence length or more reads every key.
  int sliding_window = 0;

  int resolved_head_dim() const {
    return head_dim > 0 ? head_dim : hidden_size / num_attention_heads;
  }
};

// Zoo names: llama-tiny (GQA, untied, no biases), qwen2-tiny (GQA, tied, q/k/v biases),
// mistral-tiny (sliding window 8), qwen3-tiny (q/k norms, head_dim 32), phi3-tiny (fused
// projections), llama-3.2-1B, qwen2-0.5B, mistral-7B-v0.1, qwen3-0.6B, phi3-mini-4k. Unknown
// names are input errors listing the known ones.
LlamaConfig llama_zoo_config(const std::string& name);
// Checks positivity, head and group divisibility, an even head_dim, the alignment the fused
// projections need and each family's own constraints (no biases for Mistral and Phi-3, ...);
// throws kInput naming `source` and the field.
void validate_llama_config(const LlamaConfig& config, const std::string& source);

class Llama final : public zoo::DecoderModel {
 public:
  // Validates `config` (source "LlamaConfig").
  // Validates `config` (source "LlamaConfig"). `tuning`: the tensors zt.freeze freezes go to
  // frozen units; with LoRA every base tensor is frozen and each targeted projection gains its
  // adapters (model_zoo/lora.h) in its block's trainable unit.
  explicit Llama(const LlamaConfig& config, const Tuning& tuning = {});
  ~Llama() override;

  int64_t hidden_size() const override { return config_.hidden_size; }
  int64_t max_seq_len() const override { return config_.max_position_embeddings; }
  int64_t vocab_size() const override { return config_.vocab_size; }
  double forward_flops_per_token(int64_t T) const override;
  const LlamaConfig& config() const { return config_; }

 private:
  LlamaConfig config_;
};

}  // namespace zt
