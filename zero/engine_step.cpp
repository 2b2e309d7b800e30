// Engine: the training step (docs/architecture.md, "The training step"): train_step's order
// (targets counted, the micro-batches' passes, the global norm, loss scaling, clipping, then the
// optimizer of engine_optimizer.cpp), run_pass's forward and backward loops over the layers, and
// the passes of eval_loss and compute_gradients.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "runtime/dropout_mask.h"
#include "runtime/status.h"
#include "zero/engine.h"
#include "zero/gradient_reducer.h"

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

// What one pass keeps between layers, all on the device, activations in the working dtype
// (kernels.h, Precision):
//   hidden[l]    (N, C) output of layer l, kept through backward; a checkpointed layer keeps
//                nothing else, so these are its saved input
//   losses       (N) fp32 per-position losses of the last layer
//   d_hidden[2]  (N, C) gradients of the hidden state, used alternately by backward
//   acts[l]      layer l's activation store
class PassState {
 public:
  PassState(Device& device, size_t layers, int64_t N, int64_t C, DType act_dtype, bool training)
      : device_(device), layers_(layers), act_dtype_(act_dtype),
        bytes_(static_cast<size_t>(N * C) * dtype_size(act_dtype)) {
    hidden_.resize(layers - 1);
    for (auto& h : hidden_) h = device.alloc(bytes_, MemCategory::kActivations);
    losses_ = device.alloc(static_cast<size_t>(N) * sizeof(float), MemCategory::kActivations);
    if (training)
      for (auto& d : d_hidden_) d = device.alloc(bytes_, MemCategory::kActivations);
    acts_.reserve(layers);
    for (size_t l = 0; l < layers; ++l) acts_.emplace_back(device, act_dtype);
  }

  // Layer l's input: null for the first layer.
  ConstOperand input_of(size_t l) const {
    return l == 0 ? ConstOperand() : ConstOperand(hidden_[l - 1].data(), act_dtype_);
  }
  // Layer l's output: null for the last layer.
  Operand output_of(size_t l) const {
    return l + 1 == layers_ ? Operand() : Operand(hidden_[l].data(), act_dtype_);
  }
  // After layer l's forward: what it keeps for its backward.
  void keep_activations(size_t l, bool keep) {
    if (!keep) acts_[l].release();
  }
  ConstOperand d_output(size_t l) const {
    return l + 1 < layers_ ? ConstOperand(d_hidden_[l % 2].data(), act_dtype_) : ConstOperand();
  }
  // Zeroed: backward accumulates into it. Null for the first layer.
  Operand d_input(size_t l) {
    if (l == 0) return {};
    void* d = d_hidden_[(l + 1) % 2].data();
    device_.zero(d, bytes_);
    return {d, act_dtype_};
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
  Device& device_;
  size_t layers_;
  DType act_dtype_;
  size_t bytes_;  // of one (N, C) hidden state
  std::vector<Buffer> hidden_;
  Buffer losses_;
  Buffer d_hidden_[2];
  std::vector<ActivationStore> acts_;
};

}  // namespace

