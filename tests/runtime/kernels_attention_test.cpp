// The CPU back end's causal multi-head attention (runtime/cpu/cpu_attention_kernels.cpp): forward
// against a double-precision reference written here, backward against central finite differences
// of it (dqkv accumulates into a buffer that starts non-zero), over whole rows and over rows that
// pack documents (Batch::positions: each query reads its own document's keys only), and one
// document per row given as positions is the null-positions bits. Not here: its independence of
// the thread count and instruction set (kernels_determinism_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/kernels.h"
#include "runtime/status.h"

#include "kernels_test_util.h"
#include "packed_documents.h"

namespace zt {
namespace {

using namespace test;

// ---------------------------------------------------------------------------------------------
// Double-precision reference

// Causal attention; qkv (B,T,3C), out (B,T,C), att (B,NH,T,T) with zeros outside each query's
// keys: first_key .. t (positions null: 0 .. t).
std::vector<double> attention_ref(const std::vector<double>& qkv, int64_t B, int64_t T, int64_t C,
                                  int64_t NH, std::vector<double>* att = nullptr,
                                  const int32_t* positions = nullptr) {
  const int64_t hs = C / NH;
  const double scale = 1.0 / std::sqrt(double(hs));
  std::vector<double> out(B * T * C, 0.0), p(T);
  if (att) att->assign(B * NH * T * T, 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const double* q = &qkv[(b * T + t) * 3 * C + h * hs];
        const int64_t w = first_key(positions, b * T + t, T);
        double mx = -INFINITY;
        for (int64_t j = w; j <= t; ++j) {
          const double* kj = &qkv[(b * T + j) * 3 * C + C + h * hs];
          double s = 0;
          for (int64_t d = 0; d < hs; ++d) s += q[d] * kj[d];
          p[j] = s * scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (int64_t j = w; j <= t; ++j) sum += (p[j] = std::exp(p[j] - mx));
        for (int64_t j = w; j <= t; ++j) {
          p[j] /= sum;
          if (att) (*att)[((b * NH + h) * T + t) * T + j] = p[j];
          const double* vj = &qkv[(b * T + j) * 3 * C + 2 * C + h * hs];
          for (int64_t d = 0; d < hs; ++d) out[(b * T + t) * C + h * hs + d] += p[j] * vj[d];
        }
      }
  return out;
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
    k_.attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH, nullptr);
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
    k_.attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH, nullptr);
    auto dout = random_floats(out.size(), 42);
    auto dqkv = random_floats(n_qkv, 43);
    const auto dqkv0 = dqkv;
    k_.attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, s.C, s.NH,
                          nullptr);
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
// Packed documents

// Two rows of 13 (two_rows_of_13), and a row of 70 past a 64-key tile: 30 tokens, 1, then 39.
struct DocumentCase {
  AttentionCase s;
  std::vector<int32_t> positions;
};
std::vector<DocumentCase> document_cases() {
  return {{{2, 13, 8, 2}, two_rows_of_13()}, {{1, 70, 128, 2}, document_positions({{30, 1, 39}})}};
}

TEST_F(KernelsTest, AttentionWithinDocumentsMatchesReference) {
  for (const DocumentCase& dc : document_cases()) {
    const AttentionCase& s = dc.s;
    const int32_t* positions = dc.positions.data();
    auto qkv = random_floats(s.B * s.T * 3 * s.C, 45, -1.5f, 1.5f);
    std::vector<float> out(s.B * s.T * s.C, 99.0f);
    std::vector<float> att(s.B * s.NH * s.T * s.T, std::numeric_limits<float>::quiet_NaN());
    k_.attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH, positions);
    std::vector<double> ratt;
    const auto ref = attention_ref(to_double(qkv), s.B, s.T, s.C, s.NH, &ratt, positions);
    const std::string what = "documents T=" + std::to_string(s.T);
    expect_close(out, ref, 1e-6, 1e-5, what + " out");
    expect_close(att, ratt, 1e-7, 1e-5, what + " att");
    // Every probability outside the query's document is +0, every one inside is > 0.
    for (int64_t row = 0; row < s.B * s.NH * s.T; ++row) {
      const int64_t t = row % s.T, bt = row / (s.NH * s.T) * s.T + t;
      const int64_t w = first_key(positions, bt, s.T);
      for (int64_t j = 0; j < s.T; ++j) {
        const float p = att[row * s.T + j];
        if (j < w || j > t) {
          ASSERT_EQ(std::bit_cast<uint32_t>(p), 0u) << what << " row " << row << " key " << j;
        } else {
          ASSERT_GT(p, 0.0f) << what << " row " << row << " key " << j;
        }
      }
    }
  }
}

