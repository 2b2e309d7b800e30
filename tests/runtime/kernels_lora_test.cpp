// The CPU back end's LoRA entries (runtime/cpu/cpu_lora_kernels.cpp): add_columns against a plain
// float loop (strides, kWrite and kAdd, in place). Not here: its activation rounding
// (activation_rounding_ops_test.cpp), the CUDA back end's (cuda_lora_kernels_test.cpp), frozen
// parameters' null gradients (kernels_frozen_params_test.cpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/kernels.h"
#include "runtime/status.h"

#include "kernels_test_util.h"

namespace zt {
namespace {

using namespace test;

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

}  // namespace
}  // namespace zt
