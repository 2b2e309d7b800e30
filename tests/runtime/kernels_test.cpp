// Tests of the CPU Kernels table (runtime/cpu/, CpuKernels). Every forward kernel is checked
// against a plain double-precision loop written here; every backward kernel against central
// finite differences of that double reference (and for accumulation: gradients are += into
// buffers that start non-zero). Then the properties the ZeRO stages rely on: element-wise
// kernels give an element the same bits wherever it sits, reductions give the same bits for 1,
// 2 or 3 threads, and the SSE2 / AVX2 / AVX-512 paths agree bit for bit (tables capped through
// ZT_CPU_SIMD). Last, the dtype conversions: all fp16 patterns, fp32->fp16 against the F16C
// instruction, fp32->bf16 against a round-to-nearest-even reference, and round_to / add against
// dtype.h's scalar conversions on every path. Not here: performance.
#include <gtest/gtest.h>
#include <immintrin.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_device.h"
#include "runtime/dtype.h"
#include "runtime/kernels.h"

#include "random_data.h"

namespace zt {
namespace {

// ---------------------------------------------------------------------------------------------
// Helpers

using test::random_floats;

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// |actual - expected| <= atol + rtol·|expected|, element by element, naming the first failures.
void expect_close(const std::vector<float>& actual, const std::vector<double>& expected,
                  double atol, double rtol, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < actual.size() && failures < 5; ++i) {
    const double err = std::abs(double(actual[i]) - expected[i]);
    if (!(err <= atol + rtol * std::abs(expected[i]))) {
      ADD_FAILURE() << what << "[" << i << "]: got " << actual[i] << ", want " << expected[i]
                    << " (error " << err << ")";
      ++failures;
    }
  }
}

// Central difference of loss() in x[i]; loss reads x.
double central_difference(std::vector<double>& x, size_t i, const std::function<double()>& loss,
                          double h = 1e-6) {
  const double saved = x[i];
  x[i] = saved + h;
  const double up = loss();
  x[i] = saved - h;
  const double down = loss();
  x[i] = saved;
  return (up - down) / (2 * h);
}

// Finite-difference gradient of loss() in every element of x, plus a starting value per element
// (the kernels accumulate into buffers that hold `start`).
std::vector<double> fd_gradient(std::vector<double>& x, const std::function<double()>& loss,
                                const std::vector<float>& start) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) g[i] = start[i] + central_difference(x, i, loss);
  return g;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Runs f with the OpenMP thread count set to n, then restores it.
template <class F>
void with_threads(int n, const F& f) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(n);
  f();
  omp_set_num_threads(saved);
}

// A kernel table capped at one instruction set (ZT_CPU_SIMD is read at construction only).
std::unique_ptr<Kernels> kernels_capped_at(const char* level) {
  const char* old = std::getenv("ZT_CPU_SIMD");
  const std::string saved = old ? old : "";
  setenv("ZT_CPU_SIMD", level, 1);
  auto k = make_cpu_kernels();
  if (old)
    setenv("ZT_CPU_SIMD", saved.c_str(), 1);
  else
    unsetenv("ZT_CPU_SIMD");
  return k;
}

std::vector<const char*> simd_levels() {
  std::vector<const char*> levels = {"sse2"};
  if (__builtin_cpu_supports("avx2")) levels.push_back("avx2");
  if (__builtin_cpu_supports("avx512f")) levels.push_back("avx512");
  return levels;
}

class KernelsTest : public ::testing::Test {
 protected:
  CpuDevice dev_;
  Kernels& k_ = dev_.kernels();
};

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

