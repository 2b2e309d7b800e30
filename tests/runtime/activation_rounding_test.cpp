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

#include "kernels_test_util.h"
#include "random_data.h"

namespace zt {
namespace {

using test::random_floats;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
bool same_bits(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 2) == 0;
}

uint16_t narrow(float x, DType t) { return t == DType::kF16 ? fp32_to_fp16(x) : fp32_to_bf16(x); }
float widen(uint16_t h, DType t) { return t == DType::kF16 ? fp16_to_fp32(h) : bf16_to_fp32(h); }

// x in t's 16 bits (round to nearest even), and back to fp32.
std::vector<uint16_t> narrowed(const std::vector<float>& x, DType t) {
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = narrow(x[i], t);
  return h;
}
std::vector<float> widened(const std::vector<uint16_t>& h, DType t) {
  std::vector<float> x(h.size());
  for (size_t i = 0; i < h.size(); ++i) x[i] = widen(h[i], t);
  return x;
}
// x rounded to t by dtype.h's scalar conversions.
std::vector<float> rounded(const std::vector<float>& x, DType t) {
  return widened(narrowed(x, t), t);
}

// Every element of x is a value of t.
bool all_in(const std::vector<float>& x, DType t) { return same_bits(x, rounded(x, t)); }
// Some element of x is not a value of t: a test that x is unrounded is not vacuous.
bool has_unrounded(const std::vector<float>& x, DType t) { return !all_in(x, t); }

// One ulp of t relative to the value: the 16-bit results' tolerance against a double reference.
double relative_ulp(DType t) { return t == DType::kF16 ? 0x1p-10 : 0x1p-7; }

// |got - want| <= rel·|want| + abs, element by element, naming the first failures.
void expect_within(const std::vector<float>& got, const std::vector<double>& want, double rel,
                   double abs, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    const double err = std::abs(double(got[i]) - want[i]);
    if (!(err <= rel * std::abs(want[i]) + abs)) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i] << " (error "
                    << err << ")";
      ++failures;
    }
  }
}

// The double reference of out (M,N) = inp (M,K) · W + bias, W (K,N) or (N,K) by layout.
std::vector<double> matmul_ref(const std::vector<float>& inp, const std::vector<float>& w,
                               const std::vector<float>& bias, int64_t M, int64_t K, int64_t N,
                               WeightLayout layout) {
  std::vector<double> out(M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = bias.empty() ? 0.0 : bias[n];
      for (int64_t k = 0; k < K; ++k)
        s += double(inp[m * K + k]) * w[layout == WeightLayout::kInOut ? k * N + n : n * K + k];
      out[m * N + n] = s;
    }
  return out;
}

class ActivationRoundingTest : public ::testing::TestWithParam<DType> {
 protected:
  DType dtype() const { return GetParam(); }
  // Values of the dtype: what activations are under its table.
  std::vector<float> random_values(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    return rounded(random_floats(n, seed, lo, hi), dtype());
  }
  CpuDevice dev_;
  Kernels& f32_ = dev_.kernels();
  Kernels& act_ = dev_.kernels_for(GetParam());
};

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

INSTANTIATE_TEST_SUITE_P(Dtypes, ActivationRoundingTest,
                         ::testing::Values(DType::kF16, DType::kBF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

}  // namespace
}  // namespace zt
