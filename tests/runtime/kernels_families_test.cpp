// The CPU back end's kernels for the Llama families past Llama: sliding-window grouped-query
// attention (Mistral's and Phi-3's; cpu_attention_kernels.cpp) and the per-head RMSNorm of
// queries and keys (Qwen3's q_norm and k_norm; cpu_head_norm_kernels.cpp). Each forward kernel
// against a plain double-precision loop written here (the window as transformers' masking_utils
// draws it: query i reads key j when i - window < j <= i), each backward kernel against central
// finite differences of that loop. Also: a window of T or more is plain causal attention bit for
// bit, windows inside packed documents, the same bits for 1 and 3 threads and every instruction
// set, and the per-head norm over contiguous heads is rmsnorm_forward's bits.
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

struct WindowShape {
  int64_t B, T, NH, NKV, hd, window;
  int64_t R() const { return (NH + 2 * NKV) * hd; }
  int64_t HD() const { return NH * hd; }
};

// The first key query bt reads: its document's first (positions null: 0), or the first of its
// last `window` keys when later. A naive loop, on purpose not the kernels' helper.
int64_t first_read_key(const int32_t* positions, int64_t bt, int64_t T, int64_t window) {
  const int64_t t = bt % T;
  int64_t first = first_key(positions, bt, T);
  if (window > 0)
    while (!(t - window < first)) ++first;  // key j is read when t - window < j <= t
  return first;
}

// Naive sliding-window GQA: query head h reads key/value head h / (NH/NKV); query t reads the
// keys j of its document with t - window < j <= t (window 0: every key up to t). out (B,T,NH·hd).
std::vector<double> windowed_gqa_ref(const std::vector<double>& qkv, const WindowShape& s,
                                     std::vector<double>* att = nullptr,
                                     const int32_t* positions = nullptr) {
  const int64_t G = s.NH / s.NKV, R = s.R(), T = s.T;
  const double scale = 1.0 / std::sqrt(double(s.hd));
  std::vector<double> out(s.B * T * s.HD(), 0.0), p(T);
  if (att) att->assign(s.B * s.NH * T * T, 0.0);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.NH; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t j0 = first_read_key(positions, b * T + t, T, s.window);
        const double* q = &qkv[(b * T + t) * R + h * s.hd];
        double mx = -INFINITY;
        for (int64_t u = j0; u <= t; ++u) {
          const double* k = &qkv[(b * T + u) * R + s.HD() + (h / G) * s.hd];
          double d = 0;
          for (int64_t i = 0; i < s.hd; ++i) d += q[i] * k[i];
          p[u] = d * scale;
          mx = std::max(mx, p[u]);
        }
        double sum = 0;
        for (int64_t u = j0; u <= t; ++u) sum += (p[u] = std::exp(p[u] - mx));
        for (int64_t u = j0; u <= t; ++u) {
          p[u] /= sum;
          if (att) (*att)[((b * s.NH + h) * T + t) * T + u] = p[u];
          const double* v = &qkv[(b * T + u) * R + s.HD() + (s.NKV + h / G) * s.hd];
          for (int64_t i = 0; i < s.hd; ++i)
            out[(b * T + t) * s.HD() + h * s.hd + i] += p[u] * v[i];
        }
      }
  return out;
}

// Windows of 1 (each query itself only), shorter than a block of 4 queries, between, and
// across a 64-key tile, with groups of 2 and 4 query heads and multi-query attention.
const WindowShape kWindowShapes[] = {
    {2, 9, 4, 2, 8, 1}, {2, 11, 4, 2, 8, 3}, {1, 13, 6, 3, 16, 6}, {1, 90, 4, 1, 20, 70}};

std::string describe(const WindowShape& s) {
  return "T=" + std::to_string(s.T) + " NH=" + std::to_string(s.NH) +
         " NKV=" + std::to_string(s.NKV) + " window=" + std::to_string(s.window);
}

void forward(Kernels& k, const WindowShape& s, const std::vector<float>& qkv,
             std::vector<float>& out, std::vector<float>& att, const int32_t* positions) {
  out.assign(s.B * s.T * s.HD(), 99.0f);
  att.assign(s.B * s.NH * s.T * s.T, std::numeric_limits<float>::quiet_NaN());
  k.gqa_attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.NH, s.NKV, s.hd,
                          positions, s.window);
}

