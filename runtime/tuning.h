// Which parameters a job trains: frozen tensors (zt.freeze) and LoRA adapters (zt.lora), with
// PEFT's key names and meanings (docs/lora.md). Plain data: the config reader fills it
// (runtime/config/), the zoo's models build their units from it (model_zoo/), the adapter files
// are written from it (pretrained/).
#pragma once

#include <cmath>
#include <string>
#include <vector>

namespace zt {

// LoraConfig's keys (peft.LoraConfig): y = W·x + scale()·B·(A·dropout(x)) on every targeted
// linear layer, A (r, in) Kaiming-uniform, B (out, r) zeros; the base weights frozen.
struct LoraConfig {
  bool enabled = false;  // the zt.lora block is present
  int r = 8;
  float alpha = 8.0f;    // lora_alpha
  float dropout = 0.0f;  // lora_dropout, in [0, 1)
  // Module names a linear layer's name ends with ("q_proj", "v_proj", ...), or the one entry
  // "all-linear": every linear layer of the blocks (PEFT: all but the output layer). Empty:
  // PEFT's default for the model type (q_proj and v_proj for the Llama family).
  std::vector<std::string> target_modules;
  bool use_rslora = false;  // scale alpha / sqrt(r) instead of alpha / r
  // Modules trained whole beside the adapters (PEFT's modules_to_save), e.g. "lm_head".
  std::vector<std::string> modules_to_save;
  std::string bias = "none";  // "none", "all" or "lora_only": which biases train

  float scale() const {
    return use_rslora ? alpha / std::sqrt(static_cast<float>(r)) : alpha / static_cast<float>(r);
  }
};

struct Tuning {
  // Hugging Face tensor names matched by glob patterns ('*' any run of characters, '?' one):
  // these tensors are frozen (no gradient, no master, no optimizer state).
  std::vector<std::string> freeze;
  LoraConfig lora;

  bool any() const { return lora.enabled || !freeze.empty(); }
};

}  // namespace zt