double Engine::run_pass(const Batch& host_batch, PassMode mode, float dloss, bool reduce_now) {
  Kernels& k = compute_kernels();
  const DeviceBatch tokens(device_, host_batch);
  const Batch& batch = tokens.batch();
  auto layers = model_.layers();
  const size_t L = layers.size();
  const bool training = mode == PassMode::kTraining;
  const UnitSchedule& schedule = training ? *training_schedule_ : *evaluation_schedule_;
  PassState pass(device_, L, batch.B * batch.T, model_.hidden_size(), options_.precision.compute,
                 training);
  // Every training pass its own masks: from the run's seed, the step and the pass within it.
  const uint64_t pass_seed =
      training ? splitmix64(options_.seed ^
                            splitmix64(static_cast<uint64_t>(step_ + 1) << 20 | pass_in_step_++))
               : 0;
  auto layer_io = [&](size_t l) {
    LayerIO io;
    io.batch = &batch;
    io.input = pass.input_of(l);
    io.output = pass.output_of(l);
    if (l + 1 == L) {
      io.losses = pass.losses();
      if (training) io.dloss = dloss;  // the last layer's gradient in forward
    }
    io.training = training;
    io.seed = pass_seed;
    return io;
  };

  // The trainable units among a layer's steps.
  auto trainable = [&](UnitSchedule::Steps steps, const auto& f) {
    for (size_t at = steps.begin; at < steps.end; ++at) {
      ParamGroup& g = *groups_[schedule[at].unit];
      if (!g.frozen()) f(schedule[at].unit, g);
    }
  };
  // Layers below the first that trains run no backward: they keep nothing.
  const size_t first_backward = schedule.first_backward_layer();
  auto t0 = Clock::now();
  for (size_t l = 0; l < L; ++l) {
    const UnitSchedule::Steps steps = schedule.forward_steps(l);
    use_units(schedule, steps);
    fault_point(training ? EnginePoint::kForward : EnginePoint::kEvaluation,
                schedule[steps.begin].unit);
    const LayerIO io = layer_io(l);
    if (training && l + 1 == L) trainable(steps, [](int, ParamGroup& g) { g.ensure_grads(); });
    layers[l]->forward(k, io, pass.acts(l));
    pass.keep_activations(l, training && !options_.checkpoint[l] && l >= first_backward);
    end_use(schedule, steps);
  }
  times_.forward += seconds_since(t0);
  if (!training) return pass.loss_sum();

  t0 = Clock::now();
  GradientReducer reducer(*reduce_queue_, kernels_, options_.reduce_bucket_size,
                          options_.overlap_comm);
  if (collecting_grads_) reducer.set_on_reduced([this](ParamGroup& g) { gradient_ready(g); });
  for (size_t l = L; l-- > first_backward;) {
    const UnitSchedule::Steps steps = schedule.backward_steps(l);
    use_units(schedule, steps);
    trainable(steps, [](int, ParamGroup& g) { g.ensure_grads(); });
    LayerIO io = layer_io(l);
    if (options_.checkpoint[l])
      layers[l]->forward(k, io, pass.acts(l));  // recompute (output rewritten with the same bits)
    io.d_output = pass.d_output(l);
    io.d_input = pass.d_input(l);
    ActivationStore scratch(device_, options_.precision.compute);
    layers[l]->backward(k, io, pass.acts(l), scratch);
    pass.acts(l).release();
    trainable(steps, [&](int u, ParamGroup& g) {
      if (last_backward_layer_[u] != l) return;
      // The unit's gradient of this micro-batch is complete.
      g.settle_fresh_grads();
      if (gradient_hook_) gradient_hook_(u, g.full_grads(), g.shard().numel);
      g.finish_grads(kernels_, reduce_now);
      if (reduce_now) reducer.add(g);
      fault_point(EnginePoint::kBackward, u);
    });
    end_use(schedule, steps);
  }
  reducer.finish();
  times_.backward += seconds_since(t0);
  return pass.loss_sum();
}

StepResult Engine::train_step(std::span<const Batch> micro_batches, float lr) {
  ZT_ASSERT(!micro_batches.empty(), "no micro-batches");
  times_ = StepTimes{};
  pass_in_step_ = 0;
  const CommStats comm_before = comm_stats();
  set_context(fmt::format("step {}", step_ + 1));  // names the step in a timeout report
  for (auto& g : groups_)
    if (!g->frozen()) g->zero_grads();
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
    if (!g->frozen())
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
      if (host_updates_[u].submitted || groups_[u]->frozen()) continue;
      fault_point(EnginePoint::kOptimizer, static_cast<int>(u));
      submit_host_update(static_cast<int>(u), lr, static_cast<float>(grad_scale), step_);
    }
    collect_host_updates(true);
    times_.host_optimizer = host_worker_->busy_seconds();
    times_.host_optimizer_hidden = host_worker_->busy_seconds_before(backward_end);
  } else {
    for (size_t u = 0; u < groups_.size(); ++u)
      if (!groups_[u]->frozen())
        optimizer_step(static_cast<int>(u), lr, static_cast<float>(grad_scale));
  }
  refresh_params();
  finish_times();
  return result;
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

void Engine::run_layers(const std::function<void(size_t layer, Kernels& k)>& body) {
  Kernels& k = compute_kernels();
  const UnitSchedule& schedule = *evaluation_schedule_;
  for (size_t l = 0; l < model_.layers().size(); ++l) {
    const UnitSchedule::Steps steps = schedule.forward_steps(l);
    use_units(schedule, steps);
    body(l, k);
    end_use(schedule, steps);
  }
}

double Engine::compute_gradients(const Batch& batch) {
  pass_in_step_ = 0;
  for (auto& g : groups_)
    if (!g->frozen()) g->zero_grads();
  const double local = static_cast<double>(counted_targets(batch));
  const double targets = all_ranks_sum(local);
  return run_pass(batch, PassMode::kTraining, static_cast<float>(1.0 / std::max(targets, 1.0)),
                  true) /
         std::max(local, 1.0);
}

}  // namespace zt
