// Optimizer over flat ranges of units: Adam, AdamW or SGD applied to a master range (a whole
// unit buffer at stage 0; this rank's shard of it when the policy shards the optimizer), with
// weight decay only where the ParamSpec table says Decay::kYes and never on padding. Owns its
// state (Adam moments or SGD momentum) under MemCategory::kOptimizer. No communication.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "offload/cpu_adam.h"
#include "runtime/device.h"
#include "runtime/flat_layout.h"

namespace zt {

struct OptimizerOptions {
  enum class Type { kAdam, kAdamW, kSgd } type = Type::kAdamW;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  float momentum = 0.0f;        // SGD
  bool bias_correction = true;  // Adam/AdamW: false divides m and v by nothing (DeepSpeed's)
};

// The state tensors an element has under `options`, in order: Adam "exp_avg", "exp_avg_sq";
// SGD with momentum "momentum"; plain SGD none (DeepSpeed's and PyTorch's names).
std::vector<std::string> optimizer_state_names(const OptimizerOptions& options);

// A run of elements of one flat range with one decay setting; padding is left out.
struct DecayRange {
  int64_t begin = 0;  // offsets relative to the range start
  int64_t end = 0;
  Decay decay = Decay::kNo;
};
// The tensor pieces of `layout` inside the flat range [begin, end), merged where adjacent.
std::vector<DecayRange> decay_ranges(const FlatLayout& layout, int64_t begin, int64_t end);

class Optimizer {
 public:
  // One state slot per range; `range_sizes[i]` elements, `layouts[i]` gives the decay runs of
  // the range that starts at flat offset `range_begins[i]`.
  // `kernels`: the table the updates run on (the device's, or one wrapping it).
  // `state_elsewhere`: the state tensors live outside (an NVMe-offloaded optimizer streams them
  // into step_part_host); none is allocated and state() is empty.
  Optimizer(Device& device, Kernels& kernels, const OptimizerOptions& options,
            std::vector<std::vector<DecayRange>> ranges, std::vector<int64_t> range_sizes,
            bool state_elsewhere = false);

  // Updates elements [begin, end) of range i from grads multiplied by grad_scale; params and
  // grads point at element `begin` (the whole range, or a chunk of it converted from 16-bit into
  // a bounded workspace). `step` is 1-based. Element-wise: updating a range chunk by chunk gives
  // the bits of updating it whole.
  // grads: end - begin elements in their stored dtype (widened by the kernels as they read).
  // working (may be null): end - begin elements that receive the updated params rounded to
  // their dtype, in the update's own pass for Adam (Kernels::adamw's `working`); the bits of
  // step_part followed by Kernels::cast.
  void step_part(int range, int64_t begin, int64_t end, float* params, ConstOperand grads, float lr,
                 float grad_scale, int64_t step, Operand working = nullptr);
  // The same update of an fp32 master in host memory (an offloaded optimizer), writing the
  // updated values also into `working` (end - begin elements of its dtype: the working params'
  // staging) in the same pass: CpuAdam for Adam and AdamW, the kernels' sgd then cast for SGD.
  // The bits of step_part followed by Kernels::cast. `state`: the state tensors of elements
  // [begin, end) (state_names() order), when they live elsewhere; null: the optimizer's own.
  void step_part_host(int range, int64_t begin, int64_t end, float* master, ConstOperand grads,
                      Operand working, float lr, float grad_scale, int64_t step,
                      float* const* state = nullptr);
  std::vector<std::string> state_names() const { return optimizer_state_names(options_); }
  const OptimizerOptions& options() const { return options_; }
  // State tensors of range i (Adam: m then v; SGD with momentum: the buffer), for checkpoints.
  std::vector<float*> state(int range);

 private:
  // The arguments of one decay run's update.
  AdamWArgs adam_args(const DecayRange& r, float lr, float grad_scale, int64_t step) const;
  // step_part (host false: Kernels::adamw) and step_part_host (host true: CpuAdam): each decay
  // run updated, `working` written by Adam's pass and cast where no Adam pass writes it.
  void update(int range, int64_t begin, int64_t end, float* master, ConstOperand grads,
              Operand working, float lr, float grad_scale, int64_t step, float* const* state,
              bool host);
  Device& device_;
  Kernels& kernels_;
  CpuAdam cpu_adam_;  // step_part_host's fused Adam
  OptimizerOptions options_;
  std::vector<std::vector<DecayRange>> ranges_;
  std::vector<Buffer> first_;   // Adam m / SGD momentum
  std::vector<Buffer> second_;  // Adam v
};

}  // namespace zt