std::vector<double> embedding_ref(const std::vector<int32_t>& tokens,
                                  const std::vector<double>& wte, const std::vector<double>& wpe,
                                  int64_t B, int64_t T, int64_t C) {
  std::vector<double> out(B * T * C);
  for (int64_t bt = 0; bt < B * T; ++bt)
    for (int64_t c = 0; c < C; ++c)
      out[bt * C + c] = wte[tokens[bt] * C + c] + wpe[(bt % T) * C + c];
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

// Causal attention; qkv (B,T,3C), out (B,T,C), att (B,NH,T,T) with zeros above the diagonal.
std::vector<double> attention_ref(const std::vector<double>& qkv, int64_t B, int64_t T, int64_t C,
                                  int64_t NH, std::vector<double>* att = nullptr) {
  const int64_t hs = C / NH;
  const double scale = 1.0 / std::sqrt(double(hs));
  std::vector<double> out(B * T * C, 0.0), p(T);
  if (att) att->assign(B * NH * T * T, 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const double* q = &qkv[(b * T + t) * 3 * C + h * hs];
        double mx = -INFINITY;
        for (int64_t j = 0; j <= t; ++j) {
          const double* kj = &qkv[(b * T + j) * 3 * C + C + h * hs];
          double s = 0;
          for (int64_t d = 0; d < hs; ++d) s += q[d] * kj[d];
          p[j] = s * scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= t; ++j) sum += (p[j] = std::exp(p[j] - mx));
        for (int64_t j = 0; j <= t; ++j) {
          p[j] /= sum;
          if (att) (*att)[((b * NH + h) * T + t) * T + j] = p[j];
          const double* vj = &qkv[(b * T + j) * 3 * C + 2 * C + h * hs];
          for (int64_t d = 0; d < hs; ++d) out[(b * T + t) * C + h * hs + d] += p[j] * vj[d];
        }
      }
  return out;
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
  k_.embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  std::vector<float> want(B * T * C);  // one float addition per element: exact match
  for (int64_t bt = 0; bt < B * T; ++bt)
    for (int64_t c = 0; c < C; ++c)
      want[bt * C + c] = wte[tokens[bt] * C + c] + wpe[(bt % T) * C + c];
  EXPECT_TRUE(same_bits(out, want));
  auto xwte = to_double(wte), xwpe = to_double(wpe);

  auto dout = random_floats(B * T * C, 13);
  auto dwte = random_floats(V * C, 14), dwpe = random_floats(T * C, 15);
  const auto dwte0 = dwte, dwpe0 = dwpe;
  k_.embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  const auto r = to_double(dout);
  auto loss = [&] { return dot(embedding_ref(tokens, xwte, xwpe, B, T, C), r); };
  expect_close(dwte, fd_gradient(xwte, loss, dwte0), 1e-5, 1e-5, "dwte");
  expect_close(dwpe, fd_gradient(xwpe, loss, dwpe0), 1e-5, 1e-5, "dwpe");
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
// Attention

struct AttentionCase {
  int64_t B, T, C, NH;
};

TEST_F(KernelsTest, AttentionForwardMatchesReference) {
  // The brief's small case and a GPT-2-like head size (64) with T past a 64-key tile.
  for (const AttentionCase& s : {AttentionCase{2, 5, 8, 2}, AttentionCase{1, 70, 128, 2}}) {
    auto qkv = random_floats(s.B * s.T * 3 * s.C, 40, -1.5f, 1.5f);
    std::vector<float> out(s.B * s.T * s.C, 99.0f);
    std::vector<float> att(s.B * s.NH * s.T * s.T, std::numeric_limits<float>::quiet_NaN());
    k_.attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH);
    std::vector<double> ratt;
    const auto ref = attention_ref(to_double(qkv), s.B, s.T, s.C, s.NH, &ratt);
    expect_close(out, ref, 1e-6, 1e-5, "attention out T=" + std::to_string(s.T));
    expect_close(att, ratt, 1e-7, 1e-5, "attention att");
    for (int64_t row = 0; row < s.B * s.NH * s.T; ++row)
      for (int64_t j = row % s.T + 1; j < s.T; ++j)
        ASSERT_EQ(std::bit_cast<uint32_t>(att[row * s.T + j]), 0u) << "above the diagonal";
  }
}

TEST_F(KernelsTest, AttentionBackwardMatchesFiniteDifferences) {
  for (const AttentionCase& s : {AttentionCase{2, 5, 8, 2}, AttentionCase{1, 70, 128, 2}}) {
    const int64_t n_qkv = s.B * s.T * 3 * s.C;
    auto qkv = random_floats(n_qkv, 41, -1.5f, 1.5f);
    std::vector<float> out(s.B * s.T * s.C), att(s.B * s.NH * s.T * s.T);
    k_.attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH);
    auto dout = random_floats(out.size(), 42);
    auto dqkv = random_floats(n_qkv, 43);
    const auto dqkv0 = dqkv;
    k_.attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, s.C, s.NH);
    auto x = to_double(qkv);
    const auto r = to_double(dout);
    auto loss = [&] { return dot(attention_ref(x, s.B, s.T, s.C, s.NH), r); };
    // Every element for the small case; a random sample of 150 for the large one.
    std::vector<size_t> idx;
    if (n_qkv < 1000) {
      for (int64_t i = 0; i < n_qkv; ++i) idx.push_back(size_t(i));
    } else {
      std::mt19937 gen(44);
      for (int i = 0; i < 150; ++i) idx.push_back(gen() % size_t(n_qkv));
    }
    std::vector<float> got;
    std::vector<double> want;
    for (size_t i : idx) {
      got.push_back(dqkv[i]);
      want.push_back(dqkv0[i] + central_difference(x, i, loss));
    }
    expect_close(got, want, 1e-5, 1e-4, "attention dqkv T=" + std::to_string(s.T));
  }
}

// ---------------------------------------------------------------------------------------------
// Residual, accumulate, fill: single IEEE operations, so equal to float loops bit for bit.