TEST_F(KernelsTest, AttentionWithinDocumentsBackwardMatchesFiniteDifferences) {
  for (const DocumentCase& dc : document_cases()) {
    const AttentionCase& s = dc.s;
    const int32_t* positions = dc.positions.data();
    const int64_t n_qkv = s.B * s.T * 3 * s.C;
    auto qkv = random_floats(n_qkv, 46, -1.5f, 1.5f);
    std::vector<float> out(s.B * s.T * s.C), att(s.B * s.NH * s.T * s.T);
    k_.attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH, positions);
    auto dout = random_floats(out.size(), 47);
    auto dqkv = random_floats(n_qkv, 48);
    const auto dqkv0 = dqkv;
    k_.attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, s.C, s.NH,
                          positions);
    auto x = to_double(qkv);
    const auto r = to_double(dout);
    auto loss = [&] { return dot(attention_ref(x, s.B, s.T, s.C, s.NH, nullptr, positions), r); };
    // Every element of the small case; for the large one a sample, plus every element of the
    // tokens around the single-token document (29, 30, 31).
    std::vector<size_t> idx;
    if (n_qkv < 1000) {
      for (int64_t i = 0; i < n_qkv; ++i) idx.push_back(size_t(i));
    } else {
      std::mt19937 gen(49);
      for (int i = 0; i < 150; ++i) idx.push_back(gen() % size_t(n_qkv));
      for (int64_t i = 29 * 3 * s.C; i < 32 * 3 * s.C; i += 7) idx.push_back(size_t(i));
    }
    std::vector<float> got;
    std::vector<double> want;
    for (size_t i : idx) {
      got.push_back(dqkv[i]);
      want.push_back(dqkv0[i] + central_difference(x, i, loss));
    }
    expect_close(got, want, 1e-5, 1e-4, "documents dqkv T=" + std::to_string(s.T));
  }
}

// Positions 0..T-1 in every row describe what null positions mean: the same bits, forward and
// backward.
TEST_F(KernelsTest, AttentionWithOneDocumentPerRowIsTheNullPositionsBits) {
  const int64_t B = 2, T = 11, C = 16, NH = 2;
  const std::vector<int32_t> positions = document_positions({{T}, {T}});
  auto qkv = random_floats(B * T * 3 * C, 50);
  auto dout = random_floats(B * T * C, 51);
  std::vector<float> out[2], att[2], dqkv[2];
  for (int v = 0; v < 2; ++v) {
    const int32_t* p = v == 0 ? nullptr : positions.data();
    out[v].assign(B * T * C, 0.0f);
    att[v].assign(B * NH * T * T, 0.0f);
    dqkv[v] = random_floats(qkv.size(), 52);
    k_.attention_forward(out[v].data(), att[v].data(), qkv.data(), B, T, C, NH, p);
    k_.attention_backward(dqkv[v].data(), dout.data(), qkv.data(), att[v].data(), B, T, C, NH, p);
  }
  EXPECT_TRUE(same_bits(out[0], out[1]) && same_bits(att[0], att[1]) &&
              same_bits(dqkv[0], dqkv[1]));
}

TEST_F(KernelsTest, AttentionRejectsPositionsThatDoNotCount) {
  const int64_t B = 1, T = 4, C = 8, NH = 2;
  auto qkv = random_floats(B * T * 3 * C, 53);
  std::vector<float> out(B * T * C), att(B * NH * T * T);
  for (const std::vector<int32_t>& bad : {std::vector<int32_t>{1, 2, 3, 4},     // row starts at 1
                                          std::vector<int32_t>{0, 1, 3, 4}}) {  // skips 2
    EXPECT_THROW(k_.attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, bad.data()),
                 Error);
  }
}

}  // namespace
}  // namespace zt
