// Engine: the training step, written once (DESIGN.md, "The training step"). Owns each unit's
// flat parameter and gradient buffers, the optimizer state, the hidden states between layers
// and every layer's activations, and drives any runtime::Model through forward, backward with
// optional recomputation (activation checkpointing), the global gradient norm, clipping and
// the optimizer step. Today it runs one process (no sharding); ZeRO's policies plug in here.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/device.h"
#include "runtime/model.h"
#include "zero/optimizer.h"

namespace zt {

struct EngineOptions {
  OptimizerOptions optimizer;
  float gradient_clipping = 0.0f;  // max global norm; 0 = off
  uint64_t seed = 1337;
  // Per layer of model.layers(): recompute in backward instead of keeping activations.
  // Empty = none. Entries for non-checkpointable layers must be false.
  std::vector<bool> checkpoint;
};

struct StepResult {
  double loss = 0.0;       // mean over the step's micro-batches and positions
  double grad_norm = 0.0;  // global L2 norm before clipping
  float lr = 0.0f;
};

class Engine {
 public:
  Engine(Device& device, Model& model, EngineOptions options);
  ~Engine();

  // One optimizer step over the micro-batches (gradient accumulation = their number).
  StepResult train_step(std::span<const Batch> micro_batches, float lr);
  // Forward only: mean loss of one batch; parameters and gradients untouched.
  double eval_loss(const Batch& batch);
  // Forward and backward of one batch into the gradient buffers (zeroed first), without an
  // optimizer step: what gradient tests read. Returns the mean loss.
  double compute_gradients(const Batch& batch);

  // Full parameter / gradient buffer of unit u (layout of model.units()[u]).
  float* unit_params(int u) { return params_[u].as<float>(); }
  const float* unit_grads(int u) const { return grads_[u].as<float>(); }
  int num_units() const { return static_cast<int>(params_.size()); }
  int64_t optimizer_steps() const { return step_; }
  Device& device() { return device_; }
  Model& model() { return model_; }

 private:
  // Forward and backward of one micro-batch; gradients accumulate; returns the mean loss.
  double forward_backward(const Batch& batch, float dloss);
  void zero_grads();
  double global_grad_norm();

  Device& device_;
  Model& model_;
  EngineOptions options_;
  std::vector<Buffer> params_;  // per unit, kParams
  std::vector<Buffer> grads_;   // per unit, kGrads
  std::unique_ptr<Optimizer> optimizer_;
  int64_t step_ = 0;
};

}  // namespace zt
