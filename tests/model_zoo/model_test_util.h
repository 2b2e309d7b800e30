// What the model tests share: a random batch of token ids and the checkpoint mask of every
// checkpointable layer.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "runtime/model.h"

namespace zt::model_test {

struct Tokens {
  std::vector<int32_t> inputs, targets;
  Batch batch;
};

// B x T inputs and targets uniform in [0, vocab), from `seed`.
inline Tokens random_tokens(int64_t B, int64_t T, int vocab, uint32_t seed) {
  Tokens t;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  t.inputs.resize(B * T);
  t.targets.resize(B * T);
  for (auto& x : t.inputs) x = d(rng);
  for (auto& x : t.targets) x = d(rng);
  t.batch = Batch{t.inputs.data(), t.targets.data(), B, T};
  return t;
}

// EngineOptions::checkpoint for every layer that can be checkpointed.
inline std::vector<bool> every_block(Model& m) {
  std::vector<bool> mask;
  for (Layer* l : m.layers()) mask.push_back(l->checkpointable());
  return mask;
}

}  // namespace zt::model_test
