// Engine: the ZeRO training step.
#include "zero/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <chrono>

#include "runtime/status.h"
#include "zero/gradient_reducer.h"
#include "zero/unit_residency.h"

namespace zt {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The targets of a host batch that count in the loss (not kIgnoreTarget).
int64_t counted_targets(const Batch& batch) {
  const int64_t n = batch.B * batch.T;
  return std::count_if(batch.targets, batch.targets + n, [](int32_t t) { return t >= 0; });
}

// The micro-batch's token ids (and document positions, when set) where the kernels read them:
// the caller's host arrays when the device computes on host memory, else a device copy, one
// allocation of inputs, targets[, positions] (memory_model.cpp's replay counts the same bytes).
class DeviceBatch {
 public:
  DeviceBatch(Device& device, const Batch& host) : batch_(host) {
    if (device.host_accessible()) return;
    const size_t bytes = static_cast<size_t>(host.B * host.T) * sizeof(int32_t);
    tokens_ = device.alloc((host.positions ? 3 : 2) * bytes, MemCategory::kActivations);
    const auto copy = [&](const int32_t* from, size_t slot) {
      char* at = tokens_.as<char>() + slot * bytes;
      device.copy_from_host(at, from, bytes);
      return reinterpret_cast<const int32_t*>(at);
    };
    batch_.inputs = copy(host.inputs, 0);
    batch_.targets = copy(host.targets, 1);
    if (host.positions) batch_.positions = copy(host.positions, 2);
  }
  const Batch& batch() const { return batch_; }

 private:
  Batch batch_;
  Buffer tokens_;
};

// What one pass keeps between layers, all on the device:
//   hidden[l]    (N, C) output of layer l, kept through backward in the working dtype; a
//                checkpointed layer keeps nothing else, so these are its saved input
//   losses       (N) per-position losses of the last layer
//   d_hidden[2]  (N, C) fp32 gradients of the hidden state, used alternately by backward
//   acts[l]      layer l's activation store
// Under 16-bit activations a layer reads and writes fp32 copies of the stored hidden states
// (input_of / output_of), dropped after the layer (drop_copies).
class PassState {
 public:
  PassState(Device& device, Kernels& k, size_t layers, int64_t N, int64_t C, DType act_dtype,
            bool training)
      : device_(device), k_(k), layers_(layers), n_(N * C), act_dtype_(act_dtype),
        pack_(act_dtype != DType::kF32) {
    hidden_.resize(layers - 1);
    for (auto& h : hidden_)
      h = device.alloc(static_cast<size_t>(n_) * dtype_size(act_dtype), MemCategory::kActivations);
    losses_ = device.alloc(static_cast<size_t>(N) * sizeof(float), MemCategory::kActivations);
    if (training)
      for (auto& d : d_hidden_) d = device.alloc(fp32_bytes(), MemCategory::kActivations);
    acts_.reserve(layers);
    for (size_t l = 0; l < layers; ++l) acts_.emplace_back(device, &k);
  }

  // Layer l's input: null for the first layer.
  const float* input_of(size_t l) {
    if (l == 0) return nullptr;
    if (!pack_) return hidden_[l - 1].as<float>();
    input_copy_ = device_.alloc(fp32_bytes(), MemCategory::kActivations);
    k_.cast(input_copy_.data(), DType::kF32, hidden_[l - 1].data(), act_dtype_, n_);
    return input_copy_.as<float>();
  }
  // Layer l's output buffer: null for the last layer, and for a backward that does not
  // recompute (`computed` false) under 16-bit activations.
  float* output_of(size_t l, bool computed) {
    if (l + 1 == layers_) return nullptr;
    if (!pack_) return hidden_[l].as<float>();
    if (!computed) return nullptr;
    output_copy_ = device_.alloc(fp32_bytes(), MemCategory::kActivations);
    return output_copy_.as<float>();
  }
  // After a forward: the fp32 output copy stored as the working dtype.
  void store_output(size_t l, const float* output) {
    if (pack_ && output) k_.cast(hidden_[l].data(), act_dtype_, output, DType::kF32, n_);
  }
  void drop_copies() {
    input_copy_.reset();
    output_copy_.reset();
  }
  // After layer l's forward: what it keeps for its backward.
  void keep_activations(size_t l, bool keep) {
    if (!keep)
      acts_[l].release();
    else if (pack_)
      acts_[l].pack(act_dtype_);
  }
  float* d_output(size_t l) { return l + 1 < layers_ ? d_hidden_[l % 2].as<float>() : nullptr; }
  // Zeroed: backward accumulates into it. Null for the first layer.
  float* d_input(size_t l) {
    if (l == 0) return nullptr;
    float* d = d_hidden_[(l + 1) % 2].as<float>();
    device_.zero(d, fp32_bytes());
    return d;
  }
  ActivationStore& acts(size_t l) { return acts_[l]; }
  float* losses() { return losses_.as<float>(); }
  // The sum of the per-position losses (ignored targets' are 0), in position order.
  double loss_sum() const {
    std::vector<float> host(losses_.bytes() / sizeof(float));
    device_.copy_to_host(host.data(), losses_.data(), losses_.bytes());
    double sum = 0.0;
    for (float x : host) sum += x;
    return sum;
  }

