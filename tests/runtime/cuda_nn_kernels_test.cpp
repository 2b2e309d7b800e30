// Parity of the CUDA back end's neural-network kernels (runtime/cuda/cuda_nn_kernels.cu and
// cuda_matmul_attention.cu) with the CPU back end's (runtime/cpu/cpu_nn_kernels.cpp,
// cpu_matmul_kernels.cpp and cpu_attention_kernels.cpp, themselves pinned against double
// references and finite differences in kernels_nn_test.cpp and kernels_attention_test.cpp):
// matmul (both weight layouts, with and without bias, every gradient), embedding, layer norm,
// causal attention and softmax cross-entropy, on identical random inputs. Gradient buffers start
// non-zero on both devices, so the accumulate contract is checked too. Then the 16-bit tables
// (kernels_for) with 16-bit parameters and gradients against the CPU's tables of the same dtype,
// and determinism (every op run twice on the GPU gives the same bits). Llama's kernels, packed
// documents and ignored targets are in cuda_nn_kernels_llama_test.cpp; the tensor-core GEMMs and
// column reductions of every dtype, the GPU's chunk budget and its event timer in
// cuda_nn_kernels_tensor_core_test.cpp; the fixture and helpers in cuda_nn_test_util.h.
// Written against Device / Kernels only (no CUDA headers), so it compiles with or without CUDA;
// every test skips when no GPU is usable. Not here: TF32 (CudaKernels::set_allow_tf32 needs the
// CUDA headers), the element-wise ops and optimizers (cuda_elementwise_kernels.cu,
// cuda_kernels.cu), performance.
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

// GPT-2 tiny slices, and an odd shape (nothing a multiple of 4, 32 or the warp).
struct Shape {
  int64_t B, T, C, NH, V, Vp;
};
const Shape kShapes[] = {{2, 16, 32, 4, 97, 128}, {3, 37, 30, 5, 51, 61}};

std::string shape_name(const Shape& s) {
  return "B" + std::to_string(s.B) + " T" + std::to_string(s.T) + " C" + std::to_string(s.C) +
         " NH" + std::to_string(s.NH);
}

// ---------------------------------------------------------------------------------------------
// Matmul

struct MatmulCase {
  int64_t M, K, N;
};
const MatmulCase kMatmulCases[] = {{32, 32, 96}, {32, 128, 32}, {7, 13, 5}, {37, 30, 61}};

TEST_F(CudaNnKernelsTest, MatmulForwardMatchesCpu) {
  for (const MatmulCase& mc : kMatmulCases)
    for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn})
      for (bool with_bias : {true, false}) {
        const std::string what = "M" + std::to_string(mc.M) + " K" + std::to_string(mc.K) + " N" +
                                 std::to_string(mc.N) +
                                 (layout == WeightLayout::kInOut ? " inout" : " outin") +
                                 (with_bias ? " bias" : " nobias");
        Mirror inp = mirror(random_floats(mc.M * mc.K, 1));
        Mirror w = mirror(random_floats(mc.K * mc.N, 2));
        Mirror bias = mirror(random_floats(mc.N, 3));
        Mirror out = mirror(random_floats(mc.M * mc.N, 4, 5.0f, 6.0f));  // overwritten
        cpu().matmul_forward(out.c(), inp.c(), w.c(), with_bias ? bias.c() : nullptr, mc.M, mc.K,
                             mc.N, layout);
        gpu().matmul_forward(out.g(), inp.g(), w.g(), with_bias ? bias.g() : nullptr, mc.M, mc.K,
                             mc.N, layout);
        expect_close(out.gpu(), out.cpu(), kRtol, what);
      }
}

