// Engine: the training step written once (docs/architecture.md, "The training step") for every ZeRO
// stage. Drives any runtime::Model: per micro-batch, a forward loop over the layers and a
// backward loop in reverse (recomputing checkpointed layers); a UnitSchedule says what stage 3
// gathers ahead of each step and keeps after it, a GradientReducer reduces each unit's gradient
// as soon as it is complete (every micro-batch when gradients are sharded, after the last one
// otherwise), behind the remaining backward when overlap_comm is set. Then the global gradient
// norm from per-shard partials added in rank order, the loss scaler, clipping, the optimizer on
// this rank's master shard, and the all-gather that refreshes full parameters. What is sharded
// comes from the ZeroPolicy; gathers run on their own communicator and queue, so they never
// wait behind a reduction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <optional>
#include <span>
#include <vector>

#include "comm/comm_queue.h"
#include "comm/communicator.h"
#include "runtime/device.h"
#include "runtime/model.h"
#include "zero/checkpoint/reader.h"
#include "zero/checkpoint/shard_writer.h"
#include "zero/host_worker.h"
#include "zero/loss_scaler.h"
#include "zero/offload_plan.h"
#include "zero/offloaded_params.h"
#include "zero/optimizer.h"
#include "zero/param_group.h"
#include "zero/precision.h"
#include "zero/swapped_state.h"
#include "zero/unit_schedule.h"
#include "zero/zero_policy.h"

