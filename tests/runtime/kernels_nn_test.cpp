// The CPU back end's neural-network kernels (runtime/cpu/cpu_nn_kernels.cpp): matmul, embedding,
// layer norm, GELU and softmax cross-entropy. Every forward kernel is checked against a plain
// double-precision loop written here; every backward kernel against central finite differences of
// that double reference (and for accumulation: gradients are += into buffers that start
// non-zero). Also the position table read at document positions (Batch::positions) and ignored
// targets (kIgnoreTarget). Not here: attention (kernels_attention_test.cpp), determinism across
// threads and instruction sets (kernels_determinism_test.cpp), performance.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/kernels.h"
#include "runtime/model.h"

#include "kernels_test_util.h"
#include "packed_documents.h"

namespace zt {
namespace {

using namespace test;

// ---------------------------------------------------------------------------------------------
// Double-precision references

// out (M,N) = inp (M,K) · W + bias; W is (K,N) for kInOut, (N,K) for kOutIn.
std::vector<double> matmul_ref(const std::vector<double>& inp, const std::vector<double>& w,
                               const std::vector<double>* bias, int64_t M, int64_t K, int64_t N,
                               WeightLayout layout) {
  std::vector<double> out(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = bias ? (*bias)[j] : 0.0;
      for (int64_t p = 0; p < K; ++p)
        s += inp[i * K + p] * (layout == WeightLayout::kInOut ? w[p * N + j] : w[j * K + p]);
      out[i * N + j] = s;
    }
  return out;
}

// Token bt at positions[bt] (null: bt % T).
std::vector<double> embedding_ref(const std::vector<int32_t>& tokens,
                                  const std::vector<double>& wte, const std::vector<double>& wpe,
                                  int64_t B, int64_t T, int64_t C,
                                  const int32_t* positions = nullptr) {
  std::vector<double> out(B * T * C);
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t p = positions ? positions[bt] : bt % T;
    for (int64_t c = 0; c < C; ++c) out[bt * C + c] = wte[tokens[bt] * C + c] + wpe[p * C + c];
  }
  return out;
}

std::vector<double> layernorm_ref(const std::vector<double>& x, const std::vector<double>& w,
                                  const std::vector<double>& b, int64_t N, int64_t C,
                                  std::vector<double>* mean = nullptr,
                                  std::vector<double>* rstd = nullptr) {
  std::vector<double> out(N * C);
  for (int64_t i = 0; i < N; ++i) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += x[i * C + c];
    m /= C;
    for (int64_t c = 0; c < C; ++c) v += (x[i * C + c] - m) * (x[i * C + c] - m);
    v /= C;
    const double r = 1.0 / std::sqrt(v + 1e-5);
    for (int64_t c = 0; c < C; ++c) out[i * C + c] = (x[i * C + c] - m) * r * w[c] + b[c];
    if (mean) (*mean)[i] = m;
    if (rstd) (*rstd)[i] = r;
  }
  return out;
}

double gelu_ref(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

// Per-row loss of softmax cross-entropy over the first V of Vp columns.
std::vector<double> cross_entropy_ref(const std::vector<double>& logits,
                                      const std::vector<int32_t>& targets, int64_t N, int64_t V,
                                      int64_t Vp) {
  std::vector<double> losses(N);
  for (int64_t i = 0; i < N; ++i) {
    const double* row = &logits[i * Vp];
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, row[j]);
    for (int64_t j = 0; j < V; ++j) sum += std::exp(row[j] - mx);
    losses[i] = mx + std::log(sum) - row[targets[i]];
  }
  return losses;
}

// ---------------------------------------------------------------------------------------------
// Matmul

