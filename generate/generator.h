// Generator: text generation with a model whose parameters an Engine holds (loaded from a Hugging
// Face directory or a checkpoint by the caller), on any back end and ZeRO stage: each forward
// runs over the layers through Engine::run_layers, so stage 3 gathers every unit as it is used
// and releases it after, on every rank, in step.
//
// A sequence is prefilled once (the prompt's tokens in one forward, their keys and values into
// each layer's cache), then decoded a token at a time: each step runs the layers on the one new
// token (runtime/model.h's DecodeIO) and reads the last position's logits (B = 1). The caches
// are fp32, (capacity, kv_width) per layer for keys and for values, allocated once per
// Generator under MemCategory::kActivations. Sampling: sampling.h; the same seed gives the same
// tokens on every rank.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "generate/sampling.h"
#include "runtime/device.h"
#include "zero/engine.h"

namespace zt {

struct GenerateOptions {
  int64_t max_new_tokens = 64;
  // Generation ends after one of these is generated (it is kept as the last new token).
  std::vector<int32_t> stop_ids;
  SamplingOptions sampling;
};

struct Generation {
  std::vector<int32_t> ids;  // the new tokens (a stop token last when one ended it)
  bool stopped = false;      // ended by a stop token (else by max_new_tokens or the capacity)
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;  // the steps after the first token, together
};

class Generator {
 public:
  // `capacity`: the most tokens a sequence may hold, prompt and new ones (at most the model's
  // positions; kInput otherwise).
  Generator(Engine& engine, int64_t capacity);
  ~Generator();

  // The prompt (at least one token, ids below the vocabulary) continued. Collective under
  // stage 3. kInput when the prompt does not fit the capacity.
  Generation generate(std::span<const int32_t> prompt, const GenerateOptions& options);
  // The logits (V) of the token after `ids` from one forward over the whole sequence into an
  // empty cache: generation without reuse, which the tests hold generate() against.
  std::vector<float> next_logits(std::span<const int32_t> ids);
  int64_t capacity() const { return capacity_; }

 private:
  // One forward of `tokens` at positions past .. past + n - 1 of the cached sequence; returns the
  // last one's logits (V) on the host.
  std::vector<float> forward(std::span<const int32_t> tokens, int64_t past);

  Engine& engine_;
  Device& device_;
  int64_t capacity_;
  std::vector<Buffer> k_cache_, v_cache_;  // per layer (empty for a layer without a cache)
};

}  // namespace zt
