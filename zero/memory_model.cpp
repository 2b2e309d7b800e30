// MemoryModel: model states per tier and category, the activation and device-peak replay, and
// the communication count.
#include "zero/memory_model.h"

#include <algorithm>
#include <memory>

#include "runtime/flat_layout.h"
#include "runtime/status.h"
#include "zero/engine.h"
#include "zero/swapped_state.h"
#include "zero/unit_residency.h"

namespace zt {

const char* tier_name(Tier t) {
  switch (t) {
    case Tier::kDevice: return "device";
    case Tier::kHost: return "host";
    case Tier::kNvme: return "nvme";
  }
  return "?";
}

int64_t TierBytes::model_states(Tier t) const {
  return get(t, MemCategory::kParams) + get(t, MemCategory::kGrads) +
         get(t, MemCategory::kOptimizer);
}

int64_t TierBytes::total(Tier t) const {
  int64_t sum = 0;
  for (int64_t b : bytes[static_cast<size_t>(t)]) sum += b;
  return sum;
}

StateOptions state_options(const EngineOptions& engine, OffloadDevice offload, int world,
                           OffloadDevice offload_param, int param_buffers) {
  StateOptions o;
  o.policy = engine.policy;
  o.precision = engine.precision;
  o.optimizer = engine.optimizer;
  o.persistence_threshold = engine.persistence_threshold;
  o.offload_optimizer = offload;
  o.offload_param = offload_param;
  o.param_buffers = param_buffers;
  o.world = world;
  return o;
}

std::string state_options_problem(const StateOptions& o) {
  // The planner describes rows by tier names, where the parameters' tier can be named alone
  // (an OffloadPlan, the engine's, cannot hold it).
  if (o.offload_param != OffloadDevice::kNone && o.offload_optimizer == OffloadDevice::kNone)
    return "offload_param needs offload_optimizer";
  switch (offload_problem(o.offload_optimizer != OffloadDevice::kNone,
                          o.offload_param != OffloadDevice::kNone, o.policy, o.precision)) {
    case OffloadProblem::kNone: return {};
    case OffloadProblem::kOptimizerNeedsStage1: return "offload_optimizer needs stage >= 1";
    case OffloadProblem::kOptimizerNeedsMaster:
      return "offload_optimizer needs an fp32 master (not pure 16-bit)";
    case OffloadProblem::kParamsNeedStage3: return "offload_param needs stage 3";
  }
  return {};
}

std::vector<UnitSize> unit_sizes(Model& model) {
  std::vector<UnitSize> out;
  for (Unit* u : model.units()) out.push_back(UnitSize{u->layout().numel(), u->frozen(), false});
  auto layers = model.layers();
  for (size_t l = first_backward_layer(model); l < layers.size(); ++l)
    for (int u : layers[l]->unit_indices()) out[static_cast<size_t>(u)].backward = true;
  return out;
}

std::vector<UnitSize> synthetic_unit_sizes(int64_t params, int units) {
  ZT_ASSERT(params > 0 && units > 0, "params {} units {}", params, units);
  std::vector<UnitSize> out;
  for (int u = 0; u < units; ++u) {
    // Parts differ by at most one element; each is one tensor in its own flat buffer.
    const int64_t n = params / units + (u < params % units ? 1 : 0);
    ParamSpec spec;
    spec.name = "p" + std::to_string(u);
    spec.shape = {n};
    out.push_back(UnitSize{FlatLayout({spec}).numel(), false});
  }
  return out;
}

namespace {

int64_t bytes_of(int64_t elements, DType dtype) {
  return elements * static_cast<int64_t>(dtype_size(dtype));
}

// One unit's buffers on this rank, as ParamGroup's constructor and the engine's Optimizer
// allocate them (zero/param_group.h lists the buffers); a frozen unit's working params only.
void add_unit_state_bytes(const ShardLayout& shard, bool frozen, const StateOptions& o,
                          int state_tensors, TierBytes& out) {
  const Precision& p = o.precision;
  const bool persistent = shard.numel <= o.persistence_threshold;
  const bool params_sharded = o.policy.shard_params && !persistent;
  const int64_t working = params_sharded ? shard.shard : shard.padded;
  const int64_t master = o.policy.shard_optimizer ? shard.shard : shard.padded;
  const int64_t grads = o.policy.shard_grads ? shard.shard : shard.padded;
  const DType grad_dtype = p.mixed() ? p.grad_accum : DType::kF32;

  // offload_param moves a sharded unit's working-parameter shard off the device (its pool of
  // NVMe buffers is added once, in model_state_bytes).
  const Tier params_tier = !params_sharded || o.offload_param == OffloadDevice::kNone
                               ? Tier::kDevice
                           : o.offload_param == OffloadDevice::kCpu ? Tier::kHost
                                                                    : Tier::kNvme;
  out.at(params_tier, MemCategory::kParams) += bytes_of(working, p.compute);
  if (frozen) return;  // an empty optimizer range: no gradient store, master or state
  out.at(Tier::kDevice, MemCategory::kGrads) += bytes_of(grads, grad_dtype);
  if (o.offload_optimizer == OffloadDevice::kCpu) {  // the pipelined step's per-unit buffers
    out.at(Tier::kHost, MemCategory::kGrads) += bytes_of(master, grad_dtype);
    if (p.compute != DType::kF32)
      out.at(Tier::kHost, MemCategory::kWorkspace) += bytes_of(master, p.compute);
  }

  // The fp32 state per master element: the optimizer's tensors, and a master of its own when
  // mixed precision has one or the optimizer is offloaded (fp32 training otherwise updates the
  // working params in place: they are the master).
  switch (o.offload_optimizer) {
    case OffloadDevice::kNone: {
      const int copies = state_tensors + (p.has_master() ? 1 : 0);
      out.at(Tier::kDevice, MemCategory::kOptimizer) += bytes_of(master * copies, DType::kF32);
      break;
    }
    case OffloadDevice::kCpu:
      out.at(Tier::kHost, MemCategory::kOptimizer) +=
          bytes_of(master * (state_tensors + 1), DType::kF32);
      break;
    case OffloadDevice::kNvme:  // SwappedState::bytes(): the master and the state, every precision
      out.at(Tier::kNvme, MemCategory::kOptimizer) +=
          bytes_of(master * (state_tensors + 1), DType::kF32);
      break;
  }
}

}  // namespace

TierBytes model_state_bytes(std::span<const UnitSize> units, const StateOptions& o) {
  o.policy.validate();
  if (const std::string problem = state_options_problem(o); !problem.empty())
    throw_input("the engine refuses this configuration: " + problem);
  const int state_tensors = static_cast<int>(optimizer_state_names(o.optimizer).size());
  TierBytes out;
  // The largest master range sizes the NVMe step's staging (the engine's and SwappedState's:
  // a frozen unit's is empty); the largest sharded unit, offload_param's NVMe buffers.
  int64_t largest_master = 0, largest_param_shard = 0;
  for (const UnitSize& unit : units) {
    const ShardLayout shard(unit.numel, o.world, 0);
    add_unit_state_bytes(shard, unit.frozen, o, state_tensors, out);
    if (!unit.frozen)
      largest_master =
          std::max(largest_master, o.policy.shard_optimizer ? shard.shard : shard.padded);
    if (unit.numel > o.persistence_threshold)
      largest_param_shard = std::max(largest_param_shard, shard.shard);
  }
  if (o.offload_param == OffloadDevice::kNvme) {  // OffloadedParams' pool, 4 KiB aligned
    const int64_t bytes = bytes_of(largest_param_shard, o.precision.compute);
    out.at(Tier::kHost, MemCategory::kParams) +=
        int64_t{o.param_buffers} * ((bytes + 4095) / 4096 * 4096 + 4096);
  }
  if (o.offload_optimizer == OffloadDevice::kNvme) {
    // The engine's host staging of the streamed NVMe step (offload_grads_, offload_working_),
    // one chunk; SwappedState::kChunk is the engine's kOffloadChunk (a static_assert there).
    const Precision& p = o.precision;
    const int64_t chunk = std::min(largest_master, SwappedState::kChunk);
    out.at(Tier::kHost, MemCategory::kGrads) +=
        bytes_of(chunk, p.mixed() ? p.grad_accum : DType::kF32);
    out.at(Tier::kHost, MemCategory::kWorkspace) += bytes_of(chunk, p.compute);
    // SwappedState's two staging sets
    out.at(Tier::kHost, MemCategory::kWorkspace) +=
        2 * (state_tensors + 1) * bytes_of(chunk, DType::kF32);
  }
  return out;
}

namespace {

// Current and peak bytes of the replay, per category and in total (MemoryTracker's arithmetic).
struct Tally {
  std::array<int64_t, kNumMemCategories> current{}, peak{};
  int64_t total = 0, peak_total = 0;
  void alloc(MemCategory c, int64_t bytes) {
    const auto i = static_cast<size_t>(c);
    current[i] += bytes;
    peak[i] = std::max(peak[i], current[i]);
    total += bytes;
    peak_total = std::max(peak_total, total);
  }
  void free(MemCategory c, int64_t bytes) {
    current[static_cast<size_t>(c)] -= bytes;
    total -= bytes;
  }
};

constexpr MemCategory kActs = MemCategory::kActivations;

// One layer's ActivationStore in the replay: the bytes each saved buffer holds.
struct StoreReplay {
  const LayerActivations* declared = nullptr;
  std::vector<int64_t> held;