TEST_F(CudaNnKernelsTest, MatmulForwardWithEmptyInnerDimensionIsTheBias) {
  const int64_t M = 5, N = 7;
  Mirror bias = mirror(random_floats(N, 3));
  Mirror out = mirror(random_floats(M * N, 4));
  gpu().matmul_forward(out.g(), nullptr, nullptr, bias.g(), M, 0, N, WeightLayout::kInOut);
  const std::vector<float> got = out.gpu(), b = bias.cpu();
  for (int64_t i = 0; i < M * N; ++i) EXPECT_EQ(got[i], b[i % N]) << i;
  gpu().matmul_forward(out.g(), nullptr, nullptr, nullptr, M, 0, N, WeightLayout::kOutIn);
  for (float x : out.gpu()) EXPECT_EQ(x, 0.0f);
}

TEST_F(CudaNnKernelsTest, MatmulBackwardAccumulatesLikeCpu) {
  for (const MatmulCase& mc : kMatmulCases)
    for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
      const std::string what = "M" + std::to_string(mc.M) + " K" + std::to_string(mc.K) + " N" +
                               std::to_string(mc.N) +
                               (layout == WeightLayout::kInOut ? " inout" : " outin");
      Mirror inp = mirror(random_floats(mc.M * mc.K, 1));
      Mirror w = mirror(random_floats(mc.K * mc.N, 2));
      Mirror dout = mirror(random_floats(mc.M * mc.N, 3));
      Mirror dinp = mirror(random_floats(mc.M * mc.K, 4));  // non-zero: += is checked
      Mirror dw = mirror(random_floats(mc.K * mc.N, 5));
      Mirror db = mirror(random_floats(mc.N, 6));
      cpu().matmul_backward(dinp.c(), dw.c(), db.c(), dout.c(), inp.c(), w.c(), mc.M, mc.K, mc.N,
                            layout);
      gpu().matmul_backward(dinp.g(), dw.g(), db.g(), dout.g(), inp.g(), w.g(), mc.M, mc.K, mc.N,
                            layout);
      expect_close(dinp.gpu(), dinp.cpu(), kRtol, what + " dinp");
      expect_close(dw.gpu(), dw.cpu(), kRtol, what + " dweight");
      expect_close(db.gpu(), db.cpu(), kRtol, what + " dbias");
    }
}

TEST_F(CudaNnKernelsTest, MatmulBackwardSkipsNullGradients) {
  const int64_t M = 9, K = 11, N = 6;
  const std::vector<float> dw_start = random_floats(K * N, 5);
  Mirror inp = mirror(random_floats(M * K, 1));
  Mirror w = mirror(random_floats(K * N, 2));
  Mirror dout = mirror(random_floats(M * N, 3));
  Mirror dw = mirror(dw_start);
  cpu().matmul_backward(nullptr, dw.c(), nullptr, dout.c(), inp.c(), w.c(), M, K, N,
                        WeightLayout::kOutIn);
  gpu().matmul_backward(nullptr, dw.g(), nullptr, dout.g(), inp.g(), w.g(), M, K, N,
                        WeightLayout::kOutIn);
  expect_close(dw.gpu(), dw.cpu(), kRtol, "dweight");
  Mirror dinp = mirror(random_floats(M * K, 4));
  Mirror db = mirror(random_floats(N, 6));
  cpu().matmul_backward(dinp.c(), nullptr, db.c(), dout.c(), inp.c(), w.c(), M, K, N,
                        WeightLayout::kInOut);
  gpu().matmul_backward(dinp.g(), nullptr, db.g(), dout.g(), inp.g(), w.g(), M, K, N,
                        WeightLayout::kInOut);
  expect_close(dinp.gpu(), dinp.cpu(), kRtol, "dinp");
  expect_close(db.gpu(), db.cpu(), kRtol, "dbias");
}

// The dbias reduction over many rows (more than the kernel's row groups, not a multiple).
TEST_F(CudaNnKernelsTest, MatmulBiasGradientOverManyRows) {
  const int64_t M = 1001, K = 4, N = 70;
  Mirror inp = mirror(random_floats(M * K, 1));
  Mirror w = mirror(random_floats(K * N, 2));
  Mirror dout = mirror(random_floats(M * N, 3));
  Mirror db = mirror(random_floats(N, 6));
  cpu().matmul_backward(nullptr, nullptr, db.c(), dout.c(), inp.c(), w.c(), M, K, N,
                        WeightLayout::kInOut);
  gpu().matmul_backward(nullptr, nullptr, db.g(), dout.g(), inp.g(), w.g(), M, K, N,
                        WeightLayout::kInOut);
  expect_close(db.gpu(), db.cpu(), 1e-4, "dbias");  // 1001-term sums in different orders
}

