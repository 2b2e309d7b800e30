// The CPU back end's kernels for Llama-family models: RMSNorm, rotary position embeddings,
// SwiGLU (cpu_nn_kernels.cpp), grouped-query attention (cpu_attention_kernels.cpp) and the
// embedding without a position table. Every forward kernel is checked against a plain
// double-precision loop written here; every backward kernel against central finite differences
// of that reference (gradients accumulate into buffers that start non-zero, but for rope_backward,
// which transforms in place). Rotary embeddings and attention also over rows that pack documents
// (Batch::positions). Also: the new kernels give the same bits for 1 and 3 threads and on every
// instruction set (with and without positions), and multi-head attention is the NKV == NH case of
// GQA bit for bit.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/kernels.h"

#include "kernels_test_util.h"
#include "packed_documents.h"

namespace zt {
namespace {

using namespace test;

// ---------------------------------------------------------------------------------------------
// Double-precision references

std::vector<double> rmsnorm_ref(const std::vector<double>& x, const std::vector<double>& w,
                                int64_t N, int64_t C, double eps,
                                std::vector<double>* rstd = nullptr) {
  std::vector<double> out(N * C);
  for (int64_t i = 0; i < N; ++i) {
    double ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += x[i * C + c] * x[i * C + c];
    const double r = 1.0 / std::sqrt(ss / C + eps);
    for (int64_t c = 0; c < C; ++c) out[i * C + c] = x[i * C + c] * r * w[c];
    if (rstd) (*rstd)[i] = r;
  }
  return out;
}

struct GqaShape {
  int64_t B, T, NH, NKV, hd;
  int64_t R() const { return (NH + 2 * NKV) * hd; }
  int64_t HD() const { return NH * hd; }
};

// Hugging Face's rotate-half RoPE on the q and k heads of qkv (B,T,R), angles in double, token
// bt at positions[bt] (null: bt % T).
// `inv_freq`, when given, replaces theta^(-2i/hd) (rope_scaling's frequencies).
std::vector<double> rope_ref(std::vector<double> qkv, const GqaShape& s, double theta,
                             const int32_t* positions = nullptr,
                             const std::vector<double>* inv_freq = nullptr) {
  const int64_t half = s.hd / 2;
  for (int64_t bt = 0; bt < s.B * s.T; ++bt) {
    const double t = double(positions ? positions[bt] : bt % s.T);
    for (int64_t h = 0; h < s.NH + s.NKV; ++h) {
      double* x = &qkv[bt * s.R() + h * s.hd];
      for (int64_t i = 0; i < half; ++i) {
        const double a =
            t * (inv_freq ? (*inv_freq)[i] : std::pow(theta, -2.0 * double(i) / double(s.hd)));
        const double x1 = x[i], x2 = x[i + half];
        x[i] = x1 * std::cos(a) - x2 * std::sin(a);
        x[i + half] = x2 * std::cos(a) + x1 * std::sin(a);
      }
    }
  }
  return qkv;
}

double silu_ref(double x) { return x / (1.0 + std::exp(-x)); }

// out (N,F) = silu(gate)·up over gate_up (N,2F).
std::vector<double> swiglu_ref(const std::vector<double>& gu, int64_t N, int64_t F) {
  std::vector<double> out(N * F);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t f = 0; f < F; ++f)
      out[r * F + f] = silu_ref(gu[r * 2 * F + f]) * gu[r * 2 * F + F + f];
  return out;
}

// Causal GQA: query head h reads key/value head h / (NH/NKV), query t its keys first_key .. t
// (positions null: 0 .. t). out (B,T,NH·hd).
std::vector<double> gqa_ref(const std::vector<double>& qkv, const GqaShape& s,
                            std::vector<double>* att = nullptr,
                            const int32_t* positions = nullptr) {
  const int64_t G = s.NH / s.NKV, R = s.R(), T = s.T;
  const double scale = 1.0 / std::sqrt(double(s.hd));
  std::vector<double> out(s.B * T * s.HD(), 0.0), p(T);
  if (att) att->assign(s.B * s.NH * T * T, 0.0);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.NH; ++h) {
      const int64_t j = h / G;
      for (int64_t t = 0; t < T; ++t) {
        const double* q = &qkv[(b * T + t) * R + h * s.hd];
        const int64_t w = first_key(positions, b * T + t, T);
        double mx = -INFINITY;
        for (int64_t u = w; u <= t; ++u) {
          const double* k = &qkv[(b * T + u) * R + s.HD() + j * s.hd];
          double dot = 0;
          for (int64_t d = 0; d < s.hd; ++d) dot += q[d] * k[d];
          p[u] = dot * scale;
          mx = std::max(mx, p[u]);
        }
        double sum = 0;
        for (int64_t u = w; u <= t; ++u) sum += (p[u] = std::exp(p[u] - mx));
        for (int64_t u = w; u <= t; ++u) {
          p[u] /= sum;
          if (att) (*att)[((b * s.NH + h) * T + t) * T + u] = p[u];
          const double* v = &qkv[(b * T + u) * R + s.HD() + (s.NKV + j) * s.hd];
          for (int64_t d = 0; d < s.hd; ++d)
            out[(b * T + t) * s.HD() + h * s.hd + d] += p[u] * v[d];
        }
      }
    }
  return out;
}