TEST_F(KernelsTest, MatmulForwardMatchesReference) {
  const int64_t M = 7, K = 5, N = 9;
  for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
    for (bool with_bias : {false, true}) {
      auto inp = random_floats(M * K, 1), w = random_floats(K * N, 2), bias = random_floats(N, 3);
      std::vector<float> out(M * N, 123.0f);  // overwritten, not accumulated
      k_.matmul_forward(out.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr, M, K,
                        N, layout);
      const auto bd = to_double(bias);
      expect_close(
          out, matmul_ref(to_double(inp), to_double(w), with_bias ? &bd : nullptr, M, K, N, layout),
          1e-6, 1e-5, "matmul out");
    }
  }
}

TEST_F(KernelsTest, MatmulBackwardMatchesFiniteDifferences) {
  const int64_t M = 7, K = 5, N = 9;
  for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
    auto inp = random_floats(M * K, 4), w = random_floats(K * N, 5), bias = random_floats(N, 6);
    auto dout = random_floats(M * N, 7);
    auto dinp = random_floats(M * K, 8), dw = random_floats(K * N, 9), db = random_floats(N, 10);
    const auto dinp0 = dinp, dw0 = dw, db0 = db;
    k_.matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), M, K,
                       N, layout);
    // loss = sum(out · dout), so d loss/d out = dout.
    auto xi = to_double(inp), xw = to_double(w), xb = to_double(bias);
    const auto r = to_double(dout);
    auto loss = [&] { return dot(matmul_ref(xi, xw, &xb, M, K, N, layout), r); };
    expect_close(dinp, fd_gradient(xi, loss, dinp0), 1e-5, 1e-4, "matmul dinp");
    expect_close(dw, fd_gradient(xw, loss, dw0), 1e-5, 1e-4, "matmul dweight");
    expect_close(db, fd_gradient(xb, loss, db0), 1e-5, 1e-4, "matmul dbias");

    // Null dinp and dbias are skipped; dweight still accumulates.
    auto dw_only = dw0;
    k_.matmul_backward(nullptr, dw_only.data(), nullptr, dout.data(), inp.data(), w.data(), M, K, N,
                       layout);
    EXPECT_TRUE(same_bits(dw_only, dw));
  }
}

// ---------------------------------------------------------------------------------------------
// Embedding

TEST_F(KernelsTest, EmbeddingForwardAndBackward) {
  const int64_t B = 2, T = 5, C = 8, V = 13;
  const std::vector<int32_t> tokens = {3, 12, 0, 3, 7, 7, 3, 1, 12, 0};  // repeats on purpose
  auto wte = random_floats(V * C, 11), wpe = random_floats(T * C, 12);
  std::vector<float> out(B * T * C);
  k_.embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, nullptr);
  std::vector<float> want(B * T * C);  // one float addition per element: exact match
  for (int64_t bt = 0; bt < B * T; ++bt)
    for (int64_t c = 0; c < C; ++c)
      want[bt * C + c] = wte[tokens[bt] * C + c] + wpe[(bt % T) * C + c];
  EXPECT_TRUE(same_bits(out, want));
  auto xwte = to_double(wte), xwpe = to_double(wpe);

  auto dout = random_floats(B * T * C, 13);
  auto dwte = random_floats(V * C, 14), dwpe = random_floats(T * C, 15);
  const auto dwte0 = dwte, dwpe0 = dwpe;
  k_.embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C, nullptr);
  const auto r = to_double(dout);
  auto loss = [&] { return dot(embedding_ref(tokens, xwte, xwpe, B, T, C), r); };
  expect_close(dwte, fd_gradient(xwte, loss, dwte0), 1e-5, 1e-5, "dwte");
  expect_close(dwpe, fd_gradient(xwpe, loss, dwpe0), 1e-5, 1e-5, "dwpe");
}

