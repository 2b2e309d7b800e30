// The exports zt-train writes after its last step: zt.save_weights (one safetensors file: the
// fp32 master, or the 16-bit working weights with stage3_gather_16bit_weights_on_model_save
// under mixed precision) and zt.save_pretrained (a Hugging Face model directory, the tokenizer
// files of zt.init_from copied beside it). Collective: every rank calls it, rank 0 writes and
// prints one line per export.
#pragma once

#include <functional>

#include "launch/logger.h"
#include "model_zoo/model_spec.h"
#include "runtime/config.h"
#include "zero/engine.h"

namespace zt {

// `before_unit(u)` runs on every rank before its part in unit u of the weights file (zt-train's
// test-only fault injection).
void export_weights(const Config& config, const ModelSpec& model_spec, Engine& engine,
                    const Logger& log, const std::function<void(int unit)>& before_unit);

}  // namespace zt
