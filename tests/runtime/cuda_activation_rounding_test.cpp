// The CUDA back end's 16-bit activation tables (Device::kernels_for(fp16 / bf16), kernels.h
// "Precision") against its own fp32 table, on the GPU alone: every activation one of our kernels
// writes is the fp32 table's result rounded to the dtype by dtype.h, bit for bit, because the
// kernel rounds the value it stores (round_to_act, cuda_kernel_helpers.cuh) with the arithmetic
// before it unchanged; what stays fp32 (layer-norm mean and rstd, RMSNorm rstd, losses) has the
// fp32 table's bits; what a kernel does not write (rope's value heads, the rest of the rows of
// the per-head RMSNorm, a loss's ignored row) keeps its bits, rounded or not; fp16 overflow
// becomes ±inf. Matmul's K = 0 product (the bias rows, rounded by their kernel) and its fp32 GEMM
// (rounded by a pass after cuBLAS) are checked the same way. The CPU's tables pass the same
// checks (activation_rounding*_test.cpp); parity of 16-bit tables with them is in
// cuda_kernels_test.cpp (residual, accumulate, fill: bitwise), cuda_lora_kernels_test.cpp and
// cuda_nn_kernels_test.cpp. Every test skips when no GPU is usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/kernels.h"

#include "cuda_nn_test_util.h"
#include "random_data.h"

namespace zt::cuda_nn_test {
namespace {

using test::random_floats;

constexpr DType k16BitTypes[] = {DType::kF16, DType::kBF16};
constexpr float kInf = std::numeric_limits<float>::infinity();

using Contents = std::vector<std::vector<float>>;
using Op = std::function<void(Kernels&, const std::vector<float*>&)>;

std::string name_of(DType t) { return std::string(dtype_name(t)); }

// got == want bit for bit, naming the first mismatches with their bit patterns.
void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < got.size() && reported < 5; ++i) {
    if (std::bit_cast<uint32_t>(got[i]) == std::bit_cast<uint32_t>(want[i])) continue;
    ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << " (0x" << std::hex
                  << std::bit_cast<uint32_t>(got[i]) << "), want " << want[i] << " (0x"
                  << std::bit_cast<uint32_t>(want[i]) << std::dec << ")";
    ++reported;
  }
}

// Some element of x is not a value of t: a comparison with x rounded is not vacuous.
bool has_unrounded(const std::vector<float>& x, DType t) { return !same_bits(x, rounded_to(x, t)); }

// x with [begin, begin + len) of every row of `stride` rounded to t (the parts a kernel writes).
std::vector<float> rounded_in_rows(std::vector<float> x, DType t, int64_t stride, int64_t begin,
                                   int64_t len) {
  for (size_t row = 0; row < x.size() / stride; ++row) {
    const auto first = x.begin() + static_cast<int64_t>(row) * stride + begin;
    const std::vector<float> part = rounded_to(std::vector<float>(first, first + len), t);
    std::copy(part.begin(), part.end(), first);
  }
  return x;
}

class CudaActivationRoundingTest : public CudaNnKernelsTest {
 protected:
  // `op` run by the GPU's table for `act` on device copies of `starts` (one buffer each, op
  // gets their pointers in order); the buffers' contents after it.
  Contents run(DType act, const Contents& starts, const Op& op) {
    std::vector<Buffer> buffers;
    std::vector<float*> pointers;
    for (const std::vector<float>& start : starts) {
      const size_t bytes = start.size() * sizeof(float);
      buffers.push_back(gpu_dev_->alloc(std::max<size_t>(bytes, 4), MemCategory::kOther));
      gpu_dev_->copy_from_host(buffers.back().data(), start.data(), bytes);
      pointers.push_back(buffers.back().as<float>());
    }
    op(gpu_dev_->kernels_for(act), pointers);
    Contents after;
    for (size_t i = 0; i < starts.size(); ++i) {
      after.emplace_back(starts[i].size());
      gpu_dev_->copy_to_host(after.back().data(), buffers[i].data(),
                             starts[i].size() * sizeof(float));
    }
    return after;
  }