// Packed documents: the wpe row of a token is its position in its document; dwpe gathers the
// tokens at each position. Two rows of 13 tokens, documents of 5, 1, 7 and 4, 9.
TEST_F(KernelsTest, EmbeddingAtDocumentPositions) {
  const int64_t B = 2, T = 13, C = 8, V = 11;
  const std::vector<int32_t> positions = two_rows_of_13();
  std::vector<int32_t> tokens(B * T);
  for (int64_t bt = 0; bt < B * T; ++bt) tokens[bt] = int32_t((bt * 5) % V);
  auto wte = random_floats(V * C, 16), wpe = random_floats(T * C, 17);
  std::vector<float> out(B * T * C);
  k_.embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C,
                       positions.data());
  std::vector<float> want(B * T * C);  // one float addition per element: exact match
  for (int64_t bt = 0; bt < B * T; ++bt)
    for (int64_t c = 0; c < C; ++c)
      want[bt * C + c] = wte[tokens[bt] * C + c] + wpe[positions[bt] * C + c];
  EXPECT_TRUE(same_bits(out, want));

  auto dout = random_floats(B * T * C, 18);
  auto dwte = random_floats(V * C, 19), dwpe = random_floats(T * C, 20);
  const auto dwte0 = dwte, dwpe0 = dwpe;
  k_.embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C,
                        positions.data());
  auto xwte = to_double(wte), xwpe = to_double(wpe);
  const auto r = to_double(dout);
  auto loss = [&] { return dot(embedding_ref(tokens, xwte, xwpe, B, T, C, positions.data()), r); };
  expect_close(dwte, fd_gradient(xwte, loss, dwte0), 1e-5, 1e-5, "dwte");
  expect_close(dwpe, fd_gradient(xwpe, loss, dwpe0), 1e-5, 1e-5, "dwpe");
  // No token is at position 9 or later (the longest document has 9 tokens): those rows keep
  // their bits.
  for (int64_t i = 9 * C; i < T * C; ++i) ASSERT_EQ(dwpe[i], dwpe0[i]) << i;
}

// ---------------------------------------------------------------------------------------------
// LayerNorm

TEST_F(KernelsTest, LayerNormForwardMatchesReference) {
  for (int64_t C : {8, 37, 768}) {
    const int64_t N = 5;
    auto x = random_floats(N * C, 20, -2.0f, 3.0f), w = random_floats(C, 21),
         b = random_floats(C, 22);
    std::vector<float> out(N * C), mean(N), rstd(N);
    k_.layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    std::vector<double> rm(N), rr(N);
    const auto ref = layernorm_ref(to_double(x), to_double(w), to_double(b), N, C, &rm, &rr);
    expect_close(out, ref, 1e-5, 1e-5, "layernorm out C=" + std::to_string(C));
    expect_close(mean, rm, 1e-6, 1e-5, "layernorm mean");
    expect_close(rstd, rr, 0, 1e-5, "layernorm rstd");
  }
}

TEST_F(KernelsTest, LayerNormBackwardMatchesFiniteDifferences) {
  for (int64_t C : {8, 37}) {
    const int64_t N = 3;
    auto x = random_floats(N * C, 23, -2.0f, 2.0f), w = random_floats(C, 24),
         b = random_floats(C, 25);
    std::vector<float> out(N * C), mean(N), rstd(N);
    k_.layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    auto dout = random_floats(N * C, 26);
    auto dx = random_floats(N * C, 27), dw = random_floats(C, 28), db = random_floats(C, 29);
    const auto dx0 = dx, dw0 = dw, db0 = db;
    k_.layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                          mean.data(), rstd.data(), N, C);
    auto xx = to_double(x), xw = to_double(w), xb = to_double(b);
    const auto r = to_double(dout);
    auto loss = [&] { return dot(layernorm_ref(xx, xw, xb, N, C), r); };
    expect_close(dx, fd_gradient(xx, loss, dx0), 1e-4, 1e-4, "layernorm dinp");
    expect_close(dw, fd_gradient(xw, loss, dw0), 1e-4, 1e-4, "layernorm dweight");
    expect_close(db, fd_gradient(xb, loss, db0), 1e-4, 1e-4, "layernorm dbias");
  }
}

// ---------------------------------------------------------------------------------------------
// GELU

