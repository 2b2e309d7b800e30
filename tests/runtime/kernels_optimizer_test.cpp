// The CPU back end's optimizers (runtime/cpu/cpu_optimizer_kernels.cpp): AdamW in both flavours
// and SGD against double-precision loops written here. Not here: their position invariance
// (kernels_determinism_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/kernels.h"

#include "kernels_test_util.h"

namespace zt {
namespace {

using namespace test;

// ---------------------------------------------------------------------------------------------
// Optimizers

TEST_F(KernelsTest, AdamWMatchesReference) {
  const int64_t n = 1001;
  for (int variant = 0; variant < 3; ++variant) {
    // AdamW, Adam with L2 decay, and AdamW without bias correction (DeepSpeed's
    // bias_correction: false).
    const bool decoupled = variant != 1, corrected = variant != 2;
    AdamWArgs args;
    args.bias_correction = corrected;
    args.lr = 1e-2f;
    args.weight_decay = 0.1f;
    args.grad_scale = 0.5f;
    args.decoupled = decoupled;
    auto p = random_floats(n, 70), m = std::vector<float>(n, 0.0f), v = m;
    auto rp = to_double(p), rm = to_double(m), rv = to_double(v);
    for (int64_t step = 1; step <= 3; ++step) {
      args.step = step;
      const auto g = random_floats(n, uint32_t(70 + step), -3.0f, 3.0f);
      k_.adamw(p.data(), g.data(), m.data(), v.data(), n, args);
      const double b1 = args.beta1, b2 = args.beta2;
      for (int64_t i = 0; i < n; ++i) {
        double gi = double(g[i]) * args.grad_scale;
        if (!decoupled) gi += args.weight_decay * rp[i];
        rm[i] = b1 * rm[i] + (1 - b1) * gi;
        rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
        const double mhat = corrected ? rm[i] / (1 - std::pow(b1, step)) : rm[i];
        const double vhat = corrected ? rv[i] / (1 - std::pow(b2, step)) : rv[i];
        rp[i] -= args.lr * (mhat / (std::sqrt(vhat) + args.eps) +
                            (decoupled ? args.weight_decay * rp[i] : 0.0));
      }
    }
    expect_close(p, rp, 1e-6, 1e-5,
                 !corrected  ? "adamw (no bias correction) param"
                 : decoupled ? "adamw param"
                             : "adam (L2) param");
    expect_close(m, rm, 1e-6, 1e-5, "adamw m");
    expect_close(v, rv, 1e-7, 1e-5, "adamw v");
  }
}

// The working copy written in the update's pass is cast's rounding of the updated parameters,
// bit for bit, for both 16-bit types, and the update itself is unchanged by it. fp32 values past
// fp16's range round to inf as cast's do.
TEST_F(KernelsTest, AdamWWritesTheWorkingCopyAsCastWould) {
  const int64_t n = 70001;  // several chunks, a ragged last one
  AdamWArgs args;
  args.lr = 1e-2f;
  args.weight_decay = 0.1f;
  for (DType t : {DType::kF16, DType::kBF16}) {
    auto p = random_floats(n, 75, -3.0f, 3.0f), m = std::vector<float>(n, 0.0f), v = m;
    p[5] = 1e6f;  // past fp16's largest finite value
    auto p_plain = p, m_plain = m, v_plain = v;
    const auto g = random_floats(n, 76);
    std::vector<uint16_t> working(n, 0xffff), want(n);
    k_.adamw(p.data(), g.data(), m.data(), v.data(), n, args, Operand(working.data(), t));
    k_.adamw(p_plain.data(), g.data(), m_plain.data(), v_plain.data(), n, args);
    k_.cast(want.data(), t, p_plain.data(), DType::kF32, n);
    EXPECT_EQ(std::memcmp(p.data(), p_plain.data(), n * sizeof(float)), 0) << dtype_name(t);
    EXPECT_EQ(std::memcmp(m.data(), m_plain.data(), n * sizeof(float)), 0) << dtype_name(t);
    EXPECT_EQ(std::memcmp(working.data(), want.data(), n * 2), 0) << dtype_name(t);
    if (t == DType::kF16) {
      EXPECT_TRUE(std::isinf(fp16_to_fp32(working[5])));
    }
  }
}

TEST_F(KernelsTest, SgdMatchesReference) {
  const int64_t n = 1001;
  for (float momentum : {0.0f, 0.9f}) {
    SgdArgs args;
    args.lr = 0.05f;
    args.momentum = momentum;
    args.weight_decay = 0.01f;
    args.grad_scale = 2.0f;
    auto p = random_floats(n, 80);
    std::vector<float> buf(n, 0.0f);
    auto rp = to_double(p), rb = to_double(buf);
    for (int step = 0; step < 3; ++step) {
      const auto g = random_floats(n, uint32_t(81 + step));
      k_.sgd(p.data(), g.data(), momentum != 0.0f ? buf.data() : nullptr, n, args);
      for (int64_t i = 0; i < n; ++i) {
        double gi = double(g[i]) * args.grad_scale + args.weight_decay * rp[i];
        if (momentum != 0.0f) gi = rb[i] = momentum * rb[i] + gi;
        rp[i] -= args.lr * gi;
      }
    }
    expect_close(p, rp, 1e-6, 1e-5, "sgd param");
  }
}

}  // namespace
}  // namespace zt