void check_forward(Kernels& k, const WindowShape& s, const int32_t* positions, uint32_t seed) {
  auto qkv = random_floats(s.B * s.T * s.R(), seed, -1.5f, 1.5f);
  std::vector<float> out, att;
  forward(k, s, qkv, out, att, positions);
  std::vector<double> ratt;
  const auto ref = windowed_gqa_ref(to_double(qkv), s, &ratt, positions);
  expect_close(out, ref, 1e-6, 1e-5, describe(s) + " out");
  expect_close(att, ratt, 1e-7, 1e-5, describe(s) + " att");
  for (int64_t row = 0; row < s.B * s.NH * s.T; ++row) {  // exact zeros outside the window
    const int64_t t = row % s.T, bt = row / (s.NH * s.T) * s.T + t;
    const int64_t j0 = first_read_key(positions, bt, s.T, s.window);
    for (int64_t j = 0; j < s.T; ++j) {
      if (j < j0 || j > t) {
        ASSERT_EQ(std::bit_cast<uint32_t>(att[row * s.T + j]), 0u) << describe(s) << " " << row;
      }
    }
  }
}

void check_backward(Kernels& k, const WindowShape& s, const int32_t* positions, uint32_t seed) {
  const size_t n = size_t(s.B * s.T * s.R());
  auto qkv = random_floats(n, seed, -1.5f, 1.5f);
  std::vector<float> out, att;
  forward(k, s, qkv, out, att, positions);
  auto dout = random_floats(out.size(), seed + 1), dqkv = random_floats(n, seed + 2);
  const auto dqkv0 = dqkv;  // non-zero: += is checked
  k.gqa_attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, s.NH, s.NKV,
                           s.hd, positions, s.window);
  auto x = to_double(qkv);
  const auto r = to_double(dout);
  std::vector<size_t> idx;
  std::mt19937 gen(seed + 3);
  for (size_t i = 0; i < std::min<size_t>(n, 300); ++i) idx.push_back(n <= 300 ? i : gen() % n);
  std::vector<float> got;
  std::vector<double> want;
  for (size_t i : idx) {
    got.push_back(dqkv[i]);
    want.push_back(dqkv0[i] + central_difference(x, i, [&] {
                     return dot(windowed_gqa_ref(x, s, nullptr, positions), r);
                   }));
  }
  expect_close(got, want, 1e-5, 1e-4, describe(s) + " dqkv");
}

TEST_F(KernelsTest, SlidingWindowAttentionForwardMatchesReference) {
  uint32_t seed = 600;
  for (const WindowShape& s : kWindowShapes) check_forward(k_, s, nullptr, seed += 10);
}

// Generation's attention: the sequence in pieces (a prefill of 5 tokens, then one token at a
// time) through gqa_attention_decode's cache gives each token the output of the whole
// sequence's attention (the reference loop), windows included; the caches hold every token's
// key and value heads as the rows of qkv have them.
TEST_F(KernelsTest, DecodeAttentionOverTheCacheMatchesReference) {
  uint32_t seed = 650;
  for (const WindowShape& s : kWindowShapes) {
    const auto qkv = random_floats(s.B * s.T * s.R(), seed += 10, -1.5f, 1.5f);
    const auto ref = windowed_gqa_ref(to_double(qkv), s);
    const int64_t S = s.T + 3, KV = s.NKV * s.hd;
    std::vector<float> k_cache(s.B * S * KV, 7.0f), v_cache(s.B * S * KV, 7.0f);
    std::vector<float> got(s.B * s.T * s.HD(), 99.0f);
    for (int64_t past = 0, n = std::min<int64_t>(5, s.T); past < s.T; past += n, n = 1) {
      std::vector<float> piece, out(s.B * n * s.HD(), 99.0f);  // rows past .. past + n - 1
      for (int64_t b = 0; b < s.B; ++b)
        piece.insert(piece.end(), qkv.begin() + (b * s.T + past) * s.R(),
                     qkv.begin() + (b * s.T + past + n) * s.R());
      k_.gqa_attention_decode(out.data(), k_cache.data(), v_cache.data(), piece.data(), s.B, n,
                              past, S, s.NH, s.NKV, s.hd, s.window);
      for (int64_t b = 0; b < s.B; ++b)
        std::copy(out.begin() + b * n * s.HD(), out.begin() + (b + 1) * n * s.HD(),
                  got.begin() + (b * s.T + past) * s.HD());
    }
    expect_close(got, ref, 1e-6, 1e-5, describe(s) + " decode out");
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t t = 0; t < s.T; ++t)
        for (int64_t c = 0; c < KV; ++c) {
          const float* row = &qkv[(b * s.T + t) * s.R() + s.HD()];
          ASSERT_EQ(k_cache[(b * S + t) * KV + c], row[c]) << describe(s) << " key " << t;
          ASSERT_EQ(v_cache[(b * S + t) * KV + c], row[KV + c]) << describe(s) << " value " << t;
        }
  }
}

