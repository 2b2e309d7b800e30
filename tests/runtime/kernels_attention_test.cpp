// The CPU back end's causal multi-head attention (runtime/cpu/cpu_attention_kernels.cpp): forward
// against a double-precision reference written here, backward against central finite differences
// of it (dqkv accumulates into a buffer that starts non-zero). Not here: its independence of the
// thread count and instruction set (kernels_determinism_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/kernels.h"

#include "kernels_test_util.h"

namespace zt {
namespace {

using namespace test;

// ---------------------------------------------------------------------------------------------
// Double-precision reference

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

}  // namespace
}  // namespace zt
