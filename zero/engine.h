// Engine: the training step, written once (DESIGN.md, "The training step"), for every ZeRO
// stage. Drives any runtime::Model: per micro-batch, forward over the layers (stage 3 gathers
// each unit before use, prefetches the next ones and releases after), backward in reverse with
// recomputation of checkpointed layers, each unit's gradient reduced as soon as it is complete
// (every micro-batch when gradients are sharded, after the last one otherwise), overlapped with
// the remaining backward when overlap_comm is set; then the global gradient norm from per-shard
// partials added in rank order, clipping, the optimizer on this rank's master shard, and the
// all-gather that refreshes full parameters. What is sharded comes from the ZeroPolicy.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "comm/comm_queue.h"
#include "comm/communicator.h"
#include "runtime/device.h"
#include "runtime/model.h"
#include "zero/optimizer.h"
#include "zero/param_group.h"
#include "zero/zero_policy.h"

namespace zt {

struct EngineOptions {
  OptimizerOptions optimizer;
  float gradient_clipping = 0.0f;  // max global norm; 0 = off
  uint64_t seed = 1337;
  // Per layer of model.layers(): recompute in backward instead of keeping activations.
  // Empty = none. Entries for non-checkpointable layers must be false.
  std::vector<bool> checkpoint;
  int stage = 0;                                // ZeRO stage 0..3
  bool overlap_comm = false;                    // reductions run behind the backward pass
  int64_t reduce_bucket_size = 500'000'000;     // elements of gradient per reduction launch
  int64_t prefetch_bucket_size = 50'000'000;    // stage 3: elements gathered ahead of use
  int64_t persistence_threshold = 100'000;      // stage 3: units this small stay gathered
};

struct StepResult {
  double loss = 0.0;       // mean over the step's micro-batches, positions and ranks
  double grad_norm = 0.0;  // global L2 norm before clipping
  float lr = 0.0f;
};

class Engine {
 public:
  // `comm` must outlive the engine; the engine attaches its CommQueue to it, so every
  // collective of `comm` runs on the queue's thread while the engine lives.
  Engine(Device& device, Communicator& comm, Model& model, EngineOptions options);
  ~Engine();

  // One optimizer step over this rank's micro-batches (gradient accumulation = their number).
  // Collective.
  StepResult train_step(std::span<const Batch> micro_batches, float lr);
  // Forward only: the mean loss over this rank's batch and every rank's. Parameters and
  // gradients untouched. Collective.
  double eval_loss(const Batch& batch);
  // Forward and backward of one batch into reduced gradients (zeroed first), no optimizer
  // step; returns this rank's mean loss. Gradients readable by unit_grads() when not sharded.
  double compute_gradients(const Batch& batch);

  // Full parameters of unit u (layout().numel() elements) into dst. Collective under stage 3.
  void read_unit_params(int u, float* dst);
  // Sets unit u's parameters from full values (the same on every rank). Not collective.
  void write_unit_params(int u, const float* src);
  // The full parameter / reduced gradient buffer of unit u, when not sharded.
  float* unit_params(int u);
  const float* unit_grads(int u);

  int num_units() const { return static_cast<int>(groups_.size()); }
  int64_t optimizer_steps() const { return step_; }
  const ZeroPolicy& policy() const { return policy_; }
  Device& device() { return device_; }
  Model& model() { return model_; }
  Communicator& comm() { return comm_; }
  // Stage 3: the most bytes of gathered (non-persistent) parameters held at once, and the
  // bound the engine keeps: 4 * (largest unit + stage3_prefetch_bucket_size elements).
  int64_t peak_gathered_bytes() const { return peak_gathered_bytes_; }
  int64_t gather_window_bytes() const;

 private:
  struct ScheduleItem {
    size_t layer;
    bool backward;
  };
  double forward_backward(const Batch& batch, float dloss, bool last_micro_batch);
  void prefetch(const std::vector<ScheduleItem>& schedule, size_t index);
  void note_gathered();
  double all_ranks_sum(double local);  // sum over ranks in rank order, same on every rank

  Device& device_;
  Communicator& comm_;
  Model& model_;
  EngineOptions options_;
  ZeroPolicy policy_;
  std::unique_ptr<CommQueue> queue_;
  std::vector<std::unique_ptr<ParamGroup>> groups_;  // one per unit
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<size_t> last_backward_layer_;  // per unit: the layer whose backward completes it
  int64_t step_ = 0;
  int64_t peak_gathered_bytes_ = 0;
};

}  // namespace zt
