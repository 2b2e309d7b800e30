// MemoryModel: what a ZeRO configuration holds per rank, computed before anything is allocated
// (zt-estimate, zt-train --dry-run):
//   model states  kParams, kGrads, kOptimizer per tier (device, host, NVMe), the bytes the
//                 engine's trackers hold at rest between steps, exactly: built from the same
//                 ShardLayout (padding and shard sizes), ZeroPolicy, Precision and
//                 optimizer_state_names the engine's ParamGroups and Optimizer use; a frozen
//                 unit (zt.freeze, LoRA's base) holds its working params only
//   activations   the kActivations peak of one training micro-batch, replaying the engine's
//                 pass (zero/engine_step.cpp, PassState and run_pass) over each layer's declared
//                 buffers (Layer::activations)
//   communication elements sent per step, the ZeRO paper's count
// (DeepSpeed's own two estimators, for comparison: zero/deepspeed_estimate.h.)
// tests/mpi/memory_model_test.cpp holds estimate == tracker for the model states on real
// engines (stages 0-3, offload none/cpu/nvme, fp32 and bf16, LoRA and zt.freeze models) and
// activations within 10%;
// tests/zero/memory_model_test.cpp reproduces the ZeRO paper's Figure 1.
// Pure arithmetic: no tensor memory, no communication.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/config.h"
#include "runtime/memory_tracker.h"
#include "runtime/model.h"
#include "zero/optimizer.h"
#include "zero/precision.h"
#include "zero/unit_schedule.h"
#include "zero/zero_policy.h"

namespace zt {

struct EngineOptions;

// Where bytes live (the glossary's tier).
enum class Tier { kDevice, kHost, kNvme };
inline constexpr int kNumTiers = 3;
const char* tier_name(Tier t);  // "device", "host", "nvme"

// Bytes per tier and MemCategory. The NVMe tier counts the swap files' bytes: the optimizer's
// under kOptimizer, the parameters' under kParams (Engine::nvme_bytes(c); zt-train's summary
// files them there too).
struct TierBytes {
  std::array<std::array<int64_t, kNumMemCategories>, kNumTiers> bytes{};

