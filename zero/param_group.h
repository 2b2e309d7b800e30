// ParamGroup: one unit's parameters, gradients and master shard as ZeRO keeps them, and the
// state machine of its parameters (sharded -> gathering -> full -> sharded). Which buffers
// exist follows the ZeroPolicy: parameters full (kParams) or a shard (kParams) plus a gathered
// full copy while in use (kCommBuffers); gradients full (kGrads) or a shard (kGrads) plus the
// unit's full gradient while it is being produced (kCommBuffers). Collectives go through the
// engine's CommQueue; begin_* submits, finish_* waits. Every transition checks the state it
// starts from and throws an error naming the unit, the rank and the state.
#pragma once

#include <cstdint>

#include "comm/comm_queue.h"
#include "runtime/device.h"
#include "runtime/model.h"
#include "zero/zero_policy.h"

namespace zt {

enum class ParamState { kSharded, kGathering, kFull };
const char* param_state_name(ParamState s);

class ParamGroup {
 public:
  // `persistent`: a small unit kept gathered under stage 3 (stage3_param_persistence_threshold).
  ParamGroup(Device& device, Unit& unit, const ShardLayout& shard, const ZeroPolicy& policy,
             bool persistent, uint64_t seed);

  const ShardLayout& shard() const { return shard_; }
  const std::string& name() const { return unit_.name(); }
  // True when the parameters live sharded and are gathered for use (stage 3, not persistent).
  bool params_sharded() const { return params_sharded_; }

  // ---- parameters ----
  ParamState state() const { return state_; }
  void begin_gather(CommQueue& queue);  // kSharded -> kGathering
  void finish_gather();                 // kGathering -> kFull
  void release();                       // kFull -> kSharded (sharded groups only)
  void ensure_full(CommQueue& queue);   // whatever it takes to reach kFull
  float* full_params();                 // kFull only; padded buffer of shard().padded
  int64_t gathered_bytes() const;       // bytes of the gathered copy now held (0 if none)
  // The fp32 range this rank's optimizer updates: shard().shard elements (whole buffer when
  // the optimizer is not sharded: shard().padded).
  float* master();
  int64_t master_size() const;
  int64_t master_offset() const;  // where master() starts in the padded buffer
  // After the optimizer step: refresh full parameters from every rank's master (all_gather in
  // place) when parameters are full but the optimizer is sharded.
  CommHandle begin_refresh(CommQueue& queue);

  // ---- gradients ----
  void zero_grads();                  // start of a step
  void ensure_grads();                // the full gradient buffer exists (allocated zeroed)
  float* full_grads();                // after ensure_grads()
  // Starts reducing the full gradient: all_reduce (grads full and optimizer full), or
  // reduce_scatter in place into this rank's slice. finish_reduce() then accumulates that
  // slice into the gradient shard and frees the full buffer when gradients are sharded.
  CommHandle begin_reduce(CommQueue& queue);
  void finish_reduce(Kernels& k);
  // This rank's reduced gradient for master(): master_size() elements.
  const float* grad_master();
  // This rank's shard of the reduced gradient (shard().shard elements) in every stage: the
  // range each rank's partial of the global norm covers.
  const float* grad_shard();

 private:
  [[noreturn]] void wrong_state(const char* call) const;
  void bind();

  Device& device_;
  Unit& unit_;
  ShardLayout shard_;
  ZeroPolicy policy_;
  bool params_sharded_;
  ParamState state_;
  Buffer params_;        // full (kParams) or this rank's shard (kParams)
  Buffer gathered_;      // stage 3: the full copy while gathered (kCommBuffers)
  Buffer grads_;         // full (kGrads) or this rank's shard (kGrads)
  Buffer grads_full_;    // sharded gradients: the unit's full gradient while produced (kComm)
  CommHandle pending_gather_;
};

}  // namespace zt