// The finite-difference gradient of dot(f(x), r) at the elements idx of x (all when empty).
std::vector<double> fd_at(std::vector<double>& x, const std::vector<double>& r,
                          const std::function<std::vector<double>()>& f,
                          const std::vector<size_t>& idx) {
  std::vector<double> g;
  auto loss = [&] { return dot(f(), r); };
  for (size_t i : idx) g.push_back(central_difference(x, i, loss));
  return g;
}

std::vector<size_t> all_or_sample(size_t n, size_t sample, uint32_t seed) {
  std::vector<size_t> idx;
  if (n <= 2 * sample) {
    for (size_t i = 0; i < n; ++i) idx.push_back(i);
  } else {
    std::mt19937 gen(seed);
    for (size_t i = 0; i < sample; ++i) idx.push_back(gen() % n);
  }
  return idx;
}

std::vector<float> pick(const std::vector<float>& v, const std::vector<size_t>& idx) {
  std::vector<float> out;
  for (size_t i : idx) out.push_back(v[i]);
  return out;
}

std::vector<double> plus(const std::vector<float>& start, const std::vector<size_t>& idx,
                         const std::vector<double>& g) {
  std::vector<double> out(g);
  for (size_t n = 0; n < idx.size(); ++n) out[n] += start[idx[n]];
  return out;
}

// ---------------------------------------------------------------------------------------------
// RMSNorm

TEST_F(KernelsTest, RmsnormForwardMatchesReference) {
  for (int64_t C : {int64_t{8}, int64_t{37}, int64_t{256}}) {
    const int64_t N = 45;  // more than one row block of 32
    const float eps = 1e-5f;
    auto x = random_floats(N * C, 200, -2.0f, 2.0f), w = random_floats(C, 201, 0.5f, 1.5f);
    std::vector<float> out(N * C, 7.0f), rstd(N);
    k_.rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
    std::vector<double> rrstd(N);
    expect_close(out, rmsnorm_ref(to_double(x), to_double(w), N, C, eps, &rrstd), 1e-6, 1e-5,
                 "rmsnorm out C=" + std::to_string(C));
    expect_close(rstd, rrstd, 1e-6, 1e-5, "rmsnorm rstd");
  }
}

