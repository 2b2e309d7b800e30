// The weight files of a zt-train run: what it starts from (zt.init_from's weights, then
// zt.init_adapter's LoRA adapters) and the exports it writes after its last step: zt.save_weights
// (one safetensors file: the fp32 master, or the 16-bit working weights with
// stage3_gather_16bit_weights_on_model_save under mixed precision), zt.save_pretrained (a Hugging
// Face model directory, the tokenizer files of zt.init_from copied beside it; under zt.lora the
// merged model) and zt.save_adapter (PEFT's adapter files). Collective: every rank calls them,
// rank 0 writes and prints one line per file.
#pragma once

#include <functional>

#include "launch/logger.h"
#include "model_zoo/model_spec.h"
#include "runtime/config.h"
#include "zero/engine.h"

namespace zt {

// zt.init_from, then zt.init_adapter (before any --resume, which then overwrites what it holds).
void load_initial_weights(const Config& config, const ModelSpec& model_spec, Engine& engine,
                          const Logger& log);

// `before_unit(u)` runs on every rank before its part in unit u of the weights file (zt-train's
// test-only fault injection).
void export_weights(const Config& config, const ModelSpec& model_spec, Engine& engine,
                    const Logger& log, const std::function<void(int unit)>& before_unit);

}  // namespace zt