  // `op` on the fp32 table and on t's from the same `starts`: buffer i of t's run must be the
  // fp32 run's rounded to t where rounded[i], the fp32 run's bits elsewhere; each rounded
  // buffer of the fp32 run must hold values t cannot (so the check is not vacuous).
  void expect_fp32_result_rounded(DType t, const Contents& starts, const std::vector<bool>& rounded,
                                  const Op& op, const std::string& what) {
    ASSERT_EQ(starts.size(), rounded.size()) << what;
    const Contents f32 = run(DType::kF32, starts, op), act = run(t, starts, op);
    for (size_t i = 0; i < starts.size(); ++i) {
      const std::string name = what + " " + name_of(t) + " output " + std::to_string(i);
      if (!rounded[i]) {
        expect_same_bits(act[i], f32[i], name + " (kept in fp32)");
        continue;
      }
      EXPECT_TRUE(has_unrounded(f32[i], t)) << name;
      expect_same_bits(act[i], rounded_to(f32[i], t), name);
    }
  }
};

// ---------------------------------------------------------------------------------------------
// Element-wise kernels (cuda_elementwise_kernels.cu).

TEST_F(CudaActivationRoundingTest, ElementWiseOutputsAreTheFp32ResultRounded) {
  const int64_t N = 331, F = 301, n = N * F;  // swiglu's rows: every element of out is written
  for (DType t : k16BitTypes) {
    const std::vector<float> x = rounded_to(random_floats(n, 1, -4.0f, 4.0f), t);
    const std::vector<float> y = rounded_to(random_floats(n, 2), t);
    const std::vector<float> gate_up = rounded_to(random_floats(2 * n, 3, -8.0f, 8.0f), t);
    const std::vector<float> dgate_up = rounded_to(random_floats(2 * n, 4), t);
    const std::vector<float> garbage = random_floats(n, 5);  // an output's earlier contents
    expect_fp32_result_rounded(
        t, {x, garbage}, {false, true},
        [&](Kernels& k, const auto& p) { k.gelu_forward(p[1], p[0], n); }, "gelu_forward");
    expect_fp32_result_rounded(
        t, {x, y, y}, {false, false, true},
        [&](Kernels& k, const auto& p) { k.gelu_backward(p[2], p[0], p[1], n); }, "gelu_backward");
    expect_fp32_result_rounded(
        t, {gate_up, garbage}, {false, true},
        [&](Kernels& k, const auto& p) { k.swiglu_forward(p[1], p[0], N, F); }, "swiglu_forward");
    expect_fp32_result_rounded(
        t, {gate_up, y, dgate_up}, {false, false, true},
        [&](Kernels& k, const auto& p) { k.swiglu_backward(p[2], p[0], p[1], N, F); },
        "swiglu_backward");
    expect_fp32_result_rounded(
        t, {x, y, garbage}, {false, false, true},
        [&](Kernels& k, const auto& p) { k.residual_forward(p[2], p[0], p[1], n); }, "residual");
    expect_fp32_result_rounded(
        t, {x, y}, {true, false},
        [&](Kernels& k, const auto& p) { k.residual_forward(p[0], p[0], p[1], n); },
        "residual in place");
    expect_fp32_result_rounded(
        t, {y, x}, {true, false}, [&](Kernels& k, const auto& p) { k.accumulate(p[0], p[1], n); },
        "accumulate");
  }
}