TEST_F(KernelsTest, RmsnormBackwardMatchesFiniteDifferences) {
  const int64_t N = 40, C = 19;
  const double eps = 1e-5;
  auto x = random_floats(N * C, 210, -2.0f, 2.0f), w = random_floats(C, 211, 0.5f, 1.5f);
  std::vector<float> out(N * C), rstd(N);
  k_.rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, float(eps));
  auto dout = random_floats(N * C, 212), dx = random_floats(N * C, 213), dw = random_floats(C, 214);
  const auto dx0 = dx, dw0 = dw;
  k_.rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  auto xd = to_double(x), wd = to_double(w);
  const auto r = to_double(dout);
  auto f = [&] { return rmsnorm_ref(xd, wd, N, C, eps); };
  const auto ix = all_or_sample(x.size(), 1000, 215), iw = all_or_sample(w.size(), 100, 216);
  expect_close(pick(dx, ix), plus(dx0, ix, fd_at(xd, r, f, ix)), 1e-5, 1e-4, "rmsnorm dinp");
  expect_close(pick(dw, iw), plus(dw0, iw, fd_at(wd, r, f, iw)), 1e-5, 1e-4, "rmsnorm dweight");
}

// A bf16 weight and gradient: the forward equals the fp32 kernel on the widened weight, and the
// gradient is the fp32 gradient added with one rounding.
TEST_F(KernelsTest, RmsnormTakesBf16Parameters) {
  const int64_t N = 33, C = 24;
  auto x = random_floats(N * C, 220), wf = random_floats(C, 221, 0.5f, 1.5f);
  std::vector<uint16_t> w16(C), dw16(C, 0);
  k_.cast(w16.data(), DType::kBF16, wf.data(), DType::kF32, C);
  std::vector<float> w(C);
  k_.cast(w.data(), DType::kF32, w16.data(), DType::kBF16, C);
  std::vector<float> out16(N * C), out32(N * C), rstd(N);
  k_.rmsnorm_forward(out16.data(), rstd.data(), x.data(), ConstOperand(w16.data(), DType::kBF16), N,
                     C, 1e-6f);
  k_.rmsnorm_forward(out32.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
  EXPECT_TRUE(same_bits(out16, out32));
  auto dout = random_floats(N * C, 222);
  std::vector<float> dx(N * C, 0.0f), dw32(C, 0.0f), dw_from16(C);
  k_.rmsnorm_backward(dx.data(), Operand(dw16.data(), DType::kBF16), dout.data(), x.data(),
                      ConstOperand(w16.data(), DType::kBF16), rstd.data(), N, C);
  k_.rmsnorm_backward(dx.data(), dw32.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  std::vector<uint16_t> dw32_16(C);
  k_.cast(dw32_16.data(), DType::kBF16, dw32.data(), DType::kF32, C);
  EXPECT_EQ(dw16, dw32_16);
}

// ---------------------------------------------------------------------------------------------
// Rotary embeddings

TEST_F(KernelsTest, RopeForwardMatchesReference) {
  for (const GqaShape& s : {GqaShape{2, 7, 4, 2, 16}, GqaShape{1, 300, 2, 1, 64}}) {
    for (float theta : {10000.0f, 500000.0f}) {
      auto qkv = random_floats(s.B * s.T * s.R(), 230);
      const auto before = qkv;
      k_.rope_forward(qkv.data(), s.B, s.T, s.NH, s.NKV, s.hd, theta, nullptr);
      // fp32 angles (t · inv_freq rounded) differ from the double reference's by up to
      // T · 2^-24 radians, hence the tolerance growing with T.
      expect_close(qkv, rope_ref(to_double(before), s, theta), 2e-6 * s.T, 1e-5,
                   "rope T=" + std::to_string(s.T));
      // Value heads are untouched.
      for (int64_t bt = 0; bt < s.B * s.T; ++bt)
        for (int64_t i = (s.NH + s.NKV) * s.hd; i < s.R(); ++i)
          ASSERT_EQ(qkv[bt * s.R() + i], before[bt * s.R() + i]);
    }
  }
}

// rope_scaling, as transformers computes the frequencies (modeling_rope_utils): linear divides
// every one by factor; llama3 divides those of wavelength 2π/f past original/low_freq_factor,
// keeps those below original/high_freq_factor and blends linearly in 1/wavelength between.
std::vector<double> scaled_inv_freq(const RopeScaling& sc, double theta, int64_t hd) {
  std::vector<double> f(hd / 2);
  for (int64_t i = 0; i < hd / 2; ++i) {
    const double base = std::pow(theta, -2.0 * double(i) / double(hd));
    const double wavelength = 2.0 * M_PI / base;
    if (sc.type == RopeScalingType::kLinear) {
      f[i] = base / sc.factor;
    } else if (wavelength > sc.original_max_position / sc.low_freq_factor) {
      f[i] = base / sc.factor;
    } else if (wavelength < sc.original_max_position / sc.high_freq_factor) {
      f[i] = base;
    } else {
      const double smooth = (sc.original_max_position / wavelength - sc.low_freq_factor) /
                            (sc.high_freq_factor - sc.low_freq_factor);
      f[i] = (1.0 - smooth) * base / sc.factor + smooth * base;
    }
  }
  return f;
}

// hd 64 with theta 10000 has wavelengths from 2π to about 50,000: an original context of 64
// puts pairs in each of llama3's three bands (kept below 16, divided past 64, blended between).
TEST_F(KernelsTest, RopeWithScalingMatchesReference) {
  const GqaShape s{2, 40, 2, 1, 64};
  const float theta = 10000.0f;
  const RopeScaling llama3{RopeScalingType::kLlama3, 8.0f, 1.0f, 4.0f, 64};
  const RopeScaling linear{RopeScalingType::kLinear, 4.0f};
  const std::vector<int32_t> positions = document_positions({{25, 15}, {40}});
  for (const RopeScaling& sc : {llama3, linear}) {
    const auto inv = scaled_inv_freq(sc, theta, s.hd);
    int kept = 0, divided = 0;
    for (int64_t i = 0; i < s.hd / 2; ++i) {
      const double base = std::pow(double(theta), -2.0 * double(i) / double(s.hd));
      kept += inv[i] == base;
      divided += std::abs(inv[i] - base / sc.factor) < 1e-15;
    }
    if (sc.type == RopeScalingType::kLlama3) {
      EXPECT_GT(kept, 0);
      EXPECT_GT(divided, 0);
      EXPECT_LT(kept + divided, s.hd / 2);  // some blended
    }
    auto x = random_floats(s.B * s.T * s.R(), 246);
    auto y = x;
    k_.rope_forward(y.data(), s.B, s.T, s.NH, s.NKV, s.hd, RopeFrequencies(theta, sc),
                    positions.data());
    auto xd = to_double(x);
    expect_close(y, rope_ref(xd, s, theta, positions.data(), &inv), 2e-6 * s.T, 1e-5,
                 "rope scaled");
    auto dx = random_floats(x.size(), 247);
    const auto g = to_double(dx);
    k_.rope_backward(dx.data(), s.B, s.T, s.NH, s.NKV, s.hd, RopeFrequencies(theta, sc),
                     positions.data());
    auto f = [&] { return rope_ref(xd, s, theta, positions.data(), &inv); };
    const auto idx = all_or_sample(x.size(), 1500, 248);
    expect_close(pick(dx, idx), fd_at(xd, g, f, idx), 1e-5, 1e-4, "rope scaled backward");
  }
}

// The backward is the transpose of the forward's linear map: for the gradient r of the output,
// it must give d/dx dot(rope(x), r), checked by finite differences; and backward(forward(x)) = x.
TEST_F(KernelsTest, RopeBackwardMatchesFiniteDifferences) {
  const GqaShape s{2, 6, 4, 2, 8};
  const float theta = 10000.0f;
  auto x = random_floats(s.B * s.T * s.R(), 240);
  auto g = random_floats(x.size(), 241);
  auto dx = g;
  k_.rope_backward(dx.data(), s.B, s.T, s.NH, s.NKV, s.hd, theta, nullptr);
  auto xd = to_double(x);
  const auto r = to_double(g);
  auto f = [&] { return rope_ref(xd, s, theta); };
  const auto idx = all_or_sample(x.size(), 2000, 242);
  expect_close(pick(dx, idx), fd_at(xd, r, f, idx), 1e-5, 1e-4, "rope backward");
  auto round_trip = x;
  k_.rope_forward(round_trip.data(), s.B, s.T, s.NH, s.NKV, s.hd, theta, nullptr);
  k_.rope_backward(round_trip.data(), s.B, s.T, s.NH, s.NKV, s.hd, theta, nullptr);
  expect_close(round_trip, to_double(x), 1e-6, 1e-5, "rope round trip");
}

// Packed documents: each token rotated by its position in its document; the backward, the
// transpose at the same positions; positions 0..T-1 are the null-positions bits.
TEST_F(KernelsTest, RopeAtDocumentPositionsMatchesReference) {
  const GqaShape s{2, 13, 4, 2, 16};
  const float theta = 10000.0f;
  const std::vector<int32_t> positions = two_rows_of_13();
  auto x = random_floats(s.B * s.T * s.R(), 243);
  auto y = x;
  k_.rope_forward(y.data(), s.B, s.T, s.NH, s.NKV, s.hd, theta, positions.data());
  auto xd = to_double(x);
  expect_close(y, rope_ref(xd, s, theta, positions.data()), 2e-6 * s.T, 1e-5, "rope documents");
  auto g = random_floats(x.size(), 244);
  auto dx = g;
  k_.rope_backward(dx.data(), s.B, s.T, s.NH, s.NKV, s.hd, theta, positions.data());
  auto f = [&] { return rope_ref(xd, s, theta, positions.data()); };
  const auto idx = all_or_sample(x.size(), 2000, 245);
  expect_close(pick(dx, idx), fd_at(xd, to_double(g), f, idx), 1e-5, 1e-4,
               "rope documents backward");

  const std::vector<int32_t> counting = document_positions({{13}, {13}});
  for (bool backward : {false, true}) {
    auto with_null = x, with_counting = x;
    auto rope = backward ? &Kernels::rope_backward : &Kernels::rope_forward;
    (k_.*rope)(with_null.data(), s.B, s.T, s.NH, s.NKV, s.hd, theta, nullptr);
    (k_.*rope)(with_counting.data(), s.B, s.T, s.NH, s.NKV, s.hd, theta, counting.data());
    EXPECT_TRUE(same_bits(with_null, with_counting)) << (backward ? "backward" : "forward");
  }
}

// ---------------------------------------------------------------------------------------------
// SwiGLU

TEST_F(KernelsTest, SwigluForwardMatchesReference) {
  const int64_t N = 9, F = 37;
  auto gu = random_floats(N * 2 * F, 250, -6.0f, 6.0f);
  std::vector<float> out(N * F, 5.0f);
  k_.swiglu_forward(out.data(), gu.data(), N, F);
  expect_close(out, swiglu_ref(to_double(gu), N, F), 1e-6, 1e-5, "swiglu out");
}

TEST_F(KernelsTest, SwigluBackwardMatchesFiniteDifferences) {
  const int64_t N = 6, F = 21;
  auto gu = random_floats(N * 2 * F, 260, -6.0f, 6.0f);
  auto dout = random_floats(N * F, 261), dgu = random_floats(N * 2 * F, 262);
  const auto dgu0 = dgu;
  k_.swiglu_backward(dgu.data(), gu.data(), dout.data(), N, F);
  auto x = to_double(gu);
  const auto r = to_double(dout);
  auto f = [&] { return swiglu_ref(x, N, F); };
  const auto idx = all_or_sample(x.size(), 1000, 263);
  expect_close(pick(dgu, idx), plus(dgu0, idx, fd_at(x, r, f, idx)), 1e-5, 1e-4, "swiglu dgate_up");
}

// ---------------------------------------------------------------------------------------------
// Grouped-query attention

// Groups of 2 and 4 query heads, head_dim not hidden/heads (20), T past a query block and a
// 64-key tile, and the multi-query case NKV = 1.
const GqaShape kGqaShapes[] = {{2, 5, 4, 2, 8}, {1, 70, 4, 1, 20}, {2, 9, 6, 3, 16}};

TEST_F(KernelsTest, GqaAttentionForwardMatchesReference) {
  for (const GqaShape& s : kGqaShapes) {
    auto qkv = random_floats(s.B * s.T * s.R(), 270, -1.5f, 1.5f);
    std::vector<float> out(s.B * s.T * s.HD(), 99.0f);
    std::vector<float> att(s.B * s.NH * s.T * s.T, std::numeric_limits<float>::quiet_NaN());
    k_.gqa_attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.NH, s.NKV, s.hd,
                             nullptr);
    std::vector<double> ratt;
    const auto ref = gqa_ref(to_double(qkv), s, &ratt);
    const std::string what = "gqa T=" + std::to_string(s.T) + " NKV=" + std::to_string(s.NKV);
    expect_close(out, ref, 1e-6, 1e-5, what + " out");
    expect_close(att, ratt, 1e-7, 1e-5, what + " att");
  }
}

TEST_F(KernelsTest, GqaAttentionBackwardMatchesFiniteDifferences) {
  for (const GqaShape& s : kGqaShapes) {
    const size_t n = size_t(s.B * s.T * s.R());
    auto qkv = random_floats(n, 280, -1.5f, 1.5f);
    std::vector<float> out(s.B * s.T * s.HD()), att(s.B * s.NH * s.T * s.T);
    k_.gqa_attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.NH, s.NKV, s.hd,
                             nullptr);
    auto dout = random_floats(out.size(), 281), dqkv = random_floats(n, 282);
    const auto dqkv0 = dqkv;
    k_.gqa_attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, s.NH,
                              s.NKV, s.hd, nullptr);
    auto x = to_double(qkv);
    const auto r = to_double(dout);
    auto f = [&] { return gqa_ref(x, s); };
    const auto idx = all_or_sample(n, 150, 283);
    expect_close(pick(dqkv, idx), plus(dqkv0, idx, fd_at(x, r, f, idx)), 1e-5, 1e-4,
                 "gqa dqkv T=" + std::to_string(s.T));
  }
}