  // forward's allocations: activations in the working dtype (act_bytes each), statistics fp32
  void fill(Tally& t, int64_t act_bytes) {
    for (const ActivationBuffer& b : declared->saved) {
      held.push_back((b.stats ? 4 : act_bytes) * b.elements);
      t.alloc(kActs, held.back());
    }
  }
  void release(Tally& t) {
    for (int64_t h : held) t.free(kActs, h);
    held.clear();
  }
};

// The units' transient device buffers through one training pass, as the engine's use_unit /
// end_use, ParamGroup's gradient buffers and GradientReducer allocate and free them (zero/
// engine.cpp, zero/param_group.cpp, zero/gradient_reducer.cpp).
class UnitReplay {
 public:
  UnitReplay(Model& model, const StepReplayOptions& o, Tally& t) : o_(o), t_(t) {
    const StateOptions& s = o.states;
    const Precision& p = s.precision;
    mixed_ = p.mixed();
    compute_ = static_cast<int64_t>(dtype_size(p.compute));
    comm_ = static_cast<int64_t>(dtype_size(p.comm));
    const DType grad_dtype = mixed_ ? p.grad_accum : DType::kF32;
    std::vector<int64_t> gathered;
    for (Unit* unit : model.units()) {
      const int64_t numel = unit->layout().numel();
      Group g;
      g.padded = ShardLayout(numel, s.world, 0).padded;
      g.sharded = s.policy.shard_params && numel > s.persistence_threshold;
      g.frozen = unit->frozen();
      g.state = g.sharded ? ParamState::kSharded : ParamState::kFull;
      g.separate_grads = s.policy.shard_grads || mixed_;
      // zero_grads: the first micro-batch's gradient goes into a zero store of the compute dtype
      g.produce_in_store = mixed_ && !s.policy.shard_grads && grad_dtype == p.compute;
      g.into_store = !s.policy.shard_grads && p.comm == grad_dtype;  // finish_grads(k, true)
      groups_.push_back(g);
      gathered.push_back(g.sharded ? g.padded : 0);
    }
    auto layers = model.layers();
    schedule_ = std::make_unique<UnitSchedule>(layers, PassMode::kTraining, gathered, o.gather,
                                               first_backward_layer(model));
    last_backward_layer_.assign(groups_.size(), 0);
    for (size_t l = layers.size(); l-- > 0;)
      for (int u : layers[l]->unit_indices()) last_backward_layer_[u] = l;
  }