TEST_F(KernelsTest, SlidingWindowAttentionBackwardMatchesFiniteDifferences) {
  uint32_t seed = 700;
  for (const WindowShape& s : kWindowShapes) check_backward(k_, s, nullptr, seed += 10);
}

// Windows inside packed documents: two rows of 13 (documents of 5, 1, 7 and 4, 9 tokens) with a
// window of 3, shorter than some documents and longer than others.
TEST_F(KernelsTest, SlidingWindowWithinDocumentsMatchesReference) {
  const std::vector<int32_t> positions = two_rows_of_13();
  for (int64_t window : {1, 3, 6}) {
    const WindowShape s{2, 13, 4, 2, 8, window};
    check_forward(k_, s, positions.data(), 800 + uint32_t(window));
    check_backward(k_, s, positions.data(), 810 + uint32_t(window));
  }
}

// A window of T or more reads every key: the bits of plain causal attention (window 0).
TEST_F(KernelsTest, WindowOfTheSequenceOrMoreIsCausalAttentionBits) {
  const int64_t B = 2, T = 11, NH = 4, NKV = 2, hd = 8, R = (NH + 2 * NKV) * hd;
  auto qkv = random_floats(B * T * R, 820);
  auto dout = random_floats(B * T * NH * hd, 821);
  std::vector<float> out[3], att[3], dqkv[3];
  const int64_t windows[3] = {0, T, 5 * T};
  for (int v = 0; v < 3; ++v) {
    out[v].assign(B * T * NH * hd, 0.0f);
    att[v].assign(B * NH * T * T, 0.0f);
    dqkv[v] = random_floats(qkv.size(), 822);
    k_.gqa_attention_forward(out[v].data(), att[v].data(), qkv.data(), B, T, NH, NKV, hd, nullptr,
                             windows[v]);
    k_.gqa_attention_backward(dqkv[v].data(), dout.data(), qkv.data(), att[v].data(), B, T, NH, NKV,
                              hd, nullptr, windows[v]);
  }
  for (int v = 1; v < 3; ++v)
    EXPECT_TRUE(same_bits(out[0], out[v]) && same_bits(att[0], att[v]) &&
                same_bits(dqkv[0], dqkv[v]))
        << "window " << windows[v];
}

// ---------------------------------------------------------------------------------------------
// Per-head RMSNorm

// The heads of a qkv layout (N rows of R = (NH + 2·NKV)·hd): q heads at 0, k heads at NH·hd.
struct HeadNormShape {
  int64_t N, NH, NKV, hd;
  int64_t R() const { return (NH + 2 * NKV) * hd; }
};

// out = x with heads [first, first + H) of each row normalized by weight w (double).
std::vector<double> head_rmsnorm_ref(std::vector<double> x, const std::vector<double>& w,
                                     const HeadNormShape& s, int64_t first, int64_t H, double eps) {
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t h = first; h < first + H; ++h) {
      double* v = &x[n * s.R() + h * s.hd];
      double ss = 0;
      for (int64_t i = 0; i < s.hd; ++i) ss += v[i] * v[i];
      const double r = 1.0 / std::sqrt(ss / s.hd + eps);
      for (int64_t i = 0; i < s.hd; ++i) v[i] = v[i] * r * w[i];
    }
  return x;
}

const HeadNormShape kHeadNormShapes[] = {{7, 4, 2, 16}, {40, 2, 1, 20}};

TEST_F(KernelsTest, HeadRmsnormForwardMatchesReference) {
  for (const HeadNormShape& s : kHeadNormShapes)
    for (bool keys : {false, true}) {
      const int64_t first = keys ? s.NH : 0, H = keys ? s.NKV : s.NH;
      auto x = random_floats(s.N * s.R(), 830, -2.0f, 2.0f);
      const auto w = random_floats(s.hd, 831, 0.5f, 1.5f);
      std::vector<float> rstd(s.N * H, 0.0f);
      const auto ref = head_rmsnorm_ref(to_double(x), to_double(w), s, first, H, 1e-6);
      k_.head_rmsnorm_forward(x.data() + first * s.hd, rstd.data(), w.data(), s.N, H, s.hd, s.R(),
                              1e-6f);
      expect_close(x, ref, 1e-6, 1e-5, keys ? "k heads" : "q heads");  // the rest untouched
    }
}

