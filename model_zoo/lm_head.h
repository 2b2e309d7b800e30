// LmHeadLayer: the last layer of the zoo's decoder models (gpt2.cpp, llama.cpp): the final
// norm, the LM head (a (Vp, C) weight in nn.Linear's layout, tied to the token embedding or its
// own) and softmax cross-entropy, fused. Logits are computed a chunk of rows at a time
// (logits_chunking.h) and never kept: when training, each chunk's gradient (d logits) is turned
// at once into d norm-output and d head weight, so the head keeps (N, C) floats instead of
// (N, Vp). FinalNorm is the norm it starts with: GPT-2's LayerNorm or Llama's RMSNorm.
// Holds no tensor memory.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "model_zoo/logits_chunking.h"
#include "model_zoo/table_unit.h"
#include "runtime/model.h"

namespace zt::zoo {

// A norm over rows of C whose weights are tensors of a Table: LayerNorm (weight and bias,
// the kernel's eps 1e-5; statistics mean and rstd) or RMSNorm (weight and eps; statistic
// rstd). Its statistics are fp32 (N) buffers kept for backward.
class FinalNorm {
 public:
  static FinalNorm layer_norm(int weight, int bias) { return {Kind::kLayerNorm, weight, bias, 0}; }
  static FinalNorm rms_norm(int weight, float eps) { return {Kind::kRmsNorm, weight, -1, eps}; }

  // The statistics' buffers for N rows, as forward allocates them.
  std::vector<ActivationBuffer> statistics(int64_t N) const;
  // out (N,C) = norm(inp (N,C)), the statistics allocated in `acts` (after what it holds).
  void forward(Kernels& k, const Table& u, Operand out, ConstOperand inp, ActivationStore& acts,
               int64_t N, int64_t C) const;
  // d_inp (N,C) += the gradient through the norm from d_out; the weights' gradients added to.
  // The statistics are acts.at(first_stat) on.
  void backward(Kernels& k, const Table& u, Operand d_inp, ConstOperand d_out, ConstOperand inp,
                const ActivationStore& acts, size_t first_stat, int64_t N, int64_t C) const;

 private:
  enum class Kind { kLayerNorm, kRmsNorm };
  FinalNorm(Kind kind, int weight, int bias, float eps)
      : kind_(kind), weight_(weight), bias_(bias), eps_(eps) {}
  Kind kind_;
  int weight_;  // tensor index in the unit's table
  int bias_;    // LayerNorm's bias; -1 for RMSNorm
  float eps_;   // RMSNorm's (LayerNorm's is the kernel's 1e-5)
};

class LmHeadLayer final : public Layer {
 public:
  // In `root` (unit 0): the norm's tensors and the head weight, tensor `head` of shape (Vp, C)
  // (rows V..Vp padding: GPT-2's padded vocabulary; Vp == V when not padded). `chunking` is
  // the model's and outlives the layer.
  LmHeadLayer(const Table& root, FinalNorm norm, int head, int64_t C, int64_t V, int64_t Vp,
              const LogitsChunking& chunking)
      : root_(root), norm_(norm), head_(head), C_(C), V_(V), Vp_(Vp), chunking_(chunking) {}
  int unit_index() const override { return root_.unit_indices().front(); }
  std::vector<int> unit_indices() const override { return root_.unit_indices(); }
  bool checkpointable() const override { return false; }

  void forward(Kernels& k, const LayerIO& io, ActivationStore& acts) override;
  void backward(Kernels& k, const LayerIO& io, ActivationStore& acts, ActivationStore&) override;
  // forward's buffers (the norm's output, its statistics, d norm-output when training) and its
  // logits chunk, as forward allocates them.
  std::optional<LayerActivations> activations(int64_t B, int64_t T, bool training) const override;
  // The logits (B, V) of each row's last new token: the norm and the head on those rows only.
  void decode(Kernels& k, const DecodeIO& io, ActivationStore& scratch) override;

 private:
  int64_t chunk_rows(int64_t N) const { return chunking_.rows_for(N, Vp_); }

  const Table& root_;
  FinalNorm norm_;
  int head_;
  int64_t C_, V_, Vp_;
  const LogitsChunking& chunking_;
};

}  // namespace zt::zoo
