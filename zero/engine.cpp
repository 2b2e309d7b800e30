// Engine: construction (the parameter groups, offload tiers, optimizer and unit schedules a
// configuration needs), stage 3's residency around each schedule step (use_unit / end_use), and
// the unit state that tests and weights I/O read and write. The training step itself is in
// engine_step.cpp, its optimizer half in engine_optimizer.cpp, sharded checkpoints in
// engine_checkpoint.cpp.
#include "zero/engine.h"

#include <algorithm>
#include <limits>

#include "offload/crc32c.h"
#include "runtime/status.h"
#include "zero/unit_residency.h"

namespace zt {

Engine::Engine(Device& device, Communicator& comm, Model& model, EngineOptions options)
    : device_(device), comm_(comm), model_(model), options_(std::move(options)),
      kernels_(table(options_, device.kernels())),
      compute_kernels_(options_.precision.mixed()
                           ? table(options_, device.kernels_for(options_.precision.compute))
                           : kernels_),
      policy_(options_.policy), reduce_queue_(std::make_unique<CommQueue>(comm)),
      gather_comm_(comm.duplicate()), gather_queue_(std::make_unique<CommQueue>(*gather_comm_)) {
  policy_.validate();
  const OffloadPlan& offload = options_.offload;
  Device* host = offload.host();
  switch (
      offload_problem(host != nullptr, offload.params() != nullptr, policy_, options_.precision)) {
    case OffloadProblem::kNone: break;
    case OffloadProblem::kOptimizerNeedsStage1:
      throw_input("zero_optimization.offload_optimizer needs zero_optimization.stage >= 1");
    case OffloadProblem::kOptimizerNeedsMaster:
      throw_input(
          "zero_optimization.offload_optimizer needs an fp32 master: it cannot be combined with "
          "pure 16-bit training (fp16_master_weights_and_grads / bf16_master_weights_and_grads)");
    case OffloadProblem::kParamsNeedStage3:
      throw_input("zero_optimization.offload_param needs zero_optimization.stage 3");
  }
  auto layers = model_.layers();
  const size_t first_backward = first_backward_layer(model_);
  if (first_backward == layers.size())
    throw_input("every parameter of the model is frozen (zt.freeze, zt.lora): nothing to train");
  if (options_.checkpoint.empty()) options_.checkpoint.assign(layers.size(), false);
  ZT_ASSERT(options_.checkpoint.size() == layers.size(), "checkpoint mask has {} of {} layers",
            options_.checkpoint.size(), layers.size());
  for (size_t l = 0; l < layers.size(); ++l)
    ZT_ASSERT(!options_.checkpoint[l] || layers[l]->checkpointable(),
              "layer {} cannot be checkpointed", l);

  if (const ParamOffload* params = offload.params()) {
    if (params->swap && params->buffers < 1)
      throw_input(fmt::format("zero_optimization.offload_param.buffer_count must be >= 1; got {}",
                              params->buffers));
    size_t largest = 0;  // the largest shard of a unit whose parameters are sharded
    for (Unit* unit : model_.units())
      if (unit->layout().numel() > options_.persistence_threshold)
        largest = std::max(
            largest, static_cast<size_t>(
                         ShardLayout(unit->layout().numel(), comm_.world(), comm_.rank()).shard) *
                         dtype_size(options_.precision.compute));
    offloaded_params_ =
        std::make_unique<OffloadedParams>(*host, params->swap, params->buffers, largest);
  }
  auto units = model_.units();
  if (offload.optimizer_swap()) {  // the master ranges (shards: offload needs stage >= 1) on NVMe
    std::vector<std::string> names;
    std::vector<int64_t> master_sizes;
    for (Unit* unit : units) {
      names.push_back(unit->name());
      master_sizes.push_back(
          unit->frozen() ? 0
                         : ShardLayout(unit->layout().numel(), comm_.world(), comm_.rank()).shard);
    }
    swapped_ = std::make_unique<SwappedState>(*offload.optimizer_swap(), *host, std::move(names),
                                              std::move(master_sizes),
                                              optimizer_state_names(options_.optimizer));
  }
  std::vector<std::vector<DecayRange>> ranges;
  std::vector<int64_t> sizes, gathered;
  for (Unit* unit : units) {
    const FlatLayout& layout = unit->layout();
    const ShardLayout shard(layout.numel(), comm_.world(), comm_.rank());
    const bool persistent = layout.numel() <= options_.persistence_threshold;
    OffloadTiers tiers{host, {}, offloaded_params_.get()};
    if (swapped_) {
      const int u = static_cast<int>(groups_.size());
      tiers.master_sink = [this, u](int64_t begin, const float* values, int64_t count) {
        swapped_->write_master(u, begin, values, count);
      };
    }
    groups_.push_back(std::make_unique<ParamGroup>(device_, *unit, shard, policy_,
                                                   options_.precision, persistent, options_.seed,
                                                   std::move(tiers)));
    const ParamGroup& g = *groups_.back();
    ranges.push_back(decay_ranges(layout, g.master_offset(), g.master_offset() + g.master_size()));
    sizes.push_back(g.master_size());
    gathered.push_back(g.params_sharded() ? shard.padded : 0);
  }
  for (const auto& g : groups_)
    frozen_fingerprint_.push_back(g->frozen() ? fmt::format("init {}", options_.seed) : "");
  const DType compute = options_.precision.compute;
  const bool pipelined = host && !swapped_;
  if (host) {  // the optimizer's state and its updates on the host tier
    // The pipelined step's updates run on the host thread: on the host tier's own table
    // (options_.kernels, e.g. profiling, is the engine thread's).
    offload_kernels_ = pipelined ? &host->kernels() : &table(options_, host->kernels());
    if (pipelined) {
      for (size_t u = 0; u < groups_.size(); ++u) {
        const auto n = static_cast<size_t>(sizes[u]);
        host_grads_.push_back(  // frozen units: n == 0, no buffer
            host->alloc(n * dtype_size(groups_[u]->grad_dtype()), MemCategory::kGrads));
        host_working_.push_back(
            compute == DType::kF32 ? Buffer()
                                   : host->alloc(n * dtype_size(compute), MemCategory::kWorkspace));
      }
      host_updates_.resize(groups_.size());
    } else {
      int64_t largest = 0;
      for (int64_t n : sizes) largest = std::max(largest, n);
      const size_t chunk = static_cast<size_t>(std::min(largest, kOffloadChunk));
      offload_grads_ =
          host->alloc(chunk * dtype_size(groups_[0]->grad_dtype()), MemCategory::kGrads);
      offload_working_ = host->alloc(chunk * dtype_size(compute), MemCategory::kWorkspace);
    }
  }
  optimizer_ = std::make_unique<Optimizer>(
      host ? *host : device_, host ? *offload_kernels_ : kernels_, options_.optimizer,
      std::move(ranges), std::move(sizes), swapped_ != nullptr);
  if (pipelined) host_worker_ = std::make_unique<HostWorker>();
  const GatherLimits limits{options_.prefetch_bucket_size, options_.max_live_parameters,
                            options_.max_reuse_distance};
  training_schedule_ =
      std::make_unique<UnitSchedule>(layers, PassMode::kTraining, gathered, limits, first_backward);
  evaluation_schedule_ =
      std::make_unique<UnitSchedule>(layers, PassMode::kEvaluation, gathered, limits);
  const Precision& precision = options_.precision;
  if (precision.loss_scaling()) loss_scaler_ = std::make_unique<LossScaler>(precision.fp16);
  // A unit's gradient is complete after the backward of the first layer (in forward order)
  // that uses it: backward runs in reverse.
  last_backward_layer_.assign(units.size(), 0);
  for (size_t l = layers.size(); l-- > 0;)
    for (int u : layers[l]->unit_indices()) last_backward_layer_[u] = l;
}

Engine::~Engine() = default;

Kernels& Engine::table(const EngineOptions& options, Kernels& device_table) {
  return options.kernels ? options.kernels(device_table) : device_table;
}

Kernels& Engine::compute_kernels() { return compute_kernels_; }

void Engine::for_each_fp32_chunk(const void* src, DType dtype, int64_t n,
                                 const std::function<void(float*, int64_t, int64_t)>& f) {
  ZT_ASSERT(dtype != DType::kF32, "for_each_fp32_chunk widens 16-bit values; got fp32");
  const int64_t chunk = std::min(n, kWorkspaceChunk);
  Buffer scratch =
      device_.alloc(static_cast<size_t>(chunk) * sizeof(float), MemCategory::kWorkspace);
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t count = std::min(chunk, n - begin);
    kernels_.cast(
        scratch.data(), DType::kF32,
        static_cast<const std::byte*>(src) + static_cast<size_t>(begin) * dtype_size(dtype), dtype,
        count);
    f(scratch.as<float>(), begin, count);
  }
}

