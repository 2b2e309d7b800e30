// Tests of RoundingKernels (runtime/rounding_kernels.cpp): for fp16 and bf16, each rounded output
// equals the CPU kernel's output rounded by dtype.h, bit for bit; the outputs the header keeps
// fp32 (layer-norm mean and rstd, losses, untouched embedding rows) and the pass-through calls
// (adamw, sgd) equal the CPU kernel's bits. The CPU kernels themselves are tested in
// kernels_test.cpp.
#include "runtime/rounding_kernels.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_device.h"
#include "runtime/dtype.h"
#include "runtime/status.h"

#include "random_data.h"

namespace zt {
namespace {

using test::random_floats;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// x rounded to t by dtype.h's scalar conversions.
std::vector<float> rounded(std::vector<float> x, DType t) {
  for (float& v : x)
    v = t == DType::kF16 ? fp16_to_fp32(fp32_to_fp16(v)) : bf16_to_fp32(fp32_to_bf16(v));
  return x;
}

// Some element of x is not a value of t: a test that x is unrounded is not vacuous.
bool has_unrounded(const std::vector<float>& x, DType t) { return !same_bits(x, rounded(x, t)); }

class RoundingKernelsTest : public ::testing::TestWithParam<DType> {
 protected:
  DType dtype() const { return GetParam(); }
  CpuDevice dev_;
  Kernels& base_ = dev_.kernels();
  RoundingKernels rk_{dev_.kernels(), GetParam()};
};

TEST_P(RoundingKernelsTest, MatmulForwardAndBackwardWithBias) {
  const int64_t M = 7, K = 13, N = 11;
  for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
    const auto inp = random_floats(M * K, 1), w = random_floats(K * N, 2),
               bias = random_floats(N, 3);
    std::vector<float> out_base(M * N), out(M * N);
    base_.matmul_forward(out_base.data(), inp.data(), w.data(), bias.data(), M, K, N, layout);
    rk_.matmul_forward(out.data(), inp.data(), w.data(), bias.data(), M, K, N, layout);
    EXPECT_TRUE(has_unrounded(out_base, dtype()));
    EXPECT_TRUE(same_bits(out, rounded(out_base, dtype())));

    // Gradients accumulate into buffers that hold values of no 16-bit type: the sum is rounded.
    const auto dout = random_floats(M * N, 4);
    std::vector<float> dinp_base = random_floats(M * K, 5), dw_base = random_floats(K * N, 6),
                       db_base = random_floats(N, 7);
    std::vector<float> dinp = dinp_base, dw = dw_base, db = db_base;
    base_.matmul_backward(dinp_base.data(), dw_base.data(), db_base.data(), dout.data(), inp.data(),
                          w.data(), M, K, N, layout);
    rk_.matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), M, K,
                        N, layout);
    EXPECT_TRUE(same_bits(dinp, rounded(dinp_base, dtype())));
    EXPECT_TRUE(same_bits(dw, rounded(dw_base, dtype())));
    EXPECT_TRUE(same_bits(db, rounded(db_base, dtype())));
  }
}

TEST_P(RoundingKernelsTest, MatmulOverflowBecomesInfInFp16) {
  const int64_t M = 4, K = 8, N = 4;
  const auto inp = random_floats(M * K, 8, 200.0f, 300.0f),
             w = random_floats(K * N, 9, 200.0f, 300.0f);
  std::vector<float> out_base(M * N), out(M * N);
  base_.matmul_forward(out_base.data(), inp.data(), w.data(), nullptr, M, K, N,
                       WeightLayout::kInOut);
  rk_.matmul_forward(out.data(), inp.data(), w.data(), nullptr, M, K, N, WeightLayout::kInOut);
  EXPECT_TRUE(same_bits(out, rounded(out_base, dtype())));
  // Every product is above 8·200·200 = 320000 > 65504: inf in fp16, finite in bf16.
  for (float v : out) EXPECT_EQ(std::isinf(v), dtype() == DType::kF16) << v;
}