TEST_F(KernelsTest, MultiHeadAttentionIsGqaWithEqualHeads) {
  const int64_t B = 2, T = 11, NH = 3, hd = 8, C = NH * hd;
  auto qkv = random_floats(B * T * 3 * C, 290);
  std::vector<float> out[2], att[2], dqkv[2];
  auto dout = random_floats(B * T * C, 291);
  for (int v = 0; v < 2; ++v) {
    out[v].assign(B * T * C, 0.0f);
    att[v].assign(B * NH * T * T, 0.0f);
    dqkv[v] = random_floats(qkv.size(), 292);
    if (v == 0) {
      k_.attention_forward(out[v].data(), att[v].data(), qkv.data(), B, T, C, NH, nullptr);
      k_.attention_backward(dqkv[v].data(), dout.data(), qkv.data(), att[v].data(), B, T, C, NH,
                            nullptr);
    } else {
      k_.gqa_attention_forward(out[v].data(), att[v].data(), qkv.data(), B, T, NH, NH, hd, nullptr);
      k_.gqa_attention_backward(dqkv[v].data(), dout.data(), qkv.data(), att[v].data(), B, T, NH,
                                NH, hd, nullptr);
    }
  }
  EXPECT_TRUE(same_bits(out[0], out[1]) && same_bits(att[0], att[1]) &&
              same_bits(dqkv[0], dqkv[1]));
}

