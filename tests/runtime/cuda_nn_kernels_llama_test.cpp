// Parity of the CUDA back end's kernels for Llama (RMSNorm, rotary embeddings, SwiGLU,
// grouped-query attention, the embedding without a position table) with the CPU back end's, and
// of rows packing documents (Batch::positions: attention, rotary and position embeddings) and
// ignored targets (kIgnoreTarget), on identical random inputs. The fixture and helpers are
// cuda_nn_test_util.h's (see cuda_nn_kernels_test.cpp for the rest of the parity suite). Every
// test skips when no GPU is usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "runtime/cpu/cpu_device.h"
#include "runtime/device.h"
#include "runtime/device_factory.h"
#include "runtime/kernels.h"
#include "runtime/model.h"

#include "cuda_nn_test_util.h"
#include "packed_documents.h"
#include "random_data.h"

namespace zt::cuda_nn_test {
namespace {

using test::random_floats;

// ---------------------------------------------------------------------------------------------
// Llama's kernels: RMSNorm, rotary embeddings, SwiGLU, grouped-query attention, the embedding
// without a position table (CPU references: kernels_llama_test.cpp).

TEST_F(CudaNnKernelsTest, RmsnormForwardAndBackwardMatchCpu) {
  for (int64_t C : {int64_t{32}, int64_t{61}}) {
    const int64_t N = 1001;  // more rows than the weight reduction's row groups, not a multiple
    const std::string what = "rmsnorm C" + std::to_string(C);
    Mirror x = mirror(random_floats(N * C, 1, -2.0f, 2.0f));
    Mirror w = mirror(random_floats(C, 2, 0.5f, 1.5f));
    Mirror out = mirror(random_floats(N * C, 3));
    Mirror rstd = mirror(random_floats(N, 4));
    cpu().rmsnorm_forward(out.c(), rstd.c(), x.c(), w.c(), N, C, 1e-6f);
    gpu().rmsnorm_forward(out.g(), rstd.g(), x.g(), w.g(), N, C, 1e-6f);
    expect_close(out.gpu(), out.cpu(), kRtol, what + " out");
    expect_close(rstd.gpu(), rstd.cpu(), kRtol, what + " rstd");
    rstd.reset_gpu(rstd.cpu());
    Mirror dout = mirror(random_floats(N * C, 5));
    Mirror dx = mirror(random_floats(N * C, 6));  // non-zero: += is checked
    Mirror dw = mirror(random_floats(C, 7));
    cpu().rmsnorm_backward(dx.c(), dw.c(), dout.c(), x.c(), w.c(), rstd.c(), N, C);
    gpu().rmsnorm_backward(dx.g(), dw.g(), dout.g(), x.g(), w.g(), rstd.g(), N, C);
    expect_close(dx.gpu(), dx.cpu(), kRtol, what + " dinp");
    expect_close(dw.gpu(), dw.cpu(), 1e-4, what + " dweight");  // 1001-term sums, other order
  }
}

TEST_F(CudaNnKernelsTest, RopeForwardAndBackwardMatchCpu) {
  const int64_t B = 2, T = 300, NH = 4, NKV = 2, hd = 64, R = (NH + 2 * NKV) * hd;
  for (float theta : {10000.0f, 1000000.0f}) {
    const std::string what = "rope theta " + std::to_string(theta);
    Mirror qkv = mirror(random_floats(B * T * R, 1));
    cpu().rope_forward(qkv.c(), B, T, NH, NKV, hd, theta, nullptr);
    gpu().rope_forward(qkv.g(), B, T, NH, NKV, hd, theta, nullptr);
    // The same fp32 angles; cos/sin in double on both, so at most a rare 1-ulp difference.
    expect_close(qkv.gpu(), qkv.cpu(), kRtol, what + " forward");
    qkv.reset_gpu(qkv.cpu());
    cpu().rope_backward(qkv.c(), B, T, NH, NKV, hd, theta, nullptr);
    gpu().rope_backward(qkv.g(), B, T, NH, NKV, hd, theta, nullptr);
    expect_close(qkv.gpu(), qkv.cpu(), kRtol, what + " backward");
  }
}

TEST_F(CudaNnKernelsTest, SwigluForwardAndBackwardMatchCpu) {
  const int64_t N = 37, F = 61;
  Mirror gate_up = mirror(random_floats(N * 2 * F, 1, -8.0f, 8.0f));
  Mirror out = mirror(random_floats(N * F, 2));
  cpu().swiglu_forward(out.c(), gate_up.c(), N, F);
  gpu().swiglu_forward(out.g(), gate_up.g(), N, F);
  expect_close(out.gpu(), out.cpu(), kRtol, "swiglu out");
  Mirror dout = mirror(random_floats(N * F, 3));
  Mirror dgate_up = mirror(random_floats(N * 2 * F, 4));  // non-zero: += is checked
  cpu().swiglu_backward(dgate_up.c(), gate_up.c(), dout.c(), N, F);
  gpu().swiglu_backward(dgate_up.g(), gate_up.g(), dout.g(), N, F);
  expect_close(dgate_up.gpu(), dgate_up.cpu(), kRtol, "swiglu dgate_up");
}

TEST_F(CudaNnKernelsTest, GqaAttentionForwardAndBackwardMatchCpu) {
  struct GqaShape {
    int64_t B, T, NH, NKV, hd;
  };
  for (const GqaShape& s :
       {GqaShape{2, 16, 4, 2, 16}, GqaShape{3, 37, 6, 2, 20}, GqaShape{1, 33, 4, 1, 8}}) {
    const std::string what = "gqa T" + std::to_string(s.T) + " NH" + std::to_string(s.NH) + " NKV" +
                             std::to_string(s.NKV);
    const int64_t R = (s.NH + 2 * s.NKV) * s.hd, HD = s.NH * s.hd;
    Mirror qkv = mirror(random_floats(s.B * s.T * R, 1, -2.0f, 2.0f));
    Mirror out = mirror(random_floats(s.B * s.T * HD, 2));
    Mirror att = mirror(random_floats(s.B * s.NH * s.T * s.T, 3));
    cpu().gqa_attention_forward(out.c(), att.c(), qkv.c(), s.B, s.T, s.NH, s.NKV, s.hd, nullptr);
    gpu().gqa_attention_forward(out.g(), att.g(), qkv.g(), s.B, s.T, s.NH, s.NKV, s.hd, nullptr);
    expect_close(att.gpu(), att.cpu(), kRtol, what + " att");
    expect_close(out.gpu(), out.cpu(), kRtol, what + " out");
    att.reset_gpu(att.cpu());
    Mirror dout = mirror(random_floats(s.B * s.T * HD, 4));
    Mirror dqkv = mirror(random_floats(s.B * s.T * R, 5));  // non-zero: += is checked
    cpu().gqa_attention_backward(dqkv.c(), dout.c(), qkv.c(), att.c(), s.B, s.T, s.NH, s.NKV, s.hd,
                                 nullptr);
    gpu().gqa_attention_backward(dqkv.g(), dout.g(), qkv.g(), att.g(), s.B, s.T, s.NH, s.NKV, s.hd,
                                 nullptr);
    expect_close(dqkv.gpu(), dqkv.cpu(), kRtol, what + " dqkv");
  }
}

TEST_F(CudaNnKernelsTest, EmbeddingWithoutPositionsMatchesCpu) {
  const int64_t B = 2, T = 9, C = 40, V = 31;
  Mirror tokens = mirror(random_tokens(B * T, int32_t(V), 1));
  Mirror wte = mirror(random_floats(V * C, 2));
  Mirror out = mirror(random_floats(B * T * C, 3));
  cpu().embedding_forward(out.c(), tokens.ci(), wte.c(), nullptr, B, T, C, nullptr);
  gpu().embedding_forward(out.g(), tokens.gi(), wte.g(), nullptr, B, T, C, nullptr);
  EXPECT_TRUE(same_bits(out.gpu(), out.cpu()));
  Mirror dout = mirror(random_floats(B * T * C, 4));
  Mirror dwte = mirror(random_floats(V * C, 5));
  cpu().embedding_backward(dwte.c(), nullptr, dout.c(), tokens.ci(), B, T, C, nullptr);
  gpu().embedding_backward(dwte.g(), nullptr, dout.g(), tokens.gi(), B, T, C, nullptr);
  EXPECT_TRUE(same_bits(dwte.gpu(), dwte.cpu()));
}

// ---------------------------------------------------------------------------------------------
// Packed documents and ignored targets (CPU references: kernels_attention_test.cpp,
// kernels_llama_test.cpp, kernels_nn_test.cpp)

// Two rows of 13 (two_rows_of_13: a single-token document, boundaries inside and at the edge of
// a block of 4), and a row of 37 (20, 1, 16 tokens: the warp's 32 keys crossed).
struct DocumentRows {
  int64_t B, T;
  std::vector<int32_t> positions;
};
std::vector<DocumentRows> document_rows() {
  return {{2, 13, test::two_rows_of_13()}, {1, 37, test::document_positions({{20, 1, 16}})}};
}

TEST_F(CudaNnKernelsTest, GqaAttentionWithinDocumentsMatchesCpu) {
  struct Heads {
    int64_t NH, NKV, hd;
  };
  for (const DocumentRows& d : document_rows())
    for (const Heads& h : {Heads{4, 4, 8}, Heads{6, 2, 20}}) {
      const std::string what = "documents T" + std::to_string(d.T) + " NH" + std::to_string(h.NH) +
                               " NKV" + std::to_string(h.NKV);
      const int64_t R = (h.NH + 2 * h.NKV) * h.hd, HD = h.NH * h.hd;
      const int64_t att_n = d.B * h.NH * d.T * d.T;
      Mirror positions = mirror(d.positions);
      Mirror qkv = mirror(random_floats(d.B * d.T * R, 1, -2.0f, 2.0f));
      Mirror out = mirror(random_floats(d.B * d.T * HD, 2));
      Mirror att = mirror(random_floats(att_n, 3));  // outside each document must become 0
      cpu().gqa_attention_forward(out.c(), att.c(), qkv.c(), d.B, d.T, h.NH, h.NKV, h.hd,
                                  positions.ci());
      gpu().gqa_attention_forward(out.g(), att.g(), qkv.g(), d.B, d.T, h.NH, h.NKV, h.hd,
                                  positions.gi());
      const std::vector<float> att_gpu = att.gpu();
      expect_close(att_gpu, att.cpu(), kRtol, what + " att");
      expect_close(out.gpu(), out.cpu(), kRtol, what + " out");
      for (int64_t row = 0; row < d.B * h.NH * d.T; ++row) {
        const int64_t t = row % d.T, bt = row / (h.NH * d.T) * d.T + t;
        const int64_t w = test::first_key(d.positions.data(), bt, d.T);
        for (int64_t j = 0; j < d.T; ++j) {
          if (j < w || j > t) {
            ASSERT_EQ(att_gpu[row * d.T + j], 0.0f) << what << " row " << row;
          }
        }
      }
      att.reset_gpu(att.cpu());
      Mirror dout = mirror(random_floats(d.B * d.T * HD, 4));
      Mirror dqkv = mirror(random_floats(d.B * d.T * R, 5));  // non-zero: += is checked
      cpu().gqa_attention_backward(dqkv.c(), dout.c(), qkv.c(), att.c(), d.B, d.T, h.NH, h.NKV,
                                   h.hd, positions.ci());
      gpu().gqa_attention_backward(dqkv.g(), dout.g(), qkv.g(), att.g(), d.B, d.T, h.NH, h.NKV,
                                   h.hd, positions.gi());
      expect_close(dqkv.gpu(), dqkv.cpu(), kRtol, what + " dqkv");
      if (h.NH == h.NKV) {  // multi-head attention is the same kernels: the same bits
        const int64_t C = h.NH * h.hd;
        Mirror mha_out = mirror(random_floats(d.B * d.T * HD, 6));
        gpu().attention_forward(mha_out.g(), att.g(), qkv.g(), d.B, d.T, C, h.NH, positions.gi());
        gpu().gqa_attention_forward(out.g(), att.g(), qkv.g(), d.B, d.T, h.NH, h.NKV, h.hd,
                                    positions.gi());
        EXPECT_TRUE(same_bits(mha_out.gpu(), out.gpu())) << what << " attention_forward";
      }
    }
}

TEST_F(CudaNnKernelsTest, RopeAtDocumentPositionsMatchesCpu) {
  for (const DocumentRows& d : document_rows()) {
    const int64_t NH = 4, NKV = 2, hd = 16, R = (NH + 2 * NKV) * hd;
    const std::string what = "rope documents T" + std::to_string(d.T);
    Mirror positions = mirror(d.positions);
    Mirror qkv = mirror(random_floats(d.B * d.T * R, 1));
    cpu().rope_forward(qkv.c(), d.B, d.T, NH, NKV, hd, 10000.0f, positions.ci());
    gpu().rope_forward(qkv.g(), d.B, d.T, NH, NKV, hd, 10000.0f, positions.gi());
    expect_close(qkv.gpu(), qkv.cpu(), kRtol, what + " forward");
    qkv.reset_gpu(qkv.cpu());
    cpu().rope_backward(qkv.c(), d.B, d.T, NH, NKV, hd, 10000.0f, positions.ci());
    gpu().rope_backward(qkv.g(), d.B, d.T, NH, NKV, hd, 10000.0f, positions.gi());
    expect_close(qkv.gpu(), qkv.cpu(), kRtol, what + " backward");
  }
}

// The same additions in the same (token) order as the CPU: the same bits.
TEST_F(CudaNnKernelsTest, EmbeddingAtDocumentPositionsMatchesCpu) {
  for (const DocumentRows& d : document_rows()) {
    const int64_t C = 40, V = 31;
    const std::string what = "embedding documents T" + std::to_string(d.T);
    Mirror positions = mirror(d.positions);
    Mirror tokens = mirror(random_tokens(d.B * d.T, int32_t(V), 1));
    Mirror wte = mirror(random_floats(V * C, 2));
    Mirror wpe = mirror(random_floats(d.T * C, 3));
    Mirror out = mirror(random_floats(d.B * d.T * C, 4));
    cpu().embedding_forward(out.c(), tokens.ci(), wte.c(), wpe.c(), d.B, d.T, C, positions.ci());
    gpu().embedding_forward(out.g(), tokens.gi(), wte.g(), wpe.g(), d.B, d.T, C, positions.gi());
    EXPECT_TRUE(same_bits(out.gpu(), out.cpu())) << what << " forward";
    Mirror dout = mirror(random_floats(d.B * d.T * C, 5));
    Mirror dwte = mirror(random_floats(V * C, 6));
    Mirror dwpe = mirror(random_floats(d.T * C, 7));
    cpu().embedding_backward(dwte.c(), dwpe.c(), dout.c(), tokens.ci(), d.B, d.T, C,
                             positions.ci());
    gpu().embedding_backward(dwte.g(), dwpe.g(), dout.g(), tokens.gi(), d.B, d.T, C,
                             positions.gi());
    EXPECT_TRUE(same_bits(dwte.gpu(), dwte.cpu())) << what << " dwte";
    EXPECT_TRUE(same_bits(dwpe.gpu(), dwpe.cpu())) << what << " dwpe";
  }
}

// Ignored rows: loss 0 and a zero gradient row (padding included), exactly; with dloss 0 the row
// is left alone. The other rows as the CPU's.
TEST_F(CudaNnKernelsTest, SoftmaxCrossEntropyIgnoresNegativeTargets) {
  const int64_t N = 6, V = 51, Vp = 61;
  const std::vector<int32_t> host_targets = {3, kIgnoreTarget, 50, -9, 0, kIgnoreTarget};
  const std::vector<float> host_logits = random_floats(N * Vp, 1, -4.0f, 4.0f);
  for (float dloss : {0.0f, 0.5f}) {  // 0: losses only (kKeep)
    const LogitsOutput output = dloss == 0.0f ? LogitsOutput::kKeep : LogitsOutput::kGradient;
    const std::string what = "dloss " + std::to_string(dloss);
    Mirror targets = mirror(host_targets);
    Mirror logits = mirror(host_logits);
    Mirror losses = mirror(random_floats(N, 2));
    cpu().softmax_cross_entropy(losses.c(), logits.c(), targets.ci(), N, V, Vp, output, dloss);
    gpu().softmax_cross_entropy(losses.g(), logits.g(), targets.gi(), N, V, Vp, output, dloss);
    expect_close(losses.gpu(), losses.cpu(), kRtol, what + " losses");
    expect_close(logits.gpu(), logits.cpu(), kRtol, what + " gradient");
    const std::vector<float> loss_gpu = losses.gpu(), grad = logits.gpu();
    for (int64_t r = 0; r < N; ++r) {
      if (host_targets[r] >= 0) continue;
      EXPECT_TRUE(same_bits({loss_gpu[r]}, {0.0f})) << what << " row " << r;
      for (int64_t i = 0; i < Vp; ++i) {
        const float want = dloss == 0.0f ? host_logits[r * Vp + i] : 0.0f;
        ASSERT_TRUE(same_bits({grad[r * Vp + i]}, {want})) << what << " row " << r << " col " << i;
      }
    }
  }
}
}  // namespace
}  // namespace zt::cuda_nn_test
