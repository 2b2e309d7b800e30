// The CPU back end's LoRA entries (runtime/cpu/cpu_lora_kernels.cpp): add_columns against a plain
// float loop (strides, kWrite and kAdd, in place), and dropout's mask: the fraction kept, a
// function of the seed, shared by forward and backward, runtime/dropout_mask.h's function whatever
// the thread count or instruction set, p = 0 the identity. Not here: their activation rounding
// (activation_rounding_ops_test.cpp), the CUDA back end's (cuda_lora_kernels_test.cpp), frozen
// parameters' null gradients (kernels_frozen_params_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "runtime/dropout_mask.h"
#include "runtime/dtype.h"
#include "runtime/kernels.h"
#include "runtime/status.h"

#include "kernels_test_util.h"

namespace zt {
namespace {

using namespace test;

// SplitMix64's first output from state 0 (Vigna's reference splitmix64.c).
static_assert(splitmix64(0) == 0xe220a8397b1dcdafull);
static_assert(dropout_keep(1, 2, 0.0f));  // p = 0 keeps every element

// ---------------------------------------------------------------------------------------------
// add_columns

// dst (N, dst_stride) from column `at` and src (N, src_stride) from column 1: the plain loop.
std::vector<float> add_columns_ref(std::vector<float> dst, int64_t dst_stride, int64_t at,
                                   const std::vector<float>& src, int64_t src_stride, int64_t N,
                                   int64_t width, float scale, GradOutput output) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < width; ++j) {
      float& d = dst[n * dst_stride + at + j];
      const float v = scale * src[n * src_stride + 1 + j];
      d = output == GradOutput::kAdd ? d + v : v;
    }
  return dst;
}

TEST_F(KernelsTest, AddColumnsMatchesAPlainLoop) {
  const int64_t R = 20, at = 5, width = 7, S = 9;
  for (int64_t N : {int64_t{1}, int64_t{37}, int64_t{10000}}) {  // 10000: several row chunks
    for (GradOutput output : {GradOutput::kWrite, GradOutput::kAdd}) {
      for (float scale : {1.0f, 0.37f, -2.0f}) {
        SCOPED_TRACE(::testing::Message() << "N=" << N << " scale=" << scale
                                          << (output == GradOutput::kAdd ? " kAdd" : " kWrite"));
        const auto dst0 = random_floats(N * R, 1), src = random_floats(N * S, 2);
        auto dst = dst0;
        k_.add_columns(dst.data() + at, R, src.data() + 1, S, N, width, scale, output);
        EXPECT_TRUE(same_bits(dst, add_columns_ref(dst0, R, at, src, S, N, width, scale, output)));
      }
    }
  }
}

TEST_F(KernelsTest, AddColumnsInPlaceAndEmptyAndBadStrides) {
  const int64_t N = 6, R = 10;
  const auto x0 = random_floats(N * R, 3);
  for (GradOutput output : {GradOutput::kWrite, GradOutput::kAdd}) {
    auto x = x0, want = x0;  // src is dst itself: x[2, 6) of each row scaled (or doubled-ish)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 2; j < 6; ++j) {
        const float v = 0.5f * x0[n * R + j];
        want[n * R + j] = output == GradOutput::kAdd ? x0[n * R + j] + v : v;
      }
    k_.add_columns(x.data() + 2, R, x.data() + 2, R, N, 4, 0.5f, output);
    EXPECT_TRUE(same_bits(x, want));
  }
  auto x = x0;
  k_.add_columns(x.data(), R, x0.data(), R, 0, 4, 3.0f, GradOutput::kWrite);  // no rows
  k_.add_columns(x.data(), R, x0.data(), R, N, 0, 3.0f, GradOutput::kWrite);  // no columns
  EXPECT_TRUE(same_bits(x, x0));
  EXPECT_THROW(k_.add_columns(x.data(), 3, x0.data(), R, N, 4, 1.0f, GradOutput::kAdd), Error);
  EXPECT_THROW(k_.add_columns(x.data(), R, x0.data(), 3, N, 4, 1.0f, GradOutput::kAdd), Error);
}

// ---------------------------------------------------------------------------------------------
// Dropout

// Forward's output by the header's mask, element by element.
std::vector<float> dropout_ref(const std::vector<float>& inp, float p, uint64_t seed) {
  const float k = 1.0f / (1.0f - p);
  std::vector<float> out(inp.size());
  for (size_t i = 0; i < inp.size(); ++i) out[i] = dropout_keep(seed, i, p) ? inp[i] * k : 0.0f;
  return out;
}

int64_t count_nonzero(const std::vector<float>& x) {
  int64_t kept = 0;
  for (float v : x) kept += v != 0.0f;
  return kept;
}

TEST_F(KernelsTest, DropoutKeepsAboutOneMinusPAndScalesWhatItKeeps) {
  const int64_t n = 100000;
  const auto inp = random_floats(n, 4, 0.5f, 1.5f);  // no zeros: a zero output is a drop
  for (float p : {0.05f, 0.1f, 0.5f, 0.9f}) {
    SCOPED_TRACE(p);
    std::vector<float> out(n);
    k_.dropout_forward(out.data(), inp.data(), n, p, 1234);
    EXPECT_TRUE(same_bits(out, dropout_ref(inp, p, 1234)));
    // Binomial(n, 1 - p): within 5 standard deviations.
    const double mean = n * (1.0 - p), sd = std::sqrt(n * p * (1.0 - p));
    EXPECT_NEAR(double(count_nonzero(out)), mean, 5 * sd);
    const float k = 1.0f / (1.0f - p);
    for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(out[i] == 0.0f || out[i] == inp[i] * k) << i;
  }
}

