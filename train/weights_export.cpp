// The trainer's weight exports (weights_export.h).
#include "train/weights_export.h"

#include "model_zoo/hf_config.h"
#include "pretrained/adapter_io.h"
#include "pretrained/save_pretrained.h"
#include "pretrained/weights_io.h"
#include "runtime/byte_count.h"

namespace zt {

void load_initial_weights(const Config& config, const ModelSpec& model_spec, Engine& engine,
                          const Logger& log) {
  if (!config.zt.init_from.empty()) {
    load_weights(engine, config.zt.init_from);
    log.rank0("loaded weights from {}", config.zt.init_from);
  }
  if (!config.zt.init_adapter.empty()) {
    load_adapter(engine, model_spec, config.zt.init_adapter);
    log.rank0("loaded LoRA adapters from {}", config.zt.init_adapter);
  }
}

void export_weights(const Config& config, const ModelSpec& model_spec, Engine& engine,
                    const Logger& log, const std::function<void(int unit)>& before_unit) {
  const int64_t steps = config.zt.steps;
  const Precision& precision = engine.options().precision;
  if (!config.zt.save_weights.empty()) {
    const bool sixteen_bit =
        config.zero_optimization.stage3_gather_16bit_weights_on_model_save && precision.mixed();
    engine.set_context(fmt::format("weights save after step {}", steps));
    save_weights(engine, config.zt.save_weights,
                 sixteen_bit ? WeightsDtype::kWorking : WeightsDtype::kMaster, before_unit);
    log.rank0("saved weights to {} ({})", config.zt.save_weights,
              sixteen_bit ? fmt::format("{} working weights", dtype_name(precision.compute))
                          : std::string("fp32"));
  }
  if (const SavePretrainedConfig& hf = config.zt.save_pretrained; !hf.dir.empty()) {
    engine.set_context(fmt::format("save_pretrained after step {}", steps));
    SavePretrainedOptions o;
    o.dir = hf.dir;
    o.dtype = hf.dtype == "bf16" ? DType::kBF16 : hf.dtype == "fp16" ? DType::kF16 : DType::kF32;
    o.max_shard_size = hf.max_shard_size;
    o.merge_adapters = hf.merge_adapter;
    if (is_hf_model_dir(config.zt.init_from)) o.tokenizer_from = config.zt.init_from;
    const SavePretrainedResult saved = save_pretrained(engine, model_spec, o);
    log.rank0(
        "saved a Hugging Face model directory {} ({} weights in {} safetensors file{}, {}; "
        "{} tokenizer file{} copied{})",
        hf.dir, hf.dtype, saved.files, saved.files == 1 ? "" : "s", format_bytes(saved.bytes),
        saved.tokenizer_files, saved.tokenizer_files == 1 ? "" : "s",
        hf.merge_adapter ? fmt::format("; {} weights merged with their LoRA adapters", saved.merged)
                         : "");
  }
  if (const std::string& dir = config.zt.save_adapter; !dir.empty()) {
    engine.set_context(fmt::format("save_adapter after step {}", steps));
    // What PEFT records as the base: the weights the run started from, else the zoo's name.
    const std::string base =
        !config.zt.init_from.empty() ? config.zt.init_from : config.zt.model.zoo_name;
    const SaveAdapterResult saved = save_adapter(engine, model_spec, base, dir);
    log.rank0("saved LoRA adapters to {} (PEFT's {} and {}: {} fp32 tensors, {})", dir,
              kAdapterWeightsName, kAdapterConfigName, saved.tensors, format_bytes(saved.bytes));
  }
}

}  // namespace zt
