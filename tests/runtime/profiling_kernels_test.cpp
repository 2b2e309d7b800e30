// ProfilingKernels (runtime/profiling_kernels.h): forwards to the base table unchanged (results
// bitwise equal to the base's on the same inputs), counts every call under the entry's name,
// and calls `synchronize` around each call.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/cpu/cpu_device.h"
#include "runtime/profiling_kernels.h"

#include "kernels_test_util.h"
#include "random_data.h"

namespace zt {
namespace {

using test::random_floats;
using test::same_bits;

TEST(ProfilingKernels, ForwardsBitwiseAndCountsCalls) {
  const std::unique_ptr<Kernels> base = make_cpu_kernels();
  int syncs = 0;
  OpProfile profile;
  ProfilingKernels profiled(*base, profile, [&] { ++syncs; });
  const int64_t M = 24, K = 40, N = 56;
  const auto inp = random_floats(M * K, 1), weight = random_floats(K * N, 2),
             bias = random_floats(N, 3), dout = random_floats(M * N, 4);

  // The same sequence on the base and through the decorator, each on its own outputs.
  struct Outputs {
    std::vector<float> out, dinp, dweight, dbias, gelu, half_back;
    std::vector<uint16_t> half;
    double norm = 0.0;
  };
  auto run = [&](Kernels& k) {
    Outputs o{std::vector<float>(M * N), std::vector<float>(M * K, 0.0f),
              std::vector<float>(K * N, 0.0f), std::vector<float>(N, 0.0f),
              std::vector<float>(M * N), std::vector<float>(M * N),
              std::vector<uint16_t>(M * N)};
    for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
      k.matmul_forward(o.out.data(), inp.data(), weight.data(), bias.data(), M, K, N, layout);
      k.matmul_backward(o.dinp.data(), o.dweight.data(), o.dbias.data(), dout.data(),
                        inp.data(), weight.data(), M, K, N, layout);
    }
    k.gelu_forward(o.gelu.data(), o.out.data(), M * N);
    k.cast(o.half.data(), DType::kBF16, o.gelu.data(), DType::kF32, M * N);
    k.cast(o.half_back.data(), DType::kF32, o.half.data(), DType::kBF16, M * N);
    o.norm = k.sum_squares(o.dweight.data(), K * N);
    return o;
  };
  const Outputs want = run(*base), got = run(profiled);
  EXPECT_TRUE(same_bits(got.out, want.out));
  EXPECT_TRUE(same_bits(got.dinp, want.dinp));
  EXPECT_TRUE(same_bits(got.dweight, want.dweight));
  EXPECT_TRUE(same_bits(got.dbias, want.dbias));
  EXPECT_TRUE(same_bits(got.gelu, want.gelu));
  EXPECT_EQ(got.half, want.half);
  EXPECT_TRUE(same_bits(got.half_back, want.half_back));
  EXPECT_EQ(std::bit_cast<uint64_t>(got.norm), std::bit_cast<uint64_t>(want.norm));

  const auto& ops = profiled.profile().ops();
  ASSERT_EQ(ops.size(), 5u);  // matmul_forward, matmul_backward, gelu_forward, cast, sum_squares
  EXPECT_EQ(ops.at("matmul_forward").calls, 2);
  EXPECT_EQ(ops.at("matmul_backward").calls, 2);
  EXPECT_EQ(ops.at("gelu_forward").calls, 1);
  EXPECT_EQ(ops.at("cast").calls, 2);
  EXPECT_EQ(ops.at("sum_squares").calls, 1);
  double total = 0.0;
  for (const auto& [name, t] : ops) {
    EXPECT_GE(t.seconds, 0.0) << name;
    total += t.seconds;
  }
  EXPECT_DOUBLE_EQ(profiled.profile().total_seconds(), total);
  EXPECT_EQ(syncs, 2 * 8);  // before each of the two clock reads of the 8 calls

  profiled.profile().reset();
  EXPECT_TRUE(profiled.profile().ops().empty());
}

}  // namespace
}  // namespace zt
