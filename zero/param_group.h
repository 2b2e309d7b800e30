// ParamGroup: one unit's parameters, gradients and master as ZeRO keeps them, and the state
// machine of its parameters (sharded -> gathering -> full -> sharded). Which buffers exist
// follows the ZeroPolicy (what is sharded) and the Precision (in which dtype):
//   working params  compute dtype, full or this rank's shard (kParams); fp32 training: they are
//                   also the master. Stage 3 with offload_param: the shard lives in the
//                   parameter tier (zero/offloaded_params.h), off the device, and is copied in
//                   for each gather
//   master          mixed precision, or any precision with the optimizer offloaded: fp32, the
//                   optimizer's range (kOptimizer, beside Adam's m, v), in the memory of the
//                   optimizer's device (the host tier when offloaded)
//   gathered        stage 3: the full working params while in use (kCommBuffers)
//   stored grads    grad_accum dtype, full or this rank's shard (kGrads)
//   produced grads  the unit's full gradient in the compute dtype while its backward runs, when
//                   it is not the store itself (sharded gradients: kCommBuffers; mixed
//                   precision: kWorkspace). Mixed precision with the store in the compute dtype
//                   and unsharded produces the first micro-batch's gradient in the store
//                   itself (it is zero then, so 0 + g would be g: the same bits, no buffer).
// The working params and the produced grads are bound into the unit in their own dtypes: the
// kernels read 16-bit parameters as they are (no fp32 copy of a unit exists).
// A frozen unit (Unit::frozen) has working params only: no master, no gradient buffer of any
// kind (its gradient views are bound null, so no kernel computes them) and an empty optimizer
// range; it is sharded, gathered and released like any other.
//   reduce buffer   mixed precision: the full gradient in the communication dtype while reduced
//                   (kCommBuffers)
// Collectives go through the engine's CommQueue; begin_* submits, finish_* waits. Every
// transition checks the state it starts from and throws an error naming the unit, the rank and
// the state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "comm/comm_queue.h"
#include "runtime/device.h"
#include "runtime/model.h"
#include "zero/offloaded_params.h"
#include "zero/precision.h"
#include "zero/zero_policy.h"

namespace zt {

enum class ParamState { kSharded, kGathering, kFull };
const char* param_state_name(ParamState s);

// A range of a unit's padded flat buffer, in elements.
struct FlatRange {
  int64_t begin = 0;
  int64_t size = 0;
  int64_t end() const { return begin + size; }
};

// Writes the fp32 values of the unit's padded flat buffer over [begin, end) into host memory
// at dst (zeros past the unit's numel): the initialiser, or a checkpoint or weights file.
using UnitValues = std::function<void(int64_t begin, int64_t end, float* dst)>;
// Takes the master range's values (host memory, count elements from the range's start + begin)
// where the master lives outside the group (an NVMe-offloaded optimizer: SwappedState).
using MasterSink = std::function<void(int64_t begin, const float* values, int64_t count)>;

// Where a group's state lives off the device (zero_optimization.offload_*).
struct OffloadTiers {
  // offload_optimizer: the device whose memory holds the master (the host tier: there is then
  // a master in every precision but pure 16-bit). Null: the master, if any, is on the device.
  Device* optimizer = nullptr;
  // With `optimizer`: the master lives elsewhere (on NVMe); the group holds none, and assign
  // hands the master range's values to the sink.
  MasterSink master_sink;
  // offload_param: where sharded working parameters live (stage 3; persistent units stay on the
  // device). Null: on the device.
  OffloadedParams* params = nullptr;
};

class ParamGroup {
 public:
  // Elements assign stages at a time under mixed precision (fp32 in, rounded on the device).
  static constexpr int64_t kStagingChunk = int64_t{1} << 20;

  // `persistent`: a small unit kept gathered under stage 3 (stage3_param_persistence_threshold).
  ParamGroup(Device& device, Unit& unit, const ShardLayout& shard, const ZeroPolicy& policy,
             const Precision& precision, bool persistent, uint64_t seed, OffloadTiers tiers = {});

  const ShardLayout& shard() const { return shard_; }
  const std::string& name() const { return unit_.name(); }
  bool frozen() const { return frozen_; }
  // True when the parameters live sharded and are gathered for use (stage 3, not persistent).
  bool params_sharded() const { return params_sharded_; }
  // True when the sharded working parameters live in the parameter tier (offload_param); its
  // slot for them.
  bool params_offloaded() const { return param_tier_ != nullptr; }
  int param_slot() const { return param_slot_; }

