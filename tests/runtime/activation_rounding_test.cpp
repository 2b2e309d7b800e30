// The activation tables of the CPU back end (CpuDevice::kernels_for(fp16 / bf16), kernels.h
// "Precision"): every activation a kernel writes is a value of the table's dtype, and for the
// element-wise and row kernels (and matmul with fp32 weights) it is the fp32 table's result
// rounded by dtype.h, bit for bit: rounding inside the kernel gives the bits of rounding
// afterwards. fp16 overflow becomes ±inf. What the tables keep fp32: layer-norm mean and rstd,
// losses, fp32 parameter gradients, and the non-activation entries (optimizers, cast, add,
// sum_squares). Matmul with 16-bit weights may run as a native bf16 GEMM (oneDNN AMX or
// AVX512_BF16, native_bf16_gemm()) whose accumulation order differs from sgemm's, so its
// outputs, and its 16-bit weight gradients, are held to one ulp of the dtype against a double
// reference on the widened weights. The suite runs with ZT_CPU_SIMD as the environment leaves it
// (unset under ctest), so the native path is the one tested where the CPU has it.
// The fp32 kernels themselves are tested in kernels_*_test.cpp; round_rows in round_rows_test.cpp.
// Here matmul; the other kernels and the entries that write no activation are in
// activation_rounding_ops_test.cpp, the helpers and fixture both use in
// activation_rounding_test_util.h.
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

// ---- matmul -----------------------------------------------------------------------------------

TEST_P(ActivationRoundingTest, MatmulWithFp32WeightsIsTheFp32ResultRounded) {
  const int64_t M = 7, K = 13, N = 11;
  for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
    SCOPED_TRACE(layout == WeightLayout::kInOut ? "kInOut" : "kOutIn");
    const auto inp = random_values(M * K, 1), w = random_floats(K * N, 2),
               bias = random_floats(N, 3);
    std::vector<float> out_f32(M * N), out(M * N);
    f32_.matmul_forward(out_f32.data(), inp.data(), w.data(), bias.data(), M, K, N, layout);
    act_.matmul_forward(out.data(), inp.data(), w.data(), bias.data(), M, K, N, layout);
    EXPECT_TRUE(has_unrounded(out_f32, dtype()));
    EXPECT_TRUE(same_bits(out, rounded(out_f32, dtype())));

    // dinp is an activation gradient: rounded. fp32 dweight and dbias are parameter gradients
    // stored in fp32: left as the fp32 table leaves them.
    const auto dout = random_values(M * N, 4);
    std::vector<float> dinp_f32 = random_values(M * K, 5), dw_f32 = random_floats(K * N, 6),
                       db_f32 = random_floats(N, 7);
    std::vector<float> dinp = dinp_f32, dw = dw_f32, db = db_f32;
    f32_.matmul_backward(dinp_f32.data(), dw_f32.data(), db_f32.data(), dout.data(), inp.data(),
                         w.data(), M, K, N, layout);
    act_.matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), M, K,
                         N, layout);
    EXPECT_TRUE(has_unrounded(dinp_f32, dtype()));
    EXPECT_TRUE(same_bits(dinp, rounded(dinp_f32, dtype())));
    EXPECT_TRUE(has_unrounded(dw_f32, dtype()) && has_unrounded(db_f32, dtype()));
    EXPECT_TRUE(same_bits(dw, dw_f32));
    EXPECT_TRUE(same_bits(db, db_f32));
  }
}

TEST_P(ActivationRoundingTest, MatmulOverflowBecomesInfInFp16) {
  const int64_t M = 4, K = 8, N = 4;
  const auto inp = random_values(M * K, 8, 200.0f, 300.0f);
  // Column n's weights have the sign (-1)^n: every product is above 8·200·200 = 320000 > 65504
  // in magnitude, +inf or -inf in fp16, finite in bf16.
  auto w = random_floats(K * N, 9, 200.0f, 300.0f);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 1; n < N; n += 2) w[k * N + n] = -w[k * N + n];
  const std::vector<uint16_t> w16 = narrowed(w, dtype());
  for (bool typed : {false, true}) {  // fp32 weights, then weights in the dtype
    SCOPED_TRACE(typed ? "16-bit weights" : "fp32 weights");
    const ConstOperand weight = typed ? ConstOperand(w16.data(), dtype()) : ConstOperand(w.data());
    std::vector<float> out(M * N);
    act_.matmul_forward(out.data(), inp.data(), weight, nullptr, M, K, N, WeightLayout::kInOut);
    EXPECT_TRUE(all_in(out, dtype()));
    if (!typed) {
      std::vector<float> out_f32(M * N);
      f32_.matmul_forward(out_f32.data(), inp.data(), w.data(), nullptr, M, K, N,
                          WeightLayout::kInOut);
      EXPECT_TRUE(same_bits(out, rounded(out_f32, dtype())));
    }
    for (int64_t i = 0; i < M * N; ++i) {
      EXPECT_EQ(std::isinf(out[i]), dtype() == DType::kF16) << out[i];
      EXPECT_EQ(std::signbit(out[i]), i % N % 2 == 1) << out[i];
    }
  }
}

