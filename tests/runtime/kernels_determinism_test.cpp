// The properties of the CPU kernels the ZeRO stages rely on: element-wise kernels give an element
// the same bits wherever it sits (a buffer updated whole equals its shards updated separately),
// reductions give the same bits for 1, 2 or 3 threads, and the SSE2 / AVX2 / AVX-512 paths agree
// bit for bit (tables capped through ZT_CPU_SIMD). Not here: accuracy against references
// (kernels_nn_test.cpp and the other kernels_*_test.cpp files).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/kernels.h"

#include "kernels_test_util.h"

namespace zt {
namespace {

using namespace test;

// ---------------------------------------------------------------------------------------------
// Element-position invariance: a buffer updated whole equals its two shards updated separately,
// bit for bit (shard boundary at 333, so the vector body of one is the tail of the other).

TEST_F(KernelsTest, ElementwiseKernelsArePositionInvariant) {
  const int64_t n = 1000, cut = 333;
  const auto x = random_floats(n, 90, -5.0f, 5.0f), g = random_floats(n, 91);
  auto whole_and_split = [&](const std::function<void(int64_t, int64_t, int)>& run) {
    run(0, n, 0);
    run(0, cut, 1);
    run(cut, n - cut, 1);
  };

  {  // adamw, both flavours
    for (bool decoupled : {true, false}) {
      AdamWArgs args;
      args.weight_decay = 0.1f;
      args.step = 7;
      args.decoupled = decoupled;
      std::vector<float> p[2] = {x, x}, m[2], v[2];
      for (int c = 0; c < 2; ++c) {
        m[c] = random_floats(n, 92);
        v[c] = random_floats(n, 93, 0.0f, 1.0f);
      }
      whole_and_split([&](int64_t off, int64_t len, int c) {
        k_.adamw(p[c].data() + off, g.data() + off, m[c].data() + off, v[c].data() + off, len,
                 args);
      });
      EXPECT_TRUE(same_bits(p[0], p[1]) && same_bits(m[0], m[1]) && same_bits(v[0], v[1]));
    }
  }
  {  // sgd with momentum
    SgdArgs args;
    args.momentum = 0.9f;
    args.weight_decay = 0.01f;
    std::vector<float> p[2] = {x, x}, b[2] = {g, g};
    whole_and_split([&](int64_t off, int64_t len, int c) {
      k_.sgd(p[c].data() + off, g.data() + off, b[c].data() + off, len, args);
    });
    EXPECT_TRUE(same_bits(p[0], p[1]) && same_bits(b[0], b[1]));
  }
  {  // gelu forward and backward
    std::vector<float> y[2] = {std::vector<float>(n), std::vector<float>(n)}, d[2] = {g, g};
    whole_and_split([&](int64_t off, int64_t len, int c) {
      k_.gelu_forward(y[c].data() + off, x.data() + off, len);
      k_.gelu_backward(d[c].data() + off, x.data() + off, g.data() + off, len);
    });
    EXPECT_TRUE(same_bits(y[0], y[1]) && same_bits(d[0], d[1]));
  }
  {  // cast fp32 -> fp16 / bf16 and back
    for (DType t : {DType::kF16, DType::kBF16}) {
      std::vector<uint16_t> h[2] = {std::vector<uint16_t>(n), std::vector<uint16_t>(n)};
      std::vector<float> back[2] = {std::vector<float>(n), std::vector<float>(n)};
      whole_and_split([&](int64_t off, int64_t len, int c) {
        k_.cast(h[c].data() + off, t, x.data() + off, DType::kF32, len);
        k_.cast(back[c].data() + off, DType::kF32, h[c].data() + off, t, len);
      });
      EXPECT_EQ(h[0], h[1]);
      EXPECT_TRUE(same_bits(back[0], back[1]));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Reductions: the same bits for any thread count.

TEST_F(KernelsTest, LayerNormBackwardDoesNotDependOnThreadCount) {
  const int64_t N = 200, C = 96;  // several row blocks
  auto x = random_floats(N * C, 100), w = random_floats(C, 101), b = random_floats(C, 102);
  const auto dout = random_floats(N * C, 103);
  std::vector<float> out(N * C), mean(N), rstd(N);
  k_.layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3}) {
    std::vector<float> dx(N * C, 0.5f), dw(C, 0.25f), db(C, -0.25f);
    with_threads(threads, [&] {
      k_.layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                            mean.data(), rstd.data(), N, C);
    });
    dx.insert(dx.end(), dw.begin(), dw.end());
    dx.insert(dx.end(), db.begin(), db.end());
    results.push_back(dx);
  }
  EXPECT_TRUE(same_bits(results[0], results[1]));
  EXPECT_TRUE(same_bits(results[0], results[2]));
}

TEST_F(KernelsTest, SumSquaresMatchesReferenceAndDoesNotDependOnThreadCount) {
  const int64_t n = 100003;  // 7 blocks of 16384, the last ragged
  const auto x = random_floats(n, 110, -3.0f, 3.0f);
  double ref = 0;
  for (float v : x) ref += double(v) * double(v);
  std::vector<double> got;
  for (int threads : {1, 2, 3})
    with_threads(threads, [&] { got.push_back(k_.sum_squares(x.data(), n)); });
  EXPECT_NEAR(got[0], ref, 1e-10 * ref);
  EXPECT_EQ(std::bit_cast<uint64_t>(got[0]), std::bit_cast<uint64_t>(got[1]));
  EXPECT_EQ(std::bit_cast<uint64_t>(got[0]), std::bit_cast<uint64_t>(got[2]));
  EXPECT_EQ(k_.sum_squares(x.data(), 0), 0.0);
  EXPECT_EQ(k_.sum_squares(x.data(), 3),
            double(x[0]) * x[0] + double(x[1]) * x[1] + double(x[2]) * x[2]);
}

// sum_squares' documented structure, spelled out in scalar code: blocks of 16384 elements, in a
// block element i added to double lane i % 8 in order, the 8 lanes added in a fixed tree, the
// block sums added in block order. Every instruction-set path and thread count gives exactly
// those bits, for fp32 and 16-bit operands, over enough blocks that the paths interleave blocks
// (4 at a time with AVX2 and AVX-512, 2 with SSE2) and a ragged last block.
TEST_F(KernelsTest, SumSquaresIsItsBlockStructureOnEveryPathAndThreadCount) {
  constexpr int64_t kBlock = 16384;
  const int64_t n = 9 * kBlock + 777;
  const auto values = random_floats(n, 111, -3.0f, 3.0f);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    std::vector<uint16_t> narrow(n);
    std::vector<float> x = values;
    for (int64_t i = 0; i < n; ++i) {
      if (t == DType::kF16) x[i] = fp16_to_fp32(narrow[i] = fp32_to_fp16(values[i]));
      if (t == DType::kBF16) x[i] = bf16_to_fp32(narrow[i] = fp32_to_bf16(values[i]));
    }
    double expected = 0;
    for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
      double lanes[8] = {};
      for (int64_t i = b0; i < std::min(n, b0 + kBlock); ++i)
        lanes[(i - b0) % 8] += double(x[i]) * double(x[i]);
      for (int w = 4; w >= 1; w /= 2)
        for (int j = 0; j < w; ++j) lanes[j] += lanes[j + w];
      expected += lanes[0];
    }
    const ConstOperand operand =
        t == DType::kF32 ? ConstOperand(x.data(), t) : ConstOperand(narrow.data(), t);
    for (const char* level : simd_levels()) {
      auto k = kernels_capped_at(level);
      for (int threads : {1, 3}) {
        double got = 0;
        with_threads(threads, [&] { got = k->sum_squares(operand, n); });
        EXPECT_EQ(std::bit_cast<uint64_t>(got), std::bit_cast<uint64_t>(expected))
            << dtype_name(t) << ", path " << level << ", " << threads << " threads: " << got
            << " against " << expected;
      }
    }
  }
}

