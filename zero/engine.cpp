// Engine: the ZeRO training step.
#include "zero/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>

#include "runtime/status.h"

namespace zt {

const char* engine_point_name(EnginePoint point) {
  switch (point) {
    case EnginePoint::kForward: return "forward";
    case EnginePoint::kBackward: return "backward";
    case EnginePoint::kOptimizer: return "optimizer";
    case EnginePoint::kEvaluation: return "evaluation";
  }
  return "?";
}

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
    groups_.push_back(std::make_unique<ParamGroup>(device_, *unit, shard, policy_,
                                                   options_.precision, persistent, options_.seed));
    const ParamGroup& g = *groups_.back();
    ranges.push_back(decay_ranges(layout, g.master_offset(), g.master_offset() + g.master_size()));
    sizes.push_back(g.master_size());
  }
  optimizer_ = std::make_unique<Optimizer>(device_, options_.optimizer, std::move(ranges),
                                           std::move(sizes));
  const Precision& precision = options_.precision;
  if (precision.mixed())
    rounding_ = std::make_unique<RoundingKernels>(device_.kernels(), precision.compute);
  if (precision.loss_scaling()) loss_scaler_ = std::make_unique<LossScaler>(precision.fp16);
  // A unit's gradient is complete after the backward of the first layer (in forward order)
  // that uses it: backward runs in reverse.
  last_backward_layer_.assign(units.size(), 0);
  for (size_t l = layers.size(); l-- > 0;) last_backward_layer_[layers[l]->unit_index()] = l;
}

Engine::~Engine() = default;

Kernels& Engine::compute_kernels() {
  return rounding_ ? static_cast<Kernels&>(*rounding_) : device_.kernels();
}

void Engine::for_each_fp32_chunk(const void* src, DType dtype, int64_t n,
                                 const std::function<void(const float*, int64_t, int64_t)>& f) {
  if (dtype == DType::kF32) {
    f(static_cast<const float*>(src), 0, n);
    return;
  }
  const int64_t chunk = std::min(n, kWorkspaceChunk);
  Buffer scratch = device_.alloc(static_cast<size_t>(chunk) * sizeof(float),
                                 MemCategory::kWorkspace);
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t count = std::min(chunk, n - begin);
    device_.kernels().cast(scratch.data(), DType::kF32,
                           static_cast<const std::byte*>(src) +
                               static_cast<size_t>(begin) * dtype_size(dtype),
                           dtype, count);
    f(scratch.as<float>(), begin, count);
  }
}

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
  return static_cast<int64_t>(dtype_size(options_.precision.compute)) *
         (largest + options_.prefetch_bucket_size);
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

