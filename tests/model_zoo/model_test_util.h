// What the model tests share: a random batch of token ids and the checkpoint mask of every
// checkpointable layer.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "runtime/model.h"
#include "zero/engine.h"

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

// Central differences on the whole model's mean loss for `batch`, after
// engine.compute_gradients(batch), at 4 sampled elements of every tensor (its exported rows:
// not a padded vocabulary's), in float32. Richardson extrapolation of the steps h = 1e-2 and
// h/2 cancels the h^2 truncation term (which alone reaches 1% on residual-path biases at
// h = 1e-2); an element passes when |fd - grad| <= 2e-3 * max(|fd|, |grad|) + 5e-4. fp32
// training on one rank (unit_params). Returns the number of elements checked.
inline int check_gradients_by_finite_differences(Engine& engine, Model& model, const Batch& batch) {
  std::mt19937 rng(3);
  int checked = 0;
  for (int u = 0; u < engine.num_units(); ++u) {
    float* params = engine.unit_params(u);
    const std::vector<float> grads = engine.unit_grads(u);
    for (const auto& e : model.units()[u]->layout().entries()) {
      const int64_t used = e.numel / e.spec.shape[0] * e.spec.exported_rows();
      std::uniform_int_distribution<int64_t> pick(0, used - 1);
      for (int s = 0; s < 4; ++s) {
        const int64_t i = e.offset + pick(rng);
        const float saved = params[i];
        auto central = [&](float h) {
          params[i] = saved + h;
          const double up = engine.eval_loss(batch);
          params[i] = saved - h;
          const double down = engine.eval_loss(batch);
          params[i] = saved;
          return (up - down) / (2.0 * h);
        };
        const double fd = (4.0 * central(5e-3f) - central(1e-2f)) / 3.0;
        const double g = grads[i];
        EXPECT_LE(std::abs(fd - g), 2e-3 * std::max(std::abs(fd), std::abs(g)) + 5e-4)
            << e.spec.name << "[" << i - e.offset << "] fd " << fd << " grad " << g;
        ++checked;
      }
    }
  }
  return checked;
}

}  // namespace zt::model_test
