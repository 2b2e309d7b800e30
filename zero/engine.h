// Engine: the training step, written once (DESIGN.md, "The training step"), for every ZeRO
// stage. Drives any runtime::Model: per micro-batch, forward over the layers (stage 3 gathers
// each unit before use, prefetches the next ones and releases after), backward in reverse with
// recomputation of checkpointed layers, each unit's gradient reduced as soon as it is complete
// (every micro-batch when gradients are sharded, after the last one otherwise), overlapped with
// the remaining backward when overlap_comm is set; then the global gradient norm from per-shard
// partials added in rank order, clipping, the optimizer on this rank's master shard, and the
// all-gather that refreshes full parameters. What is sharded comes from the ZeroPolicy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "comm/comm_queue.h"
#include "comm/communicator.h"
#include "runtime/device.h"
#include "runtime/model.h"
#include "runtime/rounding_kernels.h"
#include "zero/loss_scaler.h"
#include "zero/optimizer.h"
#include "zero/param_group.h"
#include "zero/precision.h"
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
  Precision precision;                          // fp32, mixed or pure 16-bit
};

struct StepResult {
  double loss = 0.0;       // mean over the step's micro-batches, positions and ranks
  double grad_norm = 0.0;  // global L2 norm before clipping (unscaled; inf on overflow)
  float lr = 0.0f;
  // fp16: the scale this step's loss was multiplied by, and what the scaler did. A skipped
  // step (overflow on any rank) changed no parameter and no optimizer state.
  float loss_scale = 1.0f;
  bool skipped = false;
  LossScalerEvent scale_update;
  // Non-empty when training cannot go on, agreed on every rank: an overflow with the loss scale
  // already at min_loss_scale (DeepSpeed raises there). Nothing was updated.
  std::string failure;
};

// Called with this rank's fp32 gradient of a unit as soon as the micro-batch's backward has
// completed it, before it is reduced or stored (tests inject faults through it). Under fp32 with
// unsharded gradients the buffer is the store itself: the step's micro-batches so far.
using GradientHook = std::function<void(int unit, float* grad, int64_t numel)>;

// Where the engine calls its fault hook (tests and zt-train's test-only fault injection throw
// from it to prove that an error on one rank at that point ends every rank):
//   kForward     before a unit's training forward
//   kBackward    after a unit's gradient of the micro-batch is complete and its reduction was
//                launched (with overlap_comm that reduction is still in flight)
//   kOptimizer   before the optimizer updates a unit's master shard
//   kEvaluation  before a unit's forward in eval_loss
enum class EnginePoint { kForward, kBackward, kOptimizer, kEvaluation };
const char* engine_point_name(EnginePoint point);  // "forward", "backward", ...
using FaultHook = std::function<void(EnginePoint point, int unit)>;

class Engine {
 public:
  // `comm` must outlive the engine; the engine attaches its CommQueue to it, so every
  // collective of `comm` runs on the queue's thread while the engine lives.
  Engine(Device& device, Communicator& comm, Model& model, EngineOptions options);
  ~Engine();

  // One optimizer step over this rank's micro-batches (gradient accumulation = their number).
  // Under fp16 an overflow on any rank skips the step on every rank (StepResult::skipped) and
  // the loss scaler updates; at its minimum scale a further overflow sets StepResult::failure.
  // Collective.
  StepResult train_step(std::span<const Batch> micro_batches, float lr);
  // Forward only: the mean loss over this rank's batch and every rank's. Parameters and
  // gradients untouched. Collective.
  double eval_loss(const Batch& batch);
  // Forward and backward of one batch into reduced gradients (zeroed first), no optimizer
  // step; returns this rank's mean loss. Gradients readable by unit_grads() when not sharded.
  double compute_gradients(const Batch& batch);

  // Full parameters of unit u (layout().numel() elements) into dst: the fp32 master under mixed
  // precision, the working parameters otherwise. Collective under stage 3, and under stages 1
  // and 2 with a sharded master.
  void read_unit_params(int u, float* dst);
  // Sets unit u's parameters from full values (the same on every rank): master and working
  // copy. Not collective.
  void write_unit_params(int u, const float* src);
  // fp32 training: the full parameter / reduced gradient buffer of unit u, when not sharded.
  float* unit_params(int u);
  const float* unit_grads(int u);
  // This rank's model state of unit u as bytes: working parameters, master, optimizer state
  // (tests compare them across skipped steps).
  std::vector<std::byte> model_state_bytes(int u);
  void set_gradient_hook(GradientHook hook) { gradient_hook_ = std::move(hook); }
  void set_fault_hook(FaultHook hook) { fault_hook_ = std::move(hook); }
  const LossScaler* loss_scaler() const { return loss_scaler_.get(); }

  int num_units() const { return static_cast<int>(groups_.size()); }
  // Steps applied (skipped fp16 steps do not count): Adam's bias-correction step, and the
  // position of the learning-rate schedule (DeepSpeed does not advance it on a skipped step).
  int64_t optimizer_steps() const { return step_; }
  const ZeroPolicy& policy() const { return policy_; }
  const EngineOptions& options() const { return options_; }
  Device& device() { return device_; }
  Model& model() { return model_; }
  Communicator& comm() { return comm_; }
  // Stage 3: the most bytes of gathered (non-persistent) parameters held at once, and the
  // bound the engine keeps: (largest unit + stage3_prefetch_bucket_size elements) in the
  // working dtype.
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
  // The kernels layers compute with: the device's, or rounding to the 16-bit working dtype.
  Kernels& compute_kernels();
  // Calls f(values, begin, count) over n elements of `dtype` at src as fp32: src itself in one
  // call for fp32, else converted chunk by chunk (kWorkspaceChunk elements, chunk boundaries
  // counted from src) into one workspace buffer.
  void for_each_fp32_chunk(const void* src, DType dtype, int64_t n,
                           const std::function<void(const float*, int64_t, int64_t)>& f);
  static constexpr int64_t kWorkspaceChunk = int64_t{1} << 22;
  void optimizer_step(int u, float lr, float grad_scale);

  Device& device_;
  Communicator& comm_;
  Model& model_;
  EngineOptions options_;
  ZeroPolicy policy_;
  std::unique_ptr<CommQueue> queue_;
  std::vector<std::unique_ptr<ParamGroup>> groups_;  // one per unit
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<RoundingKernels> rounding_;   // mixed precision
  std::unique_ptr<LossScaler> loss_scaler_;     // fp16
  GradientHook gradient_hook_;
  FaultHook fault_hook_;
  void fault_point(EnginePoint point, int unit) {
    if (fault_hook_) fault_hook_(point, unit);
  }
  std::vector<size_t> last_backward_layer_;  // per unit: the layer whose backward completes it
  int64_t step_ = 0;
  int64_t peak_gathered_bytes_ = 0;
};

}  // namespace zt
