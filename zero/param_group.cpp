// ParamGroup buffers, transitions and collectives.
#include "zero/param_group.h"

#include <algorithm>
#include <cstring>
#include <vector>

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

template <class T>
T* offset_by(T* base, int64_t elements, DType dtype) {
  using Byte = std::conditional_t<std::is_const_v<T>, const std::byte, std::byte>;
  return reinterpret_cast<Byte*>(base) + static_cast<size_t>(elements) * dtype_size(dtype);
}

// Elements [begin, end) of the unit's padded flat buffer at its initial values into dst (which
// is zeroed first: padding between and after tensors is 0). Each element's value depends only
// on (seed, tensor, index), so any range initialised alone equals that range of the whole.
void init_flat_range(const FlatLayout& layout, uint64_t seed, int64_t begin, int64_t end,
                     float* dst) {
  std::fill(dst, dst + (end - begin), 0.0f);
  for (const auto& e : layout.entries()) {
    const int64_t lo = std::max(begin, e.offset);
    const int64_t hi = std::min(end, e.offset + e.numel);
    if (lo < hi) init_param_range(e.spec, seed, lo - e.offset, hi - e.offset, dst + (lo - begin));
  }
}

}  // namespace

ParamGroup::ParamGroup(Device& device, Unit& unit, const ShardLayout& shard,
                       const ZeroPolicy& policy, const Precision& precision, bool persistent,
                       uint64_t seed, OffloadTiers tiers)
    : device_(device), offload_(tiers.optimizer), param_tier_(nullptr),
      master_sink_(std::move(tiers.master_sink)), unit_(unit), frozen_(unit.frozen()),
      shard_(shard), policy_(policy), precision_(precision), compute_(precision.compute),
      grad_dtype_(precision.mixed() ? precision.grad_accum : DType::kF32),
      params_sharded_(policy.shard_params && !persistent),
      separate_grads_(policy.shard_grads || precision.mixed()),
      state_(params_sharded_ ? ParamState::kSharded : ParamState::kFull) {
  const FlatLayout& layout = unit.layout();
  ZT_ASSERT(layout.numel() == shard.numel, "unit {}: layout {} vs shard layout {}", name(),
            layout.numel(), shard.numel);
  const FlatRange whole{0, shard.padded};
  shard_range_ = FlatRange{shard.begin(), shard.shard};
  working_range_ = params_sharded_ ? shard_range_ : whole;
  master_range_ = policy.shard_optimizer ? shard_range_ : whole;
  grads_range_ = policy.shard_grads ? shard_range_ : whole;
  if (frozen_) {  // nothing trains: an empty optimizer range, no gradient store
    master_range_ = FlatRange{working_range_.begin, 0};
    grads_range_ = FlatRange{working_range_.begin, 0};
    master_sink_ = nullptr;
  }
  ZT_ASSERT(!offload_ || !precision.mixed() || precision.has_master(),
            "unit {}: an offloaded optimizer needs an fp32 master (not pure 16-bit)", name());
  ZT_ASSERT(!master_sink_ || offload_, "unit {}: a master sink without an offload device", name());
  ZT_ASSERT(!tiers.params || offload_,
            "unit {}: offloaded parameters need the optimizer offloaded (it writes them)", name());
  if (params_sharded_ && tiers.params) {
    param_tier_ = tiers.params;
    param_slot_ = param_tier_->add(name(), param_bytes(working_range_.size));
  } else {
    params_ = device_.alloc(param_bytes(working_range_.size), MemCategory::kParams);
  }
  if ((precision.has_master() || offload_) && !master_sink_ && !frozen_)
    master_ = master_device().alloc(float_bytes(master_range_.size), MemCategory::kOptimizer);
  grads_ =
      device_.alloc_zeroed(grad_bytes(grads_range_.size), MemCategory::kGrads);  // frozen: none
  // Each element's initial value depends only on (seed, tensor, index): any range initialised
  // alone equals that range of the whole.
  assign([&](int64_t begin, int64_t end, float* dst) {
    init_flat_range(layout, seed, begin, end, dst);
  });
  bind();
}

int64_t ParamGroup::offset_in(const FlatRange& range, const FlatRange& within) {
  ZT_ASSERT(range.begin >= within.begin && range.end() <= within.end(),
            "range [{}, {}) outside [{}, {})", range.begin, range.end(), within.begin,
            within.end());
  return range.begin - within.begin;
}

