// Activations stored in 16 bits on the GPU (kernels.h, Precision), the CUDA twin of
// activation_storage_test.cpp: every entry of a 16-bit CUDA table given its activation operands
// as device arrays of the table's dtype leaves in them what it leaves, as values, in fp32 device
// arrays holding the same values; so does a call that mixes the two (every other operand fp32,
// which the entries stage through CudaKernels::ActStage). Bit for bit for our own kernels
// (cuda_elementwise_kernels.cu, cuda_nn_kernels.cu, cuda_lora_kernels.cu: the same arithmetic on
// the same values, read and written in the operand's dtype), with the fp32 results beside them
// (layer-norm statistics, losses, norm and embedding weight gradients) bit for bit too. Within
// one step of the dtype's grid for matmul (cuBLASLt) and attention (cuDNN), whose algorithm may
// differ with the output's dtype, their fp32 weight gradients within relative_ulp. What the
// tables compute is tested in cuda_activation_rounding_test.cpp and the parity suites. Skipped
// without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "runtime/cuda/attention_path.h"
#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/kernels.h"

#include "activation_rounding_test_util.h"
#include "cuda_nn_test_util.h"
#include "random_data.h"

namespace zt::cuda_nn_test {
namespace {

using activation_rounding::narrowed;
using activation_rounding::relative_ulp;
using activation_rounding::widened;
using test::random_floats;

using Contents = std::vector<std::vector<float>>;
// An entry on `k`: its activation operands `a` (in the run's dtypes) and its fp32 buffers `f`.
using Op =
    std::function<void(Kernels& k, const std::vector<Operand>& a, const std::vector<float*>& f)>;

enum class Match { kBits, kOneStep };

// Where a 16-bit pattern sits on the dtype's number line (±0 one point): patterns one step
// apart are neighbouring values, one ulp apart.
int64_t ordinal(uint16_t h) { return (h & 0x8000u) ? -int64_t(h & 0x7fffu) : int64_t(h); }

class CudaActivationStorageTest : public CudaNnKernelsTest,
                                  public ::testing::WithParamInterface<DType> {
 protected:
  DType dtype() const { return GetParam(); }
  Kernels& table() { return gpu_dev_->kernels_for(dtype()); }

  // Values of the dtype: what activations hold under its table.
  std::vector<float> values(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    return rounded_to(random_floats(static_cast<size_t>(n), seed, lo, hi), dtype());
  }

  // x (values of t) as a device array of t.
  Buffer upload(const std::vector<float>& x, DType t) {
    Buffer b = gpu_dev_->alloc(std::max<size_t>(x.size() * dtype_size(t), 4), MemCategory::kOther);
    if (t == DType::kF32) {
      gpu_dev_->copy_from_host(b.data(), x.data(), x.size() * 4);
    } else {
      const std::vector<uint16_t> h = narrowed(x, t);
      gpu_dev_->copy_from_host(b.data(), h.data(), h.size() * 2);
    }
    return b;
  }
  std::vector<float> download(const Buffer& b, size_t n, DType t) {
    std::vector<float> x(n);
    if (t == DType::kF32) {
      gpu_dev_->copy_to_host(x.data(), b.data(), n * 4);
      return x;
    }
    std::vector<uint16_t> h(n);
    gpu_dev_->copy_to_host(h.data(), b.data(), n * 2);
    return widened(h, t);
  }

  // `op` on the table, activation buffer i given as a device array of types[i]; every buffer's
  // contents after it (activations first, as floats).
  Contents run(const std::vector<DType>& types, const Contents& act, const Contents& fp32,
               const Op& op) {
    std::vector<Buffer> held;
    std::vector<Operand> a;
    std::vector<float*> f;
    held.reserve(act.size() + fp32.size());
    for (size_t i = 0; i < act.size(); ++i) {
      held.push_back(upload(act[i], types[i]));
      a.emplace_back(held.back().data(), types[i]);
    }
    for (const std::vector<float>& x : fp32) {
      held.push_back(upload(x, DType::kF32));
      f.push_back(held.back().as<float>());
    }
    op(table(), a, f);
    Contents after;
    for (size_t i = 0; i < act.size(); ++i)
      after.push_back(download(held[i], act[i].size(), types[i]));
    for (size_t i = 0; i < fp32.size(); ++i)
      after.push_back(download(held[act.size() + i], fp32[i].size(), DType::kF32));
    return after;
  }

  // `op` run from the same buffers with the activations (rounded to the dtype first) as fp32
  // arrays, as arrays of the dtype, and, given two or more, mixed (even buffers in the dtype, odd
  // ones fp32). Every buffer must end holding the fp32 run's values (as `match` says), and some
  // activation must change.
  void expect_same(const std::string& what, Contents act, const Contents& fp32, const Op& op,
                   Match match = Match::kBits) {
    SCOPED_TRACE(what + " " + std::string(dtype_name(dtype())));
    for (std::vector<float>& x : act) x = rounded_to(x, dtype());
    std::vector<DType> wide(act.size(), DType::kF32), narrow(act.size(), dtype()), mixed = narrow;
    for (size_t i = 1; i < mixed.size(); i += 2) mixed[i] = DType::kF32;
    const Contents want = run(wide, act, fp32, op);
    bool changed = false;
    for (size_t i = 0; i < act.size(); ++i) changed |= !same_bits(want[i], act[i]);
    EXPECT_TRUE(changed) << "the op wrote no activation: the comparison would be vacuous";
    const auto check = [&](const std::vector<DType>& types, const std::string& name) {
      const Contents got = run(types, act, fp32, op);
      for (size_t i = 0; i < got.size(); ++i)
        expect_match(got[i], want[i], i < act.size(), match,
                     name + " operands, buffer " + std::to_string(i));
    };
    check(narrow, "16-bit");
    if (act.size() >= 2) check(mixed, "mixed");
  }

  void expect_match(const std::vector<float>& got, const std::vector<float>& want, bool activation,
                    Match match, const std::string& what) {
    if (match == Match::kBits) {
      EXPECT_TRUE(same_bits(got, want)) << what;
    } else if (!activation) {
      expect_close(got, want, relative_ulp(dtype()), what);
    } else {
      const std::vector<uint16_t> g = narrowed(got, dtype()), w = narrowed(want, dtype());
      int failures = 0;
      for (size_t i = 0; i < g.size() && failures < 5; ++i) {
        const bool nan = std::isnan(got[i]) || std::isnan(want[i]);
        if (nan ? std::isnan(got[i]) && std::isnan(want[i])
                : std::abs(ordinal(g[i]) - ordinal(w[i])) <= 1)
          continue;
        ADD_FAILURE() << what << "[" << i << "]: " << got[i] << ", want " << want[i];
        ++failures;
      }
    }
  }
};

TEST_P(CudaActivationStorageTest, MatmulForwardAndBackward) {
  const int64_t M = 9, K = 13, N = 11;
  const std::vector<float> w = values(K * N, 1), bias = random_floats(N, 2);
  const Buffer w32 = upload(w, DType::kF32), w16 = upload(w, dtype()),
               b32 = upload(bias, DType::kF32);
  for (bool weights16 : {false, true}) {
    const ConstOperand weight = weights16 ? ConstOperand(w16.data(), dtype()) : w32.as<float>();
    expect_same(
        "matmul forward", {values(M * N, 3), values(M * K, 4)}, {},
        [&](Kernels& k, const auto& a, const auto&) {
          k.matmul_forward(a[0], a[1], weight, b32.as<float>(), M, K, N, WeightLayout::kInOut);
        },
        Match::kOneStep);
    for (GradOutput output : {GradOutput::kAdd, GradOutput::kWrite})
      expect_same(
          "matmul backward", {values(M * K, 5), values(M * N, 6), values(M * K, 7)},
          {random_floats(K * N, 8), random_floats(N, 9)},
          [&](Kernels& k, const auto& a, const auto& f) {
            k.matmul_backward(a[0], f[0], f[1], a[1], a[2], weight, M, K, N, WeightLayout::kOutIn,
                              output);
          },
          Match::kOneStep);
  }
}

TEST_P(CudaActivationStorageTest, NormsAndActivationFunctions) {
  const int64_t N = 6, C = 40, n = N * C;
  const Mirror w = mirror(random_floats(C, 1)), b = mirror(random_floats(C, 2));
  const std::vector<float> mean = random_floats(N, 3), rstd = random_floats(N, 4, 0.5f, 2.0f);
  expect_same("layernorm", {values(n, 5), values(n, 6)}, {mean, rstd},
              [&](Kernels& k, const auto& a, const auto& f) {
                k.layernorm_forward(a[0], f[0], f[1], a[1], w.g(), b.g(), N, C);
              });
  // The statistics as inputs; the parameter gradients read dout and inp in their dtype.
  expect_same("layernorm backward", {values(n, 7), values(n, 8), values(n, 9)},
              {mean, rstd, random_floats(C, 10), random_floats(C, 11)},
              [&](Kernels& k, const auto& a, const auto& f) {
                k.layernorm_backward(a[0], f[2], f[3], a[1], a[2], w.g(), f[0], f[1], N, C);
              });
  expect_same("rmsnorm", {values(n, 12), values(n, 13)}, {rstd},
              [&](Kernels& k, const auto& a, const auto& f) {
                k.rmsnorm_forward(a[0], f[0], a[1], w.g(), N, C, 1e-6f);
              });
  expect_same("rmsnorm backward", {values(n, 14), values(n, 15), values(n, 16)},
              {rstd, random_floats(C, 17)}, [&](Kernels& k, const auto& a, const auto& f) {
                k.rmsnorm_backward(a[0], f[1], a[1], a[2], w.g(), f[0], N, C);
              });
  // Two heads of 8 at the start of rows of 40: the rest of each row must be kept.
  const std::vector<float> head_rstd = random_floats(N * 2, 18, 0.5f, 2.0f);
  expect_same("head rmsnorm", {values(n, 19)}, {std::vector<float>(N * 2)},
              [&](Kernels& k, const auto& a, const auto& f) {
                k.head_rmsnorm_forward(a[0], f[0], w.g(), N, 2, 8, C, 1e-6f);
              });
  expect_same("head rmsnorm backward", {values(n, 20), values(n, 21)},
              {head_rstd, random_floats(8, 22)}, [&](Kernels& k, const auto& a, const auto& f) {
                k.head_rmsnorm_backward(a[0], f[1], a[1], w.g(), f[0], N, 2, 8, C);
              });
  expect_same("gelu", {values(n, 23), values(n, 24, -4.0f, 4.0f)}, {},
              [&](Kernels& k, const auto& a, const auto&) { k.gelu_forward(a[0], a[1], n); });
  expect_same(
      "gelu backward", {values(n, 25), values(n, 26, -4.0f, 4.0f), values(n, 27)}, {},
      [&](Kernels& k, const auto& a, const auto&) { k.gelu_backward(a[0], a[1], a[2], n); });
  expect_same(
      "swiglu", {values(n / 2, 28), values(n, 29, -8.0f, 8.0f)}, {},
      [&](Kernels& k, const auto& a, const auto&) { k.swiglu_forward(a[0], a[1], N, C / 2); });
  expect_same("swiglu backward", {values(n, 30), values(n, 31, -8.0f, 8.0f), values(n / 2, 32)}, {},
              [&](Kernels& k, const auto& a, const auto&) {
                k.swiglu_backward(a[0], a[1], a[2], N, C / 2);
              });
}

TEST_P(CudaActivationStorageTest, AttentionAndRope) {
  set_attention_path(AttentionPath::kReference);
  const int64_t B = 2, T = 7, NH = 4, NKV = 2, hd = 8, R = (NH + 2 * NKV) * hd;
  expect_same(
      "attention", {values(B * T * NH * hd, 1), values(B * NH * T * T, 2), values(B * T * R, 3)},
      {},
      [&](Kernels& k, const auto& a, const auto&) {
        k.gqa_attention_forward(a[0], a[1], a[2], B, T, NH, NKV, hd, nullptr, 3);
      },
      Match::kOneStep);
  // The backward reads probabilities the forward wrote: computed here on the fp32 arrays.
  const std::vector<float> qkv = values(B * T * R, 4);
  const std::vector<float> att =
      run({DType::kF32, DType::kF32, DType::kF32},
          {std::vector<float>(B * T * NH * hd), std::vector<float>(B * NH * T * T), qkv}, {},
          [&](Kernels& k, const auto& a, const auto&) {
            k.gqa_attention_forward(a[0], a[1], a[2], B, T, NH, NKV, hd, nullptr, 0);
          })[1];
  expect_same(
      "attention backward", {values(B * T * R, 5), values(B * T * NH * hd, 6), qkv, att}, {},
      [&](Kernels& k, const auto& a, const auto&) {
        k.gqa_attention_backward(a[0], a[1], a[2], a[3], B, T, NH, NKV, hd, nullptr, 0);
      },
      Match::kOneStep);
  const RopeFrequencies rope{10000.0f};
  const Mirror positions = mirror(std::vector<int32_t>{3, 0, 1, 2, 9, 5, 6, 0, 1, 2, 3, 4, 5, 6});
  for (const int32_t* pos : {static_cast<const int32_t*>(nullptr), positions.gi()}) {
    expect_same("rope", {values(B * T * R, 7, -2.0f, 2.0f)}, {},
                [&](Kernels& k, const auto& a, const auto&) {
                  k.rope_forward(a[0], B, T, NH, NKV, hd, rope, pos);
                });
    expect_same("rope backward", {values(B * T * R, 8, -2.0f, 2.0f)}, {},
                [&](Kernels& k, const auto& a, const auto&) {
                  k.rope_backward(a[0], B, T, NH, NKV, hd, rope, pos);
                });
  }
}

// Under `auto` at a shape cuDNN takes: att is cuDNN's own record (fp32, kept as written), not an
// activation, so it is the same device buffer in every run, and is not compared.
TEST_P(CudaActivationStorageTest, AttentionThroughCudnn) {
  set_attention_path(AttentionPath::kAuto);
  const int64_t B = 1, T = 128, NH = 2, NKV = 1, hd = 64, R = (NH + 2 * NKV) * hd;
  const AttentionRecord record = table().attention_record(B, T, NH, NKV, hd, false, 0);
  if (record.packable) GTEST_SKIP() << "cuDNN does not take this shape on this machine";
  const Buffer att = gpu_dev_->alloc(record.floats * sizeof(float), MemCategory::kOther);
  const std::vector<float> qkv = values(B * T * R, 1);
  expect_same(
      "cudnn attention", {values(B * T * NH * hd, 2), qkv}, {},
      [&](Kernels& k, const auto& a, const auto&) {
        k.gqa_attention_forward(a[0], att.as<float>(), a[1], B, T, NH, NKV, hd, nullptr, 0);
      },
      Match::kOneStep);
  // att now holds the record of qkv (each run above wrote it from the same values).
  expect_same(
      "cudnn attention backward", {values(B * T * R, 3), values(B * T * NH * hd, 4), qkv}, {},
      [&](Kernels& k, const auto& a, const auto&) {
        k.gqa_attention_backward(a[0], a[1], a[2], att.as<float>(), B, T, NH, NKV, hd, nullptr, 0);
      },
      Match::kOneStep);
}

TEST_P(CudaActivationStorageTest, ElementwiseLossEmbeddingAndAdapters) {
  const int64_t n = 300;
  expect_same(
      "residual into its first input", {values(n, 1), values(n, 2)}, {},
      [&](Kernels& k, const auto& a, const auto&) { k.residual_forward(a[0], a[0], a[1], n); });
  expect_same(
      "residual", {values(n, 3), values(n, 4), values(n, 5)}, {},
      [&](Kernels& k, const auto& a, const auto&) { k.residual_forward(a[0], a[1], a[2], n); });
  expect_same("accumulate", {values(n, 6), values(n, 7)}, {},
              [&](Kernels& k, const auto& a, const auto&) { k.accumulate(a[0], a[1], n); });
  expect_same("fill", {values(n, 8)}, {},
              [&](Kernels& k, const auto& a, const auto&) { k.fill(a[0].at(3), 0.1f, n - 5); });
  for (float p : {0.25f, 0.0f}) {
    expect_same(
        "dropout", {values(n, 9), values(n, 10, -4.0f, 4.0f)}, {},
        [&](Kernels& k, const auto& a, const auto&) { k.dropout_forward(a[0], a[1], n, p, 42); });
    expect_same(
        "dropout backward", {values(n, 11), values(n, 12)}, {},
        [&](Kernels& k, const auto& a, const auto&) { k.dropout_backward(a[0], a[1], n, p, 42); });
  }
  // Columns 3..8 of rows of 12 written: the rest kept.
  for (GradOutput output : {GradOutput::kAdd, GradOutput::kWrite})
    expect_same("add_columns", {values(5 * 12, 13), values(5 * 6, 14)}, {},
                [&](Kernels& k, const auto& a, const auto&) {
                  k.add_columns(a[0].at(3), 12, a[1], 6, 5, 6, 0.5f, output);
                });

  const int64_t N = 5, V = 30, Vp = 32, C = 16;
  const Mirror targets = mirror(std::vector<int32_t>{3, -1, 29, 0, 7});
  const Mirror tokens = mirror(std::vector<int32_t>{1, 4, 1, 0, 2});
  const Mirror positions = mirror(std::vector<int32_t>{2, 0, 2, 1, 0});
  const Mirror wte = mirror(random_floats(V * C, 15)), wpe = mirror(random_floats(N * C, 16));
  for (LogitsOutput output : {LogitsOutput::kGradient, LogitsOutput::kKeep})
    expect_same("cross-entropy", {values(N * Vp, 17, -4.0f, 4.0f)}, {std::vector<float>(N)},
                [&](Kernels& k, const auto& a, const auto& f) {
                  k.softmax_cross_entropy(f[0], a[0], targets.gi(), N, V, Vp, output, 0.2f);
                  // kKeep writes no activation: a fill does, so that the vacuity check holds
                  // (the losses are what this run compares).
                  if (output == LogitsOutput::kKeep) k.fill(a[0], 0.0f, 1);
                });
  expect_same("embedding", {values(N * C, 18)}, {}, [&](Kernels& k, const auto& a, const auto&) {
    k.embedding_forward(a[0], tokens.gi(), wte.g(), wpe.g(), 1, N, C, nullptr);
  });
  // dwte by token and dwpe by position (sorted row sums), then dwpe by row (its own kernel).
  for (const int32_t* pos : {positions.gi(), static_cast<const int32_t*>(nullptr)})
    expect_same("embedding backward", {values(N * C, 19)},
                {random_floats(V * C, 20), random_floats(N * C, 21)},
                [&](Kernels& k, const auto& a, const auto& f) {
                  k.embedding_backward(f[0], f[1], a[0], tokens.gi(), 1, N, C, pos);
                  k.fill(a[0], 0.0f, N * C);  // so that the comparison sees a write
                });
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaActivationStorageTest,
                         ::testing::Values(DType::kBF16, DType::kF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace zt::cuda_nn_test