TEST_F(KernelsTest, ElementwiseUtilitiesMatchFloatLoops) {
  const int64_t n = 100003;  // several parallel chunks and a ragged tail
  const auto a = random_floats(n, 50), b = random_floats(n, 51);
  std::vector<float> want(n);

  std::vector<float> out(n);
  k_.residual_forward(out.data(), a.data(), b.data(), n);
  for (int64_t i = 0; i < n; ++i) want[i] = a[i] + b[i];
  EXPECT_TRUE(same_bits(out, want));

  auto aliased = a;  // out may alias an input
  k_.residual_forward(aliased.data(), aliased.data(), b.data(), n);
  EXPECT_TRUE(same_bits(aliased, want));

  auto y = a;
  k_.accumulate(y.data(), b.data(), n);
  EXPECT_TRUE(same_bits(y, want));

  auto s = a;
  k_.fill(s.data(), -2.5f, n);
  EXPECT_TRUE(same_bits(s, std::vector<float>(n, -2.5f)));
  k_.fill(s.data(), 0.0f, 0);  // n = 0 is a no-op
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

    // dloss == 0: losses only, logits untouched.
    auto untouched = logits;
    std::vector<float> losses(c.N);
    k_.softmax_cross_entropy(losses.data(), untouched.data(), targets.data(), c.N, c.V, c.Vp, 0.0f);
    expect_close(losses, ref_loss, 1e-5, 1e-5, "loss");
    EXPECT_TRUE(same_bits(untouched, logits));

    // dloss != 0: gradient of sum_i dloss·loss_i in place, padding zeroed.
    const float dloss = 0.25f;
    auto grad = logits;
    k_.softmax_cross_entropy(losses.data(), grad.data(), targets.data(), c.N, c.V, c.Vp, dloss);
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

TEST_F(KernelsTest, SoftmaxCrossEntropyIsStableForLargeLogits) {
  const int64_t V = 13, Vp = 16;
  std::vector<float> logits(Vp, 0.0f);
  for (int64_t j = 0; j < V; ++j) logits[j] = 1000.0f + float(j);
  logits[5] = 3000.0f;  // dominates: loss of target 5 is ~0, of target 0 is ~3000
  for (int32_t target : {5, 0}) {
    auto row = logits;
    float loss = -1;
    k_.softmax_cross_entropy(&loss, row.data(), &target, 1, V, Vp, 1.0f);
    EXPECT_NEAR(loss, target == 5 ? 0.0 : 2000.0, 1e-3);
    for (int64_t j = 0; j < Vp; ++j) EXPECT_TRUE(std::isfinite(row[j]));
    EXPECT_NEAR(row[5], target == 5 ? 0.0 : 1.0, 1e-6);
  }
}

// ---------------------------------------------------------------------------------------------
// Optimizers

TEST_F(KernelsTest, AdamWMatchesReference) {
  const int64_t n = 1001;
  for (bool decoupled : {true, false}) {
    AdamWArgs args;
    args.lr = 1e-2f;
    args.weight_decay = 0.1f;
    args.grad_scale = 0.5f;
    args.decoupled = decoupled;
    auto p = random_floats(n, 70), m = std::vector<float>(n, 0.0f), v = m;
    auto rp = to_double(p), rm = to_double(m), rv = to_double(v);
    for (int64_t step = 1; step <= 3; ++step) {
      args.step = step;
      const auto g = random_floats(n, uint32_t(70 + step), -3.0f, 3.0f);
      k_.adamw(p.data(), g.data(), m.data(), v.data(), n, args);
      const double b1 = args.beta1, b2 = args.beta2;
      for (int64_t i = 0; i < n; ++i) {
        double gi = double(g[i]) * args.grad_scale;
        if (!decoupled) gi += args.weight_decay * rp[i];
        rm[i] = b1 * rm[i] + (1 - b1) * gi;
        rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
        const double mhat = rm[i] / (1 - std::pow(b1, step));
        const double vhat = rv[i] / (1 - std::pow(b2, step));
        rp[i] -= args.lr * (mhat / (std::sqrt(vhat) + args.eps) +
                            (decoupled ? args.weight_decay * rp[i] : 0.0));
      }
    }
    expect_close(p, rp, 1e-6, 1e-5, decoupled ? "adamw param" : "adam (L2) param");
    expect_close(m, rm, 1e-6, 1e-5, "adamw m");
    expect_close(v, rv, 1e-7, 1e-5, "adamw v");
  }
}

TEST_F(KernelsTest, SgdMatchesReference) {
  const int64_t n = 1001;
  for (float momentum : {0.0f, 0.9f}) {
    SgdArgs args;
    args.lr = 0.05f;
    args.momentum = momentum;
    args.weight_decay = 0.01f;
    args.grad_scale = 2.0f;
    auto p = random_floats(n, 80);
    std::vector<float> buf(n, 0.0f);
    auto rp = to_double(p), rb = to_double(buf);
    for (int step = 0; step < 3; ++step) {
      const auto g = random_floats(n, uint32_t(81 + step));
      k_.sgd(p.data(), g.data(), momentum != 0.0f ? buf.data() : nullptr, n, args);
      for (int64_t i = 0; i < n; ++i) {
        double gi = double(g[i]) * args.grad_scale + args.weight_decay * rp[i];
        if (momentum != 0.0f) gi = rb[i] = momentum * rb[i] + gi;
        rp[i] -= args.lr * gi;
      }
    }
    expect_close(p, rp, 1e-6, 1e-5, "sgd param");
  }
}

// ---------------------------------------------------------------------------------------------
// Element-position invariance: a buffer updated whole equals its two shards updated separately,
// bit for bit (shard boundary at 333, so the vector body of one is the tail of the other).

TEST_F(KernelsTest, ElementwiseKernelsArePositionInvariant) {
  const int64_t n = 1000, cut = 333;
  const auto x = random_floats(n, 90, -5.0f, 5.0f), g = random_floats(n, 91);
  auto whole_and_split = [&](const std::function<void(int64_t, int64_t, int)>& run) {
    run(0, n, 0);
    run(0, cut, 1);
    run(cut, n - cut, 1);
  };

  {  // adamw, both flavours
    for (bool decoupled : {true, false}) {
      AdamWArgs args;
      args.weight_decay = 0.1f;
      args.step = 7;
      args.decoupled = decoupled;
      std::vector<float> p[2] = {x, x}, m[2], v[2];
      for (int c = 0; c < 2; ++c) {
        m[c] = random_floats(n, 92);
        v[c] = random_floats(n, 93, 0.0f, 1.0f);
      }
      whole_and_split([&](int64_t off, int64_t len, int c) {
        k_.adamw(p[c].data() + off, g.data() + off, m[c].data() + off, v[c].data() + off, len,
                 args);
      });
      EXPECT_TRUE(same_bits(p[0], p[1]) && same_bits(m[0], m[1]) && same_bits(v[0], v[1]));
    }
  }
  {  // sgd with momentum
    SgdArgs args;
    args.momentum = 0.9f;
    args.weight_decay = 0.01f;
    std::vector<float> p[2] = {x, x}, b[2] = {g, g};
    whole_and_split([&](int64_t off, int64_t len, int c) {
      k_.sgd(p[c].data() + off, g.data() + off, b[c].data() + off, len, args);
    });
    EXPECT_TRUE(same_bits(p[0], p[1]) && same_bits(b[0], b[1]));
  }
  {  // gelu forward and backward
    std::vector<float> y[2] = {std::vector<float>(n), std::vector<float>(n)}, d[2] = {g, g};
    whole_and_split([&](int64_t off, int64_t len, int c) {
      k_.gelu_forward(y[c].data() + off, x.data() + off, len);
      k_.gelu_backward(d[c].data() + off, x.data() + off, g.data() + off, len);
    });
    EXPECT_TRUE(same_bits(y[0], y[1]) && same_bits(d[0], d[1]));
  }
  {  // cast fp32 -> fp16 / bf16 and back
    for (DType t : {DType::kF16, DType::kBF16}) {
      std::vector<uint16_t> h[2] = {std::vector<uint16_t>(n), std::vector<uint16_t>(n)};
      std::vector<float> back[2] = {std::vector<float>(n), std::vector<float>(n)};
      whole_and_split([&](int64_t off, int64_t len, int c) {
        k_.cast(h[c].data() + off, t, x.data() + off, DType::kF32, len);
        k_.cast(back[c].data() + off, DType::kF32, h[c].data() + off, t, len);
      });
      EXPECT_EQ(h[0], h[1]);
      EXPECT_TRUE(same_bits(back[0], back[1]));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Reductions: the same bits for any thread count.

TEST_F(KernelsTest, LayerNormBackwardDoesNotDependOnThreadCount) {
  const int64_t N = 200, C = 96;  // several row blocks
  auto x = random_floats(N * C, 100), w = random_floats(C, 101), b = random_floats(C, 102);
  const auto dout = random_floats(N * C, 103);
  std::vector<float> out(N * C), mean(N), rstd(N);
  k_.layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3}) {
    std::vector<float> dx(N * C, 0.5f), dw(C, 0.25f), db(C, -0.25f);
    with_threads(threads, [&] {
      k_.layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                            mean.data(), rstd.data(), N, C);
    });
    dx.insert(dx.end(), dw.begin(), dw.end());
    dx.insert(dx.end(), db.begin(), db.end());
    results.push_back(dx);
  }
  EXPECT_TRUE(same_bits(results[0], results[1]));
  EXPECT_TRUE(same_bits(results[0], results[2]));
}

TEST_F(KernelsTest, SumSquaresMatchesReferenceAndDoesNotDependOnThreadCount) {
  const int64_t n = 100003;  // 7 blocks of 16384, the last ragged
  const auto x = random_floats(n, 110, -3.0f, 3.0f);
  double ref = 0;
  for (float v : x) ref += double(v) * double(v);
  std::vector<double> got;
  for (int threads : {1, 2, 3})
    with_threads(threads, [&] { got.push_back(k_.sum_squares(x.data(), n)); });
  EXPECT_NEAR(got[0], ref, 1e-10 * ref);
  EXPECT_EQ(std::bit_cast<uint64_t>(got[0]), std::bit_cast<uint64_t>(got[1]));
  EXPECT_EQ(std::bit_cast<uint64_t>(got[0]), std::bit_cast<uint64_t>(got[2]));
  EXPECT_EQ(k_.sum_squares(x.data(), 0), 0.0);
  EXPECT_EQ(k_.sum_squares(x.data(), 3),
            double(x[0]) * x[0] + double(x[1]) * x[1] + double(x[2]) * x[2]);
}

TEST_F(KernelsTest, ScatterAndAttentionGradientsDoNotDependOnThreadCount) {
  const int64_t B = 3, T = 16, C = 64, NH = 4, V = 11;
  std::vector<int32_t> tokens(B * T);
  for (int64_t i = 0; i < B * T; ++i) tokens[i] = int32_t((i * i) % V);
  const auto dout = random_floats(B * T * C, 120), qkv = random_floats(B * T * 3 * C, 121);
  std::vector<float> out(B * T * C), att(B * NH * T * T);
  k_.attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3}) {
    std::vector<float> dwte(V * C, 0.1f), dwpe(T * C, 0.2f), dqkv(B * T * 3 * C, 0.3f);
    with_threads(threads, [&] {
      k_.embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
      k_.attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
    });
    dwte.insert(dwte.end(), dwpe.begin(), dwpe.end());
    dwte.insert(dwte.end(), dqkv.begin(), dqkv.end());
    results.push_back(dwte);
  }
  EXPECT_TRUE(same_bits(results[0], results[1]));
  EXPECT_TRUE(same_bits(results[0], results[2]));
}