double Engine::all_ranks_sum(double local) {
  double sum = 0.0;
  const std::vector<double> all = all_gather_doubles(comm_, {&local, 1});
  for (double x : all) sum += x;  // rank order
  return sum;
}

int64_t Engine::live_elements() const {
  int64_t elements = 0;
  for (const auto& g : groups_)
    elements += g->gathered_bytes() / static_cast<int64_t>(dtype_size(options_.precision.compute));
  return elements;
}

void Engine::note_gathered() {
  int64_t bytes = 0;
  for (auto& g : groups_) bytes += g->gathered_bytes();
  peak_gathered_bytes_ = std::max(peak_gathered_bytes_, bytes);
}

int64_t Engine::gather_window_bytes() const {
  int64_t largest = 0;
  for (const auto& g : groups_)
    if (g->params_sharded()) largest = std::max(largest, g->shard().padded);
  const int64_t bound = training_schedule_->live_bound(largest);
  const int64_t size = static_cast<int64_t>(dtype_size(options_.precision.compute));
  return bound > std::numeric_limits<int64_t>::max() / size ? std::numeric_limits<int64_t>::max()
                                                            : size * bound;
}

CommStats Engine::comm_stats() const {
  CommStats total = comm_.stats();
  total += gather_comm_->stats();
  return total;
}