namespace zt {

struct EngineOptions {
  OptimizerOptions optimizer;
  float gradient_clipping = 0.0f;  // max global norm; 0 = off
  uint64_t seed = 1337;
  // Per layer of model.layers(): recompute in backward instead of keeping activations.
  // Empty = none. Entries for non-checkpointable layers must be false.
  std::vector<bool> checkpoint;
  ZeroPolicy policy;                         // what is sharded (validated by the engine)
  bool overlap_comm = false;                 // reductions run behind the backward pass
  int64_t reduce_bucket_size = 500'000'000;  // elements of gradient per reduction launch
  // Elements of parameters all-gathered at once after the optimizer step (stages 1-2, and
  // stage 3's persistent units): a bucket is finished before the next is launched.
  int64_t allgather_bucket_size = 500'000'000;
  // Stage 3 (zero/unit_schedule.h): gathered ahead of use; gathered at once at most; kept
  // gathered when reused within this many elements (0: released after every use).
  int64_t prefetch_bucket_size = 50'000'000;
  int64_t max_live_parameters = std::numeric_limits<int64_t>::max();
  int64_t max_reuse_distance = 0;
  int64_t persistence_threshold = 100'000;  // stage 3: units this small stay gathered
  Precision precision;                      // fp32, mixed or pure 16-bit
  // zero_optimization.offload_optimizer and offload_param (zero/offload_plan.h): the host tier
  // and swap stores, which must outlive the engine. Default: nothing offloaded.
  // The optimizer offloaded (stages 1-3, not pure 16-bit): the host tier's kernels run the
  // update; the result is bitwise the device's. The step is a pipeline (Engine::gradient_ready):
  // in the last micro-batch's backward each unit's gradient shard goes to the host as soon as its
  // reduction is finished, and a host thread (zero/host_worker.h) runs the update on it: at
  // once, behind the rest of the backward, when nothing global scales the gradients (no
  // gradient_clipping, no fp16 loss scaling), else after the backward once the global norm is
  // known; the engine thread copies each unit's updated working parameters back as its update
  // finishes, while later units still update. The host tier holds every unit's gradient shard
  // (kGrads) and, 16-bit, its updated working values (kWorkspace). With the state in swap files
  // (zero/swapped_state.h) the step streams instead (kOffloadChunk elements at a time through
  // host staging, after the backward).
  // The parameters offloaded (stage 3): the sharded working parameters live on the host tier
  // (kParams there) or in swap files, one per unit, through the plan's pool of host buffers
  // (zero/offloaded_params.h). Each gather copies the unit's shard in from the tier; the
  // offloaded optimizer writes the updated shard there. Persistent units stay on the device.
  // Bitwise the device's result.
  OffloadPlan offload;
  // The tables the engine computes with, given the device's; profiling wraps them
  // (runtime/profiling_kernels.h). What it returns must outlive the engine. Empty: the device's.
  std::function<Kernels&(Kernels& device_table)> kernels;
};

// Where one step's time went on this rank (wall_clock_breakdown), in seconds. forward,
// backward and optimizer are the engine thread's wall time in each phase (backward includes
// waiting for reductions it could not overlap); reduce and gather are the communication
// threads' time executing gradient reductions and parameter all-gathers (stage-3 gathers and
// the post-step refresh), which overlap with the phases. host_optimizer: an offloaded
// optimizer's host thread running the update (offload_optimizer "cpu"), and
// host_optimizer_hidden the part of it that ran before the backward ended.
struct StepTimes {
  double forward = 0.0;
  double backward = 0.0;
  double optimizer = 0.0;
  double reduce = 0.0;
  double gather = 0.0;
  double host_optimizer = 0.0;
  double host_optimizer_hidden = 0.0;
};

struct StepResult {
  double loss = 0.0;       // mean over the targets the step trains on (every rank's)
  int64_t targets = 0;     // those targets: the global batch's positions but ignored ones
  double grad_norm = 0.0;  // global L2 norm before clipping (unscaled; inf on overflow)
  float lr = 0.0f;
  // fp16: the scale this step's loss was multiplied by, and what the scaler did. A skipped
  // step (overflow on any rank) changed no parameter and no optimizer state.
  float loss_scale = 1.0f;
  bool skipped = false;
  LossScalerEvent scale_update;
  StepTimes times;
  // offload_optimizer "cpu": the units whose update started during the backward (all of them
  // without gradient clipping or loss scaling, else none).
  int early_updates = 0;
  // Non-empty when training cannot go on, agreed on every rank: an overflow with the loss scale
  // already at min_loss_scale (DeepSpeed raises there). Nothing was updated.
  std::string failure;
};

// Called with this rank's gradient of a unit (compute dtype) as soon as the micro-batch's backward
// has completed it, before it is reduced or stored (tests inject faults through it). Under fp32
// with unsharded gradients the buffer is the store itself: the step's micro-batches so far.
using GradientHook = std::function<void(int unit, Operand grad, int64_t numel)>;

// Where the engine calls its fault hook (tests and zt-train's test-only fault injection throw
// from it to prove that an error on one rank at that point ends every rank):
//   kForward     before a unit's training forward
//   kBackward    after a unit's gradient of the micro-batch is complete and its reduction was
//                launched (with overlap_comm that reduction is still in flight)
//   kOptimizer   before the optimizer updates a unit's master shard
//   kEvaluation  before a unit's forward in eval_loss
enum class EnginePoint { kForward, kBackward, kOptimizer, kEvaluation };
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
  // Forward only: the mean loss over the counted targets (not kIgnoreTarget) of every rank's
  // batch (their number into `targets`, when given). Parameters and gradients untouched.
  // Collective.
  double eval_loss(const Batch& batch, int64_t* targets = nullptr);
  // The forward order over the model's layers with each layer's parameters in place, as
  // eval_loss has them (stage 3: its unit gathered before the layer and released after, on the
  // evaluation schedule), for a forward the caller drives itself (generation's decode):
  // body(l, k) computes layer l with k, the engine's compute table. Parameters untouched.
  // Collective under stage 3: every rank calls it in step.
  void run_layers(const std::function<void(size_t layer, Kernels& k)>& body);
  // Forward and backward of one batch into reduced gradients (zeroed first), no optimizer
  // step (the gradient of the mean over every rank's counted targets); returns this rank's mean
  // loss over its counted targets. Read them with unit_grads(). Collective.
  double compute_gradients(const Batch& batch);