// fill rounds its value once per launch; its NaN keeps the payload dtype.h keeps.
TEST_F(CudaActivationRoundingTest, FillStoresTheValueRounded) {
  const int64_t n = 1001;
  const std::vector<float> start = random_floats(n, 6);
  for (DType t : k16BitTypes)
    for (float value : {0.1f, -0.0f, 1e5f, -1e-30f, std::bit_cast<float>(0x7fc12345u)}) {
      const Contents f32 = run(DType::kF32, {start}, [&](Kernels& k, const auto& p) {
        k.fill(p[0] + 3, value, n - 5);  // the first 3 and last 2 untouched
      });
      const Contents act =
          run(t, {start}, [&](Kernels& k, const auto& p) { k.fill(p[0] + 3, value, n - 5); });
      expect_same_bits(act[0], rounded_in_rows(f32[0], t, n, 3, n - 5),
                       "fill " + std::to_string(value) + " " + name_of(t));
    }
}

// bf16 has fp32's range: overflow is fp16's alone.
TEST_F(CudaActivationRoundingTest, Fp16OverflowBecomesInf) {
  const std::vector<float> a = {40000.0f, -40000.0f, 30000.0f}, b = {30000.0f, -30000.0f, 0.0f};
  const Contents residual =
      run(DType::kF16, {a, b, {0.0f, 0.0f, 0.0f}},
          [](Kernels& k, const auto& p) { k.residual_forward(p[2], p[0], p[1], 3); });
  const Contents accumulate =
      run(DType::kF16, {a, b}, [](Kernels& k, const auto& p) { k.accumulate(p[1], p[0], 3); });
  for (const std::vector<float>& sum : {residual[2], accumulate[1]}) {
    EXPECT_EQ(sum[0], kInf);
    EXPECT_EQ(sum[1], -kInf);
    EXPECT_EQ(sum[2], 30000.0f);
  }
}

// In place on the q and k heads of qkv rows: those are the fp32 result rounded, the value heads
// (here holding values no 16-bit type has) keep their bits.
TEST_F(CudaActivationRoundingTest, RopeRoundsTheQueryAndKeyHeadsOnly) {
  const int64_t B = 2, T = 37, NH = 4, NKV = 2, hd = 32, R = (NH + 2 * NKV) * hd;
  const std::vector<float> qkv = random_floats(B * T * R, 7, -2.0f, 2.0f);
  for (DType t : k16BitTypes)
    for (float sign : {1.0f, -1.0f}) {
      const std::string what = (sign > 0 ? "rope_forward " : "rope_backward ") + name_of(t);
      const std::vector<float> start = rounded_in_rows(qkv, t, R, 0, (NH + NKV) * hd);
      const Op op = [&](Kernels& k, const auto& p) {
        if (sign > 0) {
          k.rope_forward(p[0], B, T, NH, NKV, hd, 10000.0f, nullptr);
        } else {
          k.rope_backward(p[0], B, T, NH, NKV, hd, 10000.0f, nullptr);
        }
      };
      const Contents f32 = run(DType::kF32, {start}, op), act = run(t, {start}, op);
      EXPECT_TRUE(has_unrounded(f32[0], t)) << what;
      expect_same_bits(act[0], rounded_in_rows(f32[0], t, R, 0, (NH + NKV) * hd), what);
    }
}

// ---------------------------------------------------------------------------------------------
// Embedding, norms, cross-entropy (cuda_nn_kernels.cu).

TEST_F(CudaActivationRoundingTest, EmbeddingOutputIsTheFp32ResultRounded) {
  const int64_t B = 2, T = 9, C = 40, V = 31;
  const std::vector<int32_t> tokens = random_tokens(B * T, int32_t(V), 8);
  const std::vector<float> wte = random_floats(V * C, 9), wpe = random_floats(T * C, 10);
  Buffer device_tokens = gpu_dev_->alloc(tokens.size() * sizeof(int32_t), MemCategory::kOther);
  gpu_dev_->copy_from_host(device_tokens.data(), tokens.data(), tokens.size() * sizeof(int32_t));
  const int32_t* tok = device_tokens.as<int32_t>();
  for (DType t : k16BitTypes)
    for (bool positions : {true, false})
      expect_fp32_result_rounded(
          t, {wte, wpe, random_floats(B * T * C, 11)}, {false, false, true},
          [&](Kernels& k, const auto& p) {
            k.embedding_forward(p[2], tok, p[0], positions ? p[1] : nullptr, B, T, C, nullptr);
          },
          positions ? "embedding wte + wpe" : "embedding wte");
}