TEST_F(KernelsTest, ScatterAndAttentionGradientsDoNotDependOnThreadCount) {
  const int64_t B = 3, T = 16, C = 64, NH = 4, V = 11;
  std::vector<int32_t> tokens(B * T);
  for (int64_t i = 0; i < B * T; ++i) tokens[i] = int32_t((i * i) % V);
  const auto dout = random_floats(B * T * C, 120), qkv = random_floats(B * T * 3 * C, 121);
  std::vector<float> out(B * T * C), att(B * NH * T * T);
  k_.attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, nullptr);
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3}) {
    std::vector<float> dwte(V * C, 0.1f), dwpe(T * C, 0.2f), dqkv(B * T * 3 * C, 0.3f);
    with_threads(threads, [&] {
      k_.embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C, nullptr);
      k_.attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH, nullptr);
    });
    dwte.insert(dwte.end(), dwpe.begin(), dwpe.end());
    dwte.insert(dwte.end(), dqkv.begin(), dqkv.end());
    results.push_back(dwte);
  }
  EXPECT_TRUE(same_bits(results[0], results[1]));
  EXPECT_TRUE(same_bits(results[0], results[2]));
}

// ---------------------------------------------------------------------------------------------
// The SSE2, AVX2 and AVX-512 paths give the same bits (as many as this CPU has).