  // ---- parameters ----
  ParamState state() const { return state_; }
  void begin_gather(CommQueue& queue);  // kSharded -> kGathering
  void finish_gather();                 // kGathering -> kFull
  void release();                       // kFull -> kSharded (sharded groups only)
  void ensure_full(CommQueue& queue);   // whatever it takes to reach kFull
  // The unit is about to compute: full, its parameters bound into the unit.
  void use(CommQueue& queue);
  // The engine is done with the unit for now: for sharded parameters, the gathered copy is
  // released unless `keep_gathered` (it is used again soon).
  void done(bool keep_gathered = false);
  // The one place a unit's values enter it (initialisation, weights in): the working
  // parameters this rank holds (rounded to the compute dtype) and the master range, from
  // `values`. Not collective; sharded parameters must be kSharded (a gathered copy would go
  // stale).
  void assign(const UnitValues& values);
  float* full_params();  // fp32 training, kFull only; padded buffer
  // kFull: the full working parameters (padded), compute dtype, for reading them.
  const void* full_working_data() { return full_working(); }
  int64_t gathered_bytes() const;  // bytes of the gathered copy now held (0 if none)
  int64_t gather_count() const { return gather_count_; }  // begin_gather calls so far
  // The fp32 range this rank's optimizer updates: shard().shard elements (whole padded buffer
  // when the optimizer is not sharded), in master_device()'s memory. Null under pure 16-bit
  // (no master) and when the master lives outside the group (master_sink).
  float* master();
  // Where master() lives: the offload device, else the group's device.
  Device& master_device() { return offload_ ? *offload_ : device_; }
  int64_t master_size() const;
  int64_t master_offset() const;  // where master() starts in the padded buffer
  // The working parameters over master()'s range, in the compute dtype, on the device. Not
  // for offloaded parameters: the optimizer writes them through begin_working_update.
  void* working_master_range();
  // Offloaded parameters: host memory for the updated working values of master()'s range (the
  // shard, under stage 3), until finish_working_update stores them in the parameter tier.
  void* begin_working_update();
  void finish_working_update();
  // After the optimizer step: refresh full parameters from every rank's master (all_gather in
  // place, compute dtype) when parameters are full but the optimizer is sharded.
  CommHandle begin_refresh(CommQueue& queue);

  // ---- gradients ----
  // Start of a step. Where the kernels write the store itself (not sharded, and fp32 or a
  // compute-dtype store), tensors written whole by their first kernel (ParamSpec) are left as
  // they are and handed out fresh (model.h); everything else is zeroed.
  void zero_grads();
  // The unit's gradient of this micro-batch is complete: a tensor still fresh (its backward
  // never wrote it) is zeroed, and none is fresh any more. Before anything reads the gradient.
  void settle_fresh_grads();
  void ensure_grads();  // the produced-gradient buffer exists (allocated zeroed)
  // The full gradient the unit's backward accumulates into (after ensure_grads()), in the
  // compute dtype (fp32 training: fp32).
  Operand full_grads();
  // The unit's gradient of this micro-batch is complete. Mixed precision frees its produced
  // buffer at once: when it is not reduced now (gradients not sharded, not the last
  // micro-batch), or reduced in place in the store (gradients not sharded and store dtype ==
  // communication dtype), it is added to the store; otherwise (store + it) is rounded into the
  // reduce buffer in the communication dtype. fp32: nothing (the backward accumulated into the
  // store, or into the buffer the reduction reads).
  void finish_grads(Kernels& k, bool reduce);
  // Starts reducing the gradient (after finish_grads(k, true)): all_reduce when the optimizer
  // is not sharded, else reduce_scatter in place into this rank's slice. finish_reduce() then
  // puts the slice into the store: added to the shard when gradients are sharded (accumulation
  // across micro-batches), else written over it.
  CommHandle begin_reduce(CommQueue& queue);
  void finish_reduce(Kernels& k);
  DType grad_dtype() const { return grad_dtype_; }
  // This rank's reduced gradient for master(): master_size() elements of grad_dtype().
  const void* grad_master() const;
  // This rank's shard of the reduced gradient (shard().shard elements of grad_dtype()) in every
  // stage: the range each rank's partial of the global norm covers.
  const void* grad_shard() const;

  // ---- inspection (tests): the bytes of the working params and the master this rank holds
  // (working: into host memory, wherever they live).
  size_t working_bytes() const { return param_bytes(working_range_.size); }
  void read_working(void* dst);
  std::span<const std::byte> master_bytes() const;

 private:
  [[noreturn]] void wrong_state(const char* call) const;
  void bind();
  void* full_working();  // kFull: the full working parameters, compute dtype, padded
  // Where buffer `range` starts in the buffer that holds `within` (both padded-buffer ranges).
  static int64_t offset_in(const FlatRange& range, const FlatRange& within);
  size_t param_bytes(int64_t n) const { return static_cast<size_t>(n) * dtype_size(compute_); }
  size_t grad_bytes(int64_t n) const { return static_cast<size_t>(n) * dtype_size(grad_dtype_); }
  // This micro-batch's backward writes the store itself, not grads_full_.
  bool kernels_write_store() const { return !separate_grads_ || produce_in_store_; }

  Device& device_;
  Device* offload_;              // the master's device when offloaded, else null
  OffloadedParams* param_tier_;  // where the sharded working params live, or null
  int param_slot_ = -1;
  MasterSink master_sink_;  // where the master lives when not in master_
  Unit& unit_;
  bool frozen_;
  ShardLayout shard_;
  ZeroPolicy policy_;
  Precision precision_;
  DType compute_;     // working params' dtype
  DType grad_dtype_;  // stored gradients' dtype
  bool params_sharded_;
  bool separate_grads_;            // the backward writes a buffer other than the store
  bool produce_in_store_ = false;  // this micro-batch's gradient is produced in the store
  // Computed once: what each buffer covers of the padded flat buffer.
  FlatRange working_range_;  // params_: this rank's shard when sharded, else everything
  FlatRange master_range_;   // the optimizer's range: the shard when the optimizer is sharded
  FlatRange grads_range_;    // grads_: the shard when gradients are sharded
  FlatRange shard_range_;    // this rank's shard
  ParamState state_;
  Buffer params_;      // working params: full or this rank's shard (empty when offloaded)
  Buffer master_;      // mixed precision with a master, or offloaded (master_device())
  Buffer gathered_;    // stage 3
  Buffer grads_;       // stored gradients: full or this rank's shard
  Buffer grads_full_;  // produced gradients (separate_grads_)
  Buffer reduce_buf_;  // mixed precision: the gradient in the communication dtype
  CommHandle pending_gather_;
  int64_t gather_count_ = 0;
};

}  // namespace zt