double Engine::forward_backward(const Batch& host_batch, float dloss, bool last_micro_batch) {
  Kernels& k = compute_kernels();
  // Kernels read token ids from device memory: a GPU gets a copy of the micro-batch.
  Batch batch = host_batch;
  Buffer tokens;
  if (!device_.host_accessible()) {
    const size_t bytes = static_cast<size_t>(batch.B * batch.T) * sizeof(int32_t);
    tokens = device_.alloc(2 * bytes, MemCategory::kActivations);
    device_.copy_from_host(tokens.data(), host_batch.inputs, bytes);
    device_.copy_from_host(tokens.as<char>() + bytes, host_batch.targets, bytes);
    batch.inputs = tokens.as<const int32_t>();
    batch.targets = reinterpret_cast<const int32_t*>(tokens.as<char>() + bytes);
  }
  auto layers = model_.layers();
  const size_t L = layers.size();
  const int64_t N = batch.B * batch.T, C = model_.hidden_size();
  const bool training = dloss != 0.0f;
  const DType act_dtype = options_.precision.compute;
  const bool pack = act_dtype != DType::kF32;  // activations kept 16-bit, computed in fp32

  std::vector<ScheduleItem> schedule;
  for (size_t l = 0; l < L; ++l) schedule.push_back({l, false});
  if (training)
    for (size_t l = L; l-- > 0;) schedule.push_back({l, true});

  // hidden[l]: output of layer l (input of l + 1), kept through backward in the working dtype;
  // a checkpointed layer keeps nothing else, so these are its saved input. Under 16-bit
  // activations a layer reads and writes fp32 copies (hidden_in, hidden_out) of them.
  const size_t hidden_floats = static_cast<size_t>(N * C);
  const size_t hidden_bytes = hidden_floats * sizeof(float);
  std::vector<Buffer> hidden(L - 1);
  for (auto& h : hidden)
    h = device_.alloc(hidden_floats * dtype_size(act_dtype), MemCategory::kActivations);
  Buffer losses = device_.alloc(static_cast<size_t>(N) * sizeof(float), MemCategory::kActivations);
  Buffer d_hidden[2];
  if (training)
    for (auto& d : d_hidden) d = device_.alloc(hidden_bytes, MemCategory::kActivations);
  std::vector<ActivationStore> acts;
  acts.reserve(L);
  for (size_t l = 0; l < L; ++l) acts.emplace_back(device_);
  Buffer hidden_in, hidden_out;
  auto input_of = [&](size_t l) -> const float* {
    if (l == 0) return nullptr;
    if (!pack) return hidden[l - 1].as<float>();
    hidden_in = device_.alloc(hidden_bytes, MemCategory::kActivations);
    device_.kernels().cast(hidden_in.data(), DType::kF32, hidden[l - 1].data(), act_dtype,
                           N * C);
    return hidden_in.as<float>();
  };
  auto output_of = [&](size_t l, bool computed) -> float* {
    if (l + 1 == L) return nullptr;
    if (!pack) return hidden[l].as<float>();
    if (!computed) return nullptr;  // a backward without recompute writes no output
    hidden_out = device_.alloc(hidden_bytes, MemCategory::kActivations);
    return hidden_out.as<float>();
  };

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
      groups_[in_flight.front().first]->finish_reduce(device_.kernels());
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
    g.use(*queue_);
    prefetch(schedule, i);

    LayerIO io;
    io.batch = &batch;
    io.input = input_of(l);
    io.output = output_of(l, !schedule[i].backward || options_.checkpoint[l]);
    if (l + 1 == L) {
      io.losses = losses.as<float>();
      io.dloss = dloss;
      if (training) g.ensure_grads();  // the last layer computes its gradient in forward
    }
    if (!schedule[i].backward) {
      fault_point(training ? EnginePoint::kForward : EnginePoint::kEvaluation, u);
      layers[l]->forward(k, io, acts[l]);
      if (pack && io.output)
        device_.kernels().cast(hidden[l].data(), act_dtype, io.output, DType::kF32, N * C);
      if (!training || options_.checkpoint[l])
        acts[l].release();
      else if (pack)
        acts[l].pack(act_dtype);
    } else {
      g.ensure_grads();
      if (options_.checkpoint[l])
        layers[l]->forward(k, io, acts[l]);  // recompute (output rewritten with the same bits)
      else
        acts[l].unpack();
      io.d_output = l + 1 < L ? d_hidden[l % 2].as<float>() : nullptr;
      if (l > 0) {
        io.d_input = d_hidden[(l + 1) % 2].as<float>();
        device_.zero(io.d_input, hidden_bytes);
      }
      ActivationStore scratch(device_);
      layers[l]->backward(k, io, acts[l], scratch);
      acts[l].release();
      if (last_backward_layer_[u] == l) {  // the unit's gradient of this micro-batch is complete
        if (gradient_hook_) gradient_hook_(u, g.full_grads(), g.shard().numel);
        g.finish_grads(device_.kernels(), reduce_now);
        if (reduce_now) {
          bucket.push_back(u);
          bucket_elements += g.shard().padded;
          if (bucket_elements >= options_.reduce_bucket_size) launch_bucket();
        }
        fault_point(EnginePoint::kBackward, u);
      }
    }
    hidden_in.reset();
    hidden_out.reset();
    // Done with the unit when the next item computes with another one.
    const bool next_same = i + 1 < schedule.size() &&
                           layers[schedule[i + 1].layer]->unit_index() == u;
    if (!next_same) g.done();
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
  queue_->set_context(fmt::format("step {}", step_ + 1));  // names the step in a timeout report
  for (auto& g : groups_) g->zero_grads();
  StepResult result;
  result.lr = lr;
  // fp16: the loss (through its gradient dloss) is multiplied by the scale; powers of two, so
  // scaling and unscaling are exact unless a value overflows or underflows.
  const double scale = loss_scaler_ ? loss_scaler_->scale() : 1.0;
  result.loss_scale = static_cast<float>(scale);
  const size_t accumulation = micro_batches.size();
  // Each rank's loss is its mean over B*T*accumulation positions scaled by 1/world, so the
  // rank-order sum of the reduction is the mean over the global batch.
  double local_loss = 0.0;
  for (size_t i = 0; i < accumulation; ++i) {
    const Batch& batch = micro_batches[i];
    const double positions = static_cast<double>(batch.B * batch.T) * accumulation * comm_.world();
    local_loss += forward_backward(batch, static_cast<float>(scale / positions),
                                   i + 1 == accumulation) / accumulation;
  }
  result.loss = all_ranks_sum(local_loss) / comm_.world();

  // Global norm: each rank's partial over its shard of every unit, in unit order, then the
  // partials added in rank order: the same arithmetic in every stage. A non-finite gradient on
  // any rank makes the sum non-finite on every rank: that is the agreed overflow flag.
  double partial = 0.0;
  for (auto& g : groups_) {
    for_each_fp32_chunk(g->grad_shard(), g->grad_dtype(), g->shard().shard,
                        [&](const float* x, int64_t, int64_t n) {
                          partial += device_.kernels().sum_squares(x, n);
                        });
  }
  const double norm_squared = all_ranks_sum(partial);
  result.grad_norm = std::sqrt(norm_squared) / scale;
  if (loss_scaler_) {
    bool skip = false;
    try {
      skip = loss_scaler_->update(!std::isfinite(norm_squared));
    } catch (const Error& e) {  // at the minimum scale; the scaler's state is unchanged
      result.failure = e.message();
      result.skipped = true;
      return result;
    }
    result.scale_update = loss_scaler_->last_update();
    if (skip) {
      // Parameters, master and optimizer state untouched; the stored gradients are zeroed at
      // the start of the next step.
      result.skipped = true;
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
  std::vector<CommHandle> refresh;
  for (size_t u = 0; u < groups_.size(); ++u) {
    optimizer_step(static_cast<int>(u), lr, static_cast<float>(grad_scale));
    refresh.push_back(groups_[u]->begin_refresh(*queue_));
  }
  for (auto& h : refresh) h.wait();
  return result;
}

void Engine::optimizer_step(int u, float lr, float grad_scale) {
  fault_point(EnginePoint::kOptimizer, u);
  ParamGroup& g = *groups_[u];
  const int64_t n = g.master_size();
  float* master = g.master();
  const DType dtype = options_.precision.compute;
  Kernels& k = device_.kernels();
  // Chunk by chunk when the gradients (or, without a master, the parameters) are 16-bit: the
  // fp32 workspace stays one chunk, and the update is element-wise, so the bits are those of
  // one pass over the whole range.
  for_each_fp32_chunk(g.grad_master(), g.grad_dtype(), n,
                      [&](const float* grads, int64_t begin, int64_t count) {
    if (master) {
      optimizer_->step_part(u, begin, begin + count, master + begin, grads, lr, grad_scale,
                            step_);
      return;
    }
    // Pure 16-bit: the update computed in fp32 from the working values and rounded back.
    void* working = static_cast<std::byte*>(g.working_master_range()) +
                    static_cast<size_t>(begin) * dtype_size(dtype);
    Buffer params = device_.alloc(static_cast<size_t>(count) * sizeof(float),
                                  MemCategory::kWorkspace);
    k.cast(params.data(), DType::kF32, working, dtype, count);
    optimizer_->step_part(u, begin, begin + count, params.as<float>(), grads, lr, grad_scale,
                          step_);
    k.cast(working, dtype, params.data(), DType::kF32, count);
  });
  g.sync_working(k);  // mixed: working = master rounded; fp32: they are one buffer
}

double Engine::eval_loss(const Batch& batch) {
  queue_->set_context(fmt::format("evaluation after step {}", step_));
  return all_ranks_sum(forward_backward(batch, 0.0f, false)) / comm_.world();
}

double Engine::compute_gradients(const Batch& batch) {
  for (auto& g : groups_) g->zero_grads();
  const double positions = static_cast<double>(batch.B * batch.T) * comm_.world();
  return forward_backward(batch, static_cast<float>(1.0 / positions), true);
}

void Engine::read_unit_params(int u, float* dst) {
  ParamGroup& g = *groups_[u];
  const ShardLayout& s = g.shard();
  const size_t numel_bytes = static_cast<size_t>(s.numel) * sizeof(float);
  if (options_.precision.has_master()) {
    if (g.master_size() == s.padded) {  // the master is whole on every rank
      device_.copy_to_host(dst, g.master(), numel_bytes);
      return;
    }
    Buffer full = device_.alloc(static_cast<size_t>(s.padded) * sizeof(float),
                                MemCategory::kWorkspace);
    queue_->all_gather(g.master(), full.data(), s.shard, DType::kF32, g.name()).wait();
    device_.copy_to_host(dst, full.data(), numel_bytes);
    return;
  }
  // fp32: the working parameters are the master; pure 16-bit: the fp32 compute copy holds the
  // working values exactly. Either way `use` gathers a sharded unit.
  const bool was_full = g.state() == ParamState::kFull;
  g.use(*queue_);
  device_.copy_to_host(dst, g.bound_params(), numel_bytes);
  if (!was_full || options_.precision.mixed()) g.done();
}

void Engine::write_unit_params(int u, const float* src) {
  ParamGroup& g = *groups_[u];
  const ShardLayout& s = g.shard();
  ZT_ASSERT(!g.params_sharded() || g.state() == ParamState::kSharded, "unit {} written while {}",
            g.name(), param_state_name(g.state()));
  // The values over [begin, end) of the padded buffer (zeros past numel), fp32.
  auto padded_range = [&](int64_t begin, int64_t end) {
    std::vector<float> range(static_cast<size_t>(end - begin), 0.0f);
    const int64_t stop = std::min(end, s.numel);
    if (stop > begin) std::copy(src + begin, src + stop, range.begin());
    return range;
  };
  if (options_.precision.has_master()) {
    const std::vector<float> range =
        padded_range(g.master_offset(), g.master_offset() + g.master_size());
    device_.copy_from_host(g.master(), range.data(), range.size() * sizeof(float));
  }
  // The working parameters: the whole padded buffer, or this rank's shard; rounded when 16-bit.
  const bool sharded = g.params_sharded();
  const int64_t begin = sharded ? s.begin() : 0, size = sharded ? s.shard : s.padded;
  const std::vector<float> range = padded_range(begin, begin + size);
  const size_t bytes = range.size() * sizeof(float);
  if (!options_.precision.mixed()) {
    device_.copy_from_host(g.working_data(), range.data(), bytes);
    return;
  }
  Buffer staged = device_.alloc(bytes, MemCategory::kWorkspace);
  device_.copy_from_host(staged.data(), range.data(), bytes);
  device_.kernels().cast(g.working_data(), options_.precision.compute, staged.data(),
                         DType::kF32, size);
}

float* Engine::unit_params(int u) {
  ZT_ASSERT(!options_.precision.mixed(), "unit_params is for fp32 training");
  ZT_ASSERT(!groups_[u]->params_sharded(), "unit {} parameters are sharded", u);
  return groups_[u]->full_params();
}

const float* Engine::unit_grads(int u) {
  ZT_ASSERT(!options_.precision.mixed(), "unit_grads is for fp32 training");
  ZT_ASSERT(!policy_.shard_grads, "unit {} gradients are sharded", u);
  return groups_[u]->full_grads();
}

std::vector<std::byte> Engine::model_state_bytes(int u) {
  ParamGroup& g = *groups_[u];
  std::vector<std::byte> out;
  auto append = [&](const void* data, size_t bytes) {
    const size_t at = out.size();
    out.resize(at + bytes);
    device_.copy_to_host(out.data() + at, data, bytes);
  };
  append(g.working_bytes().data(), g.working_bytes().size());
  append(g.master_bytes().data(), g.master_bytes().size());
  for (float* state : optimizer_->state(u))
    append(state, static_cast<size_t>(g.master_size()) * sizeof(float));
  return out;
}

}  // namespace zt
