// Activations stored in 16 bits (kernels.h, Precision): every entry of a 16-bit table given its
// activation operands in the table's dtype leaves in them exactly what it leaves, as values, in
// fp32 arrays holding the same values. The engine's bitwise tests (stages 0–3, mixed precision,
// checkpointing) rest on this when the stores hold 16-bit activations. The CPU back end here;
// what the tables compute is tested in kernels_*_test.cpp and activation_rounding_*_test.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_device.h"
#include "runtime/dtype.h"
#include "runtime/kernels.h"

#include "activation_rounding_test_util.h"
#include "random_data.h"

namespace zt {
namespace {

using namespace activation_rounding;
using Operands = std::vector<Operand>;

class ActivationStorageTest : public ::testing::TestWithParam<DType> {
 protected:
  DType dtype() const { return GetParam(); }
  // `op` on the table twice, given the activation buffers `init` (rounded to the dtype first) as
  // fp32 arrays, then stored in the dtype: every buffer must end holding the same values. Each
  // run may write any buffer; one that none writes still must come back unchanged.
  void expect_same(const std::string& what, std::vector<std::vector<float>> init,
                   const std::function<void(const Operands&)>& op) {
    SCOPED_TRACE(what);
    std::vector<std::vector<float>> wide;
    std::vector<std::vector<uint16_t>> narrow;
    Operands as_fp32, as_16bit;
    for (auto& b : init) {
      wide.push_back(rounded(b, dtype()));
      narrow.push_back(narrowed(b, dtype()));
    }
    for (size_t i = 0; i < init.size(); ++i) {
      as_fp32.emplace_back(wide[i].data());
      as_16bit.emplace_back(narrow[i].data(), dtype());
    }
    op(as_fp32);
    op(as_16bit);
    bool changed = false;
    for (size_t i = 0; i < init.size(); ++i) {
      EXPECT_TRUE(same_bits(narrowed(wide[i], dtype()), narrow[i])) << "buffer " << i;
      changed |= !same_bits(wide[i], rounded(init[i], dtype()));
    }
    EXPECT_TRUE(changed) << "the op wrote nothing: the comparison would be vacuous";
  }
  std::vector<float> values(int64_t n, uint32_t seed) {
    return rounded(random_floats(static_cast<size_t>(n), seed), dtype());
  }
  CpuDevice dev_;
  Kernels& k_ = dev_.kernels_for(GetParam());
};

TEST_P(ActivationStorageTest, MatmulForwardAndBackward) {
  const int64_t M = 9, K = 13, N = 11;
  const auto w = random_floats(K * N, 1), bias = random_floats(N, 2);
  const auto w16 = narrowed(w, dtype());
  for (bool weights16 : {false, true}) {
    const ConstOperand weight = weights16 ? ConstOperand(w16.data(), dtype()) : w.data();
    expect_same("forward", {values(M * N, 3), values(M * K, 4)}, [&](const Operands& a) {
      k_.matmul_forward(a[0], a[1], weight, bias.data(), M, K, N, WeightLayout::kInOut);
    });
    for (GradOutput output : {GradOutput::kAdd, GradOutput::kWrite}) {
      std::vector<float> dw_runs[2];
      int run = 0;
      expect_same("backward", {values(M * K, 5), values(M * N, 6), values(M * K, 7)},
                  [&](const Operands& a) {
                    std::vector<float>& dw = dw_runs[run++];
                    dw = random_floats(K * N, 8);
                    k_.matmul_backward(a[0], dw.data(), nullptr, a[1], a[2], weight, M, K, N,
                                       WeightLayout::kOutIn, output);
                  });
      EXPECT_TRUE(same_bits(dw_runs[0], dw_runs[1])) << "the weight gradient differs";
    }
  }
}

TEST_P(ActivationStorageTest, NormsAndActivationFunctions) {
  const int64_t N = 6, C = 40;
  const auto w = random_floats(C, 1), b = random_floats(C, 2);
  std::vector<float> mean(N), rstd(N);
  expect_same("layernorm", {values(N * C, 3), values(N * C, 4)}, [&](const Operands& a) {
    k_.layernorm_forward(a[0], mean.data(), rstd.data(), a[1], w.data(), b.data(), N, C);
  });
  expect_same("layernorm backward", {values(N * C, 5), values(N * C, 6), values(N * C, 7)},
              [&](const Operands& a) {
                k_.layernorm_backward(a[0], nullptr, nullptr, a[1], a[2], w.data(), mean.data(),
                                      rstd.data(), N, C);
              });
  expect_same("rmsnorm", {values(N * C, 8), values(N * C, 9)}, [&](const Operands& a) {
    k_.rmsnorm_forward(a[0], rstd.data(), a[1], w.data(), N, C, 1e-6f);
  });
  expect_same("rmsnorm backward", {values(N * C, 10), values(N * C, 11), values(N * C, 12)},
              [&](const Operands& a) {
                k_.rmsnorm_backward(a[0], nullptr, a[1], a[2], w.data(), rstd.data(), N, C);
              });
  // Two heads of 8 at the start of rows of 40: the rest of each row must be kept.
  std::vector<float> head_rstd(N * 2);
  expect_same("head rmsnorm", {values(N * C, 13)}, [&](const Operands& a) {
    k_.head_rmsnorm_forward(a[0], head_rstd.data(), w.data(), N, 2, 8, C, 1e-6f);
  });
  expect_same(
      "head rmsnorm backward", {values(N * C, 14), values(N * C, 15)}, [&](const Operands& a) {
        k_.head_rmsnorm_backward(a[0], nullptr, a[1], w.data(), head_rstd.data(), N, 2, 8, C);
      });
  const int64_t n = N * C;
  expect_same("gelu", {values(n, 16), values(n, 17)},
              [&](const Operands& a) { k_.gelu_forward(a[0], a[1], n); });
  expect_same("gelu backward", {values(n, 18), values(n, 19), values(n, 20)},
              [&](const Operands& a) { k_.gelu_backward(a[0], a[1], a[2], n); });
  expect_same("swiglu", {values(n / 2, 21), values(n, 22)},
              [&](const Operands& a) { k_.swiglu_forward(a[0], a[1], N, C / 2); });
  expect_same("swiglu backward", {values(n, 23), values(n, 24), values(n / 2, 25)},
              [&](const Operands& a) { k_.swiglu_backward(a[0], a[1], a[2], N, C / 2); });
}

TEST_P(ActivationStorageTest, AttentionAndRope) {
  const int64_t B = 2, T = 7, NH = 4, NKV = 2, hd = 8, R = (NH + 2 * NKV) * hd;
  expect_same("attention",
              {values(B * T * NH * hd, 1), values(B * NH * T * T, 2), values(B * T * R, 3)},
              [&](const Operands& a) {
                k_.gqa_attention_forward(a[0], a[1], a[2], B, T, NH, NKV, hd, nullptr, 3);
              });
  // The backward reads probabilities the forward wrote: computed here in fp32 and rounded.
  const auto qkv = values(B * T * R, 4);
  std::vector<float> out(B * T * NH * hd), att(B * NH * T * T);
  k_.gqa_attention_forward(out.data(), att.data(), qkv.data(), B, T, NH, NKV, hd, nullptr, 0);
  expect_same("attention backward", {values(B * T * R, 5), values(B * T * NH * hd, 6), qkv, att},
              [&](const Operands& a) {
                k_.gqa_attention_backward(a[0], a[1], a[2], a[3], B, T, NH, NKV, hd, nullptr, 0);
              });
  const RopeFrequencies rope{10000.0f};
  expect_same("rope", {values(B * T * R, 7)},
              [&](const Operands& a) { k_.rope_forward(a[0], B, T, NH, NKV, hd, rope, nullptr); });
  expect_same("rope backward", {values(B * T * R, 8)},
              [&](const Operands& a) { k_.rope_backward(a[0], B, T, NH, NKV, hd, rope, nullptr); });
}

TEST_P(ActivationStorageTest, ElementwiseLossEmbeddingAndAdapters) {
  const int64_t n = 300;
  expect_same("residual into its first input", {values(n, 1), values(n, 2)},
              [&](const Operands& a) { k_.residual_forward(a[0], a[0], a[1], n); });
  expect_same("accumulate", {values(n, 3), values(n, 4)},
              [&](const Operands& a) { k_.accumulate(a[0], a[1], n); });
  expect_same("fill", {values(n, 5)}, [&](const Operands& a) { k_.fill(a[0], 0.1f, n); });
  expect_same("dropout", {values(n, 6), values(n, 7)},
              [&](const Operands& a) { k_.dropout_forward(a[0], a[1], n, 0.25f, 42); });
  expect_same("dropout backward", {values(n, 8), values(n, 9)},
              [&](const Operands& a) { k_.dropout_backward(a[0], a[1], n, 0.25f, 42); });
  // Columns 3..8 of rows of 12 written: the rest kept.
  expect_same("add_columns", {values(5 * 12, 10), values(5 * 6, 11)}, [&](const Operands& a) {
    k_.add_columns(a[0].at(3), 12, a[1], 6, 5, 6, 0.5f, GradOutput::kWrite);
  });

  const int64_t N = 5, V = 30, Vp = 32, C = 16;
  const std::vector<int32_t> targets = {3, -1, 29, 0, 7};
  std::vector<float> losses(N);
  expect_same("cross-entropy gradient", {values(N * Vp, 12)}, [&](const Operands& a) {
    k_.softmax_cross_entropy(losses.data(), a[0], targets.data(), N, V, Vp, LogitsOutput::kGradient,
                             0.2f);
  });
  const std::vector<int32_t> tokens = {1, 4, 1, 0, 2};
  const auto wte = random_floats(V * C, 13), wpe = random_floats(N * C, 14);
  expect_same("embedding", {values(N * C, 15)}, [&](const Operands& a) {
    k_.embedding_forward(a[0], tokens.data(), wte.data(), wpe.data(), 1, N, C, nullptr);
  });
  std::vector<float> dwte_runs[2];
  int run = 0;
  expect_same("embedding backward", {values(N * C, 16)}, [&](const Operands& a) {
    std::vector<float>& dwte = dwte_runs[run++];
    dwte.assign(V * C, 0.0f);
    k_.embedding_backward(dwte.data(), nullptr, a[0], tokens.data(), 1, N, C, nullptr);
    k_.fill(a[0], 0.0f, N * C);  // so that the comparison sees a write
  });
  EXPECT_TRUE(same_bits(dwte_runs[0], dwte_runs[1]));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ActivationStorageTest,
                         ::testing::Values(DType::kBF16, DType::kF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace zt
