// ProfilingKernels (runtime/profiling_kernels.h): forwards to the base table unchanged (results
// bitwise equal to the base's on the same inputs), counts every call under the entry's name,
// and calls `synchronize` around each call; with a StreamTimer (a GPU's events; here a fake
// one), marks one span per call and fills the profile at flush(), calls that threw left out.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string_view>
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
    Outputs o{std::vector<float>(M * N),       std::vector<float>(M * K, 0.0f),
              std::vector<float>(K * N, 0.0f), std::vector<float>(N, 0.0f),
              std::vector<float>(M * N),       std::vector<float>(M * N),
              std::vector<uint16_t>(M * N)};
    for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
      k.matmul_forward(o.out.data(), inp.data(), weight.data(), bias.data(), M, K, N, layout);
      k.matmul_backward(o.dinp.data(), o.dweight.data(), o.dbias.data(), dout.data(), inp.data(),
                        weight.data(), M, K, N, layout);
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

// A StreamTimer that hands out 1 ms, 2 ms, 3 ms, ... and counts its calls.
class FakeTimer final : public StreamTimer {
 public:
  explicit FakeTimer(int& collects) : collects_(collects) {}
  void start() override {
    ASSERT_FALSE(open_);
    open_ = true;
  }
  void stop() override {
    ASSERT_TRUE(open_);
    open_ = false;
    ++spans_;
  }
  std::vector<double> collect() override {
    ++collects_;
    std::vector<double> seconds;
    for (int i = 0; i < spans_; ++i) seconds.push_back(1e-3 * double(++next_));
    spans_ = 0;
    return seconds;
  }

 private:
  int& collects_;
  bool open_ = false;
  int spans_ = 0, next_ = 0;
};

// A base whose fill throws (as a failed launch would): every other entry of
// runtime/kernel_entries.h forwards to `base`.
class ThrowingFill final : public Kernels {
 public:
  explicit ThrowingFill(Kernels& base) : base_(base) {}
#define ZT_KERNEL(ret, name, params, args, memory) \
  ret name params override {                       \
    fail_if_fill(#name);                           \
    return base_.name args;                        \
  }
#include "runtime/kernel_entries.h"

 private:
  static void fail_if_fill(std::string_view entry) {
    if (entry == "fill") throw std::runtime_error("launch failed");
  }
  Kernels& base_;
};

TEST(ProfilingKernels, StreamTimerSpansFillTheProfileAtFlush) {
  const std::unique_ptr<Kernels> cpu = make_cpu_kernels();
  ThrowingFill base(*cpu);
  int collects = 0;
  OpProfile profile;
  ProfilingKernels profiled(base, profile, std::make_unique<FakeTimer>(collects));
  const int64_t M = 3, K = 4, N = 5;
  const auto inp = random_floats(M * K, 1), weight = random_floats(K * N, 2);
  std::vector<float> out(M * N), want(M * N);
  profiled.matmul_forward(out.data(), inp.data(), weight.data(), nullptr, M, K, N,
                          WeightLayout::kInOut);                             // span 1: 1 ms
  EXPECT_THROW(profiled.fill(out.data(), 0.0f, M * N), std::runtime_error);  // span 2: dropped
  EXPECT_EQ(profiled.sum_squares(inp.data(), M * K), cpu->sum_squares(inp.data(), M * K));
  EXPECT_TRUE(profile.ops().empty()) << "nothing is read before flush";
  profiled.flush();
  EXPECT_EQ(collects, 1);
  ASSERT_EQ(profile.ops().size(), 2u);
  EXPECT_EQ(profile.ops().at("matmul_forward").calls, 1);
  EXPECT_DOUBLE_EQ(profile.ops().at("matmul_forward").seconds, 1e-3);
  EXPECT_EQ(profile.ops().at("sum_squares").calls, 1);
  EXPECT_DOUBLE_EQ(profile.ops().at("sum_squares").seconds, 3e-3);
  cpu->matmul_forward(want.data(), inp.data(), weight.data(), nullptr, M, K, N,
                      WeightLayout::kInOut);
  EXPECT_TRUE(same_bits(out, want));
  profiled.flush();  // nothing since: nothing added
  EXPECT_EQ(profile.ops().at("matmul_forward").calls, 1);
}

TEST(ProfilingKernels, CpuDeviceHasNoStreamTimer) {
  CpuDevice device;
  EXPECT_EQ(device.make_stream_timer(), nullptr);
}

}  // namespace
}  // namespace zt
