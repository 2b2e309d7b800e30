// The activation tables of the CPU back end (CpuDevice::kernels_for(fp16 / bf16), kernels.h
// "Precision") beyond matmul: embedding, layer norm, softmax cross-entropy, attention, the
// element-wise kernels and LoRA's dropout and add_columns (the columns it writes, no others)
// write values of the table's dtype, the fp32 table's results rounded by dtype.h bit for bit; fresh
// gradients are written as if added into zeros; fp16 overflow becomes ±inf; the entries that write
// no activation (optimizers, cast, add, sum_squares) are not rounded. Matmul, the suite's
// instantiation for fp16 and bf16 and the overview: activation_rounding_test.cpp; the helpers and
// fixture both use: activation_rounding_test_util.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "runtime/cpu/cpu_device.h"
#include "runtime/dtype.h"
#include "runtime/kernels.h"
#include "runtime/status.h"

#include "activation_rounding_test_util.h"
#include "kernels_test_util.h"
#include "random_data.h"

namespace zt {
namespace {

using test::random_floats;
using namespace activation_rounding;

// ---- embedding and layer norm -----------------------------------------------------------------

TEST_P(ActivationRoundingTest, EmbeddingRoundsItsOutputAndTheBatchRowsOfItsGradient) {
  const int64_t V = 10, B = 2, T = 3, C = 9;
  const std::vector<int32_t> tokens = {1, 4, 1, 7, 4, 9};
  const std::set<int32_t> present(tokens.begin(), tokens.end());
  const auto wte = random_floats(V * C, 18), wpe = random_floats(T * C, 19);
  const std::vector<uint16_t> wte16 = narrowed(wte, dtype()), wpe16 = narrowed(wpe, dtype());

  // Forward, fp32 tables and tables in the dtype (widened exactly where read).
  std::vector<float> out_f32(B * T * C), out(B * T * C);
  f32_.embedding_forward(out_f32.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, nullptr);
  act_.embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, nullptr);
  EXPECT_TRUE(has_unrounded(out_f32, dtype()));
  EXPECT_TRUE(same_bits(out, rounded(out_f32, dtype())));
  const std::vector<float> wte_w = widened(wte16, dtype()), wpe_w = widened(wpe16, dtype());
  f32_.embedding_forward(out_f32.data(), tokens.data(), wte_w.data(), wpe_w.data(), B, T, C,
                         nullptr);
  act_.embedding_forward(out.data(), tokens.data(), {wte16.data(), dtype()},
                         {wpe16.data(), dtype()}, B, T, C, nullptr);
  EXPECT_TRUE(same_bits(out, rounded(out_f32, dtype())));

  // Backward into 16-bit gradients: the rows of the batch's tokens are the fp32 sums of the old
  // values and the contributions, rounded once; the other rows keep their bits.
  const auto dout = random_values(B * T * C, 20);
  const std::vector<uint16_t> dwte0 = narrowed(random_floats(V * C, 21), dtype()),
                              dwpe0 = narrowed(random_floats(T * C, 22), dtype());
  std::vector<float> dwte_f32 = widened(dwte0, dtype()), dwpe_f32 = widened(dwpe0, dtype());
  f32_.embedding_backward(dwte_f32.data(), dwpe_f32.data(), dout.data(), tokens.data(), B, T, C,
                          nullptr);
  std::vector<uint16_t> dwte = dwte0, dwpe = dwpe0;
  act_.embedding_backward({dwte.data(), dtype()}, {dwpe.data(), dtype()}, dout.data(),
                          tokens.data(), B, T, C, nullptr);
  const std::vector<uint16_t> dwte_want = narrowed(dwte_f32, dtype());
  for (int64_t v = 0; v < V; ++v) {
    const auto& want = present.count(int32_t(v)) ? dwte_want : dwte0;
    EXPECT_EQ(std::memcmp(dwte.data() + v * C, want.data() + v * C, C * 2), 0) << "row " << v;
  }
  EXPECT_FALSE(same_bits(dwte, dwte0));
  EXPECT_TRUE(same_bits(dwpe, narrowed(dwpe_f32, dtype())));