 private:
  size_t fp32_bytes() const { return static_cast<size_t>(n_) * sizeof(float); }
  Device& device_;
  Kernels& k_;
  size_t layers_;
  int64_t n_;  // N * C
  DType act_dtype_;
  bool pack_;  // activations kept 16-bit, computed in fp32
  std::vector<Buffer> hidden_;
  Buffer losses_;
  Buffer d_hidden_[2];
  std::vector<ActivationStore> acts_;
  Buffer input_copy_, output_copy_;
};

}  // namespace

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
          ShardLayout(unit->layout().numel(), comm_.world(), comm_.rank()).shard);
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
  const DType compute = options_.precision.compute;
  const bool pipelined = host && !swapped_;
  if (host) {  // the optimizer's state and its updates on the host tier
    // The pipelined step's updates run on the host thread: on the host tier's own table
    // (options_.kernels, e.g. profiling, is the engine thread's).
    offload_kernels_ = pipelined ? &host->kernels() : &table(options_, host->kernels());
    if (pipelined) {
      for (size_t u = 0; u < groups_.size(); ++u) {
        const auto n = static_cast<size_t>(sizes[u]);
        host_grads_.push_back(
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
      std::make_unique<UnitSchedule>(layers, PassMode::kTraining, gathered, limits);
  evaluation_schedule_ =
      std::make_unique<UnitSchedule>(layers, PassMode::kEvaluation, gathered, limits);
  const Precision& precision = options_.precision;
  if (precision.loss_scaling()) loss_scaler_ = std::make_unique<LossScaler>(precision.fp16);
  // A unit's gradient is complete after the backward of the first layer (in forward order)
  // that uses it: backward runs in reverse.
  last_backward_layer_.assign(units.size(), 0);
  for (size_t l = layers.size(); l-- > 0;) last_backward_layer_[layers[l]->unit_index()] = l;
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

ParamGroup& Engine::use_unit(const UnitSchedule& schedule, size_t at) {
  GroupResidency units(*this);
  residency_before_step(schedule, at, units);
  prefetch_offloaded(schedule, at);
  note_gathered();
  return *groups_[schedule[at].unit];
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

void Engine::end_use(const UnitSchedule& schedule, size_t at) {
  GroupResidency units(*this);
  residency_after_step(schedule, at, units);
}

double Engine::run_pass(const Batch& host_batch, PassMode mode, float dloss, bool reduce_now) {
  Kernels& k = compute_kernels();
  const DeviceBatch tokens(device_, host_batch);
  const Batch& batch = tokens.batch();
  auto layers = model_.layers();
  const size_t L = layers.size();
  const bool training = mode == PassMode::kTraining;
  const UnitSchedule& schedule = training ? *training_schedule_ : *evaluation_schedule_;
  PassState pass(device_, kernels_, L, batch.B * batch.T, model_.hidden_size(),
                 options_.precision.compute, training);
  auto layer_io = [&](size_t l, bool computes_output) {
    LayerIO io;
    io.batch = &batch;
    io.input = pass.input_of(l);
    io.output = pass.output_of(l, computes_output);
    if (l + 1 == L) {
      io.losses = pass.losses();
      if (training) io.dloss = dloss;  // the last layer's gradient in forward
    }
    return io;
  };

  auto t0 = Clock::now();
  for (size_t l = 0; l < L; ++l) {
    const size_t at = schedule.forward_step(l);
    const int u = schedule[at].unit;
    ParamGroup& g = use_unit(schedule, at);
    fault_point(training ? EnginePoint::kForward : EnginePoint::kEvaluation, u);
    const LayerIO io = layer_io(l, true);
    if (training && l + 1 == L) g.ensure_grads();
    layers[l]->forward(k, io, pass.acts(l));
    pass.store_output(l, io.output);
    pass.keep_activations(l, training && !options_.checkpoint[l]);
    pass.drop_copies();
    end_use(schedule, at);
  }
  times_.forward += seconds_since(t0);
  if (!training) return pass.loss_sum();

  t0 = Clock::now();
  GradientReducer reducer(*reduce_queue_, kernels_, options_.reduce_bucket_size,
                          options_.overlap_comm);
  if (collecting_grads_) reducer.set_on_reduced([this](ParamGroup& g) { gradient_ready(g); });
  for (size_t l = L; l-- > 0;) {
    const size_t at = schedule.backward_step(l);
    const int u = schedule[at].unit;
    ParamGroup& g = use_unit(schedule, at);
    g.ensure_grads();
    LayerIO io = layer_io(l, options_.checkpoint[l]);
    if (options_.checkpoint[l])
      layers[l]->forward(k, io, pass.acts(l));  // recompute (output rewritten with the same bits)
    else
      pass.acts(l).unpack();
    io.d_output = pass.d_output(l);
    io.d_input = pass.d_input(l);
    ActivationStore scratch(device_);
    layers[l]->backward(k, io, pass.acts(l), scratch);
    pass.acts(l).release();
    if (last_backward_layer_[u] == l) {  // the unit's gradient of this micro-batch is complete
      g.settle_fresh_grads();
      if (gradient_hook_) gradient_hook_(u, g.full_grads(), g.shard().numel);
      g.finish_grads(kernels_, reduce_now);
      if (reduce_now) reducer.add(g);
      fault_point(EnginePoint::kBackward, u);
    }
    pass.drop_copies();
    end_use(schedule, at);
  }
  reducer.finish();
  times_.backward += seconds_since(t0);
  return pass.loss_sum();
}

StepResult Engine::train_step(std::span<const Batch> micro_batches, float lr) {
  ZT_ASSERT(!micro_batches.empty(), "no micro-batches");
  times_ = StepTimes{};
  const CommStats comm_before = comm_stats();
  set_context(fmt::format("step {}", step_ + 1));  // names the step in a timeout report
  for (auto& g : groups_) g->zero_grads();
  const bool pipelined = host_worker_ != nullptr;
  if (pipelined) {  // a step that failed may have left updates running: they end first
    host_worker_->drain();
    host_worker_->reset_times();
    std::fill(host_updates_.begin(), host_updates_.end(), HostUpdate{});
    host_update_order_.clear();
  }
  StepResult result;
  result.lr = lr;
  // fp16: the loss (through its gradient dloss) is multiplied by the scale; powers of two, so
  // scaling and unscaling are exact unless a value overflows or underflows.
  const double scale = loss_scaler_ ? loss_scaler_->scale() : 1.0;
  result.loss_scale = static_cast<float>(scale);
  const size_t accumulation = micro_batches.size();
  // The loss is the mean over the targets the global batch trains on (every micro-batch of
  // every rank; ignored targets, kIgnoreTarget, not counted), as Hugging Face's Trainer
  // normalises by the batch's item count: each position's gradient is scaled by one over that
  // count, so the reduction's sum is the gradient of the global mean whatever the ranks' shares
  // of prompt and padding. Stages 0/1 reduce after the last micro-batch; sharded gradients are
  // reduced every micro-batch.
  double local_targets = 0.0;
  for (const Batch& batch : micro_batches)
    local_targets += static_cast<double>(counted_targets(batch));
  const double targets = all_ranks_sum(local_targets);  // integers: exact in double
  result.targets = static_cast<int64_t>(targets);
  const float dloss = static_cast<float>(scale / std::max(targets, 1.0));
  double local_loss = 0.0;
  for (size_t i = 0; i < accumulation; ++i) {
    const Batch& batch = micro_batches[i];
    const bool reduce_now = policy_.shard_grads || i + 1 == accumulation;
    // The last micro-batch completes every unit's gradient: an offloaded optimizer takes each
    // as its reduction finishes, and updates at once when nothing global scales it.
    collecting_grads_ = pipelined && i + 1 == accumulation;
    if (collecting_grads_ && !loss_scaler_ && options_.gradient_clipping <= 0.0f)
      early_ = EarlyUpdates{lr, step_ + 1};
    try {
      local_loss += run_pass(batch, PassMode::kTraining, dloss, reduce_now);
    } catch (...) {
      collecting_grads_ = false;
      early_.reset();
      throw;
    }
    collecting_grads_ = false;
    early_.reset();
  }
  const Clock::time_point backward_end = Clock::now();
  result.early_updates = static_cast<int>(host_update_order_.size());
  result.loss = all_ranks_sum(local_loss) / std::max(targets, 1.0);

  // Global norm: each rank's partial over its shard of every unit, in unit order, then the
  // partials added in rank order: the same arithmetic in every stage. A non-finite gradient on
  // any rank makes the sum non-finite on every rank: that is the agreed overflow flag.
  auto t0 = Clock::now();
  double partial = 0.0;
  for (auto& g : groups_)
    partial +=
        kernels_.sum_squares(ConstOperand(g->grad_shard(), g->grad_dtype()), g->shard().shard);
  const double norm_squared = all_ranks_sum(partial);
  result.grad_norm = std::sqrt(norm_squared) / scale;
  auto finish_times = [&] {
    times_.optimizer = seconds_since(t0);
    const CommStats after = comm_stats();
    auto spent = [&](CollectiveKind kind) {
      return after[kind].seconds - comm_before[kind].seconds;
    };
    times_.reduce = spent(CollectiveKind::kReduceScatter) + spent(CollectiveKind::kAllReduce);
    times_.gather = spent(CollectiveKind::kAllGather);
    result.times = times_;
  };
  if (loss_scaler_) {
    bool skip = false;
    try {
      skip = loss_scaler_->update(!std::isfinite(norm_squared));
    } catch (const Error& e) {  // at the minimum scale; the scaler's state is unchanged
      result.failure = e.message();
      result.skipped = true;
      finish_times();
      return result;
    }
    result.scale_update = loss_scaler_->last_update();
    if (skip) {
      // Parameters, master and optimizer state untouched; the stored gradients are zeroed at
      // the start of the next step.
      result.skipped = true;
      finish_times();
      return result;
    }
  }
  double grad_scale = 1.0 / scale;
  if (options_.gradient_clipping > 0.0f) {
    // DeepSpeed's rule: scale by max_norm / (norm + 1e-6) when that is below 1.
    const double coef = options_.gradient_clipping / (result.grad_norm + 1e-6);
    if (coef < 1.0) grad_scale = coef / scale;
  }
  ++step_;
  if (pipelined) {
    // Updates not started in the backward start now, with the global scaling known; each
    // unit's working parameters go back as its update finishes.
    for (size_t u = 0; u < groups_.size(); ++u) {
      if (host_updates_[u].submitted) continue;
      fault_point(EnginePoint::kOptimizer, static_cast<int>(u));
      submit_host_update(static_cast<int>(u), lr, static_cast<float>(grad_scale), step_);
    }
    collect_host_updates(true);
    times_.host_optimizer = host_worker_->busy_seconds();
    times_.host_optimizer_hidden = host_worker_->busy_seconds_before(backward_end);
  } else {
    for (size_t u = 0; u < groups_.size(); ++u)
      optimizer_step(static_cast<int>(u), lr, static_cast<float>(grad_scale));
  }
  refresh_params();
  finish_times();
  return result;
}

void Engine::gradient_ready(ParamGroup& g) {
  const int u = static_cast<int>(
      std::find_if(groups_.begin(), groups_.end(), [&](const auto& p) { return p.get() == &g; }) -
      groups_.begin());
  ZT_ASSERT(u < num_units(), "unit {} is not the engine's", g.name());
  const size_t bytes = static_cast<size_t>(g.master_size()) * dtype_size(g.grad_dtype());
  device_.copy_to_host(host_grads_[u].data(), g.grad_master(), bytes);
  if (early_) {
    ZT_ASSERT(early_->step == step_ + 1, "early update for step {} at step {}", early_->step,
              step_ + 1);
    fault_point(EnginePoint::kOptimizer, u);
    submit_host_update(u, early_->lr, 1.0f, early_->step);  // no clipping, no loss scale
  }
  collect_host_updates(false);
}

void Engine::submit_host_update(int u, float lr, float grad_scale, int64_t step) {
  ParamGroup& g = *groups_[u];
  HostUpdate& h = host_updates_[u];
  ZT_ASSERT(!h.submitted, "unit {}: update submitted twice", g.name());
  float* master = g.master();  // host memory
  const int64_t n = g.master_size();
  const ConstOperand grads(host_grads_[u].data(), g.grad_dtype());
  const DType dtype = options_.precision.compute;
  const Operand working =
      dtype == DType::kF32 ? Operand() : Operand(host_working_[u].data(), dtype);
  Optimizer& optimizer = *optimizer_;
  h.ticket = host_worker_->submit([&optimizer, u, n, master, grads, working, lr, grad_scale, step] {
    optimizer.step_part_host(u, 0, n, master, grads, working, lr, grad_scale, step);
  });
  h.submitted = true;
  host_update_order_.push_back(u);
}

void Engine::write_back(int u) {
  ParamGroup& g = *groups_[u];
  const DType dtype = options_.precision.compute;
  // fp32: the updated master is the working parameters' bits.
  const void* updated =
      dtype == DType::kF32 ? static_cast<const void*>(g.master()) : host_working_[u].data();
  const size_t bytes = static_cast<size_t>(g.master_size()) * dtype_size(dtype);
  if (g.params_offloaded()) {
    std::memcpy(g.begin_working_update(), updated, bytes);
    g.finish_working_update();
  } else {
    device_.copy_from_host(g.working_master_range(), updated, bytes);
  }
}

void Engine::collect_host_updates(bool all) {
  for (int u : host_update_order_) {
    HostUpdate& h = host_updates_[u];
    if (h.written_back || (!all && !host_worker_->done(h.ticket))) continue;
    host_worker_->wait(h.ticket);
    write_back(u);
    h.written_back = true;
  }
}

void Engine::refresh_params() {
  // Launched unit after unit; once allgather_bucket_size elements are in flight they are
  // finished before more launch.
  std::vector<CommHandle> in_flight;
  int64_t in_flight_elements = 0;
  for (auto& g : groups_) {
    CommHandle h = g->begin_refresh(*gather_queue_);
    if (h.done()) continue;  // nothing to refresh for this unit
    const int64_t elements = g->shard().padded;
    if (!in_flight.empty() && in_flight_elements + elements > options_.allgather_bucket_size) {
      for (auto& pending : in_flight) pending.wait();
      in_flight.clear();
      in_flight_elements = 0;
    }
    in_flight.push_back(std::move(h));
    in_flight_elements += elements;
  }
  for (auto& h : in_flight) h.wait();
}

void Engine::offloaded_optimizer_step(int u, float lr, float grad_scale) {
  ParamGroup& g = *groups_[u];
  const int64_t n = g.master_size();
  const DType gdtype = g.grad_dtype(), dtype = options_.precision.compute;
  const size_t gsize = dtype_size(gdtype), wsize = dtype_size(dtype);
  const auto* grads = static_cast<const std::byte*>(g.grad_master());
  const bool fp32 = dtype == DType::kF32;
  // Where the updated working values go: the device, through the host staging, or (offloaded
  // parameters) straight into the parameter tier's host memory.
  std::byte* to_tier =
      g.params_offloaded() ? static_cast<std::byte*>(g.begin_working_update()) : nullptr;
  std::byte* to_device = to_tier ? nullptr : static_cast<std::byte*>(g.working_master_range());
  // Elements [begin, begin + count) of the master range: the gradients to the host, one pass
  // updating the master (and the state, when given: else the optimizer's own) and (16-bit)
  // rounding the working values, which then go where they live (fp32: the master's bits).
  auto update = [&](int64_t begin, int64_t count, float* master, float* const* state) {
    const size_t at = static_cast<size_t>(begin), count_bytes = static_cast<size_t>(count);
    device_.copy_to_host(offload_grads_.data(), grads + at * gsize, count_bytes * gsize);
    void* rounded = to_tier ? static_cast<void*>(to_tier + at * wsize) : offload_working_.data();
    optimizer_->step_part_host(
        u, begin, begin + count, master, ConstOperand(offload_grads_.data(), gdtype),
        fp32 ? Operand() : Operand(rounded, dtype), lr, grad_scale, step_, state);
    if (to_tier) {
      if (fp32) std::memcpy(to_tier + at * wsize, master, count_bytes * wsize);
      return;
    }
    const void* updated = fp32 ? static_cast<const void*>(master) : offload_working_.data();
    device_.copy_from_host(to_device + at * wsize, updated, count_bytes * wsize);
  };
  if (swapped_) {  // master and state streamed from NVMe, in the swap files' chunks
    static_assert(SwappedState::kChunk == kOffloadChunk, "one chunk size for the staging");
    swapped_->update(u, [&](int64_t begin, int64_t count, float* const* state) {
      update(begin, count, state[0], state + 1);
    });
  } else {
    float* master = g.master();  // host memory
    for (int64_t begin = 0; begin < n; begin += kOffloadChunk)
      update(begin, std::min(kOffloadChunk, n - begin), master + begin, nullptr);
  }
  if (to_tier) g.finish_working_update();
}

void Engine::optimizer_step(int u, float lr, float grad_scale) {
  fault_point(EnginePoint::kOptimizer, u);
  if (options_.offload.host()) return offloaded_optimizer_step(u, lr, grad_scale);
  ParamGroup& g = *groups_[u];
  const int64_t n = g.master_size();
  float* master = g.master();
  const DType dtype = options_.precision.compute;
  Kernels& k = kernels_;
  const ConstOperand grads(g.grad_master(), g.grad_dtype());  // widened by the kernels
  if (master) {
    // Mixed precision: the working copy is the master rounded, written in the update's own
    // pass (fp32: master and working parameters are one buffer).
    const Operand working =
        options_.precision.has_master() ? Operand(g.working_master_range(), dtype) : Operand();
    optimizer_->step_part(u, 0, n, master, grads, lr, grad_scale, step_, working);
  } else {
    // Pure 16-bit: the update computed in fp32 from the working values, a chunk at a time (the
    // update is element-wise, so the bits are those of one pass), and rounded back.
    for_each_fp32_chunk(g.working_master_range(), dtype, n,
                        [&](float* params, int64_t begin, int64_t count) {
                          void* working = static_cast<std::byte*>(g.working_master_range()) +
                                          static_cast<size_t>(begin) * dtype_size(dtype);
                          optimizer_->step_part(u, begin, begin + count, params, grads.at(begin),
                                                lr, grad_scale, step_);
                          k.cast(working, dtype, params, DType::kF32, count);
                        });
  }
}

double Engine::eval_loss(const Batch& batch, int64_t* targets_out) {
  set_context(fmt::format("evaluation after step {}", step_));
  const double sum = run_pass(batch, PassMode::kEvaluation, 0.0f, false);
  const std::array<double, 2> local{sum, static_cast<double>(counted_targets(batch))};
  const std::vector<double> all = all_gather_doubles(comm_, local);
  double sums = 0.0, targets = 0.0;
  for (size_t r = 0; r < all.size(); r += 2) {  // rank order
    sums += all[r];
    targets += all[r + 1];
  }
  if (targets_out) *targets_out = static_cast<int64_t>(targets);
  return sums / std::max(targets, 1.0);
}

double Engine::compute_gradients(const Batch& batch) {
  for (auto& g : groups_) g->zero_grads();
  const double local = static_cast<double>(counted_targets(batch));
  const double targets = all_ranks_sum(local);
  return run_pass(batch, PassMode::kTraining, static_cast<float>(1.0 / std::max(targets, 1.0)),
                  true) /
         std::max(local, 1.0);
}

void Engine::read_unit_params(int u, float* dst) {
  ParamGroup& g = *groups_[u];
  const ShardLayout& s = g.shard();
  const size_t numel_bytes = static_cast<size_t>(s.numel) * sizeof(float);
  if (options_.precision.has_master()) {
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
  groups_[u]->assign([&](int64_t begin, int64_t end, float* dst) {
    std::fill(dst, dst + (end - begin), 0.0f);  // padding past numel
    const int64_t stop = std::min(end, numel);
    if (stop > begin) std::copy(src + begin, src + stop, dst);
  });
}

float* Engine::unit_params(int u) {
  ZT_ASSERT(!options_.precision.mixed(), "unit_params is for fp32 training");
  ZT_ASSERT(!groups_[u]->params_sharded(), "unit {} parameters are sharded", u);
  return groups_[u]->full_params();
}

std::vector<float> Engine::unit_grads(int u) {
  ParamGroup& g = *groups_[u];
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
  if (swapped_) {  // the master (left out under fp32, as below) and the state from NVMe
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
