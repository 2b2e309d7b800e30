// What the model tests share: a random batch of token ids (optionally packing documents, with
// ignored targets), the checkpoint mask of every checkpointable layer, the whole-model
// finite-difference check, and the losses of a document packed after another against alone.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "runtime/model.h"
#include "zero/engine.h"

namespace zt::model_test {

struct Tokens {
  std::vector<int32_t> inputs, targets, positions;
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

// t's rows packed as documents: `positions` (B*T, Batch::positions; document_positions in
// tests/runtime/packed_documents.h writes them), and the targets at `ignored` (indices b*T + t)
// set to kIgnoreTarget.
inline void pack_documents(Tokens& t, std::vector<int32_t> positions,
                           const std::vector<int64_t>& ignored) {
  ASSERT_EQ(positions.size(), t.inputs.size());
  t.positions = std::move(positions);
  t.batch.positions = t.positions.data();
  for (int64_t i : ignored) t.targets[i] = kIgnoreTarget;
}

// Every element of every unit's parameters uniform in [-scale, scale], from `seed`: a model far
// from its initialization, where attention's weights are not near uniform, so that which keys
// a query reads shows in the losses.
inline void randomize_parameters(Engine& engine, Model& model, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  for (int u = 0; u < engine.num_units(); ++u) {
    std::vector<float> values(model.units()[u]->layout().numel());
    for (float& v : values) v = d(rng);
    engine.write_unit_params(u, values.data());
  }
}

// The losses of document D's tokens (T - a_len of them), one row of T tokens each way:
//   packed   document A (a_len tokens), then D, positions restarting at D's first token
//            (positions null: packed_unmasked, the two read as one document)
//   alone    D at the start of the row, then A as a second document
// Each token's loss is eval_loss with every other target ignored, so both batches average over
// the same count whatever eval_loss divides by. Inputs and targets random below `vocab`.
struct DocumentLosses {
  std::vector<double> packed, packed_unmasked, alone;
};
inline DocumentLosses document_losses(Engine& engine, int64_t T, int64_t a_len, int vocab,
                                      uint32_t seed) {
  const int64_t d_len = T - a_len;
  Tokens a = random_tokens(1, a_len, vocab, seed), d = random_tokens(1, d_len, vocab, seed + 1);
  auto concat = [](const std::vector<int32_t>& x, const std::vector<int32_t>& y) {
    std::vector<int32_t> xy = x;
    xy.insert(xy.end(), y.begin(), y.end());
    return xy;
  };
  auto counting = [](int64_t n) {
    std::vector<int32_t> p(n);
    for (int64_t i = 0; i < n; ++i) p[i] = int32_t(i);
    return p;
  };
  const std::vector<int32_t> packed_inputs = concat(a.inputs, d.inputs);
  const std::vector<int32_t> alone_inputs = concat(d.inputs, a.inputs);
  const std::vector<int32_t> packed_positions = concat(counting(a_len), counting(d_len));
  const std::vector<int32_t> alone_positions = concat(counting(d_len), counting(a_len));
  // The mean loss of `inputs` with only position `at` trained on, toward target `target`.
  auto loss_at = [&](const std::vector<int32_t>& inputs, const int32_t* positions, int64_t at,
                     int32_t target) {
    std::vector<int32_t> targets(T, kIgnoreTarget);
    targets[at] = target;
    return engine.eval_loss(Batch{inputs.data(), targets.data(), 1, T, positions});
  };
  DocumentLosses out;
  for (int64_t j = 0; j < d_len; ++j) {
    out.packed.push_back(loss_at(packed_inputs, packed_positions.data(), a_len + j, d.targets[j]));
    out.packed_unmasked.push_back(loss_at(packed_inputs, nullptr, a_len + j, d.targets[j]));
    out.alone.push_back(loss_at(alone_inputs, alone_positions.data(), j, d.targets[j]));
  }
  return out;
}

// document_losses' check: packed equals alone within 1e-5 relative for every token, and
// packed_unmasked differs from alone by more than 1e-3 relative for some token (attention across
// the boundary shows, so the first comparison can fail).
inline void expect_documents_independent(const DocumentLosses& l) {
  ASSERT_EQ(l.packed.size(), l.alone.size());
  double unmasked_difference = 0;
  for (size_t j = 0; j < l.alone.size(); ++j) {
    EXPECT_NEAR(l.packed[j], l.alone[j], 1e-5 * std::abs(l.alone[j])) << "token " << j;
    unmasked_difference = std::max(
        unmasked_difference, std::abs(l.packed_unmasked[j] - l.alone[j]) / std::abs(l.alone[j]));
  }
  EXPECT_GT(unmasked_difference, 1e-3);
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
// training on one rank (unit_params). Frozen units have no gradient: skipped. Returns the number
// of elements checked.
inline int check_gradients_by_finite_differences(Engine& engine, Model& model, const Batch& batch) {
  std::mt19937 rng(3);
  int checked = 0;
  for (int u = 0; u < engine.num_units(); ++u) {
    if (model.units()[u]->frozen()) continue;  // no gradient
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