  // fp32 parameter gradients under this table are not rounded.
  std::vector<float> gwte_f32 = random_floats(V * C, 23), gwpe_f32 = random_floats(T * C, 24);
  std::vector<float> gwte = gwte_f32, gwpe = gwpe_f32;
  f32_.embedding_backward(gwte_f32.data(), gwpe_f32.data(), dout.data(), tokens.data(), B, T, C,
                          nullptr);
  act_.embedding_backward(gwte.data(), gwpe.data(), dout.data(), tokens.data(), B, T, C, nullptr);
  EXPECT_TRUE(has_unrounded(gwte_f32, dtype()));
  EXPECT_TRUE(same_bits(gwte, gwte_f32) && same_bits(gwpe, gwpe_f32));
}

TEST_P(ActivationRoundingTest, LayerNormRoundsOutAndDinpKeepsMeanAndRstdInFp32) {
  const int64_t N = 5, C = 24;
  const auto x = random_values(N * C, 10, -3.0f, 3.0f), w = random_floats(C, 11),
             b = random_floats(C, 12);
  std::vector<float> out_f32(N * C), mean_f32(N), rstd_f32(N), out(N * C), mean(N), rstd(N);
  f32_.layernorm_forward(out_f32.data(), mean_f32.data(), rstd_f32.data(), x.data(), w.data(),
                         b.data(), N, C);
  act_.layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  EXPECT_TRUE(has_unrounded(out_f32, dtype()));
  EXPECT_TRUE(same_bits(out, rounded(out_f32, dtype())));
  EXPECT_TRUE(has_unrounded(mean_f32, dtype()) && has_unrounded(rstd_f32, dtype()));
  EXPECT_TRUE(same_bits(mean, mean_f32));
  EXPECT_TRUE(same_bits(rstd, rstd_f32));

  // Backward with fp32 dweight/dbias: dinp rounded, the parameter gradients not.
  const auto dout = random_values(N * C, 13);
  std::vector<float> dx_f32 = random_values(N * C, 14), dw_f32 = random_floats(C, 15),
                     db_f32 = random_floats(C, 16);
  std::vector<float> dx = dx_f32, dw = dw_f32, db = db_f32;
  f32_.layernorm_backward(dx_f32.data(), dw_f32.data(), db_f32.data(), dout.data(), x.data(),
                          w.data(), mean_f32.data(), rstd_f32.data(), N, C);
  act_.layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                          mean.data(), rstd.data(), N, C);
  EXPECT_TRUE(has_unrounded(dx_f32, dtype()));
  EXPECT_TRUE(same_bits(dx, rounded(dx_f32, dtype())));
  EXPECT_TRUE(has_unrounded(dw_f32, dtype()) && has_unrounded(db_f32, dtype()));
  EXPECT_TRUE(same_bits(dw, dw_f32) && same_bits(db, db_f32));
}