// Packed documents: two rows of 13 (two_rows_of_13) with groups of 2 and 3 query heads, and a
// multi-query row of 70 (30, 1, 39 tokens: past a 64-key tile).
struct GqaDocumentCase {
  GqaShape s;
  std::vector<int32_t> positions;
};
std::vector<GqaDocumentCase> gqa_document_cases() {
  return {{{2, 13, 4, 2, 8}, two_rows_of_13()},
          {{2, 13, 6, 2, 16}, two_rows_of_13()},
          {{1, 70, 4, 1, 20}, document_positions({{30, 1, 39}})}};
}

TEST_F(KernelsTest, GqaAttentionWithinDocumentsMatchesReference) {
  for (const GqaDocumentCase& dc : gqa_document_cases()) {
    const GqaShape& s = dc.s;
    const int32_t* positions = dc.positions.data();
    auto qkv = random_floats(s.B * s.T * s.R(), 284, -1.5f, 1.5f);
    std::vector<float> out(s.B * s.T * s.HD(), 99.0f);
    std::vector<float> att(s.B * s.NH * s.T * s.T, std::numeric_limits<float>::quiet_NaN());
    k_.gqa_attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.NH, s.NKV, s.hd,
                             positions);
    std::vector<double> ratt;
    const auto ref = gqa_ref(to_double(qkv), s, &ratt, positions);
    const std::string what = "gqa documents T=" + std::to_string(s.T) +
                             " NH=" + std::to_string(s.NH) + " NKV=" + std::to_string(s.NKV);
    expect_close(out, ref, 1e-6, 1e-5, what + " out");
    expect_close(att, ratt, 1e-7, 1e-5, what + " att");
    for (int64_t row = 0; row < s.B * s.NH * s.T; ++row) {
      const int64_t t = row % s.T, w = first_key(positions, row / (s.NH * s.T) * s.T + t, s.T);
      for (int64_t j = 0; j < s.T; ++j) {
        if (j < w || j > t) {
          ASSERT_EQ(std::bit_cast<uint32_t>(att[row * s.T + j]), 0u) << what << " row " << row;
        }
      }
    }
  }
}

