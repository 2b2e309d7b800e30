// Precision from the config's precision blocks.
#include "zero/precision.h"

#include "runtime/status.h"

namespace zt {

Precision precision_from_config(const Config& config) {
  Precision p;
  p.compute = config.compute_dtype();
  p.fp16 = config.fp16;
  const std::optional<DType> accum = config.data_types.grad_accum_dtype;
  const std::optional<DType> comm = config.communication_data_type;
  if (!p.mixed()) {
    // fp32 training: a 16-bit gradient store or reduction would only lose bits.
    if (accum && *accum != DType::kF32)
      throw_input(
          fmt::format("{}: 'data_types.grad_accum_dtype' is {} but neither fp16 nor bf16 "
                      "is enabled; use fp32 or enable one of them",
                      config.source, dtype_name(*accum)));
    if (comm && *comm != DType::kF32)
      throw_input(
          fmt::format("{}: 'communication_data_type' is {} but neither fp16 nor bf16 is "
                      "enabled; use fp32 or enable one of them",
                      config.source, dtype_name(*comm)));
    return p;
  }
  auto check_family = [&](DType t, const char* key) {
    if (t != DType::kF32 && t != p.compute)
      throw_input(fmt::format("{}: '{}' is {} but training runs in {}; use fp32 or {}",
                              config.source, key, dtype_name(t), dtype_name(p.compute),
                              dtype_name(p.compute)));
  };
  p.grad_accum = accum.value_or(p.compute);
  check_family(p.grad_accum, "data_types.grad_accum_dtype");
  p.comm = comm.value_or(p.compute);
  check_family(p.comm, "communication_data_type");
  p.master_weights = !(config.fp16.enabled ? config.fp16.fp16_master_weights_and_grads
                                           : config.bf16.bf16_master_weights_and_grads);
  return p;
}

const char* precision_name(const Precision& p) {
  switch (p.compute) {
    case DType::kF32: return "fp32";
    case DType::kF16: return p.master_weights ? "fp16 mixed" : "fp16 pure";
    case DType::kBF16: return p.master_weights ? "bf16 mixed" : "bf16 pure";
  }
  return "?";
}

}  // namespace zt