// Weight, bias and their gradients in the dtype: widened exactly where read, the gradients the
// fp32 sums of old value and contribution rounded once.
TEST_P(ActivationRoundingTest, LayerNormWith16BitParametersIsTheFp32ResultRounded) {
  const int64_t N = 40, C = 24;  // more rows than one block of layernorm_backward's partials
  const auto x = random_values(N * C, 40, -3.0f, 3.0f), dout = random_values(N * C, 41);
  const std::vector<uint16_t> w16 = narrowed(random_floats(C, 42), dtype()),
                              b16 = narrowed(random_floats(C, 43), dtype()),
                              dw0 = narrowed(random_floats(C, 44), dtype()),
                              db0 = narrowed(random_floats(C, 45), dtype());
  const std::vector<float> w = widened(w16, dtype()), b = widened(b16, dtype());
  std::vector<float> out_f32(N * C), mean(N), rstd(N), out(N * C), mean16(N), rstd16(N);
  f32_.layernorm_forward(out_f32.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N,
                         C);
  act_.layernorm_forward(out.data(), mean16.data(), rstd16.data(), x.data(), {w16.data(), dtype()},
                         {b16.data(), dtype()}, N, C);
  EXPECT_TRUE(same_bits(out, rounded(out_f32, dtype())));
  EXPECT_TRUE(same_bits(mean16, mean) && same_bits(rstd16, rstd));

  std::vector<float> dx_f32(N * C, 0.0f), dw_f32 = widened(dw0, dtype()),
                                          db_f32 = widened(db0, dtype());
  f32_.layernorm_backward(dx_f32.data(), dw_f32.data(), db_f32.data(), dout.data(), x.data(),
                          w.data(), mean.data(), rstd.data(), N, C);
  std::vector<float> dx(N * C, 0.0f);
  std::vector<uint16_t> dw = dw0, db = db0;
  act_.layernorm_backward(dx.data(), {dw.data(), dtype()}, {db.data(), dtype()}, dout.data(),
                          x.data(), {w16.data(), dtype()}, mean.data(), rstd.data(), N, C);
  EXPECT_TRUE(same_bits(dx, rounded(dx_f32, dtype())));
  EXPECT_TRUE(same_bits(dw, narrowed(dw_f32, dtype())));
  EXPECT_TRUE(same_bits(db, narrowed(db_f32, dtype())));
  EXPECT_FALSE(same_bits(dw, dw0));
}

// ---- softmax cross-entropy, attention, element-wise -------------------------------------------

TEST_P(ActivationRoundingTest, SoftmaxCrossEntropyRoundsTheGradientNotTheLosses) {
  const int64_t N = 5, V = 37, Vp = 40;
  const auto logits = random_values(N * Vp, 17, -4.0f, 4.0f);
  const std::vector<int32_t> targets = {0, 36, 5, 17, 5};
  for (float dloss : {0.5f, 0.0f}) {  // 0: losses only (kKeep)
    SCOPED_TRACE(dloss);
    const LogitsOutput output = dloss == 0.0f ? LogitsOutput::kKeep : LogitsOutput::kGradient;
    std::vector<float> g_f32 = logits, g = logits, loss_f32(N), loss(N);
    f32_.softmax_cross_entropy(loss_f32.data(), g_f32.data(), targets.data(), N, V, Vp, output,
                               dloss);
    act_.softmax_cross_entropy(loss.data(), g.data(), targets.data(), N, V, Vp, output, dloss);
    EXPECT_TRUE(has_unrounded(loss_f32, dtype()));
    EXPECT_TRUE(same_bits(loss, loss_f32));
    if (dloss != 0.0f) {
      EXPECT_TRUE(has_unrounded(g_f32, dtype()));
      EXPECT_TRUE(same_bits(g, rounded(g_f32, dtype())));
    } else {  // logits only read
      EXPECT_TRUE(same_bits(g, logits));
    }
  }
}

TEST_P(ActivationRoundingTest, AttentionRoundsOutputProbabilitiesAndGradient) {
  const int64_t B = 2, T = 5, C = 8, NH = 2;
  const auto qkv = random_values(B * T * 3 * C, 21), dout = random_values(B * T * C, 22);
  std::vector<float> out_f32(B * T * C), att_f32(B * NH * T * T), out(out_f32.size()),
      att(att_f32.size());
  f32_.attention_forward(out_f32.data(), att_f32.data(), qkv.data(), B, T, C, NH, nullptr);
  act_.attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, nullptr);
  EXPECT_TRUE(has_unrounded(out_f32, dtype()) && has_unrounded(att_f32, dtype()));
  EXPECT_TRUE(same_bits(out, rounded(out_f32, dtype())));
  EXPECT_TRUE(same_bits(att, rounded(att_f32, dtype())));
  // Both tables read the same (rounded) probabilities, as backward does after a 16-bit forward.
  std::vector<float> dqkv_f32 = random_values(qkv.size(), 23), dqkv = dqkv_f32;
  f32_.attention_backward(dqkv_f32.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH,
                          nullptr);
  act_.attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH, nullptr);
  EXPECT_TRUE(has_unrounded(dqkv_f32, dtype()));
  EXPECT_TRUE(same_bits(dqkv, rounded(dqkv_f32, dtype())));
}

