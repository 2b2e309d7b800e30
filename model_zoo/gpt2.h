// GPT-2 (learned position embeddings, pre-LN blocks, tied LM head, vocabulary padded to a
// multiple of 128) written against runtime's Model/Unit/Layer interface. Parameter names and
// shapes are Hugging Face GPT-2's, so weights move to and from transformers unchanged.
// Units: 0 = root (wte, wpe, ln_f), 1..L = blocks. Layers: embedding (root), blocks, head
// (root: final norm, tied LM head and cross-entropy fused). Forward and backward are explicit
// kernel calls; no autograd. Owns no tensor memory: the engine binds flat buffers.
#pragma once

#include <string>

#include "model_zoo/decoder_model.h"
#include "runtime/tuning.h"

namespace zt {

struct Gpt2Config {
  int n_layer = 12;
  int n_head = 12;
  int n_embd = 768;
  int vocab_size = 50257;
  int n_positions = 1024;

  int padded_vocab_size() const { return (vocab_size + 127) / 128 * 128; }
};

// Zoo names: gpt2-tiny, gpt2-124M, gpt2-350M, gpt2-774M, gpt2-1558M. Unknown names are input
// errors listing the known ones.
Gpt2Config gpt2_zoo_config(const std::string& name);
// Checks head divisibility and positivity; throws kInput naming `source`.
void validate_gpt2_config(const Gpt2Config& config, const std::string& source);

class Gpt2 final : public zoo::DecoderModel {
 public:
  // `tuning`: the tensors zt.freeze freezes go to frozen units; LoRA is refused (Llama only).
  explicit Gpt2(const Gpt2Config& config, const Tuning& tuning = {});
  ~Gpt2() override;

  int64_t hidden_size() const override { return config_.n_embd; }
  int64_t max_seq_len() const override { return config_.n_positions; }
  int64_t vocab_size() const override { return config_.vocab_size; }
  double forward_flops_per_token(int64_t T) const override;
  const Gpt2Config& config() const { return config_; }

 private:
  Gpt2Config config_;
};

}  // namespace zt