void Engine::reset_comm_stats() {
  comm_.reset_stats();
  gather_comm_->reset_stats();
}

// The engine's parameter groups as stage 3's residency decisions see them (unit_residency.h).
class Engine::GroupResidency final : public UnitResidency {
 public:
  explicit GroupResidency(Engine& e) : e_(e) {}
  ParamState state(int u) const override { return group(u).state(); }
  bool sharded(int u) const override { return group(u).params_sharded(); }
  int64_t live_elements() const override { return e_.live_elements(); }
  void release(int u) override { group(u).release(); }
  void begin_gather(int u) override { group(u).begin_gather(*e_.gather_queue_); }
  void use(int u) override { group(u).use(*e_.gather_queue_); }
  void done(int u, bool keep_gathered) override { group(u).done(keep_gathered); }

 private:
  ParamGroup& group(int u) const { return *e_.groups_[static_cast<size_t>(u)]; }
  Engine& e_;
};

void Engine::use_units(const UnitSchedule& schedule, UnitSchedule::Steps steps) {
  GroupResidency units(*this);
  for (size_t at = steps.begin; at < steps.end; ++at) {
    residency_before_step(schedule, at, units);
    prefetch_offloaded(schedule, at);
  }
  note_gathered();
}

void Engine::prefetch_offloaded(const UnitSchedule& schedule, size_t at) {
  if (!offloaded_params_ || !offloaded_params_->on_nvme()) return;
  const size_t window = static_cast<size_t>(std::max(1, options_.offload.params()->buffers - 1));
  std::vector<int> slots;
  for (size_t j = at + 1; j < schedule.size() && slots.size() < window; ++j) {
    const ParamGroup& v = *groups_[schedule[j].unit];
    if (!v.params_offloaded() || v.state() != ParamState::kSharded) continue;
    if (std::find(slots.begin(), slots.end(), v.param_slot()) == slots.end())
      slots.push_back(v.param_slot());
  }
  offloaded_params_->prefetch(slots);
}

int64_t Engine::nvme_bytes(MemCategory c) const {
  if (c == MemCategory::kOptimizer) return swapped_ ? swapped_->bytes() : 0;
  if (c == MemCategory::kParams) return offloaded_params_ ? offloaded_params_->nvme_bytes() : 0;
  return 0;
}

void Engine::end_use(const UnitSchedule& schedule, UnitSchedule::Steps steps) {
  GroupResidency units(*this);
  for (size_t at = steps.begin; at < steps.end; ++at) residency_after_step(schedule, at, units);
}

void Engine::read_unit_params(int u, float* dst) {
  ParamGroup& g = *groups_[u];
  const ShardLayout& s = g.shard();
  const size_t numel_bytes = static_cast<size_t>(s.numel) * sizeof(float);
  if (options_.precision.has_master() && !g.frozen()) {  // a frozen unit has no master
    std::vector<float> from_swap;  // an NVMe master, read whole into host memory
    if (swapped_) {
      from_swap.resize(static_cast<size_t>(g.master_size()));
      swapped_->read(u, 0, from_swap.data());
    }
    const float* master = swapped_ ? from_swap.data() : g.master();
    if (g.master_size() == s.padded) {  // the master is whole on every rank
      if (swapped_)
        std::copy(master, master + s.numel, dst);
      else
        g.master_device().copy_to_host(dst, master, numel_bytes);
      return;
    }
    Buffer full =
        device_.alloc(static_cast<size_t>(s.padded) * sizeof(float), MemCategory::kWorkspace);
    const float* shard = master;
    Buffer staged;  // an offloaded master goes through the device to be gathered
    if (&g.master_device() != &device_) {
      const size_t shard_bytes = static_cast<size_t>(s.shard) * sizeof(float);
      staged = device_.alloc(shard_bytes, MemCategory::kWorkspace);
      device_.copy_from_host(staged.data(), shard, shard_bytes);
      shard = staged.as<float>();
    }
    gather_queue_->all_gather(shard, full.data(), s.shard, DType::kF32, g.name()).wait();
    device_.copy_to_host(dst, full.data(), numel_bytes);
    return;
  }
  // fp32: the working parameters are the master; pure 16-bit: the working values widened
  // (exactly). Either way `use` gathers a sharded unit.
  const bool was_full = g.state() == ParamState::kFull;
  g.use(*gather_queue_);
  const DType dtype = working_dtype();
  if (dtype == DType::kF32) {
    device_.copy_to_host(dst, g.full_working_data(), numel_bytes);
  } else {
    Buffer widened = device_.alloc(numel_bytes, MemCategory::kWorkspace);
    device_.kernels().cast(widened.data(), DType::kF32, g.full_working_data(), dtype, s.numel);
    device_.copy_to_host(dst, widened.data(), numel_bytes);
  }
  if (!was_full) g.done();
}