// A fresh weight gradient (kernels.h: a step's first contribution) and a dinp asked to be
// written (GradOutput::kWrite) hold garbage and are written with the bits of adding into zeros:
// on every path of the weight gradient (fp32 sgemm; native bf16; the packed GEMM into the
// 16-bit gradient, over one and two reduction blocks; the sgemm and add past it, M = 4100) and
// of dinp (sgemm; native bf16 in one and in two blocks of dout's columns, N = 5000; the packed
// GEMM), and with nothing to sum (M = 0: dweight zeros; N = 0: dinp zeros). A fresh bias
// gradient is refused.
TEST_P(ActivationRoundingTest, FreshGradientsAreWrittenAsIfAddedIntoZeros) {
  const auto avx2 = test::kernels_capped_at("avx2", dtype());
  const auto sse2 = test::kernels_capped_at("sse2", dtype());
  using Shape = std::tuple<int64_t, int64_t, int64_t>;
  const Shape shapes[] = {{9, 37, 21},    {600, 40, 70}, {4100, 8, 24},
                          {600, 8, 5000}, {0, 5, 7},     {3, 5, 0}};
  for (Kernels* k : {&act_, avx2.get(), sse2.get(), &f32_}) {
    for (DType gt : {dtype(), DType::kF32}) {
      for (const auto& [M, K, N] : shapes) {
        SCOPED_TRACE(::testing::Message() << dtype_name(gt) << " gradient, M=" << M << " N=" << N);
        const auto inp = random_values(M * K, 50), dout = random_values(M * N, 51);
        const std::vector<uint16_t> w16 = narrowed(random_floats(K * N, 52), dtype());
        const std::vector<float> w32 = widened(w16, dtype());
        const ConstOperand weight =
            k == &f32_ ? ConstOperand(w32.data()) : ConstOperand(w16.data(), dtype());
        for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
          SCOPED_TRACE(layout == WeightLayout::kInOut ? "kInOut" : "kOutIn");
          const size_t bytes = static_cast<size_t>(K * N) * dtype_size(gt);
          std::vector<uint8_t> added(bytes, 0), fresh(bytes, 0xff);  // 0xff..: NaN in each
          std::vector<float> dinp_added(M * K, 0.0f), dinp_written(M * K);
          std::memset(dinp_written.data(), 0xff, dinp_written.size() * sizeof(float));
          k->matmul_backward(dinp_added.data(), Operand(added.data(), gt), nullptr, dout.data(),
                             inp.data(), weight, M, K, N, layout);
          k->matmul_backward(dinp_written.data(), Operand(fresh.data(), gt, true), nullptr,
                             dout.data(), inp.data(), weight, M, K, N, layout, GradOutput::kWrite);
          EXPECT_EQ(fresh, added);
          EXPECT_TRUE(same_bits(dinp_written, dinp_added));
          if (M > 0 && N > 0) {
            EXPECT_NE(added, std::vector<uint8_t>(bytes, 0));
            EXPECT_NE(dinp_added, std::vector<float>(M * K, 0.0f));
          }
        }
      }
    }
  }
  std::vector<float> db(4);
  const auto x = random_values(8, 53);
  EXPECT_THROW(act_.matmul_backward(nullptr, nullptr, Operand(db.data(), DType::kF32, true),
                                    x.data(), x.data(), x.data(), 2, 4, 4, WeightLayout::kInOut),
               Error);
}