TEST_F(CudaActivationRoundingTest, NormsRoundOutAndDinpAndKeepTheirStatisticsInFp32) {
  const int64_t N = 77, C = 61;
  for (DType t : k16BitTypes) {
    const std::vector<float> inp = rounded_to(random_floats(N * C, 12, -2.0f, 3.0f), t);
    const std::vector<float> dout = rounded_to(random_floats(N * C, 13), t);
    const std::vector<float> dinp = rounded_to(random_floats(N * C, 14), t);
    const std::vector<float> w = random_floats(C, 15, 0.5f, 1.5f), b = random_floats(C, 16);
    const std::vector<float> out = random_floats(N * C, 17), stats = random_floats(N, 18);
    // Backward reads the statistics forward wrote; any fp32 values do here.
    const std::vector<float> mean = random_floats(N, 19), rstd = random_floats(N, 20, 0.5f, 2.0f);
    expect_fp32_result_rounded(
        t, {inp, w, b, out, stats, stats}, {false, false, false, true, false, false},
        [&](Kernels& k, const auto& p) {
          k.layernorm_forward(p[3], p[4], p[5], p[0], p[1], p[2], N, C);
        },
        "layernorm_forward");
    expect_fp32_result_rounded(
        t, {inp, w, dout, mean, rstd, dinp, random_floats(C, 21), random_floats(C, 22)},
        {false, false, false, false, false, true, false, false},
        [&](Kernels& k, const auto& p) {
          k.layernorm_backward(p[5], p[6], p[7], p[2], p[0], p[1], p[3], p[4], N, C);
        },
        "layernorm_backward");
    expect_fp32_result_rounded(
        t, {inp, w, out, stats}, {false, false, true, false},
        [&](Kernels& k, const auto& p) { k.rmsnorm_forward(p[2], p[3], p[0], p[1], N, C, 1e-6f); },
        "rmsnorm_forward");
    expect_fp32_result_rounded(
        t, {inp, w, dout, rstd, dinp, random_floats(C, 23)},
        {false, false, false, false, true, false},
        [&](Kernels& k, const auto& p) {
          k.rmsnorm_backward(p[4], p[5], p[2], p[0], p[1], p[3], N, C);
        },
        "rmsnorm_backward");
  }
}

// In place on H heads of hd at the start of rows R apart: the heads are the fp32 result rounded,
// the rest of each row (here values no 16-bit type has) keeps its bits; rstd stays fp32.
TEST_F(CudaActivationRoundingTest, HeadRmsnormRoundsTheHeadsOnly) {
  const int64_t N = 45, NH = 4, NKV = 2, hd = 20, R = (NH + 2 * NKV) * hd;
  for (DType t : k16BitTypes)
    for (bool keys : {false, true}) {
      const int64_t H = keys ? NKV : NH, at = keys ? NH * hd : 0;
      const std::string what = std::string(keys ? "k" : "q") + " heads " + name_of(t);
      const std::vector<float> x =
          rounded_in_rows(random_floats(N * R, 24, -2.0f, 2.0f), t, R, at, H * hd);
      const std::vector<float> w = random_floats(hd, 25, 0.5f, 1.5f);
      const std::vector<float> rstd = random_floats(N * H, 26, 0.5f, 2.0f);
      const Op forward = [&](Kernels& k, const auto& p) {
        k.head_rmsnorm_forward(p[0] + at, p[2], p[1], N, H, hd, R, 1e-6f);
      };
      const Op backward = [&](Kernels& k, const auto& p) {  // p[3]: forward's input
        k.head_rmsnorm_backward(p[0] + at, nullptr, p[3] + at, p[1], p[2], N, H, hd, R);
      };
      for (const Op* op : {&forward, &backward}) {
        const std::string name = what + (op == &forward ? " forward" : " backward");
        const Contents starts = {x, w, rstd, x};
        const Contents f32 = run(DType::kF32, starts, *op), act = run(t, starts, *op);
        EXPECT_TRUE(has_unrounded(f32[0], t)) << name;
        expect_same_bits(act[0], rounded_in_rows(f32[0], t, R, at, H * hd), name);
        expect_same_bits(act[2], f32[2], name + " rstd");
      }
    }
}