  // Full parameters of unit u (layout().numel() elements) into dst: the fp32 master under mixed
  // precision, the working parameters otherwise. Collective under stage 3, and under stages 1
  // and 2 with a sharded master.
  void read_unit_params(int u, float* dst);
  // Full working parameters of unit u in the compute dtype (numel elements) into host memory:
  // what a 16-bit weights file holds (stage3_gather_16bit_weights_on_model_save). Collective
  // under stage 3.
  void read_unit_working(int u, void* dst);
  DType working_dtype() const { return options_.precision.compute; }
  // Sets unit u's parameters from full values (the same on every rank): master and working
  // copy (ParamGroup::assign). Not collective. A frozen unit's values become its fingerprint.
  void write_unit_params(int u, const float* src);
  // What each frozen unit holds, by name: "init <seed>" until values are written, then the
  // CRC32C of the fp32 values written. A checkpoint records it (save_state's "frozen_base") and
  // a resume refuses another base.
  std::map<std::string, std::string> frozen_fingerprints() const;
  // fp32 training: the full parameter buffer of unit u, when parameters are not sharded.
  float* unit_params(int u);
  // The reduced gradient of unit u, full (numel elements, fp32 whatever the stored dtype;
  // times the loss scale under fp16), in every stage: after compute_gradients or a step's
  // backward, until the next step zeroes it. Collective (every rank's shard is all-gathered).
  std::vector<float> unit_grads(int u);
  // This rank's model state of unit u as bytes: working parameters, master, optimizer state
  // (tests compare them across skipped steps).
  std::vector<std::byte> model_state_bytes(int u);

  // ---- sharded checkpoints (zero/engine_checkpoint.cpp; docs/architecture.md, "Checkpoints") ----
  // The manifest's world_size, zero_stage, dtypes and units (names, tensors, this world's
  // padded sizes). The trainer adds the step, its own state and the files.
  void describe_checkpoint(CheckpointManifest& manifest) const;
  std::vector<CheckpointUnit> checkpoint_units() const;
  // Appends this rank's records to its shard file and returns the engine's state (optimizer
  // step count, loss scaler) for the manifest's trainer_state. For every unit, in unit order,
  // elements [shard.begin, shard.begin + shard.shard) of the padded flat buffer, whatever the
  // stage (so records never overlap, even where the state is replicated, as at stage 0):
  //   "master"      fp32: the master (fp32 training: the working parameters, which are it)
  //   "working"     the compute dtype, instead of "master" under pure 16-bit (no master)
  //   <state name>  fp32, each of optimizer_state_names() ("exp_avg", "exp_avg_sq" | "momentum")
  // read wherever they live (device, host tier, swap files) through one bounded host buffer.
  // Not collective; call it between steps. `before_unit` (tests' fault injection) is called
  // before each unit's records.
  nlohmann::json save_state(RecordSink& writer,
                            const std::function<void(int unit)>& before_unit = {});
  // Sets this rank's state from a checkpoint of any world size, stage and offload tier: it reads
  // the global flat ranges it holds here (the master range, the optimizer's, the working
  // parameters') with CheckpointReader::read_range, so resharding is the same code as resuming.
  // The master and working parameters through ParamGroup::assign (working = master rounded,
  // what a straight run holds); a checkpoint without a master (pure 16-bit) gives its working
  // values widened. `engine_state` is what save_state returned. Everything is checked before
  // anything is set (kInput naming the manifest: other units, another optimizer's state, a
  // missing or mistyped record), so a refused checkpoint leaves the engine untouched. Returns
  // notes, one line each, for what differs but loads: the compute dtype (fp16 <-> bf16 <-> fp32:
  // the masters are fp32), a loss scaler started fresh or dropped. Not collective.
  std::vector<std::string> load_state(const CheckpointReader& reader,
                                      const nlohmann::json& engine_state);

  void set_gradient_hook(GradientHook hook) { gradient_hook_ = std::move(hook); }
  void set_fault_hook(FaultHook hook) { fault_hook_ = std::move(hook); }
  // What the engine's collectives are part of, named in a timeout report ("step 12",
  // "evaluation after step 12", "weights save after step 300"). train_step and eval_loss set it.
  void set_context(const std::string& context) {
    reduce_queue_->set_context(context);
    gather_queue_->set_context(context);
  }
  const LossScaler* loss_scaler() const { return loss_scaler_.get(); }