TEST_P(ActivationRoundingTest, ElementwiseOutputsAreRounded) {
  const int64_t n = 1001;
  const auto x = random_values(n, 24, -3.0f, 3.0f), y = random_values(n, 25);
  auto check = [&](const char* what, const auto& run) {
    std::vector<float> from_f32 = y, from_act = y;
    run(f32_, from_f32);
    run(act_, from_act);
    EXPECT_TRUE(has_unrounded(from_f32, dtype())) << what;
    EXPECT_TRUE(same_bits(from_act, rounded(from_f32, dtype()))) << what;
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
  check("fill", [&](Kernels& k, std::vector<float>& o) { k.fill(o.data(), 0.1f, n); });
}

// add_columns writes a column slice of strided rows: the written elements are the fp32 table's
// rounded, the other columns of dst's rows keep their (unrounded) bits. Dropout's outputs and
// gradients are the fp32 table's rounded.
TEST_P(ActivationRoundingTest, AddColumnsRoundsOnlyTheColumnsItWrites) {
  const int64_t N = 9, R = 24, at = 6, width = 10;
  const auto src = random_values(N * 12, 26), dst0 = random_floats(N * R, 27);
  ASSERT_TRUE(has_unrounded(dst0, dtype()));
  for (GradOutput output : {GradOutput::kWrite, GradOutput::kAdd}) {
    SCOPED_TRACE(output == GradOutput::kAdd ? "kAdd" : "kWrite");
    std::vector<float> from_f32 = dst0, from_act = dst0;
    f32_.add_columns(from_f32.data() + at, R, src.data() + 1, 12, N, width, 0.3f, output);
    act_.add_columns(from_act.data() + at, R, src.data() + 1, 12, N, width, 0.3f, output);
    std::vector<float> want = dst0, written;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = at; j < at + width; ++j) written.push_back(from_f32[n * R + j]);
    EXPECT_TRUE(has_unrounded(written, dtype()));
    const std::vector<float> rounded_written = rounded(written, dtype());
    for (int64_t n = 0, w = 0; n < N; ++n)
      for (int64_t j = at; j < at + width; ++j) want[n * R + j] = rounded_written[w++];
    EXPECT_TRUE(same_bits(from_act, want));
  }
}

TEST_P(ActivationRoundingTest, DropoutOutputsAndGradientsAreRounded) {
  const int64_t n = 1001;
  const auto x = random_values(n, 28), dout = random_values(n, 29);
  for (float p : {0.3f, 0.0f}) {
    SCOPED_TRACE(p);
    std::vector<float> out_f32(n), out(n);
    f32_.dropout_forward(out_f32.data(), x.data(), n, p, 11);
    act_.dropout_forward(out.data(), x.data(), n, p, 11);
    EXPECT_TRUE(same_bits(out, rounded(out_f32, dtype())));
    std::vector<float> dinp_f32 = random_values(n, 30), dinp = dinp_f32;
    f32_.dropout_backward(dinp_f32.data(), dout.data(), n, p, 11);
    act_.dropout_backward(dinp.data(), dout.data(), n, p, 11);
    EXPECT_TRUE(has_unrounded(dinp_f32, dtype()));
    EXPECT_TRUE(same_bits(dinp, rounded(dinp_f32, dtype())));
  }
  std::vector<float> out_f32(n), out(n);  // 1/(1 - 0.3) scales values of the dtype off its grid
  f32_.dropout_forward(out_f32.data(), x.data(), n, 0.3f, 11);
  EXPECT_TRUE(has_unrounded(out_f32, dtype()));
}