// Weights and bias in the dtype, as a 16-bit working copy goes to the kernels. The activation
// inputs hold dtype values (they do under this table), so a native bf16 GEMM reads them exactly.
// Run on `act` (a table of the dtype) against the double reference; the dbias bits against
// `f32`'s column sums rounded once.
void expect_16bit_matmul_within_an_ulp(Kernels& act, Kernels& f32, DType dtype, int64_t M,
                                       int64_t K, int64_t N) {
  // One ulp of the dtype, plus the fp32 accumulation's error over K products of values in
  // [-1, 1] (about sqrt(K) · 2^-24 · K in the worst realistic case; 1e-5 at K = 37).
  const double rel = relative_ulp(dtype), abs = std::max(1e-5, 1e-8 * double(K));
  const auto values = [&](size_t n, uint32_t seed) {
    return rounded(random_floats(n, seed, -1.0f, 1.0f), dtype);
  };
  for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
    SCOPED_TRACE(layout == WeightLayout::kInOut ? "kInOut" : "kOutIn");
    const auto inp = values(M * K, 31);
    const std::vector<uint16_t> w16 = narrowed(random_floats(K * N, 32), dtype),
                                b16 = narrowed(random_floats(N, 33), dtype);
    const std::vector<float> w = widened(w16, dtype), bias = widened(b16, dtype);
    const ConstOperand weight(w16.data(), dtype);

    std::vector<float> out(M * N);
    act.matmul_forward(out.data(), inp.data(), weight, {b16.data(), dtype}, M, K, N, layout);
    EXPECT_TRUE(all_in(out, dtype));
    expect_within(out, matmul_ref(inp, w, bias, M, K, N, layout), rel, abs, "out");

    // Backward: dinp (an activation gradient) and the 16-bit dweight and dbias accumulate,
    // each stored value the dtype of (old + the fp32 contribution).
    const auto dout = values(M * N, 34), dinp0 = values(M * K, 35);
    const std::vector<uint16_t> dw0 = narrowed(random_floats(K * N, 36), dtype),
                                db0 = narrowed(random_floats(N, 37), dtype);
    std::vector<float> dinp = dinp0;
    std::vector<uint16_t> dw16 = dw0, db16 = db0;
    act.matmul_backward(dinp.data(), {dw16.data(), dtype}, {db16.data(), dtype}, dout.data(),
                        inp.data(), weight, M, K, N, layout);
    EXPECT_TRUE(all_in(dinp, dtype));
    std::vector<double> dinp_ref(M * K), dw_ref(K * N), db_ref(N);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k) {
        double s = dinp0[m * K + k];
        for (int64_t n = 0; n < N; ++n)
          s += double(dout[m * N + n]) * w[layout == WeightLayout::kInOut ? k * N + n : n * K + k];
        dinp_ref[m * K + k] = s;
      }
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) {
        const int64_t i = layout == WeightLayout::kInOut ? k * N + n : n * K + k;
        double s = widen(dw0[i], dtype);
        for (int64_t m = 0; m < M; ++m) s += double(inp[m * K + k]) * dout[m * N + n];
        dw_ref[i] = s;
      }
    for (int64_t n = 0; n < N; ++n) {
      double s = widen(db0[n], dtype);
      for (int64_t m = 0; m < M; ++m) s += dout[m * N + n];
      db_ref[n] = s;
    }
    expect_within(dinp, dinp_ref, rel, abs, "dinp");
    expect_within(widened(dw16, dtype), dw_ref, rel, abs, "dweight");
    expect_within(widened(db16, dtype), db_ref, rel, abs, "dbias");
    EXPECT_FALSE(same_bits(dw16, dw0));
    // dbias is the fp32 column sums added with one rounding: the fp32 table's bits, rounded.
    std::vector<float> db_f32 = widened(db0, dtype);
    f32.matmul_backward(nullptr, nullptr, db_f32.data(), dout.data(), inp.data(), w.data(), M, K, N,
                        layout);
    EXPECT_TRUE(same_bits(db16, narrowed(db_f32, dtype)));
  }
}

