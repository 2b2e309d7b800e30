// Precision: which dtype each piece of training state is kept in, as data, the way ZeroPolicy
// says what is sharded. fp32 training keeps everything in fp32 (the parameters are the master).
// Mixed precision (apex O2, DeepSpeed's fp16/bf16 blocks): working parameters, activations and
// gradients in the 16-bit compute dtype, an fp32 master copy and the Adam moments beside them,
// sharded by the stage. Pure 16-bit (apex O3 in spirit, DeepSpeed's
// fp16_master_weights_and_grads): no master copy; the optimizer updates the 16-bit parameters
// directly (in fp32 arithmetic, rounded back), its moments stay fp32. Pure arithmetic.
#pragma once

#include <cstdint>

#include "runtime/config.h"
#include "runtime/dtype.h"

namespace zt {

struct Precision {
  DType compute = DType::kF32;     // working parameters, activations, produced gradients
  DType grad_accum = DType::kF32;  // gradients as stored between micro-batches and steps
  DType comm = DType::kF32;        // gradient reductions (parameter gathers use `compute`)
  bool master_weights = true;      // mixed: an fp32 master; false: pure 16-bit
  Fp16Config fp16;                 // loss scaling; used when compute is kF16

  bool mixed() const { return compute != DType::kF32; }
  bool has_master() const { return mixed() && master_weights; }
  bool loss_scaling() const { return compute == DType::kF16; }
  // Bytes per parameter of model state (per unsharded element): working params, stored
  // gradients, and the optimizer's fp32 state (`optimizer_state_bytes` = 8 for Adam's m and v,
  // 4 for SGD with momentum, 0 for plain SGD) plus the master when there is one.
  int param_bytes() const { return static_cast<int>(dtype_size(compute)); }
  int grad_bytes() const { return static_cast<int>(dtype_size(grad_accum)); }
  int optimizer_bytes(int optimizer_state_bytes) const {
    return optimizer_state_bytes + (has_master() ? 4 : 0);
  }
};

// From the config's fp16 / bf16 / data_types / communication_data_type blocks. Defaults: the
// 16-bit compute dtype for grad_accum_dtype and communication_data_type (the (2+2+K)Ψ family of
// the ZeRO paper); fp32 training forces fp32 everywhere and rejects 16-bit data_types (kInput,
// naming the key and `config.source`). master_weights is false when fp16.
// fp16_master_weights_and_grads or bf16.bf16_master_weights_and_grads is set.
Precision precision_from_config(const Config& config);
const char* precision_name(const Precision& p);  // "fp32", "fp16 mixed", "bf16 pure", ...

}  // namespace zt