void ParamGroup::assign(const UnitValues& values) {
  if (params_sharded_ && state_ != ParamState::kSharded) wrong_state("assign");
  // The master's range lies within the working range (stage 3 shards both alike), so one
  // host range feeds both. Values are made on the host and copied in (the device may be a GPU).
  std::vector<float> host(static_cast<size_t>(working_range_.size));
  values(working_range_.begin, working_range_.end(), host.data());
  const size_t bytes = float_bytes(working_range_.size);
  const float* master_values = host.data() + offset_in(master_range_, working_range_);
  if (master_)
    master_device().copy_from_host(master_.data(), master_values, float_bytes(master_range_.size));
  else if (master_sink_ && master_range_.size > 0)
    master_sink_(0, master_values, master_range_.size);
  void* offloaded = param_tier_ ? param_tier_->begin_write(param_slot_) : nullptr;
  if (!precision_.mixed()) {  // the master too, unless offloaded
    if (offloaded)
      std::memcpy(offloaded, host.data(), bytes);
    else
      device_.copy_from_host(params_.data(), host.data(), bytes);
  } else {
    // Rounded into the working dtype by the device's kernels through bounded staging chunks
    // (fp32 in, and the working dtype out when the parameters live in the parameter tier).
    const int64_t chunk = std::min<int64_t>(working_range_.size, kStagingChunk);
    Buffer staged = device_.alloc(float_bytes(chunk), MemCategory::kWorkspace);
    Buffer rounded;
    if (offloaded) rounded = device_.alloc(param_bytes(chunk), MemCategory::kWorkspace);
    for (int64_t begin = 0; begin < working_range_.size; begin += chunk) {
      const int64_t count = std::min(chunk, working_range_.size - begin);
      device_.copy_from_host(staged.data(), host.data() + begin, float_bytes(count));
      void* out = offloaded ? rounded.data() : offset_by(params_.data(), begin, compute_);
      device_.kernels().cast(out, compute_, staged.data(), DType::kF32, count);
      if (offloaded)
        device_.copy_to_host(offset_by(offloaded, begin, compute_), out, param_bytes(count));
    }
  }
  if (offloaded) param_tier_->finish_write(param_slot_);
}

void ParamGroup::wrong_state(const char* call) const {
  throw_internal(fmt::format("unit {} on rank {}: {} called in state {}", name(), shard_.rank, call,
                             param_state_name(state_)));
}

void ParamGroup::bind() {
  const Operand params =
      state_ == ParamState::kFull ? Operand(full_working(), compute_) : Operand();
  Operand grads(grads_.data(), grad_dtype_);
  if (!kernels_write_store())
    grads = grads_full_ ? Operand(grads_full_.data(), compute_) : Operand();
  if (frozen_) grads = Operand();
  unit_.bind(params, grads);
}

