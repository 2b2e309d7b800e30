// Parity of the CUDA back end's kernels for the Llama families past Llama with the CPU back
// end's (whose references are kernels_families_test.cpp's): sliding-window grouped-query
// attention (Mistral's, Phi-3's), alone and inside packed documents, forward and backward, with
// exact zeros outside each query's window, a window of T the bits of plain causal attention; and
// the per-head RMSNorm of queries and keys (Qwen3's), forward and backward, in place, the rest of
// each row untouched. The fixture and helpers are cuda_nn_test_util.h's. Every test skips when
// no GPU is usable.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/kernels.h"

#include "cuda_nn_test_util.h"
#include "packed_documents.h"
#include "random_data.h"

namespace zt::cuda_nn_test {
namespace {

using test::random_floats;

struct WindowCase {
  int64_t B, T, NH, NKV, hd, window;
  std::vector<int32_t> positions;  // empty: one document per row
};

std::vector<WindowCase> window_cases() {
  return {{2, 16, 4, 2, 16, 1, {}},
          {3, 37, 6, 2, 20, 5, {}},
          {1, 100, 4, 1, 8, 70, {}},
          {2, 13, 4, 2, 8, 3, test::two_rows_of_13()},
          {1, 37, 6, 3, 16, 7, test::document_positions({{20, 1, 16}})}};
}

TEST_F(CudaNnKernelsTest, SlidingWindowAttentionMatchesCpu) {
  for (const WindowCase& c : window_cases()) {
    const std::string what = "window " + std::to_string(c.window) + " T" + std::to_string(c.T) +
                             " NH" + std::to_string(c.NH) + " NKV" + std::to_string(c.NKV) +
                             (c.positions.empty() ? "" : " documents");
    const int64_t R = (c.NH + 2 * c.NKV) * c.hd, HD = c.NH * c.hd;
    Mirror positions = mirror(c.positions.empty() ? std::vector<int32_t>(1, 0) : c.positions);
    const int32_t* pc = c.positions.empty() ? nullptr : positions.ci();
    const int32_t* pg = c.positions.empty() ? nullptr : positions.gi();
    Mirror qkv = mirror(random_floats(c.B * c.T * R, 1, -2.0f, 2.0f));
    Mirror out = mirror(random_floats(c.B * c.T * HD, 2));
    Mirror att = mirror(random_floats(c.B * c.NH * c.T * c.T, 3));  // outside: must become 0
    cpu().gqa_attention_forward(out.c(), att.c(), qkv.c(), c.B, c.T, c.NH, c.NKV, c.hd, pc,
                                c.window);
    gpu().gqa_attention_forward(out.g(), att.g(), qkv.g(), c.B, c.T, c.NH, c.NKV, c.hd, pg,
                                c.window);
    const std::vector<float> att_gpu = att.gpu();
    expect_close(att_gpu, att.cpu(), kRtol, what + " att");
    expect_close(out.gpu(), out.cpu(), kRtol, what + " out");
    for (int64_t row = 0; row < c.B * c.NH * c.T; ++row) {
      const int64_t t = row % c.T, bt = row / (c.NH * c.T) * c.T + t;
      int64_t first = test::first_key(c.positions.empty() ? nullptr : c.positions.data(), bt, c.T);
      if (t - c.window + 1 > first) first = t - c.window + 1;  // keys t - window < j <= t
      for (int64_t j = 0; j < c.T; ++j) {
        if (j < first || j > t) {
          ASSERT_EQ(att_gpu[row * c.T + j], 0.0f) << what << " " << row;
        }
      }
    }
    att.reset_gpu(att.cpu());
    Mirror dout = mirror(random_floats(c.B * c.T * HD, 4));
    Mirror dqkv = mirror(random_floats(c.B * c.T * R, 5));  // non-zero: += is checked
    cpu().gqa_attention_backward(dqkv.c(), dout.c(), qkv.c(), att.c(), c.B, c.T, c.NH, c.NKV, c.hd,
                                 pc, c.window);
    gpu().gqa_attention_backward(dqkv.g(), dout.g(), qkv.g(), att.g(), c.B, c.T, c.NH, c.NKV, c.hd,
                                 pg, c.window);
    expect_close(dqkv.gpu(), dqkv.cpu(), kRtol, what + " dqkv");
  }
}

// Generation's attention on the GPU: a prefill of 6 tokens over an empty cache, then a token
// after 6, each against the CPU's; the caches equal.
TEST_F(CudaNnKernelsTest, DecodeAttentionMatchesCpu) {
  for (const WindowCase& c : window_cases()) {
    if (!c.positions.empty()) continue;  // generation's rows are one sequence each
    const std::string what = "decode window " + std::to_string(c.window) + " T" +
                             std::to_string(c.T) + " NKV" + std::to_string(c.NKV);
    const int64_t R = (c.NH + 2 * c.NKV) * c.hd, HD = c.NH * c.hd, S = 8, KV = c.NKV * c.hd;
    Mirror k_cache = mirror(random_floats(c.B * S * KV, 6));
    Mirror v_cache = mirror(random_floats(c.B * S * KV, 7));
    for (const auto& [past, n] : {std::pair<int64_t, int64_t>{0, 6}, {6, 1}}) {
      Mirror qkv = mirror(random_floats(c.B * n * R, 8 + past, -2.0f, 2.0f));
      Mirror out = mirror(random_floats(c.B * n * HD, 9));
      cpu().gqa_attention_decode(out.c(), k_cache.c(), v_cache.c(), qkv.c(), c.B, n, past, S, c.NH,
                                 c.NKV, c.hd, c.window);
      gpu().gqa_attention_decode(out.g(), k_cache.g(), v_cache.g(), qkv.g(), c.B, n, past, S, c.NH,
                                 c.NKV, c.hd, c.window);
      expect_close(out.gpu(), out.cpu(), kRtol, what + " out after " + std::to_string(past));
      EXPECT_TRUE(same_bits(k_cache.gpu(), k_cache.cpu())) << what;
      EXPECT_TRUE(same_bits(v_cache.gpu(), v_cache.cpu())) << what;
    }
  }
}

TEST_F(CudaNnKernelsTest, WindowOfTheSequenceIsCausalAttentionBitsOnTheGpu) {
  const int64_t B = 2, T = 19, NH = 4, NKV = 2, hd = 16, R = (NH + 2 * NKV) * hd, HD = NH * hd;
  Mirror qkv = mirror(random_floats(B * T * R, 1));
  Mirror dout = mirror(random_floats(B * T * HD, 2));
  std::vector<float> outs[2], dqkvs[2];
  for (int v = 0; v < 2; ++v) {
    Mirror out = mirror(random_floats(B * T * HD, 3));
    Mirror att = mirror(random_floats(B * NH * T * T, 4));
    Mirror dqkv = mirror(random_floats(B * T * R, 5));
    gpu().gqa_attention_forward(out.g(), att.g(), qkv.g(), B, T, NH, NKV, hd, nullptr,
                                v == 0 ? 0 : T);
    gpu().gqa_attention_backward(dqkv.g(), dout.g(), qkv.g(), att.g(), B, T, NH, NKV, hd, nullptr,
                                 v == 0 ? 0 : T);
    outs[v] = out.gpu();
    dqkvs[v] = dqkv.gpu();
  }
  EXPECT_TRUE(same_bits(outs[0], outs[1]) && same_bits(dqkvs[0], dqkvs[1]));
}

TEST_F(CudaNnKernelsTest, HeadRmsnormForwardAndBackwardMatchCpu) {
  const int64_t N = 1001, NH = 4, NKV = 2;  // more head rows than the reduction's row groups
  for (int64_t hd : {int64_t{32}, int64_t{20}}) {
    const int64_t R = (NH + 2 * NKV) * hd;
    for (bool keys : {false, true}) {
      const std::string what = std::string(keys ? "k" : "q") + " heads hd " + std::to_string(hd);
      const int64_t H = keys ? NKV : NH, off = keys ? NH * hd : 0;
      const std::vector<float> x0 = random_floats(N * R, 1, -2.0f, 2.0f);
      Mirror x = mirror(x0);
      Mirror w = mirror(random_floats(hd, 2, 0.5f, 1.5f));
      Mirror rstd = mirror(random_floats(N * H, 3));
      cpu().head_rmsnorm_forward(x.c() + off, rstd.c(), w.c(), N, H, hd, R, 1e-6f);
      gpu().head_rmsnorm_forward(x.g() + off, rstd.g(), w.g(), N, H, hd, R, 1e-6f);
      expect_close(x.gpu(), x.cpu(), kRtol, what + " out");  // the rest of each row untouched
      expect_close(rstd.gpu(), rstd.cpu(), kRtol, what + " rstd");
      rstd.reset_gpu(rstd.cpu());
      Mirror inp = mirror(x0);
      Mirror dx = mirror(random_floats(N * R, 4));
      Mirror dw = mirror(random_floats(hd, 5));  // non-zero: += is checked
      cpu().head_rmsnorm_backward(dx.c() + off, dw.c(), inp.c() + off, w.c(), rstd.c(), N, H, hd,
                                  R);
      gpu().head_rmsnorm_backward(dx.g() + off, dw.g(), inp.g() + off, w.g(), rstd.g(), N, H, hd,
                                  R);
      expect_close(dx.gpu(), dx.cpu(), kRtol, what + " dx");
      expect_close(dw.gpu(), dw.cpu(), 1e-4, what + " dweight");  // long sums, other order
    }
  }
}

}  // namespace
}  // namespace zt::cuda_nn_test