TEST_P(ActivationRoundingTest, MatmulWith16BitWeightsIsWithinAnUlpOfTheWidenedProduct) {
  expect_16bit_matmul_within_an_ulp(act_, f32_, dtype(), 9, 37, 21);
}

// Shapes past every block of the packed GEMM (cpu_gemm.cpp: reduction blocks of 512, column
// chunks of 384, row blocks of 256, ragged edge tiles), of the weight gradient's (a GEMM into
// the 16-bit gradient: M = 300 is two of the dinput product's row blocks, M = 600 two of the
// weight gradient's reduction blocks summed in fp32 before the one rounding, and M = 4100 a
// reduction too long for it, where an sgemm into fp32 blocks and an add take over) and of the
// native bf16 path's activation blocks. Each table: as the CPU runs it, and capped at AVX2
// and at SSE2 (each its own microkernel; both widen bf16 too: no native bf16 below AVX-512).
TEST_P(ActivationRoundingTest, MatmulWith16BitWeightsAcrossBlocks) {
  expect_16bit_matmul_within_an_ulp(act_, f32_, dtype(), 3, 1100, 1000);
  for (const char* level : {"avx2", "sse2"}) {
    const auto widening = test::kernels_capped_at(level, dtype());
    SCOPED_TRACE(std::string("capped at ") + level);
    expect_16bit_matmul_within_an_ulp(*widening, f32_, dtype(), 3, 1100, 1000);
    expect_16bit_matmul_within_an_ulp(*widening, f32_, dtype(), 300, 40, 70);
    expect_16bit_matmul_within_an_ulp(*widening, f32_, dtype(), 600, 40, 70);
    expect_16bit_matmul_within_an_ulp(*widening, f32_, dtype(), 4100, 8, 24);
    // dinput's reduction over N = 5000: A packed a block at a time, shared by the threads.
    expect_16bit_matmul_within_an_ulp(*widening, f32_, dtype(), 9, 40, 5000);
  }
}

// The packed GEMM rounds its output as the microkernel stores the last reduction block's tile
// (cpu_gemm.cpp): each output is dtype.h's rounding of the fp32 sum, bit for bit. Inputs whose
// sums are exact in fp32 in any order, so the expected bits are known: many halfway between two
// values of the dtype (ties to even, down and up), a part added only in the second reduction
// block (K = 600; rounding a block early would differ), a NaN row, and for fp16 a row that
// overflows. 11 x 53 leaves a ragged edge on every tile. Each table that runs the packed GEMM:
// as the CPU runs it (unless bf16 is native there: oneDNN's), capped at AVX2 and at SSE2.
TEST_P(ActivationRoundingTest, MatmulWith16BitWeightsRoundsItsOutputAsDtypeH) {
  const DType t = dtype();
  const int64_t M = 11, K = 600, N = 53;
  const float h = t == DType::kF16 ? 0x1p-11f : 0x1p-8f;  // half an ulp at 1
  std::vector<float> inp(M * K, 0.0f);
  for (int64_t m = 0; m < M; ++m) {
    inp[m * K] = t == DType::kF16 && m == 7 ? 40000.0f : 1.0f + float(2 * m + 1) * h;
    inp[m * K + 1] = m == 4 ? std::nanf("") : 0.25f * float(m + 1);
    inp[m * K + K - 1] = float(m % 3) * h;
  }
  std::vector<float> w(K * N, 0.0f);  // kInOut: (K, N)
  for (int64_t n = 0; n < N; ++n) {
    w[n] = float(1 + n % 2);
    w[N + n] = float(n % 3);
    w[(K - 1) * N + n] = 1.0f;
  }
  const std::vector<uint16_t> w16 = narrowed(w, t);
  ASSERT_TRUE(same_bits(widened(w16, t), w));
  std::vector<float> want(M * N);
  int ties = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      const float sum = inp[m * K] * w[n] + inp[m * K + 1] * w[N + n] + inp[m * K + K - 1];
      want[m * N + n] = widen(narrow(sum, t), t);
      ties += !std::isnan(sum) && std::abs(sum) < 16.0f &&
              std::abs(double(want[m * N + n]) - sum) == double(h) * (sum < 2.0f ? 1 : 2);
    }
  EXPECT_GT(ties, 100);
  std::vector<std::pair<std::string, std::unique_ptr<Kernels>>> tables;
  for (const char* level : {"avx2", "sse2"})
    tables.emplace_back(level, test::kernels_capped_at(level, t));
  const bool native = t == DType::kBF16 && native_bf16_gemm();
  for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
    std::vector<uint16_t> wl = w16;
    if (layout == WeightLayout::kOutIn)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t n = 0; n < N; ++n) wl[n * K + k] = w16[k * N + n];
    const auto run = [&](Kernels& k, const std::string& name) {
      SCOPED_TRACE(name + (layout == WeightLayout::kInOut ? " kInOut" : " kOutIn"));
      std::vector<float> out(M * N);
      k.matmul_forward(out.data(), inp.data(), {wl.data(), t}, nullptr, M, K, N, layout);
      for (int64_t i = 0; i < M * N; ++i) {
        if (i / N == 4) {
          EXPECT_TRUE(std::isnan(out[i]) && all_in({out[i]}, t)) << i;
          continue;
        }
        EXPECT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(want[i]))
            << "[" << i / N << ", " << i % N << "]: got " << out[i] << ", want " << want[i];
      }
    };
    if (!native) run(act_, "native");
    for (auto& [name, table] : tables) run(*table, name);
  }
}