void ParamGroup::begin_gather(CommQueue& queue) {
  if (!params_sharded_ || state_ != ParamState::kSharded) wrong_state("begin_gather");
  gathered_ = device_.alloc(param_bytes(shard_.padded), MemCategory::kCommBuffers);
  state_ = ParamState::kGathering;
  ++gather_count_;
  const void* shard = params_.data();
  if (param_tier_) {
    // The shard comes in from the parameter tier to its place in the gathered buffer, which is
    // then gathered in place.
    void* own = offset_by(gathered_.data(), shard_.begin(), compute_);
    device_.copy_from_host(own, param_tier_->fetch(param_slot_), param_bytes(shard_.shard));
    param_tier_->release(param_slot_);
    shard = own;
  }
  pending_gather_ = queue.all_gather(shard, gathered_.data(), shard_.shard, compute_, name());
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

void ParamGroup::use(CommQueue& queue) { ensure_full(queue); }

void ParamGroup::done(bool keep_gathered) {
  if (params_sharded_ && state_ == ParamState::kFull && !keep_gathered) release();
}

void* ParamGroup::full_working() {
  if (state_ != ParamState::kFull) wrong_state("full_working");
  return params_sharded_ ? gathered_.data() : params_.data();
}

float* ParamGroup::full_params() {
  ZT_ASSERT(!precision_.mixed(), "unit {}: fp32 parameters asked of a {} group", name(),
            dtype_name(compute_));
  if (state_ != ParamState::kFull) wrong_state("full_params");
  return static_cast<float*>(full_working());
}

int64_t ParamGroup::gathered_bytes() const { return static_cast<int64_t>(gathered_.bytes()); }

float* ParamGroup::master() {
  if (master_) return master_.as<float>();
  if (frozen_) return nullptr;
  if (precision_.mixed() || master_sink_) return nullptr;  // pure 16-bit, or on NVMe
  return static_cast<float*>(working_master_range());  // fp32: the working params are the master
}

int64_t ParamGroup::master_size() const { return master_range_.size; }

int64_t ParamGroup::master_offset() const { return master_range_.begin; }

void* ParamGroup::working_master_range() {
  ZT_ASSERT(!param_tier_, "unit {}: working parameters asked on the device, but they are offloaded",
            name());
  return offset_by(params_.data(), offset_in(master_range_, working_range_), compute_);
}

void* ParamGroup::begin_working_update() {
  ZT_ASSERT(param_tier_, "unit {}: begin_working_update without offloaded parameters", name());
  // Stage 3 shards the master and the parameters alike: the master's range is the shard.
  ZT_ASSERT(
      offset_in(master_range_, working_range_) == 0 && master_range_.size == working_range_.size,
      "unit {}: the master range is not the parameter shard", name());
  return param_tier_->begin_write(param_slot_);
}

void ParamGroup::finish_working_update() { param_tier_->finish_write(param_slot_); }

CommHandle ParamGroup::begin_refresh(CommQueue& queue) {
  if (params_sharded_ || !policy_.shard_optimizer || frozen_) return CommHandle();
  void* full = params_.data();
  return queue.all_gather(offset_by(full, shard_.begin(), compute_), full, shard_.shard, compute_,
                          name());
}

void ParamGroup::zero_grads() {
  ZT_ASSERT(!frozen_, "unit {} is frozen: it has no gradient", name());
  // The store is zero: a full store in the compute dtype takes the first micro-batch's gradient
  // directly, bitwise what producing it apart and adding it to zero would store.
  produce_in_store_ = precision_.mixed() && !policy_.shard_grads && grad_dtype_ == compute_;
  if (!kernels_write_store()) {
    device_.zero(grads_.data(), grads_.bytes());
  } else {
    // The backward writes the store: the ranges between tensors written whole are zeroed (the
    // padding included), those tensors are handed out fresh.
    ZT_ASSERT(grads_range_.size == shard_.padded, "unit {}: a partial store written whole", name());
    int64_t zero_from = 0;
    auto zero_to = [&](int64_t end) {
      if (end > zero_from)
        device_.zero(offset_by(grads_.data(), zero_from, grad_dtype_), grad_bytes(end - zero_from));
    };
    for (const FlatLayout::Entry& e : unit_.layout().entries()) {
      if (!e.spec.grad_written_whole) continue;
      zero_to(e.offset);
      zero_from = e.offset + e.numel;
    }
    zero_to(grads_range_.size);
    unit_.start_fresh_grads();
  }
  bind();
}

void ParamGroup::settle_fresh_grads() {
  const auto entries = unit_.layout().entries();
  for (size_t i = 0; i < entries.size(); ++i)
    if (unit_.grad_fresh(i))
      device_.zero(offset_by(grads_.data(), entries[i].offset, grad_dtype_),
                   grad_bytes(entries[i].numel));
  unit_.end_fresh_grads();
}

void ParamGroup::ensure_grads() {
  ZT_ASSERT(!frozen_, "unit {} is frozen: it has no gradient", name());
  if (!kernels_write_store() && !grads_full_) {
    grads_full_ = device_.alloc_zeroed(param_bytes(shard_.padded), precision_.mixed()
                                                                       ? MemCategory::kWorkspace
                                                                       : MemCategory::kCommBuffers);
    bind();
  }
}

Operand ParamGroup::full_grads() {
  if (kernels_write_store()) return Operand(grads_.data(), grad_dtype_);
  ZT_ASSERT(grads_full_, "unit {}: no full gradient buffer (ensure_grads first)", name());
  return Operand(grads_full_.data(), compute_);
}

void ParamGroup::finish_grads(Kernels& k, bool reduce) {
  if (!precision_.mixed()) return;
  const bool into_store = !policy_.shard_grads && (!reduce || precision_.comm == grad_dtype_);
  if (produce_in_store_) {
    // Already in the store; a reduction in another dtype reads it from a rounded copy.
    produce_in_store_ = false;
    if (reduce && !into_store) {
      reduce_buf_ = device_.alloc(static_cast<size_t>(shard_.padded) * dtype_size(precision_.comm),
                                  MemCategory::kCommBuffers);
      k.cast(reduce_buf_.data(), precision_.comm, grads_.data(), grad_dtype_, shard_.padded);
    }
    bind();
    return;
  }
  const Operand produced = full_grads();
  if (into_store) {
    k.add(grads_.data(), grad_dtype_, grads_.data(), grad_dtype_, produced.data, produced.dtype,
          shard_.padded);
  } else {
    // One rounding into the communication dtype of (what earlier micro-batches stored + this
    // one's gradient); with sharded gradients the store holds reduced slices, added afterwards.
    reduce_buf_ = device_.alloc(static_cast<size_t>(shard_.padded) * dtype_size(precision_.comm),
                                MemCategory::kCommBuffers);
    k.add(reduce_buf_.data(), precision_.comm, policy_.shard_grads ? nullptr : grads_.data(),
          grad_dtype_, produced.data, produced.dtype, shard_.padded);
  }
  grads_full_.reset();
  bind();
}

CommHandle ParamGroup::begin_reduce(CommQueue& queue) {
  // Without a sharded optimizer every rank needs every reduced element; otherwise only its
  // slice, reduced in place. Both sum in rank order, so the slice's bits are the same.
  DType dtype = DType::kF32;
  void* full = nullptr;
  if (!precision_.mixed()) {
    full = full_grads().data;
  } else if (reduce_buf_) {
    dtype = precision_.comm;
    full = reduce_buf_.data();
  } else {  // reduced in place in the (full) store
    dtype = grad_dtype_;
    full = grads_.data();
  }
  if (!policy_.shard_optimizer)
    return queue.all_reduce(full, full, shard_.padded, dtype, ReduceOp::kSum, name());
  return queue.reduce_scatter(full, offset_by(full, shard_.begin(), dtype), shard_.shard, dtype,
                              ReduceOp::kSum, name());
}

void ParamGroup::finish_reduce(Kernels& k) {
  if (!precision_.mixed()) {
    if (!policy_.shard_grads) return;
    // Gradient accumulation under sharded gradients: every micro-batch's reduced slice is added
    // to the shard (0 + x == x exactly for the first).
    k.accumulate(grads_.as<float>(), grads_full_.as<float>() + shard_.begin(), shard_.shard);
    grads_full_.reset();
    bind();
    return;
  }
  if (!reduce_buf_) return;  // reduced in place in the store
  const DType comm = precision_.comm;
  const void* slice = offset_by(static_cast<const void*>(reduce_buf_.data()), shard_.begin(), comm);
  if (policy_.shard_grads) {
    k.add(grads_.data(), grad_dtype_, grads_.data(), grad_dtype_, slice, comm, shard_.shard);
  } else if (policy_.shard_optimizer) {
    k.cast(offset_by(grads_.data(), shard_.begin(), grad_dtype_), grad_dtype_, slice, comm,
           shard_.shard);
  } else {
    k.cast(grads_.data(), grad_dtype_, reduce_buf_.data(), comm, shard_.padded);
  }
  reduce_buf_.reset();
}

const void* ParamGroup::grad_master() const {
  return offset_by(static_cast<const void*>(grads_.data()), offset_in(master_range_, grads_range_),
                   grad_dtype_);
}

const void* ParamGroup::grad_shard() const {
  return offset_by(static_cast<const void*>(grads_.data()), offset_in(shard_range_, grads_range_),
                   grad_dtype_);
}

void ParamGroup::read_working(void* dst) {
  if (param_tier_)
    param_tier_->read(param_slot_, dst);
  else
    device_.copy_to_host(dst, params_.data(), params_.bytes());
}

std::span<const std::byte> ParamGroup::master_bytes() const {
  return {master_.as<const std::byte>(), master_.bytes()};
}

}  // namespace zt