TEST_F(KernelsTest, GqaAttentionWithinDocumentsBackwardMatchesFiniteDifferences) {
  for (const GqaDocumentCase& dc : gqa_document_cases()) {
    const GqaShape& s = dc.s;
    const int32_t* positions = dc.positions.data();
    const size_t n = size_t(s.B * s.T * s.R());
    auto qkv = random_floats(n, 285, -1.5f, 1.5f);
    std::vector<float> out(s.B * s.T * s.HD()), att(s.B * s.NH * s.T * s.T);
    k_.gqa_attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.NH, s.NKV, s.hd,
                             positions);
    auto dout = random_floats(out.size(), 286), dqkv = random_floats(n, 287);
    const auto dqkv0 = dqkv;
    k_.gqa_attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, s.NH,
                              s.NKV, s.hd, positions);
    auto x = to_double(qkv);
    const auto r = to_double(dout);
    auto f = [&] { return gqa_ref(x, s, nullptr, positions); };
    const auto idx = all_or_sample(n, 400, 288);
    expect_close(pick(dqkv, idx), plus(dqkv0, idx, fd_at(x, r, f, idx)), 1e-5, 1e-4,
                 "gqa documents dqkv T=" + std::to_string(s.T) + " NH=" + std::to_string(s.NH));
  }
}