// bf16 has fp32's range: overflow is fp16's alone.
TEST(ActivationRounding, Fp16ResidualAndAccumulateOverflowBecomeInf) {
  CpuDevice dev;
  Kernels& fp16 = dev.kernels_for(DType::kF16);
  const std::vector<float> a = {40000.0f, -40000.0f, 30000.0f}, b = {30000.0f, -30000.0f, 0.0f};
  std::vector<float> out(3);
  fp16.residual_forward(out.data(), a.data(), b.data(), 3);
  EXPECT_EQ(out[0], INFINITY);
  EXPECT_EQ(out[1], -INFINITY);
  EXPECT_EQ(out[2], 30000.0f);
  std::vector<float> y = b;
  fp16.accumulate(y.data(), a.data(), 3);
  EXPECT_EQ(y[0], INFINITY);
  EXPECT_EQ(y[1], -INFINITY);
  EXPECT_EQ(y[2], 30000.0f);
}

// ---- entries that write no activation ---------------------------------------------------------

TEST_P(ActivationRoundingTest, OptimizersCastAddAndSumSquaresAreNotRounded) {
  const int64_t n = 1001;
  const auto p0 = random_floats(n, 26), g = random_floats(n, 27), m0 = random_floats(n, 28),
             v0 = random_floats(n, 29, 0.0f, 1.0f);
  const std::vector<uint16_t> g16 = narrowed(g, dtype());
  for (bool typed : {false, true}) {  // the gradient in fp32, then in the dtype
    SCOPED_TRACE(typed ? "16-bit gradient" : "fp32 gradient");
    const ConstOperand grad = typed ? ConstOperand(g16.data(), dtype()) : ConstOperand(g.data());
    AdamWArgs args;
    args.step = 3;
    args.weight_decay = 0.1f;
    std::vector<float> p_f32 = p0, m_f32 = m0, v_f32 = v0, p = p0, m = m0, v = v0;
    f32_.adamw(p_f32.data(), grad, m_f32.data(), v_f32.data(), n, args);
    act_.adamw(p.data(), grad, m.data(), v.data(), n, args);
    EXPECT_TRUE(has_unrounded(p_f32, dtype()) && has_unrounded(m_f32, dtype()) &&
                has_unrounded(v_f32, dtype()));
    EXPECT_TRUE(same_bits(p, p_f32) && same_bits(m, m_f32) && same_bits(v, v_f32));

    SgdArgs sgd;
    sgd.momentum = 0.9f;
    std::vector<float> q_f32 = p0, b_f32 = m0, q = p0, b = m0;
    f32_.sgd(q_f32.data(), grad, b_f32.data(), n, sgd);
    act_.sgd(q.data(), grad, b.data(), n, sgd);
    EXPECT_TRUE(has_unrounded(q_f32, dtype()));
    EXPECT_TRUE(same_bits(q, q_f32) && same_bits(b, b_f32));

    const double ss_f32 = f32_.sum_squares(grad, n), ss = act_.sum_squares(grad, n);
    EXPECT_EQ(std::memcmp(&ss, &ss_f32, sizeof(double)), 0) << ss << " vs " << ss_f32;
  }

  // cast to fp32 and an fp32 add keep fp32 values.
  std::vector<float> cast_f32(n), cast(n), sum_f32(n), sum(n);
  f32_.cast(cast_f32.data(), DType::kF32, g.data(), DType::kF32, n);
  act_.cast(cast.data(), DType::kF32, g.data(), DType::kF32, n);
  EXPECT_TRUE(has_unrounded(cast, dtype()));
  EXPECT_TRUE(same_bits(cast, cast_f32));
  f32_.add(sum_f32.data(), DType::kF32, p0.data(), DType::kF32, g.data(), DType::kF32, n);
  act_.add(sum.data(), DType::kF32, p0.data(), DType::kF32, g.data(), DType::kF32, n);
  EXPECT_TRUE(has_unrounded(sum, dtype()));
  EXPECT_TRUE(same_bits(sum, sum_f32));
}

}  // namespace
}  // namespace zt
