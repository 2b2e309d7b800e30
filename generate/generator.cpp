// Generator (generator.h): prefill, then one decode step per token over Engine::run_layers.
#include "generate/generator.h"

#include <chrono>
#include <numeric>
#include <random>

#include "runtime/activation_store.h"
#include "runtime/status.h"

namespace zt {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

Generator::Generator(Engine& engine, int64_t capacity)
    : engine_(engine), device_(engine.device()), capacity_(capacity) {
  Model& model = engine.model();
  if (capacity <= 0 || capacity > model.max_seq_len())
    throw_input(fmt::format("generation: {} tokens of context asked; the model has {} positions",
                            capacity, model.max_seq_len()));
  for (Layer* layer : model.layers()) {
    const size_t bytes = static_cast<size_t>(capacity * layer->kv_width()) * sizeof(float);
    k_cache_.push_back(device_.alloc(bytes, MemCategory::kActivations));
    v_cache_.push_back(device_.alloc(bytes, MemCategory::kActivations));
  }
}

Generator::~Generator() = default;

std::vector<float> Generator::forward(std::span<const int32_t> tokens, int64_t past) {
  Model& model = engine_.model();
  const int64_t T = static_cast<int64_t>(tokens.size()), C = model.hidden_size();
  const int64_t V = model.vocab_size();
  ZT_ASSERT(T > 0 && past + T <= capacity_, "decode of {} tokens after {} in {}", T, past,
            capacity_);
  for (int32_t id : tokens)
    if (id < 0 || id >= V)
      throw_input(fmt::format("generation: token id {} is not below the vocabulary's {}", id, V));
  // Token ids and their positions where the kernels read them.
  std::vector<int32_t> host(2 * static_cast<size_t>(T));
  std::copy(tokens.begin(), tokens.end(), host.begin());
  std::iota(host.begin() + T, host.end(), static_cast<int32_t>(past));
  Buffer ids = device_.alloc(host.size() * sizeof(int32_t), MemCategory::kActivations);
  device_.copy_from_host(ids.data(), host.data(), host.size() * sizeof(int32_t));
  Buffer hidden[2] = {
      device_.alloc(static_cast<size_t>(T * C) * sizeof(float), MemCategory::kActivations),
      device_.alloc(static_cast<size_t>(T * C) * sizeof(float), MemCategory::kActivations)};
  Buffer logits = device_.alloc(static_cast<size_t>(V) * sizeof(float), MemCategory::kActivations);
  const size_t L = model.layers().size();
  engine_.run_layers([&](size_t l, Kernels& k) {
    DecodeIO io;
    io.tokens = ids.as<int32_t>();
    io.positions = ids.as<int32_t>() + T;
    io.B = 1;
    io.T = T;
    io.past = past;
    io.capacity = capacity_;
    io.input = l == 0 ? nullptr : hidden[(l + 1) % 2].as<float>();
    io.output = l + 1 == L ? nullptr : hidden[l % 2].as<float>();
    io.k_cache = k_cache_[l].as<float>();
    io.v_cache = v_cache_[l].as<float>();
    io.logits = l + 1 == L ? logits.as<float>() : nullptr;
    ActivationStore scratch(device_);
    model.layers()[l]->decode(k, io, scratch);
  });
  std::vector<float> out(static_cast<size_t>(V));
  device_.copy_to_host(out.data(), logits.data(), out.size() * sizeof(float));
  return out;
}

Generation Generator::generate(std::span<const int32_t> prompt, const GenerateOptions& options) {
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (n == 0) throw_input("generation: the prompt has no tokens");
  if (n >= capacity_)
    throw_input(fmt::format("generation: the prompt's {} tokens leave no room in a context of {}",
                            n, capacity_));
  std::mt19937_64 rng(options.sampling.seed);
  Generation g;
  auto t0 = Clock::now();
  std::vector<float> logits = forward(prompt, 0);
  g.prefill_seconds = seconds_since(t0);
  t0 = Clock::now();
  for (int64_t past = n;; ++past) {
    const int32_t next = pick_token(logits, options.sampling, rng);
    g.ids.push_back(next);
    g.stopped =
        std::find(options.stop_ids.begin(), options.stop_ids.end(), next) != options.stop_ids.end();
    if (g.stopped || static_cast<int64_t>(g.ids.size()) >= options.max_new_tokens ||
        past + 1 >= capacity_)
      break;
    logits = forward(std::span<const int32_t>(&g.ids.back(), 1), past);
  }
  g.decode_seconds = seconds_since(t0);
  return g;
}

std::vector<float> Generator::next_logits(std::span<const int32_t> ids) {
  if (ids.empty() || static_cast<int64_t>(ids.size()) > capacity_)
    throw_input(
        fmt::format("generation: {} tokens do not fit a context of {}", ids.size(), capacity_));
  return forward(ids, 0);
}

}  // namespace zt
