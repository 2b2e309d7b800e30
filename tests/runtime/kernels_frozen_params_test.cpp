// The backward entries with frozen parameters (a LoRA base model's weights, a frozen norm or
// embedding): a null weight or bias gradient Operand is skipped, and the input gradient, and any
// parameter gradient that is given, get the bits of the call with every gradient (kernels.h:
// "skipped when null"). matmul, layer norm, RMSNorm, per-head RMSNorm and embedding backward, on
// the CPU device's fp32 table and its bf16 one (whose rounding pass writes dinp too). The CUDA
// back end's: cuda_frozen_params_test.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/kernels.h"

#include "kernels_test_util.h"

namespace zt {
namespace {

using namespace test;

// The device's fp32 table and its bf16 one.
class FrozenParametersTest : public KernelsTest {
 protected:
  std::vector<Kernels*> tables() { return {&k_, &dev_.kernels_for(DType::kBF16)}; }
};

TEST_F(FrozenParametersTest, MatmulBackwardSkipsNullWeightAndBiasGradients) {
  const int64_t M = 37, K = 24, N = 19;
  const auto inp = random_floats(M * K, 20), w = random_floats(K * N, 21),
             dout = random_floats(M * N, 22), dinp0 = random_floats(M * K, 23),
             dw0 = random_floats(K * N, 24), db0 = random_floats(N, 25);
  for (Kernels* k : tables())
    for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn})
      for (GradOutput output : {GradOutput::kAdd, GradOutput::kWrite}) {
        auto dinp = dinp0, dw = dw0, db = db0;
        k->matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), M,
                           K, N, layout, output);
        for (int given = 0; given < 3; ++given) {  // neither, dweight only, dbias only
          SCOPED_TRACE(given);
          auto dinp_f = dinp0, dw_f = dw0, db_f = db0;
          k->matmul_backward(dinp_f.data(), given == 1 ? Operand(dw_f.data()) : nullptr,
                             given == 2 ? Operand(db_f.data()) : nullptr, dout.data(), inp.data(),
                             w.data(), M, K, N, layout, output);
          EXPECT_TRUE(same_bits(dinp_f, dinp));
          EXPECT_TRUE(same_bits(dw_f, given == 1 ? dw : dw0));
          EXPECT_TRUE(same_bits(db_f, given == 2 ? db : db0));
        }
      }
}

TEST_F(FrozenParametersTest, LayerNormBackwardSkipsNullWeightAndBiasGradients) {
  const int64_t N = 70, C = 24;  // more rows than one block of the weight partials
  const auto x = random_floats(N * C, 30, -3.0f, 3.0f), w = random_floats(C, 31),
             b = random_floats(C, 32), dout = random_floats(N * C, 33),
             dinp0 = random_floats(N * C, 34), dw0 = random_floats(C, 35),
             db0 = random_floats(C, 36);
  for (Kernels* k : tables()) {
    std::vector<float> out(N * C), mean(N), rstd(N);
    k->layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    auto dinp = dinp0, dw = dw0, db = db0;
    k->layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                          mean.data(), rstd.data(), N, C);
    for (int given = 0; given < 3; ++given) {
      SCOPED_TRACE(given);
      auto dinp_f = dinp0, dw_f = dw0, db_f = db0;
      k->layernorm_backward(dinp_f.data(), given == 1 ? Operand(dw_f.data()) : nullptr,
                            given == 2 ? Operand(db_f.data()) : nullptr, dout.data(), x.data(),
                            w.data(), mean.data(), rstd.data(), N, C);
      EXPECT_TRUE(same_bits(dinp_f, dinp));
      EXPECT_TRUE(same_bits(dw_f, given == 1 ? dw : dw0));
      EXPECT_TRUE(same_bits(db_f, given == 2 ? db : db0));
    }
  }
}

TEST_F(FrozenParametersTest, RmsNormBackwardsSkipANullWeightGradient) {
  const int64_t N = 70, C = 24, H = 3, hd = 8, stride = 40;  // head norm: 3 heads of 8 in 40
  const auto x = random_floats(N * C, 40, -3.0f, 3.0f), w = random_floats(C, 41),
             dout = random_floats(N * C, 42), dinp0 = random_floats(N * C, 43),
             dw0 = random_floats(C, 44);
  const auto hx0 = random_floats(N * stride, 45, -3.0f, 3.0f), hw = random_floats(hd, 46),
             hdx0 = random_floats(N * stride, 47), hdw0 = random_floats(hd, 48);
  for (Kernels* k : tables()) {
    std::vector<float> out(N * C), rstd(N);
    k->rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
    auto dinp = dinp0, dw = dw0, dinp_f = dinp0;
    k->rmsnorm_backward(dinp.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
    k->rmsnorm_backward(dinp_f.data(), nullptr, dout.data(), x.data(), w.data(), rstd.data(), N, C);
    EXPECT_TRUE(same_bits(dinp_f, dinp)) << "rmsnorm";

    auto hx = hx0;
    std::vector<float> hrstd(N * H);
    k->head_rmsnorm_forward(hx.data(), hrstd.data(), hw.data(), N, H, hd, stride, 1e-6f);
    auto hdx = hdx0, hdw = hdw0, hdx_f = hdx0;
    k->head_rmsnorm_backward(hdx.data(), hdw.data(), hx0.data(), hw.data(), hrstd.data(), N, H, hd,
                             stride);
    k->head_rmsnorm_backward(hdx_f.data(), nullptr, hx0.data(), hw.data(), hrstd.data(), N, H, hd,
                             stride);
    EXPECT_TRUE(same_bits(hdx_f, hdx)) << "head_rmsnorm";
  }
}

TEST_F(FrozenParametersTest, EmbeddingBackwardSkipsEitherNullGradient) {
  const int64_t B = 2, T = 5, C = 8, V = 13;
  const std::vector<int32_t> tokens = {3, 12, 0, 3, 7, 7, 3, 1, 12, 0};
  const auto dout = random_floats(B * T * C, 50), dwte0 = random_floats(V * C, 51),
             dwpe0 = random_floats(T * C, 52);
  for (Kernels* k : tables()) {
    auto dwte = dwte0, dwpe = dwpe0;
    k->embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C, nullptr);
    auto dwte_only = dwte0, dwpe_only = dwpe0;
    k->embedding_backward(dwte_only.data(), nullptr, dout.data(), tokens.data(), B, T, C, nullptr);
    k->embedding_backward(nullptr, dwpe_only.data(), dout.data(), tokens.data(), B, T, C, nullptr);
    k->embedding_backward(nullptr, nullptr, dout.data(), tokens.data(), B, T, C, nullptr);
    EXPECT_TRUE(same_bits(dwte_only, dwte));
    EXPECT_TRUE(same_bits(dwpe_only, dwpe));
  }
}

}  // namespace
}  // namespace zt