TEST_F(KernelsTest, GqaAttentionWithOneDocumentPerRowIsTheNullPositionsBits) {
  const GqaShape s{2, 11, 4, 2, 8};
  const std::vector<int32_t> positions = document_positions({{11}, {11}});
  auto qkv = random_floats(s.B * s.T * s.R(), 289);
  auto dout = random_floats(s.B * s.T * s.HD(), 290);
  std::vector<float> out[2], att[2], dqkv[2];
  for (int v = 0; v < 2; ++v) {
    const int32_t* p = v == 0 ? nullptr : positions.data();
    out[v].assign(s.B * s.T * s.HD(), 0.0f);
    att[v].assign(s.B * s.NH * s.T * s.T, 0.0f);
    dqkv[v] = random_floats(qkv.size(), 291);
    k_.gqa_attention_forward(out[v].data(), att[v].data(), qkv.data(), s.B, s.T, s.NH, s.NKV, s.hd,
                             p);
    k_.gqa_attention_backward(dqkv[v].data(), dout.data(), qkv.data(), att[v].data(), s.B, s.T,
                              s.NH, s.NKV, s.hd, p);
  }
  EXPECT_TRUE(same_bits(out[0], out[1]) && same_bits(att[0], att[1]) &&
              same_bits(dqkv[0], dqkv[1]));
}