// The packed GEMM splits C's columns (or, for a C with more rows than columns, its rows) over
// the threads; each element is the same chain of products whichever thread computed it, so 1,
// 2 and 3 threads give the same bits (the ZeRO stages compare runs bit for bit). Capped at
// AVX2, where both dtypes take the packed GEMM; K = 600 crosses a reduction block, N = 5000
// makes dinput's A shared by the threads, and M = 600 crosses the weight gradient's reduction
// block; each layout gives the weight gradient a wide C and a tall one. {512, 300, 800}: a
// weight gradient of two row blocks whose columns take two B panels on 1 and 2 threads (each
// row block's A packed once, the panels outside the row blocks) and one on 3 (row blocks
// outside): the two loop orders give the same bits.
TEST_P(ActivationRoundingTest, MatmulWith16BitWeightsDoesNotDependOnThreadCount) {
  const auto packed = test::kernels_capped_at("avx2", dtype());
  using Shape = std::tuple<int64_t, int64_t, int64_t>;
  for (const auto& [M, K, N] :
       {Shape{20, 600, 517}, Shape{20, 40, 5000}, Shape{600, 30, 90}, Shape{512, 300, 800}}) {
    const auto inp = random_values(M * K, 40), dout = random_values(M * N, 41);
    const std::vector<uint16_t> w16 = narrowed(random_floats(K * N, 42), dtype());
    for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
      std::vector<std::vector<float>> results;
      for (int threads : {1, 2, 3}) {
        std::vector<float> out(M * N), dinp(M * K, 0.5f);
        std::vector<uint16_t> dw16(K * N, 0);
        test::with_threads(threads, [&] {
          packed->matmul_forward(out.data(), inp.data(), {w16.data(), dtype()}, nullptr, M, K, N,
                                 layout);
          packed->matmul_backward(dinp.data(), {dw16.data(), dtype()}, nullptr, dout.data(),
                                  inp.data(), {w16.data(), dtype()}, M, K, N, layout);
        });
        const std::vector<float> dw = widened(dw16, dtype());
        out.insert(out.end(), dinp.begin(), dinp.end());
        out.insert(out.end(), dw.begin(), dw.end());
        results.push_back(out);
      }
      EXPECT_TRUE(same_bits(results[0], results[1]));
      EXPECT_TRUE(same_bits(results[0], results[2]));
      // Without a bias the first reduction block writes out and the second adds to it.
      const std::vector<float> out(results[0].begin(), results[0].begin() + M * N);
      expect_within(out, matmul_ref(inp, widened(w16, dtype()), {}, M, K, N, layout),
                    relative_ulp(dtype()), 1e-5, "out");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ActivationRoundingTest,
                         ::testing::Values(DType::kF16, DType::kBF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

}  // namespace
}  // namespace zt
