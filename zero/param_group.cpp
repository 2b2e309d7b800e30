// ParamGroup buffers, transitions and collectives.
#include "zero/param_group.h"

#include <cstring>

#include "runtime/status.h"
#include "zero/param_init.h"

namespace zt {

const char* param_state_name(ParamState s) {
  switch (s) {
    case ParamState::kSharded: return "sharded";
    case ParamState::kGathering: return "gathering";
    case ParamState::kFull: return "full";
  }
  return "?";
}

namespace {
size_t float_bytes(int64_t n) { return static_cast<size_t>(n) * sizeof(float); }
}  // namespace

ParamGroup::ParamGroup(Device& device, Unit& unit, const ShardLayout& shard,
                       const ZeroPolicy& policy, bool persistent, uint64_t seed)
    : device_(device),
      unit_(unit),
      shard_(shard),
      policy_(policy),
      params_sharded_(policy.shard_params && !persistent),
      state_(params_sharded_ ? ParamState::kSharded : ParamState::kFull) {
  const FlatLayout& layout = unit.layout();
  ZT_ASSERT(layout.numel() == shard.numel, "unit {}: layout {} vs shard layout {}", name(),
            layout.numel(), shard.numel);
  if (params_sharded_) {
    // Each element's initial value depends only on (seed, tensor, index): a shard initialised
    // alone equals the same range of the whole buffer.
    params_ = device_.alloc_zeroed(float_bytes(shard.shard), MemCategory::kParams);
    float* p = params_.as<float>();
    for (const auto& e : layout.entries()) {
      const int64_t lo = std::max(shard.begin(), e.offset);
      const int64_t hi = std::min(shard.end(), e.offset + e.numel);
      if (lo < hi)
        init_param_range(e.spec, seed, lo - e.offset, hi - e.offset, p + (lo - shard.begin()));
    }
  } else {
    params_ = device_.alloc_zeroed(float_bytes(shard.padded), MemCategory::kParams);
    init_flat_buffer(layout, seed, params_.as<float>());
  }
  grads_ = device_.alloc_zeroed(
      float_bytes(policy.shard_grads ? shard.shard : shard.padded), MemCategory::kGrads);
  bind();
}

void ParamGroup::wrong_state(const char* call) const {
  throw_internal(fmt::format("unit {} on rank {}: {} called in state {}", name(), shard_.rank,
                             call, param_state_name(state_)));
}

void ParamGroup::bind() {
  float* params = state_ == ParamState::kFull ? full_params() : nullptr;
  float* grads = policy_.shard_grads ? (grads_full_ ? grads_full_.as<float>() : nullptr)
                                     : grads_.as<float>();
  unit_.bind(params, grads);
}

void ParamGroup::begin_gather(CommQueue& queue) {
  if (!params_sharded_ || state_ != ParamState::kSharded) wrong_state("begin_gather");
  gathered_ = device_.alloc(float_bytes(shard_.padded), MemCategory::kCommBuffers);
  state_ = ParamState::kGathering;
  pending_gather_ = queue.all_gather(params_.data(), gathered_.data(), shard_.shard, DType::kF32);
}

void ParamGroup::finish_gather() {
  if (state_ != ParamState::kGathering) wrong_state("finish_gather");
  pending_gather_.wait();
  state_ = ParamState::kFull;
  bind();
}

void ParamGroup::release() {
  if (!params_sharded_ || state_ != ParamState::kFull) wrong_state("release");
  gathered_.reset();
  state_ = ParamState::kSharded;
  bind();
}

void ParamGroup::ensure_full(CommQueue& queue) {
  if (state_ == ParamState::kSharded) begin_gather(queue);
  if (state_ == ParamState::kGathering) finish_gather();
}

float* ParamGroup::full_params() {
  if (state_ != ParamState::kFull) wrong_state("full_params");
  return params_sharded_ ? gathered_.as<float>() : params_.as<float>();
}

int64_t ParamGroup::gathered_bytes() const { return static_cast<int64_t>(gathered_.bytes()); }

float* ParamGroup::master() {
  if (params_sharded_) return params_.as<float>();
  return params_.as<float>() + master_offset();
}

int64_t ParamGroup::master_size() const {
  return policy_.shard_optimizer ? shard_.shard : shard_.padded;
}

int64_t ParamGroup::master_offset() const {
  return policy_.shard_optimizer ? shard_.begin() : 0;
}

CommHandle ParamGroup::begin_refresh(CommQueue& queue) {
  if (params_sharded_ || !policy_.shard_optimizer) return CommHandle();
  float* full = params_.as<float>();
  return queue.all_gather(full + shard_.begin(), full, shard_.shard, DType::kF32);
}

void ParamGroup::zero_grads() { device_.zero(grads_.data(), grads_.bytes()); }

void ParamGroup::ensure_grads() {
  if (policy_.shard_grads && !grads_full_) {
    grads_full_ = device_.alloc_zeroed(float_bytes(shard_.padded), MemCategory::kCommBuffers);
    bind();
  }
}

float* ParamGroup::full_grads() {
  if (!policy_.shard_grads) return grads_.as<float>();
  ZT_ASSERT(grads_full_, "unit {}: no full gradient buffer (ensure_grads first)", name());
  return grads_full_.as<float>();
}

CommHandle ParamGroup::begin_reduce(CommQueue& queue) {
  float* full = full_grads();
  // Without a sharded optimizer every rank needs every reduced element; otherwise only its
  // slice, reduced in place. Both sum in rank order, so the slice's bits are the same.
  if (!policy_.shard_optimizer)
    return queue.all_reduce(full, full, shard_.padded, DType::kF32, ReduceOp::kSum);
  return queue.reduce_scatter(full, full + shard_.begin(), shard_.shard, DType::kF32,
                              ReduceOp::kSum);
}

void ParamGroup::finish_reduce(Kernels& k) {
  if (!policy_.shard_grads) return;
  // Gradient accumulation under sharded gradients: every micro-batch's reduced slice is added
  // to the shard (0 + x == x exactly for the first).
  k.accumulate(grads_.as<float>(), grads_full_.as<float>() + shard_.begin(), shard_.shard);
  grads_full_.reset();
  bind();
}

const float* ParamGroup::grad_master() {
  if (policy_.shard_grads) return grads_.as<float>();
  return grads_.as<float>() + master_offset();
}

const float* ParamGroup::grad_shard() {
  if (policy_.shard_grads) return grads_.as<float>();
  return grads_.as<float>() + shard_.begin();
}

}  // namespace zt