TEST_F(KernelsTest, HeadRmsnormBackwardMatchesFiniteDifferences) {
  for (const HeadNormShape& s : kHeadNormShapes)
    for (bool keys : {false, true}) {
      const std::string what = std::string(keys ? "k" : "q") + " heads hd " + std::to_string(s.hd);
      const int64_t first = keys ? s.NH : 0, H = keys ? s.NKV : s.NH, off = first * s.hd;
      const auto x = random_floats(s.N * s.R(), 840, -2.0f, 2.0f);
      const auto w = random_floats(s.hd, 841, 0.5f, 1.5f);
      std::vector<float> y = x, rstd(s.N * H);
      k_.head_rmsnorm_forward(y.data() + off, rstd.data(), w.data(), s.N, H, s.hd, s.R(), 1e-6f);
      const auto r = random_floats(x.size(), 842);  // the gradient w.r.t. the output
      std::vector<float> dx = r, dw = random_floats(s.hd, 843);
      const auto dw0 = dw;
      k_.head_rmsnorm_backward(dx.data() + off, dw.data(), x.data() + off, w.data(), rstd.data(),
                               s.N, H, s.hd, s.R());
      auto xd = to_double(x), wd = to_double(w);
      const auto rd = to_double(r);
      auto loss = [&] { return dot(head_rmsnorm_ref(xd, wd, s, first, H, 1e-6), rd); };
      std::vector<float> zero(x.size(), 0.0f);
      expect_close(dx, fd_gradient(xd, loss, zero), 1e-5, 1e-4, what + " dx");
      expect_close(dw, fd_gradient(wd, loss, dw0), 1e-5, 1e-4, what + " dweight");
    }
}

// Heads that fill their rows (stride H·hd) are rmsnorm_forward's rows of hd: the same bits.
TEST_F(KernelsTest, HeadRmsnormOverContiguousHeadsIsRmsnormBits) {
  const int64_t N = 9, H = 3, hd = 24;
  const auto x = random_floats(N * H * hd, 850, -2.0f, 2.0f);
  const auto w = random_floats(hd, 851, 0.5f, 1.5f);
  std::vector<float> a = x, b(x.size()), ra(N * H), rb(N * H);
  k_.head_rmsnorm_forward(a.data(), ra.data(), w.data(), N, H, hd, H * hd, 1e-5f);
  k_.rmsnorm_forward(b.data(), rb.data(), x.data(), w.data(), N * H, hd, 1e-5f);
  EXPECT_TRUE(same_bits(a, b) && same_bits(ra, rb));
}

// The same bits for 1 and 3 threads and on every instruction set.
TEST_F(KernelsTest, FamilyKernelsIndependentOfThreadsAndIsa) {
  const WindowShape s{2, 37, 4, 2, 16, 6};
  const auto qkv = random_floats(s.B * s.T * s.R(), 860, -1.5f, 1.5f);
  const auto dout = random_floats(s.B * s.T * s.HD(), 861);
  const auto w = random_floats(s.hd, 862, 0.5f, 1.5f);
  auto run = [&](Kernels& k) {
    std::vector<float> out, att, dqkv = random_floats(qkv.size(), 863), normed = qkv;
    std::vector<float> rstd(s.B * s.T * s.NH), dw(s.hd, 0.0f);
    forward(k, s, qkv, out, att, nullptr);
    k.gqa_attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, s.NH,
                             s.NKV, s.hd, nullptr, s.window);
    k.head_rmsnorm_forward(normed.data(), rstd.data(), w.data(), s.B * s.T, s.NH, s.hd, s.R(),
                           1e-6f);
    k.head_rmsnorm_backward(dqkv.data(), dw.data(), qkv.data(), w.data(), rstd.data(), s.B * s.T,
                            s.NH, s.hd, s.R());
    out.insert(out.end(), att.begin(), att.end());
    out.insert(out.end(), dqkv.begin(), dqkv.end());
    out.insert(out.end(), normed.begin(), normed.end());
    out.insert(out.end(), dw.begin(), dw.end());
    return out;
  };
  std::vector<float> reference;
  with_threads(1, [&] { reference = run(k_); });
  std::vector<float> threaded;
  with_threads(3, [&] { threaded = run(k_); });
  EXPECT_TRUE(same_bits(reference, threaded)) << "3 threads";
  for (const char* level : simd_levels()) {
    auto k = kernels_capped_at(level);
    EXPECT_TRUE(same_bits(reference, run(*k))) << level;
  }
}

}  // namespace
}  // namespace zt