TEST_F(KernelsTest, InstructionSetPathsAgreeBitForBit) {
  const int64_t n = 1237, N = 37, C = 96, B = 2, T = 70, AC = 128, NH = 2, Vp = 3008, Vv = 3001;
  const auto x = random_floats(n, 140, -6.0f, 6.0f), g = random_floats(n, 141);
  const auto lx = random_floats(N * C, 142), lw = random_floats(C, 143), lb = random_floats(C, 144);
  const auto qkv = random_floats(B * T * 3 * AC, 145), dout = random_floats(B * T * AC, 146);
  const auto logits = random_floats(4 * Vp, 147, -5.0f, 5.0f);
  const std::vector<int32_t> targets = {0, 17, 3000, 1234};

  auto run_all = [&](Kernels& k) {
    std::vector<float> r(n);
    k.gelu_forward(r.data(), x.data(), n);
    std::vector<float> d = g;
    k.gelu_backward(d.data(), x.data(), g.data(), n);
    r.insert(r.end(), d.begin(), d.end());
    std::vector<float> p = x, m = g, v(n, 0.01f);
    AdamWArgs args;
    args.step = 3;
    args.weight_decay = 0.1f;
    k.adamw(p.data(), g.data(), m.data(), v.data(), n, args);
    r.insert(r.end(), p.begin(), p.end());
    std::vector<float> out(N * C), mean(N), rstd(N), dx(N * C), dw(C), db(C);
    k.layernorm_forward(out.data(), mean.data(), rstd.data(), lx.data(), lw.data(), lb.data(), N,
                        C);
    k.layernorm_backward(dx.data(), dw.data(), db.data(), out.data(), lx.data(), lw.data(),
                         mean.data(), rstd.data(), N, C);
    for (auto* part : {&out, &mean, &rstd, &dx, &dw, &db})
      r.insert(r.end(), part->begin(), part->end());
    std::vector<float> ao(B * T * AC), att(B * NH * T * T), dqkv(qkv.size());
    k.attention_forward(ao.data(), att.data(), qkv.data(), B, T, AC, NH, nullptr);
    k.attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, AC, NH, nullptr);
    for (auto* part : {&ao, &att, &dqkv}) r.insert(r.end(), part->begin(), part->end());
    std::vector<float> lg = logits, losses(4);
    k.softmax_cross_entropy(losses.data(), lg.data(), targets.data(), 4, Vv, Vp,
                            LogitsOutput::kGradient, 0.5f);
    for (auto* part : {&lg, &losses}) r.insert(r.end(), part->begin(), part->end());
    const double ss = k.sum_squares(x.data(), n);
    r.push_back(float(ss));
    r.push_back(float(ss - double(float(ss))));
    return r;
  };
  const auto reference = run_all(k_);
  for (const char* level : simd_levels()) {
    auto k = kernels_capped_at(level);
    EXPECT_TRUE(same_bits(run_all(*k), reference)) << "path " << level;
  }
}

}  // namespace
}  // namespace zt