  int num_units() const { return static_cast<int>(groups_.size()); }
  // Steps applied (skipped fp16 steps do not count): Adam's bias-correction step, and the
  // position of the learning-rate schedule (DeepSpeed does not advance it on a skipped step).
  int64_t optimizer_steps() const { return step_; }
  const EngineOptions& options() const { return options_; }
  Device& device() { return device_; }
  // Bytes in swap files: the optimizer state (optimizer_swap: kOptimizer) and the parameters
  // (param_swap: kParams); 0 for every other category and without swap files.
  int64_t nvme_bytes(MemCategory c) const;
  int64_t nvme_bytes() const {
    return nvme_bytes(MemCategory::kOptimizer) + nvme_bytes(MemCategory::kParams);
  }
  // The host tier's memory (offload_optimizer), or null when nothing is offloaded.
  const MemoryTracker* host_memory() const {
    return options_.offload.host() ? &options_.offload.host()->memory() : nullptr;
  }
  Model& model() { return model_; }
  Communicator& comm() { return comm_; }
  // What the engine's collectives cost: its communicator's and its gather communicator's
  // counters added (read between steps).
  CommStats comm_stats() const;
  void reset_comm_stats();
  // Stage 3: the most bytes of gathered (non-persistent) parameters held at once, and the
  // bound the engine keeps (UnitSchedule::live_bound of the largest unit, in the working
  // dtype).
  int64_t peak_gathered_bytes() const { return peak_gathered_bytes_; }
  // Stage 3: how many times unit u was gathered so far (0 for a persistent unit, which is
  // never gathered). For benchmarks and tests.
  int64_t gather_count(int u) const { return groups_[u]->gather_count(); }
  int64_t gather_window_bytes() const;

  // Elements pure 16-bit training's optimizer step widens at a time (for_each_fp32_chunk):
  // the planner's device replay (zero/memory_model.h) counts its workspace.
  static constexpr int64_t kWorkspaceChunk = int64_t{1} << 22;

 private:
  // One pass over the layers (zero/unit_schedule.h): forward in order, then, when training,
  // backward in reverse with each completed unit's gradient handed to a GradientReducer
  // (reduced now when `reduce_now`, else stored for a later micro-batch). Returns the sum of
  // this rank's per-position losses (ignored targets add 0).
  double run_pass(const Batch& batch, PassMode mode, float dloss, bool reduce_now);
  // Stage 3 around step `at` of a schedule, as zero/unit_residency.h decides: use_units makes
  // room under max_live (releasing kept units), gathers the step's unit and starts the
  // prefetches; end_use releases it unless the schedule keeps it.
  // use_units and end_use take a layer's steps (UnitSchedule::Steps: one per unit it computes
  // with), each step's decisions in turn.
  class GroupResidency;
  void use_units(const UnitSchedule& schedule, UnitSchedule::Steps steps);
  void end_use(const UnitSchedule& schedule, UnitSchedule::Steps steps);
  // offload_param on NVMe, before step `at`: the shards of the next sharded units after it
  // (the plan's buffers - 1: one buffer stays for a shard needed now) start to be read.
  void prefetch_offloaded(const UnitSchedule& schedule, size_t at);
  int64_t live_elements() const;  // gathered (and gathering) elements held now
  void note_gathered();
  double all_ranks_sum(double local);  // sum over ranks in rank order, same on every rank
  // The kernels layers compute with: the device's table rounding activations to the compute
  // dtype (fp32: the plain one).
  Kernels& compute_kernels();
  // A device table as the engine computes with it: options.kernels applied when set.
  static Kernels& table(const EngineOptions& options, Kernels& device_table);
  // Calls f(values, begin, count) over n 16-bit elements of `dtype` at src widened to fp32,
  // chunk by chunk (kWorkspaceChunk elements, boundaries counted from src) into one workspace
  // buffer that f may overwrite (pure 16-bit training's optimizer step).
  void for_each_fp32_chunk(const void* src, DType dtype, int64_t n,
                           const std::function<void(float*, int64_t, int64_t)>& f);
  void optimizer_step(int u, float lr, float grad_scale);
  // The offloaded step of unit u with its state on NVMe: gradients to the host, the update there,
  // working parameters back, a chunk at a time.
  void offloaded_optimizer_step(int u, float lr, float grad_scale);
  // The pipelined offloaded step (offload_optimizer "cpu"). gradient_ready: the reducer
  // finished g's last reduction of the step: its gradient shard to the host, and (early_) its
  // update submitted. submit_host_update: unit u's update on the host thread. write_back: its
  // updated working parameters to where they live (device or parameter tier).
  // collect_host_updates: write back the finished updates (all of them, waiting, when `all`).
  void gradient_ready(ParamGroup& g);
  void submit_host_update(int u, float lr, float grad_scale, int64_t step);
  void write_back(int u);
  void collect_host_updates(bool all);
  static constexpr int64_t kOffloadChunk = int64_t{1} << 20;
  // After the optimizer: full parameters refreshed from every rank's master where the
  // optimizer is sharded but the parameters are not, allgather_bucket_size elements at a time.
  void refresh_params();