// ---------------------------------------------------------------------------------------------
// Embedding

TEST_F(CudaNnKernelsTest, EmbeddingForwardAndBackwardMatchCpu) {
  for (const Shape& s : kShapes) {
    const std::string what = shape_name(s);
    std::vector<int32_t> host_tokens = random_tokens(s.B * s.T, int32_t(s.V), 7);
    // Repeats within and across sequences, the first and last positions included.
    host_tokens[3] = host_tokens[0];
    host_tokens[s.B * s.T - 1] = host_tokens[0];
    host_tokens[s.T + 1] = host_tokens[5];
    Mirror tokens = mirror(host_tokens);
    Mirror wte = mirror(random_floats(s.Vp * s.C, 1));
    Mirror wpe = mirror(random_floats(s.T * s.C, 2));
    Mirror out = mirror(random_floats(s.B * s.T * s.C, 3));
    cpu().embedding_forward(out.c(), tokens.ci(), wte.c(), wpe.c(), s.B, s.T, s.C, nullptr);
    gpu().embedding_forward(out.g(), tokens.gi(), wte.g(), wpe.g(), s.B, s.T, s.C, nullptr);
    EXPECT_TRUE(same_bits(out.gpu(), out.cpu())) << what << " forward";  // one add each

    Mirror dout = mirror(random_floats(s.B * s.T * s.C, 4));
    Mirror dwte = mirror(random_floats(s.Vp * s.C, 5));
    Mirror dwpe = mirror(random_floats(s.T * s.C, 6));
    cpu().embedding_backward(dwte.c(), dwpe.c(), dout.c(), tokens.ci(), s.B, s.T, s.C, nullptr);
    gpu().embedding_backward(dwte.g(), dwpe.g(), dout.g(), tokens.gi(), s.B, s.T, s.C, nullptr);
    // The same additions in the same (position) order as the CPU: the same bits.
    EXPECT_TRUE(same_bits(dwte.gpu(), dwte.cpu())) << what << " dwte";
    EXPECT_TRUE(same_bits(dwpe.gpu(), dwpe.cpu())) << what << " dwpe";
    expect_close(dwte.gpu(), dwte.cpu(), kRtol, what + " dwte");
    expect_close(dwpe.gpu(), dwpe.cpu(), kRtol, what + " dwpe");
  }
}

// ---------------------------------------------------------------------------------------------
// Layer norm

TEST_F(CudaNnKernelsTest, LayerNormForwardAndBackwardMatchCpu) {
  const std::pair<int64_t, int64_t> shapes[] = {{32, 32}, {77, 30}, {9, 771}};  // (N, C)
  for (const auto& [N, C] : shapes) {
    const std::string what = "N" + std::to_string(N) + " C" + std::to_string(C);
    // An offset and a scale per row, so mean and variance are not trivial.
    std::vector<float> x = random_floats(N * C, 1);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t c = 0; c < C; ++c) x[r * C + c] = x[r * C + c] * (1.0f + r % 3) + 0.5f * r;
    Mirror inp = mirror(x);
    Mirror w = mirror(random_floats(C, 2, 0.5f, 1.5f));
    Mirror b = mirror(random_floats(C, 3));
    Mirror out = mirror(random_floats(N * C, 4));
    Mirror mean = mirror(random_floats(N, 5));
    Mirror rstd = mirror(random_floats(N, 6));
    cpu().layernorm_forward(out.c(), mean.c(), rstd.c(), inp.c(), w.c(), b.c(), N, C);
    gpu().layernorm_forward(out.g(), mean.g(), rstd.g(), inp.g(), w.g(), b.g(), N, C);
    expect_close(out.gpu(), out.cpu(), kRtol, what + " out");
    expect_close(mean.gpu(), mean.cpu(), kRtol, what + " mean");
    expect_close(rstd.gpu(), rstd.cpu(), kRtol, what + " rstd");

    // Backward from the CPU's mean and rstd on both devices (the same inputs).
    const std::vector<float> mean_host = mean.cpu(), rstd_host = rstd.cpu();
    mean.reset_gpu(mean_host);
    rstd.reset_gpu(rstd_host);
    Mirror dout = mirror(random_floats(N * C, 7));
    Mirror dinp = mirror(random_floats(N * C, 8));
    Mirror dw = mirror(random_floats(C, 9));
    Mirror db = mirror(random_floats(C, 10));
    cpu().layernorm_backward(dinp.c(), dw.c(), db.c(), dout.c(), inp.c(), w.c(), mean.c(), rstd.c(),
                             N, C);
    gpu().layernorm_backward(dinp.g(), dw.g(), db.g(), dout.g(), inp.g(), w.g(), mean.g(), rstd.g(),
                             N, C);
    expect_close(dinp.gpu(), dinp.cpu(), kRtol, what + " dinp");
    expect_close(dw.gpu(), dw.cpu(), kRtol, what + " dweight");
    expect_close(db.gpu(), db.cpu(), kRtol, what + " dbias");
  }
}