  int64_t& at(Tier t, MemCategory c) {
    return bytes[static_cast<size_t>(t)][static_cast<size_t>(c)];
  }
  int64_t get(Tier t, MemCategory c) const {
    return bytes[static_cast<size_t>(t)][static_cast<size_t>(c)];
  }
  int64_t model_states(Tier t) const;  // kParams + kGrads + kOptimizer
  int64_t total(Tier t) const;         // every category
};

// What decides the model states' bytes: the engine's options that size its buffers.
struct StateOptions {
  ZeroPolicy policy;
  Precision precision;
  OptimizerOptions optimizer;               // its state tensors: optimizer_state_names()
  int64_t persistence_threshold = 100'000;  // stage 3: units this small stay gathered
  // offload_optimizer.device: kCpu keeps the fp32 master and the optimizer state on the host
  // tier (EngineOptions::offload, zero/offload_plan.h), kNvme in swap files.
  OffloadDevice offload_optimizer = OffloadDevice::kNone;
  // offload_param.device: stage-3 parameter shards of the sharded units in host memory (kCpu)
  // or in swap files through param_buffers host buffers (kNvme); EngineOptions::offload.
  OffloadDevice offload_param = OffloadDevice::kNone;
  int param_buffers = 5;  // offload_param.buffer_count
  int world = 1;
};

// The StateOptions of an engine built with `engine` on `world` ranks, with the optimizer
// offloaded to `offload` and the parameters to `offload_param` (EngineOptions holds the tiers
// as pointers; the planner takes the choices instead).
StateOptions state_options(const EngineOptions& engine, OffloadDevice offload, int world,
                           OffloadDevice offload_param = OffloadDevice::kNone,
                           int param_buffers = 5);

// Whether the engine accepts this combination (Engine's constructor): offload_optimizer needs
// stage >= 1 and an fp32 master under 16-bit compute; offload_param needs stage 3 and
// offload_optimizer. Empty when it does, else the reason.
std::string state_options_problem(const StateOptions& o);

// One unit as the model states see it: its flat buffer's size and whether it trains.
struct UnitSize {
  int64_t numel = 0;    // FlatLayout::numel()
  bool frozen = false;  // Unit::frozen: working params only (zero/param_group.h)
  // A layer the backward runs (at or after the first that trains, first_backward_layer)
  // computes with it, so stage 3 gathers it there too; false: the forward's gather alone.
  bool backward = true;
};

// Each unit's size, frozenness and use in the backward, in model order.
std::vector<UnitSize> unit_sizes(Model& model);
// A raw parameter count as units: `params` split into `units` equal parts, each one tensor laid
// out by FlatLayout (its alignment), all trained, for a planner given no model.
std::vector<UnitSize> synthetic_unit_sizes(int64_t params, int units);

// Model-state bytes of one rank at rest between steps (every rank holds the same: shards are
// equal). Per unit (ShardLayout(numel, world, rank)), as ParamGroup, Optimizer, SwappedState
// and the engine's offload staging allocate them:
//   device kParams     working params, compute dtype: padded (full) or shard (stage 3, a unit
//                      above persistence_threshold)
//   device kGrads      stored grads, grad dtype (fp32 training: fp32): padded or shard (stage>=2)
//   device kOptimizer  without offload: 4 bytes x (the master when mixed with a master + the
//                      optimizer's state tensors) x (padded, or shard at stage >= 1)
//   host kOptimizer    offload cpu: 4 bytes x (master + state tensors) x shard
//   host kGrads        offload cpu (the pipelined step): every unit's gradient shard, grad dtype;
//                      offload nvme: one staging chunk, min(largest shard, 2^20) elements of the
//                      grad dtype (the engine's offload_grads_)
//   host kWorkspace    (not model state) offload cpu, 16-bit: every unit's updated working
//                      values, compute dtype; nvme: the staging chunk in the compute dtype and
//                      two sets of (1 + state tensors) fp32 chunks
//   nvme kOptimizer    offload nvme: 4 bytes x (master + state tensors) x shard, every precision
//   offload_param      the sharded units' working-parameter shards leave the device's kParams:
//                      cpu to host kParams; nvme to nvme kParams, with param_buffers host buffers
//                      (host kParams) each the largest shard's bytes rounded up to 4096 plus 4096
// A frozen unit holds its working params only (sharded, persistent and offloaded as any): no
// stored grads, no master, no optimizer state, no host-tier gradient or working buffers, and
// it sizes none of the NVMe staging (its master range is empty, as SwappedState sees it).
TierBytes model_state_bytes(std::span<const UnitSize> units, const StateOptions& o);

// Activations of one training micro-batch of (B, T).
struct ActivationOptions {
  int64_t B = 1;
  int64_t T = 1;
  DType compute = DType::kF32;   // activations stored in it (statistics and losses fp32)
  std::vector<bool> checkpoint;  // per layer, as EngineOptions::checkpoint; empty: none
  // A device the host cannot address (a GPU) holds a copy of the token ids: 2 * B * T int32,
  // 3 * B * T with batch_positions (batches of packed documents, Batch::positions).
  bool tokens_on_device = false;
  bool batch_positions = false;
  // What the device keeps in attention's att for these heads (a back end's rule for
  // Kernels::attention_record: planned_attention_record); null: the probabilities each layer
  // declares, what every CPU table keeps.
  std::function<AttentionRecord(const AttentionHeads&, int64_t B, int64_t T, bool packed)>
      attention;
};
// The kActivations peak of Engine::train_step's pass, replayed over the layers' declared
// buffers; nullopt when a layer declares none (Layer::activations).
std::optional<int64_t> activation_peak_bytes(Model& model, const ActivationOptions& o);

// The device's whole peak over one training step (the tracker's peak_total: every category at
// once), replayed in the engine's order of allocation on the engine thread, which alone
// allocates and frees device memory, so the peak does not depend on timing:
//   construction  the model states, unit by unit, with ParamGroup::assign's staging chunk
//   the pass      the activation replay above, interleaved per layer with the units' transient
//                 buffers: stage-3 gathers (UnitSchedule's prefetch, keep and max_live
//                 answers, the same class the engine asks), the produced gradients
//                 (ensure_grads .. finish_grads or finish_reduce), the reduce buffers and
//                 GradientReducer's buckets (at most the bucket in flight and the one filling)
//   the optimizer pure 16-bit: Engine::for_each_fp32_chunk's workspace
// plus `comm_staging` bytes the communicators allocate once (MpiCommunicator's staging). Not
// included: what exporting weights or reading parameters gathers after training
// (Engine::read_unit_params), and evaluation passes (forward only, below the training peak).
// One micro-batch with its reduction: accumulation changes no device peak (stages 0-1 reduce
// on the last micro-batch only, which is this one; stages 2-3 reduce on each).
struct StepReplayOptions {
  StateOptions states;
  ActivationOptions activations;
  GatherLimits gather;  // stage3_prefetch_bucket_size, max_live_parameters, max_reuse_distance
  int64_t reduce_bucket_elements = 500'000'000;
  bool overlap_comm = false;
  int64_t comm_staging = 0;  // bytes on the device, allocated before the model states
};
struct DevicePeak {
  int64_t total = 0;                                  // at the step's highest point
  std::array<int64_t, kNumMemCategories> category{};  // each category's own peak
};
// The replay's options for an engine built with `engine` (its gather limits, reduce buckets and
// overlap_comm), holding `states`, running micro-batches as `activations` says.
StepReplayOptions step_replay_options(const EngineOptions& engine, const StateOptions& states,
                                      const ActivationOptions& activations, int64_t comm_staging);
// nullopt when a layer declares no activations (Layer::activations).
std::optional<DevicePeak> device_peak_bytes(Model& model, const StepReplayOptions& o);

// Elements each rank sends and receives per step, the ZeRO paper's count (section 7) over the
// padded unit sizes: stages 0-2 reduce-scatter + all-gather (an all-reduce), 2 per element;
// stage 3 adds the second parameter all-gather of the backward, 3 per element of a sharded unit
// (a persistent unit is never gathered: 2). A frozen unit is never reduced nor refreshed: only
// stage 3's gathers of a sharded one, 2 per element, or 1 when no layer the backward runs
// computes with it (UnitSize::backward: it is gathered in the forward only), else 0.
int64_t comm_elements_per_step(std::span<const UnitSize> units, const StateOptions& o);

}  // namespace zt