TEST_P(RoundingKernelsTest, LayerNormKeepsMeanAndRstdInFp32) {
  const int64_t N = 5, C = 24;
  const auto x = random_floats(N * C, 10, -3.0f, 3.0f), w = random_floats(C, 11),
             b = random_floats(C, 12);
  std::vector<float> out_base(N * C), mean_base(N), rstd_base(N), out(N * C), mean(N), rstd(N);
  base_.layernorm_forward(out_base.data(), mean_base.data(), rstd_base.data(), x.data(), w.data(),
                          b.data(), N, C);
  rk_.layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  EXPECT_TRUE(same_bits(out, rounded(out_base, dtype())));
  EXPECT_TRUE(has_unrounded(mean_base, dtype()) && has_unrounded(rstd_base, dtype()));
  EXPECT_TRUE(same_bits(mean, mean_base));
  EXPECT_TRUE(same_bits(rstd, rstd_base));

  const auto dout = random_floats(N * C, 13);
  std::vector<float> dx_base = random_floats(N * C, 14), dw_base = random_floats(C, 15),
                     db_base = random_floats(C, 16);
  std::vector<float> dx = dx_base, dw = dw_base, db = db_base;
  base_.layernorm_backward(dx_base.data(), dw_base.data(), db_base.data(), dout.data(), x.data(),
                           w.data(), mean_base.data(), rstd_base.data(), N, C);
  rk_.layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                         mean.data(), rstd.data(), N, C);
  EXPECT_TRUE(same_bits(dx, rounded(dx_base, dtype())));
  EXPECT_TRUE(same_bits(dw, rounded(dw_base, dtype())));
  EXPECT_TRUE(same_bits(db, rounded(db_base, dtype())));
}

TEST_P(RoundingKernelsTest, SoftmaxCrossEntropyRoundsTheGradientNotTheLosses) {
  const int64_t N = 5, V = 37, Vp = 40;
  const auto logits = random_floats(N * Vp, 17, -4.0f, 4.0f);
  const std::vector<int32_t> targets = {0, 36, 5, 17, 5};
  for (float dloss : {0.5f, 0.0f}) {
    std::vector<float> g_base = logits, g = logits, loss_base(N), loss(N);
    base_.softmax_cross_entropy(loss_base.data(), g_base.data(), targets.data(), N, V, Vp, dloss);
    rk_.softmax_cross_entropy(loss.data(), g.data(), targets.data(), N, V, Vp, dloss);
    EXPECT_TRUE(has_unrounded(loss_base, dtype()));
    EXPECT_TRUE(same_bits(loss, loss_base)) << "dloss " << dloss;
    if (dloss != 0.0f) {
      EXPECT_TRUE(same_bits(g, rounded(g_base, dtype())));
    } else {  // logits only read
      EXPECT_TRUE(has_unrounded(logits, dtype()));
      EXPECT_TRUE(same_bits(g, logits));
    }
  }
}

TEST_P(RoundingKernelsTest, EmbeddingBackwardRoundsTheRowsOfTheBatchTokens) {
  const int64_t V = 10, B = 2, T = 3, C = 9;
  const std::vector<int32_t> tokens = {1, 4, 1, 7, 4, 9};
  const std::set<int32_t> present(tokens.begin(), tokens.end());
  const auto dout = random_floats(B * T * C, 18);
  const auto dwte0 = random_floats(V * C, 19), dwpe0 = random_floats(T * C, 20);
  std::vector<float> dwte_base = dwte0, dwpe_base = dwpe0, dwte = dwte0, dwpe = dwpe0;
  base_.embedding_backward(dwte_base.data(), dwpe_base.data(), dout.data(), tokens.data(), B, T, C);
  rk_.embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  const auto dwte_rounded = rounded(dwte_base, dtype());
  for (int64_t v = 0; v < V; ++v) {
    const auto& want = present.count(int32_t(v)) ? dwte_rounded : dwte0;  // absent rows untouched
    EXPECT_EQ(std::memcmp(dwte.data() + v * C, want.data() + v * C, C * sizeof(float)), 0)
        << "row " << v;
  }
  EXPECT_TRUE(same_bits(dwpe, rounded(dwpe_base, dtype())));

  std::vector<float> out_base(B * T * C), out(B * T * C);
  base_.embedding_forward(out_base.data(), tokens.data(), dwte0.data(), dwpe0.data(), B, T, C);
  rk_.embedding_forward(out.data(), tokens.data(), dwte0.data(), dwpe0.data(), B, T, C);
  EXPECT_TRUE(same_bits(out, rounded(out_base, dtype())));
}