TEST_F(KernelsTest, DropoutMaskIsAFunctionOfTheSeed) {
  const int64_t n = 100000;
  const float p = 0.3f;
  const auto inp = random_floats(n, 5, 0.5f, 1.5f);
  std::vector<float> a(n), b(n), c(n), d(n);
  k_.dropout_forward(a.data(), inp.data(), n, p, 42);
  k_.dropout_forward(b.data(), inp.data(), n, p, 42);
  EXPECT_TRUE(same_bits(a, b));
  // Other seeds (a neighbour, the top bit): masks independent of seed 42's, so about
  // 2p(1-p) = 42% of the elements differ.
  for (uint64_t other : {uint64_t{43}, uint64_t{42} ^ (uint64_t{1} << 63)}) {
    k_.dropout_forward(c.data(), inp.data(), n, p, other);
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i) differ += (a[i] == 0.0f) != (c[i] == 0.0f);
    EXPECT_NEAR(double(differ) / n, 2 * p * (1 - p), 0.02) << other;
  }
  // In place (out = inp) gives the same bits.
  d = inp;
  k_.dropout_forward(d.data(), d.data(), n, p, 42);
  EXPECT_TRUE(same_bits(d, a));
}

TEST_F(KernelsTest, DropoutBackwardUsesTheForwardMaskAndAccumulates) {
  const int64_t n = 100003;
  const auto inp = random_floats(n, 6, 0.5f, 1.5f), dout = random_floats(n, 7),
             dinp0 = random_floats(n, 8);
  for (float p : {0.1f, 0.5f}) {
    SCOPED_TRACE(p);
    std::vector<float> out(n), dinp = dinp0, want(n);
    k_.dropout_forward(out.data(), inp.data(), n, p, 99);
    k_.dropout_backward(dinp.data(), dout.data(), n, p, 99);
    const float k = 1.0f / (1.0f - p);
    for (int64_t i = 0; i < n; ++i) want[i] = dinp0[i] + (out[i] != 0.0f ? dout[i] * k : 0.0f);
    EXPECT_TRUE(same_bits(dinp, want));
  }
}

TEST_F(KernelsTest, DropoutWithZeroPIsTheIdentity) {
  const int64_t n = 70001;
  const auto inp = random_floats(n, 9), dout = random_floats(n, 10), dinp0 = random_floats(n, 11);
  std::vector<float> out(n, 7.0f);
  k_.dropout_forward(out.data(), inp.data(), n, 0.0f, 5);
  EXPECT_TRUE(same_bits(out, inp));
  k_.dropout_forward(out.data(), out.data(), n, 0.0f, 5);  // in place
  EXPECT_TRUE(same_bits(out, inp));
  auto dinp = dinp0, want = dinp0;
  k_.dropout_backward(dinp.data(), dout.data(), n, 0.0f, 5);
  k_.accumulate(want.data(), dout.data(), n);
  EXPECT_TRUE(same_bits(dinp, want));
}

TEST_F(KernelsTest, DropoutBitsDoNotDependOnThreadsOrInstructionSet) {
  const int64_t n = 200003;  // several chunks of kElementGrain and a ragged tail
  const float p = 0.25f;
  const auto inp = random_floats(n, 12), dout = random_floats(n, 13), dinp0 = random_floats(n, 14);
  const auto want_out = dropout_ref(inp, p, 7);
  std::vector<float> want_dinp = dinp0;
  k_.dropout_backward(want_dinp.data(), dout.data(), n, p, 7);
  std::vector<std::unique_ptr<Kernels>> capped;
  for (const char* level : simd_levels()) capped.push_back(kernels_capped_at(level));
  for (int threads : {1, 2, 3}) {
    for (auto& k : capped) {
      with_threads(threads, [&] {
        std::vector<float> out(n), dinp = dinp0;
        k->dropout_forward(out.data(), inp.data(), n, p, 7);
        k->dropout_backward(dinp.data(), dout.data(), n, p, 7);
        EXPECT_TRUE(same_bits(out, want_out)) << threads << " threads";
        EXPECT_TRUE(same_bits(dinp, want_dinp)) << threads << " threads";
      });
    }
  }
}

TEST_F(KernelsTest, DropoutRejectsAProbabilityOutsideZeroToOne) {
  std::vector<float> x(4, 1.0f), y(4);
  for (float p : {1.0f, -0.1f, 2.0f, std::numeric_limits<float>::quiet_NaN()}) {
    EXPECT_THROW(k_.dropout_forward(y.data(), x.data(), 4, p, 1), Error) << p;
    EXPECT_THROW(k_.dropout_backward(y.data(), x.data(), 4, p, 1), Error) << p;
  }
}

}  // namespace
}  // namespace zt
