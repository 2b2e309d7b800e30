// Engine: the ZeRO training step.
#include "zero/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>

#include "runtime/status.h"

namespace zt {

Engine::Engine(Device& device, Communicator& comm, Model& model, EngineOptions options)
    : device_(device),
      comm_(comm),
      model_(model),
      options_(std::move(options)),
      policy_(ZeroPolicy::for_stage(options_.stage)),
      queue_(std::make_unique<CommQueue>(comm)) {
  auto layers = model_.layers();
  if (options_.checkpoint.empty()) options_.checkpoint.assign(layers.size(), false);
  ZT_ASSERT(options_.checkpoint.size() == layers.size(), "checkpoint mask has {} of {} layers",
            options_.checkpoint.size(), layers.size());
  for (size_t l = 0; l < layers.size(); ++l)
    ZT_ASSERT(!options_.checkpoint[l] || layers[l]->checkpointable(),
              "layer {} cannot be checkpointed", l);

  auto units = model_.units();
  std::vector<std::vector<DecayRange>> ranges;
  std::vector<int64_t> sizes;
  for (Unit* unit : units) {
    const FlatLayout& layout = unit->layout();
    const ShardLayout shard(layout.numel(), comm_.world(), comm_.rank());
    const bool persistent = layout.numel() <= options_.persistence_threshold;
    groups_.push_back(
        std::make_unique<ParamGroup>(device_, *unit, shard, policy_, persistent, options_.seed));
    const ParamGroup& g = *groups_.back();
    ranges.push_back(decay_ranges(layout, g.master_offset(), g.master_offset() + g.master_size()));
    sizes.push_back(g.master_size());
  }
  optimizer_ = std::make_unique<Optimizer>(device_, options_.optimizer, std::move(ranges),
                                           std::move(sizes));
  // A unit's gradient is complete after the backward of the first layer (in forward order)
  // that uses it: backward runs in reverse.
  last_backward_layer_.assign(units.size(), 0);
  for (size_t l = layers.size(); l-- > 0;) last_backward_layer_[layers[l]->unit_index()] = l;
}

Engine::~Engine() = default;

double Engine::all_ranks_sum(double local) {
  double sum = 0.0;
  const std::vector<double> all = all_gather_doubles(comm_, {&local, 1});
  for (double x : all) sum += x;  // rank order
  return sum;
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
  return 4 * (largest + options_.prefetch_bucket_size);
}

void Engine::prefetch(const std::vector<ScheduleItem>& schedule, size_t index) {
  // Walk ahead in the schedule and gather the next units while their sizes fit the budget;
  // units already gathered or gathering ahead count against it, so the gathered bytes stay
  // within the current unit + stage3_prefetch_bucket_size.
  auto layers = model_.layers();
  const int current = layers[schedule[index].layer]->unit_index();
  int64_t budget = options_.prefetch_bucket_size;
  std::vector<bool> seen(groups_.size(), false);
  seen[current] = true;
  for (size_t j = index + 1; j < schedule.size(); ++j) {
    const int u = layers[schedule[j].layer]->unit_index();
    ParamGroup& g = *groups_[u];
    if (seen[u] || !g.params_sharded()) continue;
    seen[u] = true;
    if (g.shard().padded > budget) break;
    budget -= g.shard().padded;
    if (g.state() == ParamState::kSharded) g.begin_gather(*queue_);
  }
  note_gathered();
}

double Engine::forward_backward(const Batch& batch, float dloss, bool last_micro_batch) {
  Kernels& k = device_.kernels();
  auto layers = model_.layers();
  const size_t L = layers.size();
  const int64_t N = batch.B * batch.T, C = model_.hidden_size();
  const bool training = dloss != 0.0f;

  std::vector<ScheduleItem> schedule;
  for (size_t l = 0; l < L; ++l) schedule.push_back({l, false});
  if (training)
    for (size_t l = L; l-- > 0;) schedule.push_back({l, true});

  // hidden[l]: output of layer l (input of l + 1), kept through backward; a checkpointed
  // layer keeps nothing else, so these are its saved input.
  const size_t hidden_bytes = static_cast<size_t>(N * C) * sizeof(float);
  std::vector<Buffer> hidden(L - 1);
  for (auto& h : hidden) h = device_.alloc(hidden_bytes, MemCategory::kActivations);
  Buffer losses = device_.alloc(static_cast<size_t>(N) * sizeof(float), MemCategory::kActivations);
  Buffer d_hidden[2];
  if (training)
    for (auto& d : d_hidden) d = device_.alloc(hidden_bytes, MemCategory::kActivations);
  std::vector<ActivationStore> acts;
  acts.reserve(L);
  for (size_t l = 0; l < L; ++l) acts.emplace_back(device_);

  // Gradient reductions: units are launched in buckets of about reduce_bucket_size elements;
  // before a bucket launches, the one before it is finished, so at most two buckets of full
  // unit gradients are alive when gradients are sharded.
  const bool reduce_now = policy_.shard_grads || last_micro_batch;
  std::vector<int> bucket;
  int64_t bucket_elements = 0;
  std::deque<std::pair<int, CommHandle>> in_flight;
  auto finish_in_flight = [&] {
    while (!in_flight.empty()) {
      in_flight.front().second.wait();
      groups_[in_flight.front().first]->finish_reduce(k);
      in_flight.pop_front();
    }
  };
  auto launch_bucket = [&] {
    finish_in_flight();
    for (int u : bucket) {
      in_flight.emplace_back(u, groups_[u]->begin_reduce(*queue_));
      if (!options_.overlap_comm) finish_in_flight();
    }
    bucket.clear();
    bucket_elements = 0;
  };

  for (size_t i = 0; i < schedule.size(); ++i) {
    const size_t l = schedule[i].layer;
    const int u = layers[l]->unit_index();
    ParamGroup& g = *groups_[u];
    g.ensure_full(*queue_);
    prefetch(schedule, i);

    LayerIO io;
    io.batch = &batch;
    io.input = l > 0 ? hidden[l - 1].as<float>() : nullptr;
    io.output = l + 1 < L ? hidden[l].as<float>() : nullptr;
    if (l + 1 == L) {
      io.losses = losses.as<float>();
      io.dloss = dloss;
      if (training) g.ensure_grads();  // the last layer computes its gradient in forward
    }
    if (!schedule[i].backward) {
      layers[l]->forward(k, io, acts[l]);
      if (training && options_.checkpoint[l]) acts[l].release();
    } else {
      g.ensure_grads();
      if (options_.checkpoint[l]) layers[l]->forward(k, io, acts[l]);  // recompute
      io.d_output = l + 1 < L ? d_hidden[l % 2].as<float>() : nullptr;
      if (l > 0) {
        io.d_input = d_hidden[(l + 1) % 2].as<float>();
        device_.zero(io.d_input, hidden_bytes);
      }
      ActivationStore scratch(device_);
      layers[l]->backward(k, io, acts[l], scratch);
      acts[l].release();
      if (reduce_now && last_backward_layer_[u] == l) {
        bucket.push_back(u);
        bucket_elements += g.shard().padded;
        if (bucket_elements >= options_.reduce_bucket_size) launch_bucket();
      }
    }
    // Release a gathered unit when the next item computes with another one.
    const bool next_same = i + 1 < schedule.size() &&
                           layers[schedule[i + 1].layer]->unit_index() == u;
    if (g.params_sharded() && !next_same) g.release();
  }
  if (!bucket.empty()) launch_bucket();
  finish_in_flight();

  std::vector<float> host_losses(static_cast<size_t>(N));
  device_.copy_to_host(host_losses.data(), losses.data(), losses.bytes());
  double sum = 0.0;
  for (float x : host_losses) sum += x;
  return sum / static_cast<double>(N);
}

StepResult Engine::train_step(std::span<const Batch> micro_batches, float lr) {
  ZT_ASSERT(!micro_batches.empty(), "no micro-batches");
  for (auto& g : groups_) g->zero_grads();
  StepResult result;
  result.lr = lr;
  const size_t accumulation = micro_batches.size();
  // Each rank's loss is its mean over B*T*accumulation positions scaled by 1/world, so the
  // rank-order sum of the reduction is the mean over the global batch.
  double local_loss = 0.0;
  for (size_t i = 0; i < accumulation; ++i) {
    const Batch& batch = micro_batches[i];
    const double positions = static_cast<double>(batch.B * batch.T) * accumulation * comm_.world();
    local_loss += forward_backward(batch, static_cast<float>(1.0 / positions),
                                   i + 1 == accumulation) / accumulation;
  }
  result.loss = all_ranks_sum(local_loss) / comm_.world();

  // Global norm: each rank's partial over its shard of every unit, in unit order, then the
  // partials added in rank order: the same arithmetic in every stage.
  double partial = 0.0;
  for (auto& g : groups_)
    partial += device_.kernels().sum_squares(g->grad_shard(), g->shard().shard);
  result.grad_norm = std::sqrt(all_ranks_sum(partial));
  float grad_scale = 1.0f;
  if (options_.gradient_clipping > 0.0f) {
    // DeepSpeed's rule: scale by max_norm / (norm + 1e-6) when that is below 1.
    const double coef = options_.gradient_clipping / (result.grad_norm + 1e-6);
    if (coef < 1.0) grad_scale = static_cast<float>(coef);
  }
  ++step_;
  std::vector<CommHandle> refresh;
  for (size_t u = 0; u < groups_.size(); ++u) {
    ParamGroup& g = *groups_[u];
    optimizer_->step(static_cast<int>(u), g.master(), g.grad_master(), lr, grad_scale, step_);
    refresh.push_back(g.begin_refresh(*queue_));
  }
  for (auto& h : refresh) h.wait();
  return result;
}

double Engine::eval_loss(const Batch& batch) {
  return all_ranks_sum(forward_backward(batch, 0.0f, false)) / comm_.world();
}

double Engine::compute_gradients(const Batch& batch) {
  for (auto& g : groups_) g->zero_grads();
  const double positions = static_cast<double>(batch.B * batch.T) * comm_.world();
  return forward_backward(batch, static_cast<float>(1.0 / positions), true);
}

void Engine::read_unit_params(int u, float* dst) {
  ParamGroup& g = *groups_[u];
  const int64_t n = g.shard().numel;
  if (g.state() == ParamState::kFull) {
    std::memcpy(dst, g.full_params(), static_cast<size_t>(n) * sizeof(float));
    return;
  }
  g.ensure_full(*queue_);
  std::memcpy(dst, g.full_params(), static_cast<size_t>(n) * sizeof(float));
  g.release();
}

void Engine::write_unit_params(int u, const float* src) {
  ParamGroup& g = *groups_[u];
  const ShardLayout& s = g.shard();
  if (!g.params_sharded()) {
    std::memcpy(g.full_params(), src, static_cast<size_t>(s.numel) * sizeof(float));
    return;
  }
  ZT_ASSERT(g.state() == ParamState::kSharded, "unit {} written while {}", g.name(),
            param_state_name(g.state()));
  float* shard = g.master();
  const int64_t end = std::min(s.end(), s.numel);
  std::fill(shard, shard + s.shard, 0.0f);
  if (end > s.begin())
    std::memcpy(shard, src + s.begin(), static_cast<size_t>(end - s.begin()) * sizeof(float));
}

float* Engine::unit_params(int u) {
  ZT_ASSERT(!groups_[u]->params_sharded(), "unit {} parameters are sharded", u);
  return groups_[u]->full_params();
}

const float* Engine::unit_grads(int u) {
  ZT_ASSERT(!policy_.shard_grads, "unit {} gradients are sharded", u);
  return groups_[u]->full_grads();
}

}  // namespace zt