// ---------------------------------------------------------------------------------------------
// Embedding without a position table (Llama's)

TEST_F(KernelsTest, EmbeddingWithoutPositionsCopiesRows) {
  const int64_t B = 2, T = 3, C = 20, V = 7;
  auto wte = random_floats(V * C, 300);
  const std::vector<int32_t> tokens = {3, 0, 6, 3, 1, 2};
  std::vector<float> out(B * T * C, 1.0f);
  k_.embedding_forward(out.data(), tokens.data(), wte.data(), nullptr, B, T, C, nullptr);
  for (int64_t bt = 0; bt < B * T; ++bt)
    for (int64_t c = 0; c < C; ++c) ASSERT_EQ(out[bt * C + c], wte[tokens[bt] * C + c]);
  auto dout = random_floats(B * T * C, 301);
  std::vector<float> dwte(V * C, 0.0f);
  k_.embedding_backward(dwte.data(), nullptr, dout.data(), tokens.data(), B, T, C, nullptr);
  EXPECT_EQ(dwte[3 * C], dout[0] + dout[3 * C]);  // token 3 twice, in position order
}

// ---------------------------------------------------------------------------------------------
// Determinism: the same bits for 1 and 3 threads and for every instruction set.

// positions: (2, 13) or null.
std::vector<std::vector<float>> run_llama_kernels(Kernels& k, const int32_t* positions) {
  const GqaShape s{2, 13, 4, 2, 16};
  const int64_t N = s.B * s.T, C = 40, F = 45;
  auto x = random_floats(N * C, 310), w = random_floats(C, 311), dy = random_floats(N * C, 312);
  std::vector<float> y(N * C), rstd(N), dx(N * C, 0.0f), dw(C, 0.0f);
  k.rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
  k.rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
  auto qkv = random_floats(N * s.R(), 313);
  k.rope_forward(qkv.data(), s.B, s.T, s.NH, s.NKV, s.hd, 10000.0f, positions);
  std::vector<float> out(N * s.HD()), att(s.B * s.NH * s.T * s.T), dqkv(qkv.size(), 0.0f);
  k.gqa_attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.NH, s.NKV, s.hd,
                          positions);
  auto dout = random_floats(out.size(), 314);
  k.gqa_attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, s.NH, s.NKV,
                           s.hd, positions);
  k.rope_backward(dqkv.data(), s.B, s.T, s.NH, s.NKV, s.hd, 10000.0f, positions);
  auto gu = random_floats(N * 2 * F, 315, -5.0f, 5.0f), dsw = random_floats(N * F, 316);
  std::vector<float> sw(N * F), dgu(N * 2 * F, 0.0f);
  k.swiglu_forward(sw.data(), gu.data(), N, F);
  k.swiglu_backward(dgu.data(), gu.data(), dsw.data(), N, F);
  return {y, rstd, dx, dw, qkv, out, att, dqkv, sw, dgu};
}

TEST_F(KernelsTest, LlamaKernelsIndependentOfThreadsAndIsa) {
  const std::vector<int32_t> documents = two_rows_of_13();
  for (const int32_t* positions : {static_cast<const int32_t*>(nullptr), documents.data()}) {
    const std::string what = positions ? "documents " : "";
    std::vector<std::vector<float>> one, three;
    with_threads(1, [&] { one = run_llama_kernels(k_, positions); });
    with_threads(3, [&] { three = run_llama_kernels(k_, positions); });
    for (size_t i = 0; i < one.size(); ++i)
      EXPECT_TRUE(same_bits(one[i], three[i])) << what << "output " << i;
    for (const char* level : simd_levels()) {
      auto k = kernels_capped_at(level);
      const auto got = run_llama_kernels(*k, positions);
      for (size_t i = 0; i < one.size(); ++i)
        EXPECT_TRUE(same_bits(one[i], got[i])) << what << level << " output " << i;
    }
  }
}

}  // namespace
}  // namespace zt