// ---------------------------------------------------------------------------------------------
// The SSE2, AVX2 and AVX-512 paths give the same bits (as many as this CPU has).

TEST_F(KernelsTest, InstructionSetPathsAgreeBitForBit) {
  const int64_t n = 1237, N = 37, C = 96, B = 2, T = 70, AC = 128, NH = 2, Vp = 3008, Vv = 3001;
  const auto x = random_floats(n, 140, -6.0f, 6.0f), g = random_floats(n, 141);
  const auto lx = random_floats(N * C, 142), lw = random_floats(C, 143), lb = random_floats(C, 144);
  const auto qkv = random_floats(B * T * 3 * AC, 145), dout = random_floats(B * T * AC, 146);
  const auto logits = random_floats(4 * Vp, 147, -5.0f, 5.0f);
  const std::vector<int32_t> targets = {0, 17, 3000, 1234};

  auto run_all = [&](Kernels& k) {
    std::vector<float> r(n);
    k.gelu_forward(r.data(), x.data(), n);
    std::vector<float> d = g;
    k.gelu_backward(d.data(), x.data(), g.data(), n);
    r.insert(r.end(), d.begin(), d.end());
    std::vector<float> p = x, m = g, v(n, 0.01f);
    AdamWArgs args;
    args.step = 3;
    args.weight_decay = 0.1f;
    k.adamw(p.data(), g.data(), m.data(), v.data(), n, args);
    r.insert(r.end(), p.begin(), p.end());
    std::vector<float> out(N * C), mean(N), rstd(N), dx(N * C), dw(C), db(C);
    k.layernorm_forward(out.data(), mean.data(), rstd.data(), lx.data(), lw.data(), lb.data(), N,
                        C);
    k.layernorm_backward(dx.data(), dw.data(), db.data(), out.data(), lx.data(), lw.data(),
                         mean.data(), rstd.data(), N, C);
    for (auto* part : {&out, &mean, &rstd, &dx, &dw, &db})
      r.insert(r.end(), part->begin(), part->end());
    std::vector<float> ao(B * T * AC), att(B * NH * T * T), dqkv(qkv.size());
    k.attention_forward(ao.data(), att.data(), qkv.data(), B, T, AC, NH);
    k.attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, AC, NH);
    for (auto* part : {&ao, &att, &dqkv}) r.insert(r.end(), part->begin(), part->end());
    std::vector<float> lg = logits, losses(4);
    k.softmax_cross_entropy(losses.data(), lg.data(), targets.data(), 4, Vv, Vp, 0.5f);
    for (auto* part : {&lg, &losses}) r.insert(r.end(), part->begin(), part->end());
    const double ss = k.sum_squares(x.data(), n);
    r.push_back(float(ss));
    r.push_back(float(ss - double(float(ss))));
    return r;
  };
  const auto reference = run_all(k_);
  for (const char* level : simd_levels()) {
    auto k = kernels_capped_at(level);
    EXPECT_TRUE(same_bits(run_all(*k), reference)) << "path " << level;
  }
}