// ---------------------------------------------------------------------------------------------
// Attention

TEST_F(CudaNnKernelsTest, AttentionForwardAndBackwardMatchCpu) {
  for (const Shape& s : kShapes) {
    const std::string what = shape_name(s);
    const int64_t att_n = s.B * s.NH * s.T * s.T;
    // Spread of ±2 gives peaked softmax rows (scores up to ~|4·hs|/sqrt(hs)).
    Mirror qkv = mirror(random_floats(s.B * s.T * 3 * s.C, 1, -2.0f, 2.0f));
    Mirror out = mirror(random_floats(s.B * s.T * s.C, 2));
    Mirror att = mirror(random_floats(att_n, 3));  // the upper triangle must become 0
    cpu().attention_forward(out.c(), att.c(), qkv.c(), s.B, s.T, s.C, s.NH, nullptr);
    gpu().attention_forward(out.g(), att.g(), qkv.g(), s.B, s.T, s.C, s.NH, nullptr);
    const std::vector<float> att_gpu = att.gpu();
    expect_close(att_gpu, att.cpu(), kRtol, what + " att");
    expect_close(out.gpu(), out.cpu(), kRtol, what + " out");
    for (int64_t row = 0; row < s.B * s.NH * s.T; ++row) {
      const int64_t t = row % s.T;
      double sum = 0;
      for (int64_t j = 0; j < s.T; ++j) {
        const float p = att_gpu[row * s.T + j];
        if (j > t) {
          ASSERT_EQ(p, 0.0f) << what << " att row " << row << " col " << j;
        }
        sum += p;
      }
      EXPECT_NEAR(sum, 1.0, 1e-5) << what << " att row " << row;
    }

    // Backward from the CPU's probabilities on both devices (the same inputs).
    att.reset_gpu(att.cpu());
    Mirror dout = mirror(random_floats(s.B * s.T * s.C, 4));
    Mirror dqkv = mirror(random_floats(s.B * s.T * 3 * s.C, 5));  // non-zero: += is checked
    cpu().attention_backward(dqkv.c(), dout.c(), qkv.c(), att.c(), s.B, s.T, s.C, s.NH, nullptr);
    gpu().attention_backward(dqkv.g(), dout.g(), qkv.g(), att.g(), s.B, s.T, s.C, s.NH, nullptr);
    // q, k, v parts separately, so a failure names the part.
    const std::vector<float> g = dqkv.gpu(), c = dqkv.cpu();
    for (int part = 0; part < 3; ++part) {
      std::vector<float> gp, cp;
      for (int64_t bt = 0; bt < s.B * s.T; ++bt)
        for (int64_t i = 0; i < s.C; ++i) {
          gp.push_back(g[bt * 3 * s.C + part * s.C + i]);
          cp.push_back(c[bt * 3 * s.C + part * s.C + i]);
        }
      expect_close(gp, cp, kRtol, what + (part == 0 ? " dq" : part == 1 ? " dk" : " dv"));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Softmax cross-entropy

TEST_F(CudaNnKernelsTest, SoftmaxCrossEntropyMatchesCpu) {
  struct Case {
    int64_t N, V, Vp;
  };
  const Case cases[] = {{32, 97, 128}, {5, 51, 61}, {3, 1000, 1000}, {4, 700, 777}};
  for (const Case& cs : cases) {
    for (float dloss : {0.0f, 1.0f / 32.0f}) {  // 0: losses only (kKeep)
      const LogitsOutput output = dloss == 0.0f ? LogitsOutput::kKeep : LogitsOutput::kGradient;
      const std::string what = "N" + std::to_string(cs.N) + " V" + std::to_string(cs.V) + " Vp" +
                               std::to_string(cs.Vp) + " dloss " + std::to_string(dloss);
      std::vector<int32_t> host_targets = random_tokens(cs.N, int32_t(cs.V), 8);
      host_targets[0] = int32_t(cs.V - 1);  // the last real column
      host_targets[cs.N - 1] = 0;
      Mirror targets = mirror(host_targets);
      const std::vector<float> host_logits = random_floats(cs.N * cs.Vp, 1, -4.0f, 4.0f);
      Mirror logits = mirror(host_logits);
      Mirror losses = mirror(random_floats(cs.N, 2));
      cpu().softmax_cross_entropy(losses.c(), logits.c(), targets.ci(), cs.N, cs.V, cs.Vp, output,
                                  dloss);
      gpu().softmax_cross_entropy(losses.g(), logits.g(), targets.gi(), cs.N, cs.V, cs.Vp, output,
                                  dloss);
      expect_close(losses.gpu(), losses.cpu(), kRtol, what + " losses");
      const std::vector<float> grad = logits.gpu();
      if (dloss == 0.0f) {
        EXPECT_TRUE(same_bits(grad, host_logits)) << what << ": logits changed with dloss 0";
        continue;
      }
      expect_close(grad, logits.cpu(), kRtol, what + " gradient");
      for (int64_t r = 0; r < cs.N; ++r)
        for (int64_t i = cs.V; i < cs.Vp; ++i)
          ASSERT_EQ(grad[r * cs.Vp + i], 0.0f) << what << " padded column " << i << " row " << r;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The 16-bit tables (Device::kernels_for) with parameters and their gradients stored in 16 bits,
// against the CPU's table of the same dtype. Every activation written holds a value of the
// dtype on both; the fp32 values the two round differ by ~1e-6 relative, so rounded results
// agree within a unit in the last place of the dtype (the tolerance is two). The embedding
// gradients add the same terms in the same order on both: bitwise. Wrong dtype reads or a
// missing rounding give O(1) errors or unrepresentable values.

TEST_F(CudaNnKernelsTest, SixteenBitTablesAndOperandsMatchCpu) {
  for (DType t : {DType::kF16, DType::kBF16}) {
    Kernels& ck = cpu_dev_.kernels_for(t);
    Kernels& gk = gpu_dev_->kernels_for(t);
    const double rtol = t == DType::kBF16 ? 0x1p-7 : 0x1p-10;
    const std::string type = " " + std::string(dtype_name(t));

    // Matmul: 16-bit weight, bias and their gradients.
    const int64_t M = 37, K = 30, N = 61;
    for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
      const std::string what =
          std::string(layout == WeightLayout::kInOut ? "matmul inout" : "matmul outin") + type;
      Mirror inp = mirror(rounded_to(random_floats(M * K, 1), t));  // t's values (kernels.h)
      Mirror w = mirror_as(random_floats(K * N, 2), t);
      Mirror bias = mirror_as(random_floats(N, 3), t);
      Mirror out = mirror(random_floats(M * N, 4));
      ck.matmul_forward(out.c(), inp.c(), w.co(t), bias.co(t), M, K, N, layout);
      gk.matmul_forward(out.g(), inp.g(), w.go(t), bias.go(t), M, K, N, layout);
      expect_close(out.gpu(), out.cpu(), rtol, what + " out");
      expect_representable(out.gpu(), t, what + " out");
      Mirror dout = mirror(rounded_to(random_floats(M * N, 5), t));
      Mirror dinp = mirror(rounded_to(random_floats(M * K, 6), t));
      Mirror dw = mirror_as(random_floats(K * N, 7), t);
      Mirror db = mirror_as(random_floats(N, 8), t);
      ck.matmul_backward(dinp.c(), dw.co(t), db.co(t), dout.c(), inp.c(), w.co(t), M, K, N, layout);
      gk.matmul_backward(dinp.g(), dw.go(t), db.go(t), dout.g(), inp.g(), w.go(t), M, K, N, layout);
      expect_close(dinp.gpu(), dinp.cpu(), rtol, what + " dinp");
      expect_representable(dinp.gpu(), t, what + " dinp");
      expect_close(dw.gpu_as(t), dw.cpu_as(t), rtol, what + " dweight");
      expect_close(db.gpu_as(t), db.cpu_as(t), rtol, what + " dbias");
    }

    // Embedding: 16-bit tables and gradients.
    {
      const Shape& s = kShapes[1];
      const std::string what = "embedding" + type;
      Mirror tokens = mirror(random_tokens(s.B * s.T, int32_t(s.V), 11));
      Mirror wte = mirror_as(random_floats(s.V * s.C, 12), t);
      Mirror wpe = mirror_as(random_floats(s.T * s.C, 13), t);
      Mirror out = mirror(random_floats(s.B * s.T * s.C, 14));
      ck.embedding_forward(out.c(), tokens.ci(), wte.co(t), wpe.co(t), s.B, s.T, s.C, nullptr);
      gk.embedding_forward(out.g(), tokens.gi(), wte.go(t), wpe.go(t), s.B, s.T, s.C, nullptr);
      EXPECT_TRUE(same_bits(out.gpu(), out.cpu())) << what << " out";
      expect_representable(out.gpu(), t, what + " out");
      Mirror dout = mirror(random_floats(s.B * s.T * s.C, 15));
      Mirror dwte = mirror_as(random_floats(s.V * s.C, 16), t);
      Mirror dwpe = mirror_as(random_floats(s.T * s.C, 17), t);
      ck.embedding_backward(dwte.co(t), dwpe.co(t), dout.c(), tokens.ci(), s.B, s.T, s.C, nullptr);
      gk.embedding_backward(dwte.go(t), dwpe.go(t), dout.g(), tokens.gi(), s.B, s.T, s.C, nullptr);
      EXPECT_TRUE(same_bits(dwte.gpu_as(t), dwte.cpu_as(t))) << what << " dwte";
      EXPECT_TRUE(same_bits(dwpe.gpu_as(t), dwpe.cpu_as(t))) << what << " dwpe";
    }

    // Layer norm: 16-bit weight, bias and their gradients; mean and rstd stay fp32.
    {
      const int64_t rows = 77, C = 30;
      const std::string what = "layernorm" + type;
      Mirror inp = mirror(random_floats(rows * C, 21, -2.0f, 3.0f));
      Mirror w = mirror_as(random_floats(C, 22, 0.5f, 1.5f), t);
      Mirror b = mirror_as(random_floats(C, 23), t);
      Mirror out = mirror(random_floats(rows * C, 24));
      Mirror mean = mirror(random_floats(rows, 25));
      Mirror rstd = mirror(random_floats(rows, 26));
      ck.layernorm_forward(out.c(), mean.c(), rstd.c(), inp.c(), w.co(t), b.co(t), rows, C);
      gk.layernorm_forward(out.g(), mean.g(), rstd.g(), inp.g(), w.go(t), b.go(t), rows, C);
      expect_close(out.gpu(), out.cpu(), rtol, what + " out");
      expect_representable(out.gpu(), t, what + " out");
      expect_close(mean.gpu(), mean.cpu(), kRtol, what + " mean");
      expect_close(rstd.gpu(), rstd.cpu(), kRtol, what + " rstd");
      mean.reset_gpu(mean.cpu());
      rstd.reset_gpu(rstd.cpu());
      Mirror dout = mirror(random_floats(rows * C, 27));
      Mirror dinp = mirror(random_floats(rows * C, 28));
      Mirror dw = mirror_as(random_floats(C, 29), t);
      Mirror db = mirror_as(random_floats(C, 30), t);
      ck.layernorm_backward(dinp.c(), dw.co(t), db.co(t), dout.c(), inp.c(), w.co(t), mean.c(),
                            rstd.c(), rows, C);
      gk.layernorm_backward(dinp.g(), dw.go(t), db.go(t), dout.g(), inp.g(), w.go(t), mean.g(),
                            rstd.g(), rows, C);
      expect_close(dinp.gpu(), dinp.cpu(), rtol, what + " dinp");
      expect_representable(dinp.gpu(), t, what + " dinp");
      expect_close(dw.gpu_as(t), dw.cpu_as(t), rtol, what + " dweight");
      expect_close(db.gpu_as(t), db.cpu_as(t), rtol, what + " dbias");
    }

    // The activation-only ops of the table round what they write.
    {
      const Shape& s = kShapes[0];
      const std::string what = "activations" + type;
      const int64_t n = s.B * s.T * s.C, att_n = s.B * s.NH * s.T * s.T;
      Mirror qkv = mirror(random_floats(3 * n, 31, -2.0f, 2.0f));
      Mirror out = mirror(random_floats(n, 32));
      Mirror att = mirror(random_floats(att_n, 33));
      gk.attention_forward(out.g(), att.g(), qkv.g(), s.B, s.T, s.C, s.NH, nullptr);
      expect_representable(out.gpu(), t, what + " attention out");
      expect_representable(att.gpu(), t, what + " attention att");
      Mirror dqkv = mirror(random_floats(3 * n, 34));
      Mirror dout = mirror(random_floats(n, 35));
      gk.attention_backward(dqkv.g(), dout.g(), qkv.g(), att.g(), s.B, s.T, s.C, s.NH, nullptr);
      expect_representable(dqkv.gpu(), t, what + " attention dqkv");
      Mirror x = mirror(random_floats(n, 36));
      Mirror y = mirror(random_floats(n, 37));
      gk.residual_forward(out.g(), x.g(), y.g(), n);
      expect_representable(out.gpu(), t, what + " residual");
      gk.gelu_forward(out.g(), x.g(), n);
      expect_representable(out.gpu(), t, what + " gelu");
      gk.gelu_backward(y.g(), x.g(), dout.g(), n);
      expect_representable(y.gpu(), t, what + " gelu dinp");
      gk.accumulate(x.g(), dout.g(), n);
      expect_representable(x.gpu(), t, what + " accumulate");
      gk.fill(x.g(), 0.1f, n);
      expect_representable(x.gpu(), t, what + " fill");
      Mirror logits = mirror(random_floats(s.B * s.T * s.Vp, 38, -3.0f, 3.0f));
      Mirror targets = mirror(random_tokens(s.B * s.T, int32_t(s.V), 39));
      Mirror losses = mirror(random_floats(s.B * s.T, 40));
      gk.softmax_cross_entropy(losses.g(), logits.g(), targets.gi(), s.B * s.T, s.V, s.Vp,
                               LogitsOutput::kGradient, 0.5f);
      expect_representable(logits.gpu(), t, what + " cross-entropy gradient");
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Determinism: each op twice on the GPU from the same inputs gives the same bits.

TEST_F(CudaNnKernelsTest, EveryOpIsDeterministic) {
  const Shape s = kShapes[1];
  const int64_t BT = s.B * s.T, C = s.C, att_n = s.B * s.NH * s.T * s.T;
  // Runs `op` twice from the same starting contents of `outputs` and compares the bits.
  auto twice = [&](const std::string& what, std::vector<Mirror*> outputs,
                   const std::function<void()>& op) {
    std::vector<std::vector<float>> start, first;
    for (Mirror* m : outputs) start.push_back(m->gpu());
    op();
    for (Mirror* m : outputs) first.push_back(m->gpu());
    for (size_t i = 0; i < outputs.size(); ++i) outputs[i]->reset_gpu(start[i]);
    op();
    for (size_t i = 0; i < outputs.size(); ++i)
      EXPECT_TRUE(same_bits(outputs[i]->gpu(), first[i])) << what << " output " << i;
  };
  Mirror inp = mirror(random_floats(BT * C, 1));
  Mirror w = mirror(random_floats(C * 3 * C, 2));
  Mirror bias = mirror(random_floats(3 * C, 3));
  Mirror qkv = mirror(random_floats(BT * 3 * C, 4));
  Mirror dqkv = mirror(random_floats(BT * 3 * C, 5));
  Mirror dinp = mirror(random_floats(BT * C, 6));
  Mirror dw = mirror(random_floats(C * 3 * C, 7));
  Mirror db = mirror(random_floats(3 * C, 8));
  for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
    twice("matmul_forward", {&qkv},
          [&] { gpu().matmul_forward(qkv.g(), inp.g(), w.g(), bias.g(), BT, C, 3 * C, layout); });
    twice("matmul_backward", {&dinp, &dw, &db}, [&] {
      gpu().matmul_backward(dinp.g(), dw.g(), db.g(), dqkv.g(), inp.g(), w.g(), BT, C, 3 * C,
                            layout);
    });
  }
  Mirror tokens = mirror(random_tokens(BT, int32_t(s.V), 9));
  Mirror wte = mirror(random_floats(s.Vp * C, 10));
  Mirror wpe = mirror(random_floats(s.T * C, 11));
  Mirror out = mirror(random_floats(BT * C, 12));
  twice("embedding_forward", {&out}, [&] {
    gpu().embedding_forward(out.g(), tokens.gi(), wte.g(), wpe.g(), s.B, s.T, C, nullptr);
  });
  twice("embedding_backward", {&wte, &wpe}, [&] {
    gpu().embedding_backward(wte.g(), wpe.g(), inp.g(), tokens.gi(), s.B, s.T, C, nullptr);
  });
  Mirror lnw = mirror(random_floats(C, 13));
  Mirror lnb = mirror(random_floats(C, 14));
  Mirror mean = mirror(random_floats(BT, 15));
  Mirror rstd = mirror(random_floats(BT, 16));
  twice("layernorm_forward", {&out, &mean, &rstd}, [&] {
    gpu().layernorm_forward(out.g(), mean.g(), rstd.g(), inp.g(), lnw.g(), lnb.g(), BT, C);
  });
  twice("layernorm_backward", {&dinp, &lnw, &lnb}, [&] {
    gpu().layernorm_backward(dinp.g(), lnw.g(), lnb.g(), out.g(), inp.g(), bias.g(), mean.g(),
                             rstd.g(), BT, C);
  });
  Mirror att = mirror(random_floats(att_n, 17));
  twice("attention_forward", {&out, &att},
        [&] { gpu().attention_forward(out.g(), att.g(), qkv.g(), s.B, s.T, C, s.NH, nullptr); });
  twice("attention_backward", {&dqkv}, [&] {
    gpu().attention_backward(dqkv.g(), inp.g(), qkv.g(), att.g(), s.B, s.T, C, s.NH, nullptr);
  });
  Mirror logits = mirror(random_floats(BT * s.Vp, 18, -4.0f, 4.0f));
  Mirror losses = mirror(random_floats(BT, 19));
  twice("softmax_cross_entropy", {&logits, &losses}, [&] {
    gpu().softmax_cross_entropy(losses.g(), logits.g(), tokens.gi(), BT, s.V, s.Vp,
                                LogitsOutput::kGradient, 0.5f);
  });
}
}  // namespace
}  // namespace zt::cuda_nn_test