std::vector<float> gelu_inputs() {
  auto x = random_floats(997, 30, -6.0f, 6.0f);
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 9.0f, -9.0f, 12.0f, -12.0f, 20.0f, -20.0f, 100.0f,
                  -100.0f, 1e4f, -1e4f})
    x.push_back(v);
  return x;
}

TEST_F(KernelsTest, GeluForwardMatchesReference) {
  const auto x = gelu_inputs();
  std::vector<float> out(x.size());
  k_.gelu_forward(out.data(), x.data(), int64_t(x.size()));
  std::vector<double> ref(x.size());
  for (size_t i = 0; i < x.size(); ++i) ref[i] = gelu_ref(x[i]);
  expect_close(out, ref, 1e-7, 2e-6, "gelu");
}

TEST_F(KernelsTest, GeluBackwardMatchesFiniteDifferences) {
  const auto x = gelu_inputs();
  const auto dout = random_floats(x.size(), 31);
  auto dinp = random_floats(x.size(), 32);
  const auto dinp0 = dinp;
  k_.gelu_backward(dinp.data(), x.data(), dout.data(), int64_t(x.size()));
  std::vector<double> ref(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    std::vector<double> xi = {x[i]};
    ref[i] = dinp0[i] + dout[i] * central_difference(xi, 0, [&] { return gelu_ref(xi[0]); });
  }
  expect_close(dinp, ref, 1e-6, 1e-5, "gelu dinp");
}

// ---------------------------------------------------------------------------------------------
// Softmax cross-entropy

TEST_F(KernelsTest, SoftmaxCrossEntropyMatchesReference) {
  struct Case {
    int64_t N, V, Vp;
  };
  // The brief's small case, and rows spanning several 2048-column chunks with a ragged tail.
  for (const Case& c : {Case{3, 13, 16}, Case{2, 5000, 5008}}) {
    auto logits = random_floats(c.N * c.Vp, 60, -4.0f, 4.0f);
    std::vector<int32_t> targets(c.N);
    for (int64_t i = 0; i < c.N; ++i) targets[i] = int32_t((7 * i + 3) % c.V);
    auto x = to_double(logits);
    const auto ref_loss = cross_entropy_ref(x, targets, c.N, c.V, c.Vp);

    // kKeep: losses only, logits untouched.
    auto untouched = logits;
    std::vector<float> losses(c.N);
    k_.softmax_cross_entropy(losses.data(), untouched.data(), targets.data(), c.N, c.V, c.Vp,
                             LogitsOutput::kKeep);
    expect_close(losses, ref_loss, 1e-5, 1e-5, "loss");
    EXPECT_TRUE(same_bits(untouched, logits));

    // kGradient: gradient of sum_i dloss·loss_i in place, padding zeroed.
    const float dloss = 0.25f;
    auto grad = logits;
    k_.softmax_cross_entropy(losses.data(), grad.data(), targets.data(), c.N, c.V, c.Vp,
                             LogitsOutput::kGradient, dloss);
    expect_close(losses, ref_loss, 1e-5, 1e-5, "loss with gradient");
    std::vector<float> got;
    std::vector<double> want;
    for (int64_t i = 0; i < c.N; ++i) {
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < c.V; ++j) mx = std::max(mx, x[i * c.Vp + j]);
      for (int64_t j = 0; j < c.V; ++j) sum += std::exp(x[i * c.Vp + j] - mx);
      for (int64_t j = 0; j < c.Vp; ++j) {
        got.push_back(grad[i * c.Vp + j]);
        if (j >= c.V) {
          want.push_back(0.0);
          continue;
        }
        want.push_back(dloss * (std::exp(x[i * c.Vp + j] - mx) / sum - (j == targets[i])));
      }
    }
    expect_close(got, want, 1e-8, 1e-5, "softmax gradient");
    for (int64_t i = 0; i < c.N; ++i)
      for (int64_t j = c.V; j < c.Vp; ++j) ASSERT_EQ(grad[i * c.Vp + j], 0.0f);

    // Finite differences of the double loss, for the small case.
    if (c.V < 100) {
      auto loss = [&] {
        double s = 0;
        for (double l : cross_entropy_ref(x, targets, c.N, c.V, c.Vp)) s += dloss * l;
        return s;
      };
      std::vector<float> fd_got;
      std::vector<double> fd_want;
      for (int64_t i = 0; i < c.N; ++i)
        for (int64_t j = 0; j < c.V; ++j) {
          fd_got.push_back(grad[i * c.Vp + j]);
          fd_want.push_back(central_difference(x, size_t(i * c.Vp + j), loss));
        }
      expect_close(fd_got, fd_want, 1e-7, 1e-4, "softmax gradient (finite differences)");
    }
  }
}