// ---------------------------------------------------------------------------------------------
// Dtype conversions through the cast kernel

bool is_fp16_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

TEST_F(KernelsTest, Fp16RoundTripOfAllBitPatterns) {
  std::vector<uint16_t> all(65536), back(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = uint16_t(i);
  std::vector<float> f(65536);
  k_.cast(f.data(), DType::kF32, all.data(), DType::kF16, 65536);
  k_.cast(back.data(), DType::kF16, f.data(), DType::kF32, 65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    if (is_fp16_nan(all[i])) {
      ASSERT_TRUE(std::isnan(f[i])) << std::hex << i;
      ASSERT_TRUE(is_fp16_nan(back[i])) << std::hex << i;
    } else {
      ASSERT_EQ(back[i], all[i]) << std::hex << i;
    }
  }
}

__attribute__((target("f16c"))) uint16_t f16c_from_float(float x) {
  return uint16_t(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float f16c_to_float(uint16_t h) { return _cvtsh_ss(h); }

// Random bit patterns (every exponent), plus the edges of fp16's range and its rounding ties.
std::vector<float> conversion_inputs() {
  std::mt19937 gen(150);
  std::vector<float> v;
  for (int i = 0; i < 400000; ++i) v.push_back(std::bit_cast<float>(uint32_t(gen())));
  // Concentrate on fp16's exponent range [2^-26, 2^17).
  std::uniform_int_distribution<uint32_t> mant(0, 0x7fffff), exp(127 - 26, 127 + 16);
  for (int i = 0; i < 400000; ++i)
    v.push_back(
        std::bit_cast<float>(uint32_t(((gen() & 1u) << 31) | (exp(gen) << 23) | mant(gen))));
  for (float e : {0.0f,
                  -0.0f,
                  1.0f,
                  65504.0f,
                  65519.0f,
                  65519.99f,
                  65520.0f,
                  65536.0f,
                  1e10f,
                  0x1p-14f,
                  0x1p-24f,
                  0x1p-25f,
                  0x1.000002p-25f,
                  0x1.8p-24f,
                  0x1.4p-24f,
                  0x1.ffcp-15f,
                  0x1.ffep-15f,
                  1.0009765625f,
                  1.00048828125f,
                  1.00146484375f,
                  std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::min(),
                  std::numeric_limits<float>::denorm_min(),
                  INFINITY,
                  -INFINITY}) {
    v.push_back(e);
    v.push_back(-e);
  }
  return v;
}

TEST_F(KernelsTest, Fp32ToFp16MatchesF16C) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C on this CPU";
  const auto in = conversion_inputs();
  std::vector<uint16_t> out(in.size());
  k_.cast(out.data(), DType::kF16, in.data(), DType::kF32, int64_t(in.size()));
  for (size_t i = 0; i < in.size(); ++i) {
    if (std::isnan(in[i])) {
      ASSERT_TRUE(is_fp16_nan(out[i]));  // F16C keeps payload bits; we only promise NaN
      continue;
    }
    ASSERT_EQ(out[i], f16c_from_float(in[i])) << std::hexfloat << in[i];
  }
  for (uint32_t h = 0; h < 65536; ++h) {
    if (is_fp16_nan(uint16_t(h))) continue;
    const float f = fp16_to_fp32(uint16_t(h));
    ASSERT_EQ(std::bit_cast<uint32_t>(f), std::bit_cast<uint32_t>(f16c_to_float(uint16_t(h))))
        << std::hex << h;
  }
}

// bf16 by exact arithmetic: the two neighbouring bf16 values as doubles, the nearer one wins,
// ties go to the even pattern; past the largest finite value, the "next" value is 2^128 (inf).
uint16_t bf16_reference(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7fc0u);
  if (abs == 0x7f800000u) return uint16_t(sign | 0x7f80u);
  const uint16_t below = uint16_t(abs >> 16), above = uint16_t(below + 1);
  auto value = [](uint16_t b) {
    const int e = (b >> 7) & 0xff, m = b & 0x7f;
    return e == 0 ? std::ldexp(double(m), -133) : std::ldexp(double(128 + m), e - 134);
  };
  const double v = std::bit_cast<float>(abs);
  const double lo = value(below), hi = value(above);
  uint16_t pick = below;
  if (v - lo > hi - v || (v - lo == hi - v && (below & 1u))) pick = above;
  return uint16_t(sign | pick);
}

TEST_F(KernelsTest, Fp32ToBf16MatchesRoundToNearestEven) {
  const auto in = conversion_inputs();
  std::vector<uint16_t> out(in.size());
  std::vector<float> back(in.size());
  k_.cast(out.data(), DType::kBF16, in.data(), DType::kF32, int64_t(in.size()));
  k_.cast(back.data(), DType::kF32, out.data(), DType::kBF16, int64_t(in.size()));
  for (size_t i = 0; i < in.size(); ++i) {
    if (std::isnan(in[i])) {
      ASSERT_TRUE(std::isnan(back[i]));
      continue;
    }
    ASSERT_EQ(out[i], bf16_reference(in[i])) << std::hexfloat << in[i];
    ASSERT_EQ(std::bit_cast<uint32_t>(back[i]), uint32_t(out[i]) << 16);
  }
}

// The cast kernel (vectorised where it can be) gives dtype.h's bits on every path, NaNs included.
TEST_F(KernelsTest, CastMatchesDtypeConversionsOnEveryPath) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = uint16_t(i);
  auto in = conversion_inputs();
  for (uint32_t nan : {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7fa00000u, 0xff812345u})
    in.push_back(std::bit_cast<float>(nan));
  for (const char* level : simd_levels()) {
    auto k = kernels_capped_at(level);
    std::vector<float> f(65536);
    k->cast(f.data(), DType::kF32, all.data(), DType::kF16, 65536);
    for (uint32_t i = 0; i < 65536; ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(f[i]), std::bit_cast<uint32_t>(fp16_to_fp32(uint16_t(i))))
          << level << " fp16 " << std::hex << i;
    k->cast(f.data(), DType::kF32, all.data(), DType::kBF16, 65536);
    for (uint32_t i = 0; i < 65536; ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(f[i]), std::bit_cast<uint32_t>(bf16_to_fp32(uint16_t(i))))
          << level << " bf16 " << std::hex << i;
    std::vector<uint16_t> h(in.size()), b(in.size());
    k->cast(h.data(), DType::kF16, in.data(), DType::kF32, int64_t(in.size()));
    k->cast(b.data(), DType::kBF16, in.data(), DType::kF32, int64_t(in.size()));
    for (size_t i = 0; i < in.size(); ++i) {
      ASSERT_EQ(h[i], fp32_to_fp16(in[i])) << level << " " << std::hexfloat << in[i];
      ASSERT_EQ(b[i], fp32_to_bf16(in[i])) << level << " " << std::hexfloat << in[i];
    }
    std::vector<uint16_t> hb(65536), bh(65536);
    k->cast(hb.data(), DType::kBF16, all.data(), DType::kF16, 65536);
    k->cast(bh.data(), DType::kF16, all.data(), DType::kBF16, 65536);
    for (uint32_t i = 0; i < 65536; ++i) {
      ASSERT_EQ(hb[i], fp32_to_bf16(fp16_to_fp32(uint16_t(i)))) << level << std::hex << i;
      ASSERT_EQ(bh[i], fp32_to_fp16(bf16_to_fp32(uint16_t(i)))) << level << std::hex << i;
    }
  }
}