  const UnitSchedule& schedule() const { return *schedule_; }
  bool completes_unit(size_t l, int u) const {
    return !groups_[u].frozen && last_backward_layer_[u] == l;
  }

  void use_units(UnitSchedule::Steps steps) {
    for (size_t at = steps.begin; at < steps.end; ++at)
      residency_before_step(*schedule_, at, residency_);
  }
  void end_use(UnitSchedule::Steps steps) {
    for (size_t at = steps.begin; at < steps.end; ++at)
      residency_after_step(*schedule_, at, residency_);
  }
  void ensure_grads(UnitSchedule::Steps steps) {
    for (size_t at = steps.begin; at < steps.end; ++at) ensure_grads((*schedule_)[at].unit);
  }
  void ensure_grads(int u) {
    Group& g = groups_[u];
    if (g.frozen || !g.separate_grads || g.produce_in_store || g.grads_full > 0) return;
    g.grads_full = g.padded * compute_;
    t_.alloc(grads_full_category(), g.grads_full);
  }
  // ParamGroup::finish_grads(k, true), then GradientReducer::add.
  void gradient_complete(int u) {
    Group& g = groups_[u];
    if (mixed_) {
      if (g.produce_in_store) {
        g.produce_in_store = false;
        if (!g.into_store) alloc_reduce_buffer(g);
      } else {
        if (!g.into_store) alloc_reduce_buffer(g);
        t_.free(grads_full_category(), g.grads_full);
        g.grads_full = 0;
      }
    }
    bucket_.push_back(u);
    bucket_elements_ += g.padded;
    if (bucket_elements_ >= o_.reduce_bucket_elements) launch_bucket();
  }
  void finish_reductions() {
    if (!bucket_.empty()) launch_bucket();
    finish_in_flight();
  }

