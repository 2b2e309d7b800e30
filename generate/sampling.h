// How the next token is chosen from a row of logits: greedy (the argmax, the first on ties, as
// torch.argmax) or sampled as transformers' generate samples (do_sample): the logits divided by
// the temperature, then top-k (the k largest kept), then top-p (the fewest largest whose
// probabilities add up to top_p or more kept, the largest always), then one draw from the
// softmax of what is kept. Host code, no device.
#pragma once

#include <cstdint>
#include <random>
#include <span>

namespace zt {

struct SamplingOptions {
  float temperature = 0.0f;  // 0: greedy; > 0: sampled
  float top_p = 1.0f;        // (0, 1]; 1: no nucleus filter
  int top_k = 0;             // 0: no top-k filter
  uint64_t seed = 0;         // of the draws' generator (the same tokens for the same seed)
};

// Throws kInput naming `source` and the option for a temperature < 0, a top_p outside (0, 1] or
// a top_k < 0.
void validate_sampling(const SamplingOptions& options, const std::string& source);

// The index of the largest logit (the first of equal ones).
int32_t argmax_token(std::span<const float> logits);

// The next token: argmax_token when options.temperature is 0, else one draw from `rng`.
int32_t pick_token(std::span<const float> logits, const SamplingOptions& options,
                   std::mt19937_64& rng);

}  // namespace zt