TEST_F(KernelsTest, CastBetweenSixteenBitTypesGoesThroughFp32) {
  const auto f = random_floats(1001, 160, -100.0f, 100.0f);
  std::vector<uint16_t> h(f.size()), b(f.size()), hb(f.size()), bh(f.size()), copy(f.size());
  k_.cast(h.data(), DType::kF16, f.data(), DType::kF32, int64_t(f.size()));
  k_.cast(b.data(), DType::kBF16, f.data(), DType::kF32, int64_t(f.size()));
  k_.cast(hb.data(), DType::kBF16, h.data(), DType::kF16, int64_t(f.size()));
  k_.cast(bh.data(), DType::kF16, b.data(), DType::kBF16, int64_t(f.size()));
  k_.cast(copy.data(), DType::kF16, h.data(), DType::kF16, int64_t(f.size()));
  for (size_t i = 0; i < f.size(); ++i) {
    ASSERT_EQ(hb[i], fp32_to_bf16(fp16_to_fp32(h[i])));
    ASSERT_EQ(bh[i], fp32_to_fp16(bf16_to_fp32(b[i])));
  }
  EXPECT_EQ(copy, h);
}

// ---------------------------------------------------------------------------------------------
// round_to and add: dtype.h's scalar conversions, element by element, on every path.

