// Causal attention through cuDNN's fused SDPA (runtime/cuda/cudnn_attention.h) against the
// materialised reference kernels on the same GPU table and against a float64 host reference:
// bf16 and fp16 tables, multi-head and grouped-query, forward (out, the softmax statistics left
// in att) and backward (dqkv, accumulated); determinism; the calls cuDNN is not built for (packed
// documents, sliding windows) falling back under `auto` to the reference's bits, and refused by
// name under `cudnn`; attention_record, the size of att a layer allocates (and the memory
// planner's planned_attention_record, the same by the rules alone), and its survival in
// a 16-bit run's activation store. The cuDNN tests run under the `cudnn` path, so a refusal on the
// GPU fails them rather than testing the fallback twice. Skipped without a GPU, or built without
// cuDNN.
//
// Tolerances, with u the unit roundoff of the table's dtype (2^-8 bf16, 2^-11 fp16), each
// |got - want| <= rtol·(|want| + max|want|) (expect_close; the floor absorbs cancellation):
//   out vs reference and vs float64: 4u. Both paths compute the scores and the softmax in fp32
//     from the same 16-bit inputs and round O once; cuDNN also rounds P to 16 bits before P·V
//     (u per term, random signs, |Σ p·v| error <= u·max|v|), and each side's final rounding is
//     u: 2u to 3u in all, 4u leaves room for the fp32 exponentials' order.
//   dqkv vs reference: 8u. cuDNN rounds P and dS to 16 bits before the gradient GEMMs, forms
//     rowsum(dO ∘ O) from the 16-bit O, and rounds dQ, dK, dV to 16 bits before our add rounds
//     the sum again; about 4u of terms, doubled for the cancellation in dP - rowsum.
//   stats vs float64 log-sum-exp: 1e-5 (fp32 arithmetic on exact 16-bit inputs).
// A wrong layout, head mapping or mask gives errors of the order of max|want|.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/activation_store.h"
#include "runtime/cuda/attention_path.h"
#include "runtime/device_factory.h"
#include "runtime/status.h"

#include "cuda_nn_test_util.h"
#include "random_data.h"

namespace zt::cuda_nn_test {
namespace {

using test::random_floats;

struct AttentionShape {
  int64_t B, T, NH, NKV, hd;
  std::string name() const {
    return "B" + std::to_string(B) + " T" + std::to_string(T) + " NH" + std::to_string(NH) +
           " NKV" + std::to_string(NKV) + " hd" + std::to_string(hd);
  }
  int64_t R() const { return (NH + 2 * NKV) * hd; }
  int64_t HD() const { return NH * hd; }
};

// T a multiple of 128: cuDNN 9.14's rule (cudnn_attention.cpp); MHA, GQA, MQA.
const AttentionShape kShapes[] = {{2, 128, 4, 4, 64}, {2, 256, 4, 2, 64}, {1, 128, 4, 1, 128}};

double unit_roundoff(DType t) { return t == DType::kF16 ? 0x1p-11 : 0x1p-8; }

// out (B,T,NH·hd) and the statistics (B,NH,T) of causal attention in float64.
void host_attention(const std::vector<float>& qkv, const AttentionShape& s,
                    std::vector<double>& out, std::vector<double>& lse) {
  const int64_t R = s.R(), HD = s.HD(), G = s.NH / s.NKV;
  const double scale = 1.0 / std::sqrt(double(s.hd));
  out.assign(size_t(s.B * s.T * HD), 0.0);
  lse.assign(size_t(s.B * s.NH * s.T), 0.0);
  std::vector<double> p(size_t(s.T));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.NH; ++h)
      for (int64_t t = 0; t < s.T; ++t) {
        const float* q = &qkv[size_t((b * s.T + t) * R + h * s.hd)];
        double mx = -INFINITY;
        for (int64_t u = 0; u <= t; ++u) {
          const float* k = &qkv[size_t((b * s.T + u) * R + HD + (h / G) * s.hd)];
          double dot = 0;
          for (int64_t d = 0; d < s.hd; ++d) dot += double(q[d]) * double(k[d]);
          p[size_t(u)] = dot * scale;
          mx = std::max(mx, p[size_t(u)]);
        }
        double sum = 0;
        for (int64_t u = 0; u <= t; ++u) sum += (p[size_t(u)] = std::exp(p[size_t(u)] - mx));
        lse[size_t((b * s.NH + h) * s.T + t)] = mx + std::log(sum);
        double* o = &out[size_t((b * s.T + t) * HD + h * s.hd)];
        for (int64_t u = 0; u <= t; ++u) {
          const float* v = &qkv[size_t((b * s.T + u) * R + HD + s.NKV * s.hd + (h / G) * s.hd)];
          for (int64_t d = 0; d < s.hd; ++d) o[d] += p[size_t(u)] / sum * double(v[d]);
        }
      }
}

std::vector<float> as_floats(const std::vector<double>& x) { return {x.begin(), x.end()}; }

class CudaCudnnAttentionTest : public CudaNnKernelsTest {
 protected:
  void SetUp() override {
    CudaNnKernelsTest::SetUp();
    if (IsSkipped()) return;
#if !ZT_HAVE_CUDNN
    GTEST_SKIP() << "built without cuDNN (runtime/CMakeLists.txt found no libcudnn)";
#endif
  }