  Device& device_;
  Communicator& comm_;
  Model& model_;
  EngineOptions options_;
  Kernels& kernels_;          // options_.kernels applied to the device's fp32 table
  Kernels& compute_kernels_;  // ... and to its table for the compute dtype (fp32: kernels_)
  ZeroPolicy policy_;
  // Two communicators, each with its queue: gradient reductions and scalar reductions on
  // comm_, parameter gathers on a duplicate, so a stage-3 prefetch never waits behind a large
  // reduction (each keeps the engine's order on every rank).
  std::unique_ptr<CommQueue> reduce_queue_;
  std::unique_ptr<Communicator> gather_comm_;
  std::unique_ptr<CommQueue> gather_queue_;
  std::vector<std::unique_ptr<ParamGroup>> groups_;  // one per unit
  std::unique_ptr<UnitSchedule> training_schedule_, evaluation_schedule_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<LossScaler> loss_scaler_;  // fp16
  Buffer offload_grads_, offload_working_;   // host staging of offloaded steps
  Kernels* offload_kernels_ = nullptr;       // the host tier's table (options_.kernels applied)
  std::unique_ptr<SwappedState> swapped_;    // optimizer_swap: the state's swap files
  std::unique_ptr<OffloadedParams> offloaded_params_;  // offload_param: the parameter tier
  // The pipelined offloaded step: per unit, its gradient shard and (16-bit) updated working
  // values on the host tier, and where its update stands this step.
  struct HostUpdate {
    bool submitted = false;
    bool written_back = false;
    size_t ticket = 0;
  };
  std::vector<Buffer> host_grads_, host_working_;
  std::vector<HostUpdate> host_updates_;
  std::vector<int> host_update_order_;  // units in the order their updates were submitted
  bool collecting_grads_ = false;       // the last micro-batch's backward is running
  // ... and the updates start at once: the step's lr and Adam step (no global scaling).
  struct EarlyUpdates {
    float lr;
    int64_t step;
  };
  std::optional<EarlyUpdates> early_;
  GradientHook gradient_hook_;
  FaultHook fault_hook_;
  void fault_point(EnginePoint point, int unit) {
    if (fault_hook_) fault_hook_(point, unit);
  }
  std::vector<size_t> last_backward_layer_;  // per unit: the layer whose backward completes it
  int64_t step_ = 0;
  std::vector<std::string> frozen_fingerprint_;  // per unit; empty for a trainable one
  // The training pass of the step in progress: with the step, each pass's dropout seed, so a
  // resumed run draws the masks an uninterrupted one draws.
  uint64_t pass_in_step_ = 0;
  int64_t peak_gathered_bytes_ = 0;
  StepTimes times_;  // of the step in progress
  // Last: destroyed first, so no update runs on buffers already freed.
  std::unique_ptr<HostWorker> host_worker_;
};

}  // namespace zt