// The logits' gradient is the fp32 result rounded, the losses are the fp32 table's bits; an
// ignored target's row is zeros; kKeep leaves the logits as they were.
TEST_F(CudaActivationRoundingTest, CrossEntropyRoundsTheGradientNotTheLosses) {
  const int64_t N = 6, V = 37, Vp = 40;
  const std::vector<int32_t> targets = {0, 36, 5, -1, 17, 5};
  Buffer device_targets = gpu_dev_->alloc(N * sizeof(int32_t), MemCategory::kOther);
  gpu_dev_->copy_from_host(device_targets.data(), targets.data(), N * sizeof(int32_t));
  for (DType t : k16BitTypes) {
    const std::vector<float> logits = rounded_to(random_floats(N * Vp, 27, -4.0f, 4.0f), t);
    const std::vector<float> losses = random_floats(N, 28);
    for (LogitsOutput output : {LogitsOutput::kGradient, LogitsOutput::kKeep}) {
      const std::string what = output == LogitsOutput::kKeep ? "kKeep" : "kGradient";
      const Op op = [&](Kernels& k, const auto& p) {
        k.softmax_cross_entropy(p[1], p[0], device_targets.as<int32_t>(), N, V, Vp, output, 0.5f);
      };
      const Contents f32 = run(DType::kF32, {logits, losses}, op),
                     act = run(t, {logits, losses}, op);
      expect_same_bits(act[1], f32[1], what + " losses");
      EXPECT_TRUE(has_unrounded(f32[1], t)) << what;
      if (output == LogitsOutput::kKeep) {
        expect_same_bits(act[0], logits, what + " logits");
        continue;
      }
      EXPECT_TRUE(has_unrounded(f32[0], t)) << what;
      expect_same_bits(act[0], rounded_to(f32[0], t), what + " gradient");
      for (int64_t i = 3 * Vp; i < 4 * Vp; ++i) ASSERT_EQ(act[0][i], 0.0f) << "ignored row, " << i;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Matmul on the fp32 path of a 16-bit table (fp32 weights): with K = 0 the output is the bias
// rows, rounded by the kernel writing them; otherwise the fp32 GEMM's output, rounded after it.

TEST_F(CudaActivationRoundingTest, MatmulOnTheFp32PathIsTheFp32ResultRounded) {
  const int64_t M = 37, N = 61;
  for (DType t : k16BitTypes)
    for (int64_t K : {int64_t{0}, int64_t{30}}) {
      const std::vector<float> inp = rounded_to(random_floats(M * std::max<int64_t>(K, 1), 29), t);
      const std::vector<float> w = random_floats(std::max<int64_t>(K, 1) * N, 30);
      const std::vector<float> bias = random_floats(N, 31);
      for (bool with_bias : {true, false}) {
        if (!with_bias && K == 0) continue;  // zeros: nothing to round
        const std::string what = "matmul K=" + std::to_string(K) + (with_bias ? " bias" : "");
        expect_fp32_result_rounded(
            t, {inp, w, bias, random_floats(M * N, 32)}, {false, false, false, true},
            [&](Kernels& k, const auto& p) {
              k.matmul_forward(p[3], p[0], p[1], with_bias ? p[2] : nullptr, M, K, N,
                               WeightLayout::kInOut);
            },
            what);
      }
    }
}

}  // namespace
}  // namespace zt::cuda_nn_test