  // One forward and backward of `s` on the `t` table under `path`; dqkv starts at dqkv0.
  struct Result {
    std::vector<float> out, att, dqkv;
  };
  Result run(AttentionPath path, DType t, const AttentionShape& s, const std::vector<float>& qkv,
             const std::vector<float>& dout, const std::vector<float>& dqkv0,
             const int32_t* positions = nullptr, int64_t window = 0) {
    set_attention_path(path);
    Kernels& k = gpu_dev_->kernels_for(t);
    Mirror q = mirror(qkv), dy = mirror(dout), dq = mirror(dqkv0);
    Mirror out = mirror(std::vector<float>(size_t(s.B * s.T * s.HD()), 7.0f));
    Mirror att = mirror(std::vector<float>(size_t(s.B * s.NH * s.T * s.T), 7.0f));
    k.gqa_attention_forward(out.g(), att.g(), q.g(), s.B, s.T, s.NH, s.NKV, s.hd, positions,
                            window);
    k.gqa_attention_backward(dq.g(), dy.g(), q.g(), att.g(), s.B, s.T, s.NH, s.NKV, s.hd, positions,
                             window);
    return {out.gpu(), att.gpu(), dq.gpu()};
  }
};

TEST_F(CudaCudnnAttentionTest, MatchesTheReferenceAndFloat64ForEveryDtype) {
  for (DType t : {DType::kBF16, DType::kF16})
    for (const AttentionShape& s : kShapes) {
      const std::string what = std::string(dtype_name(t)) + " " + s.name();
      const double u = unit_roundoff(t);
      const auto qkv = rounded_to(random_floats(size_t(s.B * s.T * s.R()), 1, -2.0f, 2.0f), t);
      const auto dout = rounded_to(random_floats(size_t(s.B * s.T * s.HD()), 2), t);
      const std::vector<float> zeros(size_t(s.B * s.T * s.R()), 0.0f);
      const Result ref = run(AttentionPath::kReference, t, s, qkv, dout, zeros);
      const Result got = run(AttentionPath::kCudnn, t, s, qkv, dout, zeros);
      std::vector<double> host_out, host_lse;
      host_attention(qkv, s, host_out, host_lse);
      expect_representable(got.out, t, what + " out");
      expect_close(got.out, ref.out, 4 * u, what + " out vs reference");
      expect_close(got.out, as_floats(host_out), 4 * u, what + " out vs float64");
      const std::vector<float> stats(got.att.begin(), got.att.begin() + s.B * s.NH * s.T);
      expect_close(stats, as_floats(host_lse), 1e-5, what + " stats in att");
      expect_representable(got.dqkv, t, what + " dqkv");
      expect_close(got.dqkv, ref.dqkv, 8 * u, what + " dqkv vs reference");

      // The accumulate contract: from a non-zero start, the fp32 sum rounded once to t.
      const auto dqkv0 = rounded_to(random_floats(size_t(s.B * s.T * s.R()), 3), t);
      const Result acc = run(AttentionPath::kCudnn, t, s, qkv, dout, dqkv0);
      std::vector<float> want(dqkv0.size());
      for (size_t i = 0; i < want.size(); ++i) want[i] = dqkv0[i] + got.dqkv[i];
      EXPECT_TRUE(same_bits(acc.dqkv, rounded_to(want, t))) << what << " dqkv += gradient";
    }
}

TEST_F(CudaCudnnAttentionTest, RunsGiveTheSameBits) {
  const AttentionShape s = kShapes[1];  // GQA: the grouped reductions of dK and dV too
  for (DType t : {DType::kBF16, DType::kF16}) {
    const auto qkv = rounded_to(random_floats(size_t(s.B * s.T * s.R()), 4, -2.0f, 2.0f), t);
    const auto dout = rounded_to(random_floats(size_t(s.B * s.T * s.HD()), 5), t);
    const auto dqkv0 = rounded_to(random_floats(size_t(s.B * s.T * s.R()), 6), t);
    const Result first = run(AttentionPath::kCudnn, t, s, qkv, dout, dqkv0);
    const Result second = run(AttentionPath::kCudnn, t, s, qkv, dout, dqkv0);
    EXPECT_TRUE(same_bits(first.out, second.out)) << dtype_name(t) << " out";
    EXPECT_TRUE(same_bits(first.dqkv, second.dqkv)) << dtype_name(t) << " dqkv";
  }
}

TEST_F(CudaCudnnAttentionTest, PackedDocumentsAndWindowsFallBackToTheReferenceBits) {
  const AttentionShape s = kShapes[1];
  const DType t = DType::kBF16;
  const auto qkv = rounded_to(random_floats(size_t(s.B * s.T * s.R()), 7, -2.0f, 2.0f), t);
  const auto dout = rounded_to(random_floats(size_t(s.B * s.T * s.HD()), 8), t);
  const auto dqkv0 = rounded_to(random_floats(size_t(s.B * s.T * s.R()), 9), t);
  // Two documents per row: tokens [0, 100) and [100, T).
  std::vector<int32_t> host_positions(size_t(s.B * s.T));
  for (int64_t i = 0; i < s.B * s.T; ++i)
    host_positions[size_t(i)] = int32_t(i % s.T < 100 ? i % s.T : i % s.T - 100);
  Mirror positions = mirror(host_positions);
  const Result packed_ref =
      run(AttentionPath::kReference, t, s, qkv, dout, dqkv0, positions.gi(), 0);
  const Result packed = run(AttentionPath::kAuto, t, s, qkv, dout, dqkv0, positions.gi(), 0);
  EXPECT_TRUE(same_bits(packed.out, packed_ref.out)) << "packed out";
  EXPECT_TRUE(same_bits(packed.att, packed_ref.att)) << "packed att";
  EXPECT_TRUE(same_bits(packed.dqkv, packed_ref.dqkv)) << "packed dqkv";
  const Result windowed_ref = run(AttentionPath::kReference, t, s, qkv, dout, dqkv0, nullptr, 32);
  const Result windowed = run(AttentionPath::kAuto, t, s, qkv, dout, dqkv0, nullptr, 32);
  EXPECT_TRUE(same_bits(windowed.out, windowed_ref.out)) << "window out";
  EXPECT_TRUE(same_bits(windowed.att, windowed_ref.att)) << "window att";
  EXPECT_TRUE(same_bits(windowed.dqkv, windowed_ref.dqkv)) << "window dqkv";
}

// On the cuDNN path att is cuDNN's record alone (the statistics, rounded up to 4 floats, then
// the 16-bit O), kept as written: a forward and backward on an att of exactly that size write
// nothing past it, and with the record in an ActivationStore of the run's 16-bit dtype (where a
// 16-bit run's engine keeps it) give the bits of a run on a whole (B,NH,T,T) att. On the reference
// path: the probabilities, packable.
TEST_F(CudaCudnnAttentionTest, TheRecordIsAllTheForwardKeepsAndSurvivesTheActivationStore) {
  const AttentionShape s = kShapes[1];
  for (DType t : {DType::kBF16, DType::kF16}) {
    const std::string what(dtype_name(t));
    const auto qkv = rounded_to(random_floats(size_t(s.B * s.T * s.R()), 11, -2.0f, 2.0f), t);
    const auto dout = rounded_to(random_floats(size_t(s.B * s.T * s.HD()), 12), t);
    const std::vector<float> zeros(size_t(s.B * s.T * s.R()), 0.0f);
    const Result whole = run(AttentionPath::kCudnn, t, s, qkv, dout, zeros);  // leaves kCudnn
    Kernels& k = gpu_dev_->kernels_for(t);
    const AttentionRecord record = k.attention_record(s.B, s.T, s.NH, s.NKV, s.hd, false, 0);
    EXPECT_FALSE(record.packable) << what;
    EXPECT_EQ(record.floats, (s.B * s.NH * s.T + 3) / 4 * 4 + (s.B * s.T * s.HD() + 1) / 2) << what;
    // The memory planner's answer, by the rules alone, is the device's (unless the environment
    // plans the reference path, which this test overrides).
    if (attention_path_from_env() != AttentionPath::kReference) {
      const AttentionRecord planned = planned_attention_record(
          DeviceKind::kCuda, t, AttentionHeads{s.NH, s.NKV, s.hd, 0}, s.B, s.T, false);
      EXPECT_EQ(planned.floats, record.floats) << what;
      EXPECT_FALSE(planned.packable) << what;
    }

    // Exactly the record, then 256 sentinels.
    const int64_t kGuard = 256;
    Mirror q = mirror(qkv), dy = mirror(dout), dq = mirror(zeros);
    Mirror out = mirror(std::vector<float>(size_t(s.B * s.T * s.HD()), 7.0f));
    Mirror att = mirror(std::vector<float>(size_t(record.floats + kGuard), 7.0f));
    k.gqa_attention_forward(out.g(), att.g(), q.g(), s.B, s.T, s.NH, s.NKV, s.hd, nullptr, 0);
    k.gqa_attention_backward(dq.g(), dy.g(), q.g(), att.g(), s.B, s.T, s.NH, s.NKV, s.hd, nullptr,
                             0);
    const std::vector<float> att_after = att.gpu();
    const std::vector<float> guard(att_after.end() - kGuard, att_after.end());
    EXPECT_TRUE(same_bits(guard, std::vector<float>(size_t(kGuard), 7.0f))) << what << " guard";
    EXPECT_TRUE(same_bits(out.gpu(), whole.out)) << what << " out";
    EXPECT_TRUE(same_bits(dq.gpu(), whole.dqkv)) << what << " dqkv";

    // In an activation store of the run's dtype: the record stays fp32, kept as written.
    ActivationStore acts(*gpu_dev_, t);
    acts.alloc_acts(s.B * s.T * s.HD());  // an activation of t beside it
    const Operand kept = acts.alloc_attention(record);
    EXPECT_EQ(kept.dtype, DType::kF32) << what;
    Mirror out2 = mirror(std::vector<float>(size_t(s.B * s.T * s.HD()), 7.0f));
    Mirror dq2 = mirror(zeros);
    k.gqa_attention_forward(out2.g(), kept, q.g(), s.B, s.T, s.NH, s.NKV, s.hd, nullptr, 0);
    k.gqa_attention_backward(dq2.g(), dy.g(), q.g(), acts.at(1), s.B, s.T, s.NH, s.NKV, s.hd,
                             nullptr, 0);
    EXPECT_TRUE(same_bits(dq2.gpu(), whole.dqkv)) << what << " dqkv through the store";

    set_attention_path(AttentionPath::kReference);
    const AttentionRecord probabilities = k.attention_record(s.B, s.T, s.NH, s.NKV, s.hd, false, 0);
    EXPECT_TRUE(probabilities.packable) << what;
    EXPECT_EQ(probabilities.floats, s.B * s.NH * s.T * s.T) << what;
  }
}

TEST_F(CudaCudnnAttentionTest, TheCudnnPathNamesWhyItCannotRun) {
  const AttentionShape s = kShapes[0];
  const auto qkv = random_floats(size_t(s.B * s.T * s.R()), 10);
  const std::vector<float> dout(size_t(s.B * s.T * s.HD()), 0.0f), dqkv0(qkv.size(), 0.0f);
  try {
    run(AttentionPath::kCudnn, DType::kBF16, s, qkv, dout, dqkv0, nullptr, 32);
    ADD_FAILURE() << "a sliding window ran under the cudnn path";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sliding window 32"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zt::cuda_nn_test