// Rows whose target is negative are not trained on: loss 0 and, with dloss != 0, a gradient row
// of +0 (padding included); with dloss == 0 their logits are left alone. The other rows give the
// bits they give when every row is trained on.
TEST_F(KernelsTest, SoftmaxCrossEntropyIgnoresNegativeTargets) {
  const int64_t N = 5, V = 13, Vp = 16;
  const auto logits = random_floats(N * Vp, 62, -4.0f, 4.0f);
  const std::vector<int32_t> all = {3, 0, 12, 7, 5};
  const std::vector<int32_t> some = {3, kIgnoreTarget, 12, -7, 5};
  for (float dloss : {0.0f, 0.25f}) {  // 0: losses only (kKeep)
    const LogitsOutput output = dloss == 0.0f ? LogitsOutput::kKeep : LogitsOutput::kGradient;
    std::vector<float> losses_all(N), losses_some(N, 99.0f);
    auto grad_all = logits, grad_some = logits;
    k_.softmax_cross_entropy(losses_all.data(), grad_all.data(), all.data(), N, V, Vp, output,
                             dloss);
    k_.softmax_cross_entropy(losses_some.data(), grad_some.data(), some.data(), N, V, Vp, output,
                             dloss);
    for (int64_t i = 0; i < N; ++i) {
      const std::vector<float> row_all(grad_all.begin() + i * Vp, grad_all.begin() + (i + 1) * Vp);
      const std::vector<float> row_some(grad_some.begin() + i * Vp,
                                        grad_some.begin() + (i + 1) * Vp);
      if (some[i] >= 0) {
        EXPECT_TRUE(same_bits({losses_some[i]}, {losses_all[i]})) << "row " << i;
        EXPECT_TRUE(same_bits(row_some, row_all)) << "row " << i << " dloss " << dloss;
        continue;
      }
      EXPECT_TRUE(same_bits({losses_some[i]}, {0.0f})) << "row " << i;
      const std::vector<float> untouched(logits.begin() + i * Vp, logits.begin() + (i + 1) * Vp);
      EXPECT_TRUE(same_bits(row_some, dloss == 0.0f ? untouched : std::vector<float>(Vp, 0.0f)))
          << "row " << i << " dloss " << dloss;
    }
  }
}

TEST_F(KernelsTest, SoftmaxCrossEntropyIsStableForLargeLogits) {
  const int64_t V = 13, Vp = 16;
  std::vector<float> logits(Vp, 0.0f);
  for (int64_t j = 0; j < V; ++j) logits[j] = 1000.0f + float(j);
  logits[5] = 3000.0f;  // dominates: loss of target 5 is ~0, of target 0 is ~3000
  for (int32_t target : {5, 0}) {
    auto row = logits;
    float loss = -1;
    k_.softmax_cross_entropy(&loss, row.data(), &target, 1, V, Vp, LogitsOutput::kGradient, 1.0f);
    EXPECT_NEAR(loss, target == 5 ? 0.0 : 2000.0, 1e-3);
    for (int64_t j = 0; j < Vp; ++j) EXPECT_TRUE(std::isfinite(row[j]));
    EXPECT_NEAR(row[5], target == 5 ? 0.0 : 1.0, 1e-6);
  }
}

}  // namespace
}  // namespace zt
