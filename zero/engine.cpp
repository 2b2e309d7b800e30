// Engine: forward, backward with recomputation, norm, clipping, optimizer step.
#include "zero/engine.h"

#include <cmath>

#include "runtime/status.h"
#include "zero/param_init.h"

namespace zt {

Engine::Engine(Device& device, Model& model, EngineOptions options)
    : device_(device), model_(model), options_(std::move(options)) {
  auto layers = model_.layers();
  if (options_.checkpoint.empty()) options_.checkpoint.assign(layers.size(), false);
  ZT_ASSERT(options_.checkpoint.size() == layers.size(), "checkpoint mask has {} of {} layers",
            options_.checkpoint.size(), layers.size());
  for (size_t l = 0; l < layers.size(); ++l)
    ZT_ASSERT(!options_.checkpoint[l] || layers[l]->checkpointable(),
              "layer {} cannot be checkpointed", l);

  std::vector<std::vector<DecayRange>> ranges;
  std::vector<int64_t> sizes;
  for (Unit* unit : model_.units()) {
    const FlatLayout& layout = unit->layout();
    const size_t bytes = static_cast<size_t>(layout.numel()) * sizeof(float);
    params_.push_back(device_.alloc(bytes, MemCategory::kParams));
    grads_.push_back(device_.alloc_zeroed(bytes, MemCategory::kGrads));
    init_flat_buffer(layout, options_.seed, params_.back().as<float>());
    unit->bind(params_.back().as<float>(), grads_.back().as<float>());
    ranges.push_back(decay_ranges(layout, 0, layout.numel()));
    sizes.push_back(layout.numel());
  }
  optimizer_ = std::make_unique<Optimizer>(device_, options_.optimizer, std::move(ranges),
                                           std::move(sizes));
}

Engine::~Engine() = default;

void Engine::zero_grads() {
  for (Buffer& g : grads_) device_.zero(g.data(), g.bytes());
}

double Engine::forward_backward(const Batch& batch, float dloss) {
  Kernels& k = device_.kernels();
  auto layers = model_.layers();
  const size_t L = layers.size();
  const int64_t N = batch.B * batch.T, C = model_.hidden_size();
  const bool training = dloss != 0.0f;

  // hidden[l]: output of layer l (input of l + 1), kept through backward; a checkpointed
  // layer keeps nothing else, so these are its saved input.
  std::vector<Buffer> hidden(L - 1);
  for (auto& h : hidden)
    h = device_.alloc(static_cast<size_t>(N * C) * sizeof(float), MemCategory::kActivations);
  Buffer losses = device_.alloc(static_cast<size_t>(N) * sizeof(float), MemCategory::kActivations);
  std::vector<ActivationStore> acts;
  acts.reserve(L);
  for (size_t l = 0; l < L; ++l) acts.emplace_back(device_);

  auto io_for = [&](size_t l) {
    LayerIO io;
    io.batch = &batch;
    io.input = l > 0 ? hidden[l - 1].as<float>() : nullptr;
    io.output = l + 1 < L ? hidden[l].as<float>() : nullptr;
    if (l + 1 == L) {
      io.losses = losses.as<float>();
      io.dloss = dloss;
    }
    return io;
  };

  for (size_t l = 0; l < L; ++l) {
    layers[l]->forward(k, io_for(l), acts[l]);
    if (training && options_.checkpoint[l]) acts[l].release();
  }
  std::vector<float> host_losses(static_cast<size_t>(N));
  device_.copy_to_host(host_losses.data(), losses.data(), losses.bytes());
  double sum = 0.0;
  for (float x : host_losses) sum += x;

  if (training) {
    // d_hidden[l % 2] holds d(output of layer l); the other is d(its input), filled next.
    const size_t hidden_bytes = static_cast<size_t>(N * C) * sizeof(float);
    Buffer d_hidden[2] = {device_.alloc(hidden_bytes, MemCategory::kActivations),
                          device_.alloc(hidden_bytes, MemCategory::kActivations)};
    for (size_t l = L; l-- > 0;) {
      LayerIO io = io_for(l);
      if (options_.checkpoint[l]) layers[l]->forward(k, io, acts[l]);  // recompute
      io.d_output = l + 1 < L ? d_hidden[l % 2].as<float>() : nullptr;
      if (l > 0) {
        io.d_input = d_hidden[(l + 1) % 2].as<float>();
        device_.zero(io.d_input, hidden_bytes);
      }
      ActivationStore scratch(device_);
      layers[l]->backward(k, io, acts[l], scratch);
      acts[l].release();
    }
  }
  return sum / static_cast<double>(N);
}

double Engine::global_grad_norm() {
  // Sum of squares unit by unit, in unit order (the ZeRO stages add shard partials in rank
  // order the same way).
  double sum = 0.0;
  for (Buffer& g : grads_)
    sum += device_.kernels().sum_squares(g.as<float>(), static_cast<int64_t>(g.bytes() / 4));
  return std::sqrt(sum);
}

StepResult Engine::train_step(std::span<const Batch> micro_batches, float lr) {
  ZT_ASSERT(!micro_batches.empty(), "no micro-batches");
  zero_grads();
  StepResult result;
  result.lr = lr;
  const double accumulation = static_cast<double>(micro_batches.size());
  for (const Batch& batch : micro_batches) {
    const float dloss = static_cast<float>(1.0 / (static_cast<double>(batch.B * batch.T) * accumulation));
    result.loss += forward_backward(batch, dloss) / accumulation;
  }
  result.grad_norm = global_grad_norm();
  float grad_scale = 1.0f;
  if (options_.gradient_clipping > 0.0f) {
    // DeepSpeed's rule: scale by max_norm / (norm + 1e-6) when that is below 1.
    const double coef = options_.gradient_clipping / (result.grad_norm + 1e-6);
    if (coef < 1.0) grad_scale = static_cast<float>(coef);
  }
  ++step_;
  for (int u = 0; u < num_units(); ++u)
    optimizer_->step(u, params_[u].as<float>(), grads_[u].as<float>(), lr, grad_scale, step_);
  return result;
}

double Engine::eval_loss(const Batch& batch) { return forward_backward(batch, 0.0f); }

double Engine::compute_gradients(const Batch& batch) {
  zero_grads();
  return forward_backward(batch, static_cast<float>(1.0 / static_cast<double>(batch.B * batch.T)));
}

}  // namespace zt