 private:
  struct Group {
    int64_t padded = 0;
    bool sharded = false, separate_grads = false, produce_in_store = false, into_store = false,
         frozen = false;
    ParamState state = ParamState::kSharded;
    int64_t gathered = 0, grads_full = 0, reduce_buffer = 0;  // bytes held now
  };
  // The replayed groups as stage 3's residency decisions see them (zero/unit_residency.h),
  // each transition counting the gathered buffer's bytes as ParamGroup allocates and frees it.
  class Residency final : public UnitResidency {
   public:
    explicit Residency(UnitReplay& r) : r_(r) {}
    ParamState state(int u) const override { return group(u).state; }
    bool sharded(int u) const override { return group(u).sharded; }
    int64_t live_elements() const override { return r_.live(); }
    void release(int u) override { r_.release(group(u)); }
    void begin_gather(int u) override {
      r_.gather(group(u));
      group(u).state = ParamState::kGathering;
    }
    void use(int u) override {
      if (group(u).state == ParamState::kSharded) r_.gather(group(u));
      group(u).state = ParamState::kFull;
    }
    void done(int u, bool keep_gathered) override {
      if (group(u).sharded && group(u).state == ParamState::kFull && !keep_gathered)
        r_.release(group(u));
    }

   private:
    Group& group(int u) const { return r_.groups_[static_cast<size_t>(u)]; }
    UnitReplay& r_;
  };

  MemCategory grads_full_category() const {
    return mixed_ ? MemCategory::kWorkspace : MemCategory::kCommBuffers;
  }
  int64_t live() const {
    int64_t bytes = 0;
    for (const Group& g : groups_) bytes += g.gathered;
    return bytes / compute_;
  }
  void gather(Group& g) {
    g.gathered = g.padded * compute_;
    t_.alloc(MemCategory::kCommBuffers, g.gathered);
  }
  void release(Group& g) {
    t_.free(MemCategory::kCommBuffers, g.gathered);
    g.gathered = 0;
    g.state = ParamState::kSharded;
  }
  void alloc_reduce_buffer(Group& g) {
    g.reduce_buffer = g.padded * comm_;
    t_.alloc(MemCategory::kCommBuffers, g.reduce_buffer);
  }
  void launch_bucket() {
    finish_in_flight();
    for (int u : bucket_) {
      in_flight_.push_back(u);
      if (!o_.overlap_comm) finish_in_flight();
    }
    bucket_.clear();
    bucket_elements_ = 0;
  }
  // ParamGroup::finish_reduce for each reduction in flight.
  void finish_in_flight() {
    for (int u : in_flight_) {
      Group& g = groups_[u];
      if (!mixed_ && o_.states.policy.shard_grads) {
        t_.free(MemCategory::kCommBuffers, g.grads_full);
        g.grads_full = 0;
      }
      if (mixed_) {
        t_.free(MemCategory::kCommBuffers, g.reduce_buffer);
        g.reduce_buffer = 0;
      }
    }
    in_flight_.clear();
  }

