// LmHeadLayer and FinalNorm (lm_head.h).
#include "model_zoo/lm_head.h"

#include <algorithm>

namespace zt::zoo {

std::vector<ActivationBuffer> FinalNorm::statistics(int64_t N) const {
  if (kind_ == Kind::kLayerNorm) return {{N, true}, {N, true}};  // mean, rstd
  return {{N, true}};                                            // rstd
}

void FinalNorm::forward(Kernels& k, const Table& u, Operand out, ConstOperand inp,
                        ActivationStore& acts, int64_t N, int64_t C) const {
  if (kind_ == Kind::kLayerNorm) {
    float* mean = acts.alloc_stats(N);  // (N)
    float* rstd = acts.alloc_stats(N);  // (N)
    k.layernorm_forward(out, mean, rstd, inp, u.param(weight_), u.param(bias_), N, C);
  } else {
    float* rstd = acts.alloc_stats(N);  // (N)
    k.rmsnorm_forward(out, rstd, inp, u.param(weight_), N, C, eps_);
  }
}

void FinalNorm::backward(Kernels& k, const Table& u, Operand d_inp, ConstOperand d_out,
                         ConstOperand inp, const ActivationStore& acts, size_t first_stat,
                         int64_t N, int64_t C) const {
  if (kind_ == Kind::kLayerNorm)
    k.layernorm_backward(d_inp, u.grad(weight_), u.grad(bias_), d_out, inp, u.param(weight_),
                         acts.stats_at(first_stat), acts.stats_at(first_stat + 1), N, C);
  else
    k.rmsnorm_backward(d_inp, u.grad(weight_), d_out, inp, u.param(weight_),
                       acts.stats_at(first_stat), N, C);
}

// Saved buffers: the norm's output (index 0), its statistics (1 ..), then d norm-output.
void LmHeadLayer::forward(Kernels& k, const LayerIO& io, ActivationStore& acts) {
  const int64_t N = io.batch->B * io.batch->T, C = C_;
  Operand normed = acts.alloc_acts(N * C);  // (N, C)
  norm_.forward(k, root_, normed, io.input, acts, N, C);
  const bool training = io.dloss.has_value();
  Operand d_normed;
  if (training) d_normed = acts.alloc_acts(N * C);  // (N, C), each chunk's rows written once
  const LogitsOutput output = training ? LogitsOutput::kGradient : LogitsOutput::kKeep;
  const int64_t rows = chunk_rows(N);
  ActivationStore chunk(acts.device(), acts.dtype());
  Operand logits = chunk.alloc_acts(rows * Vp_);  // (rows, Vp)
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t n = std::min(rows, N - r0);
    k.matmul_forward(logits, normed.at(r0 * C), root_.param(head_), nullptr, n, C, Vp_,
                     WeightLayout::kOutIn);
    k.softmax_cross_entropy(io.losses + r0, logits, io.batch->targets + r0, n, V_, Vp_, output,
                            io.dloss.value_or(0.0f));
    if (training)
      k.matmul_backward(d_normed.at(r0 * C), root_.grad(head_), nullptr, logits, normed.at(r0 * C),
                        root_.param(head_), n, C, Vp_, WeightLayout::kOutIn, GradOutput::kWrite);
  }
}

void LmHeadLayer::backward(Kernels& k, const LayerIO& io, ActivationStore& acts, ActivationStore&) {
  const int64_t N = io.batch->B * io.batch->T;
  const size_t d_normed = 1 + norm_.statistics(N).size();
  norm_.backward(k, root_, io.d_input, acts.at(d_normed), io.input, acts, 1, N, C_);
}

void LmHeadLayer::decode(Kernels& k, const DecodeIO& io, ActivationStore& scratch) {
  const int64_t B = io.B, C = C_;
  Operand last = scratch.alloc_acts(B * C);  // (B, C) each row's last new token
  for (int64_t b = 0; b < B; ++b)
    cast(k, last.at(b * C), io.input.at((b * io.T + io.T - 1) * C), C);
  Operand normed = scratch.alloc_acts(B * C);  // (B, C)
  norm_.forward(k, root_, normed, last, scratch, B, C);
  // The logits in fp32 (sampling reads them), the real vocabulary's columns.
  const bool padded = Vp_ != V_;
  const Operand logits = padded ? Operand(scratch.alloc_stats(B * Vp_)) : io.logits;  // (B, Vp)
  k.matmul_forward(logits, normed, root_.param(head_), nullptr, B, C, Vp_, WeightLayout::kOutIn);
  if (padded)
    for (int64_t b = 0; b < B; ++b) cast(k, io.logits + b * V_, logits.at(b * Vp_), V_);
}

std::optional<LayerActivations> LmHeadLayer::activations(int64_t B, int64_t T,
                                                         bool training) const {
  const int64_t N = B * T;
  LayerActivations a;
  a.saved = {{N * C_}};
  for (const ActivationBuffer& stat : norm_.statistics(N)) a.saved.push_back(stat);
  if (training) a.saved.push_back({N * C_});
  a.transient = chunk_rows(N) * Vp_;
  return a;
}

}  // namespace zt::zoo