TEST_P(RoundingKernelsTest, AttentionRoundsOutputProbabilitiesAndGradient) {
  const int64_t B = 2, T = 5, C = 8, NH = 2;
  const auto qkv = random_floats(B * T * 3 * C, 21), dout = random_floats(B * T * C, 22);
  std::vector<float> out_base(B * T * C), att_base(B * NH * T * T), out(out_base.size()),
      att(att_base.size());
  base_.attention_forward(out_base.data(), att_base.data(), qkv.data(), B, T, C, NH);
  rk_.attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  EXPECT_TRUE(same_bits(out, rounded(out_base, dtype())));
  EXPECT_TRUE(same_bits(att, rounded(att_base, dtype())));
  std::vector<float> dqkv_base = random_floats(qkv.size(), 23), dqkv = dqkv_base;
  base_.attention_backward(dqkv_base.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
  rk_.attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
  EXPECT_TRUE(same_bits(dqkv, rounded(dqkv_base, dtype())));
}

TEST_P(RoundingKernelsTest, ElementwiseOutputsAreRounded) {
  const int64_t n = 1001;
  const auto x = random_floats(n, 24, -3.0f, 3.0f), y = random_floats(n, 25);
  auto check = [&](const char* what, const auto& run) {
    std::vector<float> from_base = y, from_rk = y;
    run(base_, from_base);
    run(rk_, from_rk);
    EXPECT_TRUE(has_unrounded(from_base, dtype())) << what;
    EXPECT_TRUE(same_bits(from_rk, rounded(from_base, dtype()))) << what;
  };
  check("gelu_forward",
        [&](Kernels& k, std::vector<float>& o) { k.gelu_forward(o.data(), x.data(), n); });
  check("gelu_backward", [&](Kernels& k, std::vector<float>& o) {
    k.gelu_backward(o.data(), x.data(), y.data(), n);
  });
  check("residual_forward", [&](Kernels& k, std::vector<float>& o) {
    k.residual_forward(o.data(), x.data(), o.data(), n);
  });
  check("accumulate",
        [&](Kernels& k, std::vector<float>& o) { k.accumulate(o.data(), x.data(), n); });
  std::vector<float> filled(n);
  rk_.fill(filled.data(), 0.1f, n);
  EXPECT_TRUE(same_bits(filled, rounded(std::vector<float>(n, 0.1f), dtype())));
}

TEST_P(RoundingKernelsTest, OptimizersPassThroughUnrounded) {
  const int64_t n = 1001;
  const auto p0 = random_floats(n, 26), g = random_floats(n, 27), m0 = random_floats(n, 28),
             v0 = random_floats(n, 29, 0.0f, 1.0f);
  AdamWArgs args;
  args.step = 3;
  args.weight_decay = 0.1f;
  std::vector<float> p_base = p0, m_base = m0, v_base = v0, p = p0, m = m0, v = v0;
  base_.adamw(p_base.data(), g.data(), m_base.data(), v_base.data(), n, args);
  rk_.adamw(p.data(), g.data(), m.data(), v.data(), n, args);
  EXPECT_TRUE(has_unrounded(p_base, dtype()) && has_unrounded(m_base, dtype()) &&
              has_unrounded(v_base, dtype()));
  EXPECT_TRUE(same_bits(p, p_base) && same_bits(m, m_base) && same_bits(v, v_base));

  SgdArgs sgd;
  sgd.momentum = 0.9f;
  std::vector<float> q_base = p0, b_base = m0, q = p0, b = m0;
  base_.sgd(q_base.data(), g.data(), b_base.data(), n, sgd);
  rk_.sgd(q.data(), g.data(), b.data(), n, sgd);
  EXPECT_TRUE(has_unrounded(q_base, dtype()));
  EXPECT_TRUE(same_bits(q, q_base) && same_bits(b, b_base));
}

TEST(RoundingKernels, RejectsFp32) {
  CpuDevice dev;
  EXPECT_THROW(RoundingKernels(dev.kernels(), DType::kF32), Error);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RoundingKernelsTest, ::testing::Values(DType::kF16, DType::kBF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

}  // namespace
}  // namespace zt