void Engine::read_unit_working(int u, void* dst) {
  ParamGroup& g = *groups_[u];
  const bool was_full = g.state() == ParamState::kFull;
  g.ensure_full(*gather_queue_);
  device_.copy_to_host(dst, g.full_working_data(),
                       static_cast<size_t>(g.shard().numel) * dtype_size(working_dtype()));
  if (!was_full) g.release();
}

void Engine::write_unit_params(int u, const float* src) {
  const int64_t numel = groups_[u]->shard().numel;
  if (groups_[u]->frozen())
    frozen_fingerprint_[u] =
        fmt::format("crc32c {:08x}", crc32c(src, static_cast<size_t>(numel) * sizeof(float)));
  groups_[u]->assign([&](int64_t begin, int64_t end, float* dst) {
    std::fill(dst, dst + (end - begin), 0.0f);  // padding past numel
    const int64_t stop = std::min(end, numel);
    if (stop > begin) std::copy(src + begin, src + stop, dst);
  });
}

std::map<std::string, std::string> Engine::frozen_fingerprints() const {
  std::map<std::string, std::string> out;
  for (size_t u = 0; u < groups_.size(); ++u)
    if (groups_[u]->frozen()) out[groups_[u]->name()] = frozen_fingerprint_[u];
  return out;
}

float* Engine::unit_params(int u) {
  ZT_ASSERT(!options_.precision.mixed(), "unit_params is for fp32 training");
  ZT_ASSERT(!groups_[u]->params_sharded(), "unit {} parameters are sharded", u);
  return groups_[u]->full_params();
}

std::vector<float> Engine::unit_grads(int u) {
  ParamGroup& g = *groups_[u];
  ZT_ASSERT(!g.frozen(), "unit {} is frozen: it has no gradient", g.name());
  const ShardLayout& s = g.shard();
  const DType dtype = g.grad_dtype();
  Buffer full =
      device_.alloc(static_cast<size_t>(s.padded) * dtype_size(dtype), MemCategory::kWorkspace);
  gather_queue_->all_gather(g.grad_shard(), full.data(), s.shard, dtype).wait();
  Buffer widened;
  const void* values = full.data();
  if (dtype != DType::kF32) {
    widened = device_.alloc(static_cast<size_t>(s.padded) * sizeof(float), MemCategory::kWorkspace);
    kernels_.cast(widened.data(), DType::kF32, full.data(), dtype, s.padded);
    values = widened.data();
  }
  std::vector<float> out(static_cast<size_t>(s.numel));
  device_.copy_to_host(out.data(), values, out.size() * sizeof(float));
  return out;
}

std::vector<std::byte> Engine::model_state_bytes(int u) {
  ParamGroup& g = *groups_[u];
  std::vector<std::byte> out;
  auto append = [&](Device& where, const void* data, size_t bytes) {
    const size_t at = out.size();
    out.resize(at + bytes);
    where.copy_to_host(out.data() + at, data, bytes);
  };
  Device& state_device = options_.offload.host() ? *options_.offload.host() : device_;
  out.resize(g.working_bytes());
  g.read_working(out.data());
  const size_t state_bytes = static_cast<size_t>(g.master_size()) * sizeof(float);
  if (g.frozen()) return out;  // no master, no optimizer state
  if (swapped_) {              // the master (left out under fp32, as below) and the state from NVMe
    for (int k = options_.precision.has_master() ? 0 : 1; k < swapped_->num_kinds(); ++k) {
      const size_t at = out.size();
      out.resize(at + state_bytes);
      swapped_->read(u, k, reinterpret_cast<float*>(out.data() + at));
    }
    return out;
  }
  // An fp32 offloaded master holds the working bits again: left out, so that the bytes are
  // those of the same run without offload.
  if (options_.precision.has_master())
    append(g.master_device(), g.master_bytes().data(), g.master_bytes().size());
  for (float* state : optimizer_->state(u)) append(state_device, state, state_bytes);
  return out;
}

}  // namespace zt