  const StepReplayOptions& o_;
  Tally& t_;
  bool mixed_ = false;
  int64_t compute_ = 4, comm_ = 4;
  std::vector<Group> groups_;
  std::unique_ptr<UnitSchedule> schedule_;
  Residency residency_{*this};
  std::vector<size_t> last_backward_layer_;
  std::vector<int> bucket_, in_flight_;
  int64_t bucket_elements_ = 0;
};

// The engine's run_pass in training mode over the layers' declared activations, with the
// units' buffers when `units` is given (it counts into the same tally). The pass's own buffers
// are freed at its end. False when a layer declares no activations.
bool replay_pass(Model& model, const ActivationOptions& o, Tally& t, UnitReplay* units) {
  auto layers = model.layers();
  const size_t L = layers.size();
  ZT_ASSERT(o.checkpoint.empty() || o.checkpoint.size() == L, "checkpoint mask has {} of {} layers",
            o.checkpoint.size(), L);
  std::vector<LayerActivations> declared;
  for (Layer* layer : layers) {
    std::optional<LayerActivations> a = layer->activations(o.B, o.T, true);
    if (!a) return false;
    if (o.attention)
      for (ActivationBuffer& b : a->saved)
        if (b.attention) {
          const AttentionRecord record = o.attention(*b.attention, o.B, o.T, o.batch_positions);
          b.elements = record.floats;
          b.stats = !record.packable;
        }
    declared.push_back(std::move(*a));
  }
  const auto checkpointed = [&](size_t l) { return !o.checkpoint.empty() && o.checkpoint[l]; };
  const int64_t N = o.B * o.T, C = model.hidden_size();
  const int64_t act = static_cast<int64_t>(dtype_size(o.compute));  // activations' bytes
  const int64_t hidden = N * C * act;

  // DeviceBatch, then PassState (hidden states, fp32 losses, two hidden gradients), then the
  // layers.
  const int64_t token_bytes = o.tokens_on_device ? (o.batch_positions ? 3 : 2) * N * 4 : 0;
  const int64_t pass_bytes =
      token_bytes + static_cast<int64_t>(L - 1) * hidden + 4 * N + 2 * hidden;
  if (o.tokens_on_device) t.alloc(kActs, token_bytes);
  t.alloc(kActs, static_cast<int64_t>(L - 1) * hidden);
  t.alloc(kActs, 4 * N);
  t.alloc(kActs, 2 * hidden);
  std::vector<StoreReplay> stores(L);
  for (size_t l = 0; l < L; ++l) stores[l].declared = &declared[l];
  const auto forward = [&](size_t l) {
    stores[l].fill(t, act);
    t.alloc(kActs, act * declared[l].transient);
    t.free(kActs, act * declared[l].transient);
  };
  // Layers below the first that trains run no backward and keep nothing.
  const size_t first_backward = first_backward_layer(model);
  for (size_t l = 0; l < L; ++l) {
    const UnitSchedule::Steps steps =
        units ? units->schedule().forward_steps(l) : UnitSchedule::Steps{};
    if (units) units->use_units(steps);
    if (units && l + 1 == L) units->ensure_grads(steps);
    forward(l);
    if (checkpointed(l) || l < first_backward) stores[l].release(t);
    if (units) units->end_use(steps);
  }
  for (size_t l = L; l-- > first_backward;) {
    const UnitSchedule::Steps steps =
        units ? units->schedule().backward_steps(l) : UnitSchedule::Steps{};
    if (units) {
      units->use_units(steps);
      units->ensure_grads(steps);
    }
    if (checkpointed(l)) forward(l);  // the recompute
    t.alloc(kActs, act * declared[l].scratch);
    stores[l].release(t);
    if (units)
      for (size_t at = steps.begin; at < steps.end; ++at) {
        const int u = units->schedule()[at].unit;
        if (units->completes_unit(l, u)) units->gradient_complete(u);
      }
    t.free(kActs, act * declared[l].scratch);
    if (units) units->end_use(steps);
  }
  if (units) units->finish_reductions();
  t.free(kActs, pass_bytes);
  return true;
}

}  // namespace

std::optional<int64_t> activation_peak_bytes(Model& model, const ActivationOptions& o) {
  Tally t;
  if (!replay_pass(model, o, t, nullptr)) return std::nullopt;
  return t.peak[static_cast<size_t>(kActs)];
}

StepReplayOptions step_replay_options(const EngineOptions& engine, const StateOptions& states,
                                      const ActivationOptions& activations, int64_t comm_staging) {
  StepReplayOptions step;
  step.states = states;
  step.activations = activations;
  step.gather = GatherLimits{engine.prefetch_bucket_size, engine.max_live_parameters,
                             engine.max_reuse_distance};
  step.reduce_bucket_elements = engine.reduce_bucket_size;
  step.overlap_comm = engine.overlap_comm;
  step.comm_staging = comm_staging;
  return step;
}

std::optional<DevicePeak> device_peak_bytes(Model& model, const StepReplayOptions& o) {
  const StateOptions& s = o.states;
  const std::vector<UnitSize> sizes = unit_sizes(model);
  const TierBytes states = model_state_bytes(sizes, s);
  // Construction: the communicators' staging, then each ParamGroup (working params, a device
  // master, stored grads, then assign's staging chunk under mixed precision), then the
  // Optimizer's state tensors on the device.
  Tally t;
  t.alloc(MemCategory::kCommBuffers, o.comm_staging);
  const Precision& p = s.precision;
  for (const UnitSize& unit : sizes) {
    const ShardLayout shard(unit.numel, s.world, 0);
    TierBytes group;
    // no optimizer state tensors: the group's buffers
    add_unit_state_bytes(shard, unit.frozen, s, 0, group);
    for (MemCategory c : {MemCategory::kParams, MemCategory::kGrads, MemCategory::kOptimizer})
      t.alloc(c, group.get(Tier::kDevice, c));
    if (p.mixed()) {
      const bool sharded = s.policy.shard_params && shard.numel > s.persistence_threshold;
      const int64_t working = sharded ? shard.shard : shard.padded;
      const int64_t chunk = std::min(working, ParamGroup::kStagingChunk);
      const int64_t staging =
          bytes_of(chunk, DType::kF32) +
          (sharded && s.offload_param != OffloadDevice::kNone ? bytes_of(chunk, p.compute) : 0);
      t.alloc(MemCategory::kWorkspace, staging);
      t.free(MemCategory::kWorkspace, staging);
    }
  }
  for (MemCategory c : {MemCategory::kParams, MemCategory::kGrads, MemCategory::kOptimizer})
    t.alloc(c, states.get(Tier::kDevice, c) - t.current[static_cast<size_t>(c)]);

  UnitReplay units(model, o, t);
  if (!replay_pass(model, o.activations, t, &units)) return std::nullopt;
  // The optimizer: pure 16-bit widens each unit's working range a chunk at a time on the
  // device; every other step updates in place or on the host.
  if (p.mixed() && !p.has_master() && s.offload_optimizer == OffloadDevice::kNone)
    for (const UnitSize& unit : sizes) {
      if (unit.frozen) continue;  // no optimizer range
      const ShardLayout shard(unit.numel, s.world, 0);
      const int64_t range = s.policy.shard_optimizer ? shard.shard : shard.padded;
      const int64_t bytes = bytes_of(std::min(range, Engine::kWorkspaceChunk), DType::kF32);
      t.alloc(MemCategory::kWorkspace, bytes);
      t.free(MemCategory::kWorkspace, bytes);
    }
  DevicePeak out;
  out.total = t.peak_total;
  out.category = t.peak;
  return out;
}

int64_t comm_elements_per_step(std::span<const UnitSize> units, const StateOptions& o) {
  int64_t elements = 0;
  for (const UnitSize& unit : units) {
    const ShardLayout shard(unit.numel, o.world, 0);
    const bool gathered = o.policy.shard_params && unit.numel > o.persistence_threshold;
    // Trained: an all-reduce's 2, or at stage 3 a reduce-scatter and two gathers; frozen: the
    // gathers alone, the forward's and, where the backward computes with it, the backward's.
    const int gathers = unit.backward ? 2 : 1;
    const int per_element = unit.frozen ? (gathered ? gathers : 0) : (gathered ? 3 : 2);
    elements += per_element * shard.padded;
  }
  return elements;
}

}  // namespace zt