// float(t(x)) by dtype.h.
float round_ref(float x, DType t) {
  switch (t) {
    case DType::kF16: return fp16_to_fp32(fp32_to_fp16(x));
    case DType::kBF16: return bf16_to_fp32(fp32_to_bf16(x));
    case DType::kF32: return x;
  }
  return x;
}

bool same_float_bits(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

// conversion_inputs() (random patterns with fp32 subnormals, fp16's range edges and ties, values
// past 65504, ±inf), plus bf16 ties (even and odd below, and the one that rounds to inf) and NaNs
// with payloads.
std::vector<float> rounding_inputs() {
  auto v = conversion_inputs();
  for (uint32_t bits :
       {0x3f808000u, 0x3f818000u, 0xbf818000u, 0x7f7f8000u, 0x7f7f7fffu, 0x7f7fffffu, 0x00000001u,
        0x00400000u, 0x807fffffu, 0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7fa00000u, 0xff812345u})
    v.push_back(std::bit_cast<float>(bits));
  return v;
}

TEST_F(KernelsTest, RoundToMatchesDtypeConversionsOnEveryPath) {
  const auto in = rounding_inputs();
  const int64_t n = int64_t(in.size());
  for (const char* level : simd_levels()) {
    auto k = kernels_capped_at(level);
    std::vector<float> x = in;
    k->round_to(x.data(), DType::kF32, n);
    ASSERT_TRUE(same_bits(x, in)) << level << " fp32 is a no-op";
    for (DType t : {DType::kF16, DType::kBF16}) {
      x = in;
      k->round_to(x.data(), t, n);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_TRUE(same_float_bits(x[i], round_ref(in[i], t)))
            << level << " " << dtype_name(t) << " " << std::hexfloat << in[i] << " gave " << x[i];
      // Odd lengths at unaligned starts: the same bits, and nothing outside the range touched.
      for (int64_t off : {1, 3, 7}) {
        for (int64_t len : {1, 5, 13, 1001}) {
          x = in;
          k->round_to(x.data() + off, t, len);
          for (int64_t i = 0; i < off + len + 8; ++i) {
            const float want = i >= off && i < off + len ? round_ref(in[i], t) : in[i];
            ASSERT_TRUE(same_float_bits(x[i], want))
                << level << " " << dtype_name(t) << " off " << off << " len " << len << " i " << i;
          }
        }
      }
    }
  }
}

// n values of one dtype, made from fp32 by dtype.h.
struct TypedValues {
  DType type;
  std::vector<float> f32;
  std::vector<uint16_t> h16;
  TypedValues(DType t, const std::vector<float>& x) : type(t) {
    if (t == DType::kF32) {
      f32 = x;
      return;
    }
    for (float v : x) h16.push_back(t == DType::kF16 ? fp32_to_fp16(v) : fp32_to_bf16(v));
  }
  TypedValues(DType t, int64_t n) : type(t) {
    if (t == DType::kF32)
      f32.assign(n, 0.0f);
    else
      h16.assign(n, 0);
  }
  void* data() { return type == DType::kF32 ? static_cast<void*>(f32.data()) : h16.data(); }
  void* at(int64_t i) { return static_cast<char*>(data()) + i * int64_t(dtype_size(type)); }
  float get(int64_t i) const {
    switch (type) {
      case DType::kF16: return fp16_to_fp32(h16[i]);
      case DType::kBF16: return bf16_to_fp32(h16[i]);
      case DType::kF32: return f32[i];
    }
    return 0.0f;
  }
};

// Element i of dst equals t(sum) by dtype.h's rounding, bit for bit (any NaN for a NaN sum: the
// payload of NaN + NaN depends on operand order, which the compiler may swap).
::testing::AssertionResult stored_as(const TypedValues& dst, int64_t i, float sum) {
  const float want = round_ref(sum, dst.type), got = dst.get(i);
  if (std::isnan(want) ? std::isnan(got) : same_float_bits(got, want))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "i " << i << ": got " << std::hexfloat << got << ", want " << want;
}

// Random values of several magnitudes, with specials: ±0, ±inf, NaN, fp16 overflow and ties,
// fp16 and fp32 subnormals.
std::vector<float> add_inputs(int64_t n, uint32_t seed) {
  auto v = random_floats(size_t(n), seed, -4.0f, 4.0f);
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> scale(-30, 20);
  for (float& x : v) x = std::ldexp(x, scale(gen));
  const float specials[] = {0.0f,      -0.0f,          INFINITY,       -INFINITY, NAN,
                            65504.0f,  65520.0f,       -70000.0f,      0x1p-24f,  0x1p-25f,
                            0x1p-130f, 1.00048828125f, 1.00146484375f, 3.0e38f};
  for (size_t j = 0; j < std::size(specials); ++j) v[(j * 997 + seed) % size_t(n)] = specials[j];
  return v;
}

// Signalling NaNs (which F16C's fp16 load returns quiet) at elements 100 and 20001 of a, 101 and
// 20001 of b: the sums are NaN either way.
void add_signalling_nans(TypedValues& v, int64_t first) {
  for (int64_t i : {first, int64_t(20001)}) {
    if (v.type == DType::kF32)
      v.f32[i] = std::bit_cast<float>(i == first ? 0x7f800001u : 0xffa00000u);
    else if (v.type == DType::kF16)
      v.h16[i] = i == first ? 0x7c01 : 0xfd55;
    else
      v.h16[i] = i == first ? 0x7f81 : 0xffa0;
  }
}

TEST_F(KernelsTest, AddMatchesScalarReferenceForEveryDtypeCombination) {
  const int64_t n = 40003;  // more than one kElementGrain chunk, odd tail
  const auto xa = add_inputs(n, 170), xb = add_inputs(n, 171);
  const DType types[] = {DType::kF32, DType::kF16, DType::kBF16};
  std::vector<std::pair<const char*, std::unique_ptr<Kernels>>> paths;
  for (const char* level : simd_levels()) paths.emplace_back(level, kernels_capped_at(level));
  for (DType dt : types)
    for (DType at : types)
      for (DType bt : types) {
        TypedValues a(at, xa), b(bt, xb), first(dt, n);
        add_signalling_nans(a, 100);
        add_signalling_nans(b, 101);
        for (auto& [level, k] : paths) {
          TypedValues dst(dt, n), part(dt, n);
          const std::string what = std::string(level) + " " + std::string(dtype_name(dt)) +
                                   " = " + std::string(dtype_name(at)) + " + " +
                                   std::string(dtype_name(bt));
          k->add(dst.data(), dt, a.data(), at, b.data(), bt, n);
          for (int64_t i = 0; i < n; ++i)
            ASSERT_TRUE(stored_as(dst, i, a.get(i) + b.get(i))) << what;
          // Every path gives the same bits, NaNs included (but NaN + NaN, whose payload depends
          // on operand order).
          if (k == paths.front().second) first = dst;
          for (int64_t i = 0; i < n; ++i)
            ASSERT_TRUE(same_float_bits(dst.get(i), first.get(i)) ||
                        (std::isnan(a.get(i)) && std::isnan(b.get(i))))
                << what << " differs from " << paths.front().first << " at " << i;
          // An unaligned start and odd length give the same bits.
          k->add(part.at(3), dt, a.at(3), at, b.at(3), bt, 1001);
          for (int64_t i = 3; i < 1004; ++i)
            ASSERT_TRUE(same_float_bits(part.get(i), dst.get(i)))
                << what << " at offset 3, i " << i;
        }
      }
  for (auto& [level, k] : paths) {
    for (DType dt : types)
      for (DType bt : types) {  // a null: a rounding cast of b (-0 stays -0)
        TypedValues b(bt, xb), dst(dt, n);
        k->add(dst.data(), dt, nullptr, DType::kF32, b.data(), bt, n);
        const std::string what = std::string(level) + " null + " + std::string(dtype_name(bt));
        for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(stored_as(dst, i, b.get(i))) << what;
      }
    for (DType t : types)
      for (DType other : types) {  // dst is a, then dst is b
        TypedValues a(t, xa), b(other, xb);
        const std::string what = std::string(level) + " in place " + std::string(dtype_name(t));
        k->add(a.data(), t, a.data(), t, b.data(), other, n);
        const TypedValues a0(t, xa);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_TRUE(stored_as(a, i, a0.get(i) + b.get(i))) << what << " dst=a";
        TypedValues c(other, xa), d(t, xb);
        k->add(d.data(), t, c.data(), other, d.data(), t, n);
        const TypedValues d0(t, xb);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_TRUE(stored_as(d, i, c.get(i) + d0.get(i))) << what << " dst=b";
      }
  }
}

}  // namespace
}  // namespace zt
