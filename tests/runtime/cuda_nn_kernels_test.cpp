// Parity of the CUDA back end's neural-network kernels (runtime/cuda/cuda_nn_kernels.cu) with the
// CPU back end's (runtime/cpu/cpu_nn_kernels.cpp and cpu_attention_kernels.cpp, themselves pinned
// against double references and finite differences in kernels_nn_test.cpp and
// kernels_attention_test.cpp): matmul (both weight layouts, with and without bias, every
// gradient), embedding, layer norm, causal attention and softmax cross-entropy, and Llama's
// RMSNorm, rotary embeddings, SwiGLU and grouped-query attention, on identical
// random inputs. Gradient buffers start non-zero on both devices, so the accumulate contract is
// checked too. Then the 16-bit tables (kernels_for) with 16-bit parameters and gradients against
// the CPU's tables of the same dtype, determinism (every op run twice on the GPU gives the same
// bits), and rows packing documents (Batch::positions: attention, rotary and position
// embeddings) and ignored targets (kIgnoreTarget) against the CPU. Last, issue 11's paths for
// every dtype on awkward shapes, within the error bound of fp32 sums: the tensor-core matmul
// (cuBLASLt; both layouts, with and without bias, dweight accumulated in 16 bits and in fp32),
// the two-stage column reductions, and their determinism; and the CUDA event timer behind
// zt-bench train --profile (Device::make_stream_timer) and the GPU's chunk budget.
// Written against Device / Kernels only (no CUDA headers), so it compiles with or without CUDA;
// every test skips when no GPU is usable. Not here: TF32 (CudaKernels::set_allow_tf32 needs the
// CUDA headers), the element-wise ops and optimizers (cuda_kernels.cu), performance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "runtime/cpu/cpu_device.h"
#include "runtime/device.h"
#include "runtime/device_factory.h"
#include "runtime/kernels.h"
#include "runtime/model.h"

#include "packed_documents.h"
#include "random_data.h"

namespace zt {
namespace {

using test::random_floats;

std::vector<int32_t> random_tokens(size_t n, int32_t V, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, V - 1);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(gen);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// |gpu - cpu| <= rtol·(|cpu| + max|cpu|) element by element: relative to the element, with a
// floor relative to the array's largest magnitude (sums that cancel to near zero carry the
// rounding error of their terms, not of their result). A layout mistake gives O(1) errors.
void expect_close(const std::vector<float>& gpu, const std::vector<float>& cpu, double rtol,
                  const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  double max_abs = 0;
  for (float x : cpu) max_abs = std::max(max_abs, std::abs(double(x)));
  int failures = 0;
  for (size_t i = 0; i < gpu.size() && failures < 5; ++i) {
    const double err = std::abs(double(gpu[i]) - double(cpu[i]));
    if (!(err <= rtol * (std::abs(double(cpu[i])) + max_abs))) {
      ADD_FAILURE() << what << "[" << i << "]: gpu " << gpu[i] << ", cpu " << cpu[i] << " (error "
                    << err << ", max |cpu| " << max_abs << ")";
      ++failures;
    }
  }
}

// The same host data on both devices; read back with cpu() / gpu().
class Mirror {
 public:
  template <class T>
  Mirror(Device& cpu_dev, Device& gpu_dev, const std::vector<T>& host)
      : cpu_dev_(cpu_dev), gpu_dev_(gpu_dev), bytes_(host.size() * sizeof(T)) {
    cpu_ = cpu_dev.alloc(bytes_, MemCategory::kOther);
    gpu_ = gpu_dev.alloc(bytes_, MemCategory::kOther);
    if (bytes_ == 0) return;
    cpu_dev.copy_from_host(cpu_.data(), host.data(), bytes_);
    gpu_dev.copy_from_host(gpu_.data(), host.data(), bytes_);
  }
  float* c() const { return cpu_.as<float>(); }
  float* g() const { return gpu_.as<float>(); }
  const int32_t* ci() const { return cpu_.as<int32_t>(); }
  const int32_t* gi() const { return gpu_.as<int32_t>(); }
  std::vector<float> cpu() const { return read(cpu_dev_, cpu_); }
  std::vector<float> gpu() const { return read(gpu_dev_, gpu_); }
  // The buffer as an operand of dtype t (its bytes hold elements of t: see mirror_as).
  Operand co(DType t) const { return {cpu_.data(), t}; }
  Operand go(DType t) const { return {gpu_.data(), t}; }
  // Elements of dtype t, widened exactly.
  std::vector<float> cpu_as(DType t) const { return widen(read_bytes(cpu_dev_, cpu_), t); }
  std::vector<float> gpu_as(DType t) const { return widen(read_bytes(gpu_dev_, gpu_), t); }
  void reset_gpu(const std::vector<float>& host) {
    gpu_dev_.copy_from_host(gpu_.data(), host.data(), bytes_);
  }

 private:
  std::vector<float> read(Device& dev, const Buffer& buf) const {
    std::vector<float> host(bytes_ / sizeof(float));
    if (bytes_ > 0) dev.copy_to_host(host.data(), buf.data(), bytes_);
    return host;
  }
  std::vector<uint8_t> read_bytes(Device& dev, const Buffer& buf) const {
    std::vector<uint8_t> host(bytes_);
    if (bytes_ > 0) dev.copy_to_host(host.data(), buf.data(), bytes_);
    return host;
  }
  static std::vector<float> widen(const std::vector<uint8_t>& bytes, DType t) {
    std::vector<float> x(bytes.size() / dtype_size(t));
    for (size_t i = 0; i < x.size(); ++i) {
      if (t == DType::kF32) {
        std::memcpy(&x[i], bytes.data() + 4 * i, 4);
        continue;
      }
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      x[i] = t == DType::kF16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
    }
    return x;
  }
  Device& cpu_dev_;
  Device& gpu_dev_;
  size_t bytes_;
  Buffer cpu_, gpu_;
};

class CudaNnKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << cuda_unavailable_reason();
    gpu_dev_ = make_device(DeviceKind::kCuda, 0);
  }
  // Buffers must die before the devices: tests declare Mirrors as locals, destroyed first.
  Mirror mirror(const std::vector<float>& host) { return Mirror(cpu_dev_, *gpu_dev_, host); }
  Mirror mirror(const std::vector<int32_t>& host) { return Mirror(cpu_dev_, *gpu_dev_, host); }
  // host rounded to dtype t and stored as t on both devices (read back with cpu_as / gpu_as).
  Mirror mirror_as(const std::vector<float>& host, DType t) {
    if (t == DType::kF32) return mirror(host);
    std::vector<uint16_t> bits(host.size());
    for (size_t i = 0; i < host.size(); ++i)
      bits[i] = t == DType::kF16 ? fp32_to_fp16(host[i]) : fp32_to_bf16(host[i]);
    return Mirror(cpu_dev_, *gpu_dev_, bits);
  }
  Kernels& cpu() { return cpu_dev_.kernels(); }
  Kernels& gpu() { return gpu_dev_->kernels(); }

  CpuDevice cpu_dev_;
  std::unique_ptr<Device> gpu_dev_;
};

constexpr double kRtol = 1e-5;

// GPT-2 tiny slices, and an odd shape (nothing a multiple of 4, 32 or the warp).
struct Shape {
  int64_t B, T, C, NH, V, Vp;
};
const Shape kShapes[] = {{2, 16, 32, 4, 97, 128}, {3, 37, 30, 5, 51, 61}};

std::string shape_name(const Shape& s) {
  return "B" + std::to_string(s.B) + " T" + std::to_string(s.T) + " C" + std::to_string(s.C) +
         " NH" + std::to_string(s.NH);
}

// ---------------------------------------------------------------------------------------------
// Matmul

struct MatmulCase {
  int64_t M, K, N;
};
const MatmulCase kMatmulCases[] = {{32, 32, 96}, {32, 128, 32}, {7, 13, 5}, {37, 30, 61}};

TEST_F(CudaNnKernelsTest, MatmulForwardMatchesCpu) {
  for (const MatmulCase& mc : kMatmulCases)
    for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn})
      for (bool with_bias : {true, false}) {
        const std::string what = "M" + std::to_string(mc.M) + " K" + std::to_string(mc.K) + " N" +
                                 std::to_string(mc.N) +
                                 (layout == WeightLayout::kInOut ? " inout" : " outin") +
                                 (with_bias ? " bias" : " nobias");
        Mirror inp = mirror(random_floats(mc.M * mc.K, 1));
        Mirror w = mirror(random_floats(mc.K * mc.N, 2));
        Mirror bias = mirror(random_floats(mc.N, 3));
        Mirror out = mirror(random_floats(mc.M * mc.N, 4, 5.0f, 6.0f));  // overwritten
        cpu().matmul_forward(out.c(), inp.c(), w.c(), with_bias ? bias.c() : nullptr, mc.M, mc.K,
                             mc.N, layout);
        gpu().matmul_forward(out.g(), inp.g(), w.g(), with_bias ? bias.g() : nullptr, mc.M, mc.K,
                             mc.N, layout);
        expect_close(out.gpu(), out.cpu(), kRtol, what);
      }
}

TEST_F(CudaNnKernelsTest, MatmulForwardWithEmptyInnerDimensionIsTheBias) {
  const int64_t M = 5, N = 7;
  Mirror bias = mirror(random_floats(N, 3));
  Mirror out = mirror(random_floats(M * N, 4));
  gpu().matmul_forward(out.g(), nullptr, nullptr, bias.g(), M, 0, N, WeightLayout::kInOut);
  const std::vector<float> got = out.gpu(), b = bias.cpu();
  for (int64_t i = 0; i < M * N; ++i) EXPECT_EQ(got[i], b[i % N]) << i;
  gpu().matmul_forward(out.g(), nullptr, nullptr, nullptr, M, 0, N, WeightLayout::kOutIn);
  for (float x : out.gpu()) EXPECT_EQ(x, 0.0f);
}

TEST_F(CudaNnKernelsTest, MatmulBackwardAccumulatesLikeCpu) {
  for (const MatmulCase& mc : kMatmulCases)
    for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
      const std::string what = "M" + std::to_string(mc.M) + " K" + std::to_string(mc.K) + " N" +
                               std::to_string(mc.N) +
                               (layout == WeightLayout::kInOut ? " inout" : " outin");
      Mirror inp = mirror(random_floats(mc.M * mc.K, 1));
      Mirror w = mirror(random_floats(mc.K * mc.N, 2));
      Mirror dout = mirror(random_floats(mc.M * mc.N, 3));
      Mirror dinp = mirror(random_floats(mc.M * mc.K, 4));  // non-zero: += is checked
      Mirror dw = mirror(random_floats(mc.K * mc.N, 5));
      Mirror db = mirror(random_floats(mc.N, 6));
      cpu().matmul_backward(dinp.c(), dw.c(), db.c(), dout.c(), inp.c(), w.c(), mc.M, mc.K, mc.N,
                            layout);
      gpu().matmul_backward(dinp.g(), dw.g(), db.g(), dout.g(), inp.g(), w.g(), mc.M, mc.K, mc.N,
                            layout);
      expect_close(dinp.gpu(), dinp.cpu(), kRtol, what + " dinp");
      expect_close(dw.gpu(), dw.cpu(), kRtol, what + " dweight");
      expect_close(db.gpu(), db.cpu(), kRtol, what + " dbias");
    }
}

TEST_F(CudaNnKernelsTest, MatmulBackwardSkipsNullGradients) {
  const int64_t M = 9, K = 11, N = 6;
  const std::vector<float> dw_start = random_floats(K * N, 5);
  Mirror inp = mirror(random_floats(M * K, 1));
  Mirror w = mirror(random_floats(K * N, 2));
  Mirror dout = mirror(random_floats(M * N, 3));
  Mirror dw = mirror(dw_start);
  cpu().matmul_backward(nullptr, dw.c(), nullptr, dout.c(), inp.c(), w.c(), M, K, N,
                        WeightLayout::kOutIn);
  gpu().matmul_backward(nullptr, dw.g(), nullptr, dout.g(), inp.g(), w.g(), M, K, N,
                        WeightLayout::kOutIn);
  expect_close(dw.gpu(), dw.cpu(), kRtol, "dweight");
  Mirror dinp = mirror(random_floats(M * K, 4));
  Mirror db = mirror(random_floats(N, 6));
  cpu().matmul_backward(dinp.c(), nullptr, db.c(), dout.c(), inp.c(), w.c(), M, K, N,
                        WeightLayout::kInOut);
  gpu().matmul_backward(dinp.g(), nullptr, db.g(), dout.g(), inp.g(), w.g(), M, K, N,
                        WeightLayout::kInOut);
  expect_close(dinp.gpu(), dinp.cpu(), kRtol, "dinp");
  expect_close(db.gpu(), db.cpu(), kRtol, "dbias");
}

// The dbias reduction over many rows (more than the kernel's row groups, not a multiple).
TEST_F(CudaNnKernelsTest, MatmulBiasGradientOverManyRows) {
  const int64_t M = 1001, K = 4, N = 70;
  Mirror inp = mirror(random_floats(M * K, 1));
  Mirror w = mirror(random_floats(K * N, 2));
  Mirror dout = mirror(random_floats(M * N, 3));
  Mirror db = mirror(random_floats(N, 6));
  cpu().matmul_backward(nullptr, nullptr, db.c(), dout.c(), inp.c(), w.c(), M, K, N,
                        WeightLayout::kInOut);
  gpu().matmul_backward(nullptr, nullptr, db.g(), dout.g(), inp.g(), w.g(), M, K, N,
                        WeightLayout::kInOut);
  expect_close(db.gpu(), db.cpu(), 1e-4, "dbias");  // 1001-term sums in different orders
}

// ---------------------------------------------------------------------------------------------
// Embedding

TEST_F(CudaNnKernelsTest, EmbeddingForwardAndBackwardMatchCpu) {
  for (const Shape& s : kShapes) {
    const std::string what = shape_name(s);
    std::vector<int32_t> host_tokens = random_tokens(s.B * s.T, int32_t(s.V), 7);
    // Repeats within and across sequences, the first and last positions included.
    host_tokens[3] = host_tokens[0];
    host_tokens[s.B * s.T - 1] = host_tokens[0];
    host_tokens[s.T + 1] = host_tokens[5];
    Mirror tokens = mirror(host_tokens);
    Mirror wte = mirror(random_floats(s.Vp * s.C, 1));
    Mirror wpe = mirror(random_floats(s.T * s.C, 2));
    Mirror out = mirror(random_floats(s.B * s.T * s.C, 3));
    cpu().embedding_forward(out.c(), tokens.ci(), wte.c(), wpe.c(), s.B, s.T, s.C, nullptr);
    gpu().embedding_forward(out.g(), tokens.gi(), wte.g(), wpe.g(), s.B, s.T, s.C, nullptr);
    EXPECT_TRUE(same_bits(out.gpu(), out.cpu())) << what << " forward";  // one add each

    Mirror dout = mirror(random_floats(s.B * s.T * s.C, 4));
    Mirror dwte = mirror(random_floats(s.Vp * s.C, 5));
    Mirror dwpe = mirror(random_floats(s.T * s.C, 6));
    cpu().embedding_backward(dwte.c(), dwpe.c(), dout.c(), tokens.ci(), s.B, s.T, s.C, nullptr);
    gpu().embedding_backward(dwte.g(), dwpe.g(), dout.g(), tokens.gi(), s.B, s.T, s.C, nullptr);
    // The same additions in the same (position) order as the CPU: the same bits.
    EXPECT_TRUE(same_bits(dwte.gpu(), dwte.cpu())) << what << " dwte";
    EXPECT_TRUE(same_bits(dwpe.gpu(), dwpe.cpu())) << what << " dwpe";
    expect_close(dwte.gpu(), dwte.cpu(), kRtol, what + " dwte");
    expect_close(dwpe.gpu(), dwpe.cpu(), kRtol, what + " dwpe");
  }
}

// ---------------------------------------------------------------------------------------------
// Layer norm

TEST_F(CudaNnKernelsTest, LayerNormForwardAndBackwardMatchCpu) {
  const std::pair<int64_t, int64_t> shapes[] = {{32, 32}, {77, 30}, {9, 771}};  // (N, C)
  for (const auto& [N, C] : shapes) {
    const std::string what = "N" + std::to_string(N) + " C" + std::to_string(C);
    // An offset and a scale per row, so mean and variance are not trivial.
    std::vector<float> x = random_floats(N * C, 1);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t c = 0; c < C; ++c) x[r * C + c] = x[r * C + c] * (1.0f + r % 3) + 0.5f * r;
    Mirror inp = mirror(x);
    Mirror w = mirror(random_floats(C, 2, 0.5f, 1.5f));
    Mirror b = mirror(random_floats(C, 3));
    Mirror out = mirror(random_floats(N * C, 4));
    Mirror mean = mirror(random_floats(N, 5));
    Mirror rstd = mirror(random_floats(N, 6));
    cpu().layernorm_forward(out.c(), mean.c(), rstd.c(), inp.c(), w.c(), b.c(), N, C);
    gpu().layernorm_forward(out.g(), mean.g(), rstd.g(), inp.g(), w.g(), b.g(), N, C);
    expect_close(out.gpu(), out.cpu(), kRtol, what + " out");
    expect_close(mean.gpu(), mean.cpu(), kRtol, what + " mean");
    expect_close(rstd.gpu(), rstd.cpu(), kRtol, what + " rstd");

    // Backward from the CPU's mean and rstd on both devices (the same inputs).
    const std::vector<float> mean_host = mean.cpu(), rstd_host = rstd.cpu();
    mean.reset_gpu(mean_host);
    rstd.reset_gpu(rstd_host);
    Mirror dout = mirror(random_floats(N * C, 7));
    Mirror dinp = mirror(random_floats(N * C, 8));
    Mirror dw = mirror(random_floats(C, 9));
    Mirror db = mirror(random_floats(C, 10));
    cpu().layernorm_backward(dinp.c(), dw.c(), db.c(), dout.c(), inp.c(), w.c(), mean.c(), rstd.c(),
                             N, C);
    gpu().layernorm_backward(dinp.g(), dw.g(), db.g(), dout.g(), inp.g(), w.g(), mean.g(), rstd.g(),
                             N, C);
    expect_close(dinp.gpu(), dinp.cpu(), kRtol, what + " dinp");
    expect_close(dw.gpu(), dw.cpu(), kRtol, what + " dweight");
    expect_close(db.gpu(), db.cpu(), kRtol, what + " dbias");
  }
}

// ---------------------------------------------------------------------------------------------
// Attention

TEST_F(CudaNnKernelsTest, AttentionForwardAndBackwardMatchCpu) {
  for (const Shape& s : kShapes) {
    const std::string what = shape_name(s);
    const int64_t att_n = s.B * s.NH * s.T * s.T;
    // Spread of ±2 gives peaked softmax rows (scores up to ~|4·hs|/sqrt(hs)).
    Mirror qkv = mirror(random_floats(s.B * s.T * 3 * s.C, 1, -2.0f, 2.0f));
    Mirror out = mirror(random_floats(s.B * s.T * s.C, 2));
    Mirror att = mirror(random_floats(att_n, 3));  // the upper triangle must become 0
    cpu().attention_forward(out.c(), att.c(), qkv.c(), s.B, s.T, s.C, s.NH, nullptr);
    gpu().attention_forward(out.g(), att.g(), qkv.g(), s.B, s.T, s.C, s.NH, nullptr);
    const std::vector<float> att_gpu = att.gpu();
    expect_close(att_gpu, att.cpu(), kRtol, what + " att");
    expect_close(out.gpu(), out.cpu(), kRtol, what + " out");
    for (int64_t row = 0; row < s.B * s.NH * s.T; ++row) {
      const int64_t t = row % s.T;
      double sum = 0;
      for (int64_t j = 0; j < s.T; ++j) {
        const float p = att_gpu[row * s.T + j];
        if (j > t) {
          ASSERT_EQ(p, 0.0f) << what << " att row " << row << " col " << j;
        }
        sum += p;
      }
      EXPECT_NEAR(sum, 1.0, 1e-5) << what << " att row " << row;
    }

    // Backward from the CPU's probabilities on both devices (the same inputs).
    att.reset_gpu(att.cpu());
    Mirror dout = mirror(random_floats(s.B * s.T * s.C, 4));
    Mirror dqkv = mirror(random_floats(s.B * s.T * 3 * s.C, 5));  // non-zero: += is checked
    cpu().attention_backward(dqkv.c(), dout.c(), qkv.c(), att.c(), s.B, s.T, s.C, s.NH, nullptr);
    gpu().attention_backward(dqkv.g(), dout.g(), qkv.g(), att.g(), s.B, s.T, s.C, s.NH, nullptr);
    // q, k, v parts separately, so a failure names the part.
    const std::vector<float> g = dqkv.gpu(), c = dqkv.cpu();
    for (int part = 0; part < 3; ++part) {
      std::vector<float> gp, cp;
      for (int64_t bt = 0; bt < s.B * s.T; ++bt)
        for (int64_t i = 0; i < s.C; ++i) {
          gp.push_back(g[bt * 3 * s.C + part * s.C + i]);
          cp.push_back(c[bt * 3 * s.C + part * s.C + i]);
        }
      expect_close(gp, cp, kRtol, what + (part == 0 ? " dq" : part == 1 ? " dk" : " dv"));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Softmax cross-entropy

TEST_F(CudaNnKernelsTest, SoftmaxCrossEntropyMatchesCpu) {
  struct Case {
    int64_t N, V, Vp;
  };
  const Case cases[] = {{32, 97, 128}, {5, 51, 61}, {3, 1000, 1000}, {4, 700, 777}};
  for (const Case& cs : cases) {
    for (float dloss : {0.0f, 1.0f / 32.0f}) {  // 0: losses only (kKeep)
      const LogitsOutput output = dloss == 0.0f ? LogitsOutput::kKeep : LogitsOutput::kGradient;
      const std::string what = "N" + std::to_string(cs.N) + " V" + std::to_string(cs.V) + " Vp" +
                               std::to_string(cs.Vp) + " dloss " + std::to_string(dloss);
      std::vector<int32_t> host_targets = random_tokens(cs.N, int32_t(cs.V), 8);
      host_targets[0] = int32_t(cs.V - 1);  // the last real column
      host_targets[cs.N - 1] = 0;
      Mirror targets = mirror(host_targets);
      const std::vector<float> host_logits = random_floats(cs.N * cs.Vp, 1, -4.0f, 4.0f);
      Mirror logits = mirror(host_logits);
      Mirror losses = mirror(random_floats(cs.N, 2));
      cpu().softmax_cross_entropy(losses.c(), logits.c(), targets.ci(), cs.N, cs.V, cs.Vp, output,
                                  dloss);
      gpu().softmax_cross_entropy(losses.g(), logits.g(), targets.gi(), cs.N, cs.V, cs.Vp, output,
                                  dloss);
      expect_close(losses.gpu(), losses.cpu(), kRtol, what + " losses");
      const std::vector<float> grad = logits.gpu();
      if (dloss == 0.0f) {
        EXPECT_TRUE(same_bits(grad, host_logits)) << what << ": logits changed with dloss 0";
        continue;
      }
      expect_close(grad, logits.cpu(), kRtol, what + " gradient");
      for (int64_t r = 0; r < cs.N; ++r)
        for (int64_t i = cs.V; i < cs.Vp; ++i)
          ASSERT_EQ(grad[r * cs.Vp + i], 0.0f) << what << " padded column " << i << " row " << r;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The 16-bit tables (Device::kernels_for) with parameters and their gradients stored in 16 bits,
// against the CPU's table of the same dtype. Every activation written holds a value of the
// dtype on both; the fp32 values the two round differ by ~1e-6 relative, so rounded results
// agree within a unit in the last place of the dtype (the tolerance is two). The embedding
// gradients add the same terms in the same order on both: bitwise. Wrong dtype reads or a
// missing rounding give O(1) errors or unrepresentable values.

// x rounded to t (t's values, as activations of a t table hold).
std::vector<float> rounded_to(std::vector<float> x, DType t) {
  for (float& v : x) {
    if (t == DType::kF16) v = fp16_to_fp32(fp32_to_fp16(v));
    if (t == DType::kBF16) v = bf16_to_fp32(fp32_to_bf16(v));
  }
  return x;
}

// Every element of x is a value of dtype t.
void expect_representable(const std::vector<float>& x, DType t, const std::string& what) {
  int failures = 0;
  for (size_t i = 0; i < x.size() && failures < 5; ++i) {
    const float r =
        t == DType::kF16 ? fp16_to_fp32(fp32_to_fp16(x[i])) : bf16_to_fp32(fp32_to_bf16(x[i]));
    if (!same_bits({r}, {x[i]})) {
      ADD_FAILURE() << what << "[" << i << "] = " << x[i] << " is not a " << dtype_name(t)
                    << " value";
      ++failures;
    }
  }
}

TEST_F(CudaNnKernelsTest, SixteenBitTablesAndOperandsMatchCpu) {
  for (DType t : {DType::kF16, DType::kBF16}) {
    Kernels& ck = cpu_dev_.kernels_for(t);
    Kernels& gk = gpu_dev_->kernels_for(t);
    const double rtol = t == DType::kBF16 ? 0x1p-7 : 0x1p-10;
    const std::string type = " " + std::string(dtype_name(t));

    // Matmul: 16-bit weight, bias and their gradients.
    const int64_t M = 37, K = 30, N = 61;
    for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
      const std::string what =
          std::string(layout == WeightLayout::kInOut ? "matmul inout" : "matmul outin") + type;
      Mirror inp = mirror(rounded_to(random_floats(M * K, 1), t));  // t's values (kernels.h)
      Mirror w = mirror_as(random_floats(K * N, 2), t);
      Mirror bias = mirror_as(random_floats(N, 3), t);
      Mirror out = mirror(random_floats(M * N, 4));
      ck.matmul_forward(out.c(), inp.c(), w.co(t), bias.co(t), M, K, N, layout);
      gk.matmul_forward(out.g(), inp.g(), w.go(t), bias.go(t), M, K, N, layout);
      expect_close(out.gpu(), out.cpu(), rtol, what + " out");
      expect_representable(out.gpu(), t, what + " out");
      Mirror dout = mirror(rounded_to(random_floats(M * N, 5), t));
      Mirror dinp = mirror(rounded_to(random_floats(M * K, 6), t));
      Mirror dw = mirror_as(random_floats(K * N, 7), t);
      Mirror db = mirror_as(random_floats(N, 8), t);
      ck.matmul_backward(dinp.c(), dw.co(t), db.co(t), dout.c(), inp.c(), w.co(t), M, K, N, layout);
      gk.matmul_backward(dinp.g(), dw.go(t), db.go(t), dout.g(), inp.g(), w.go(t), M, K, N, layout);
      expect_close(dinp.gpu(), dinp.cpu(), rtol, what + " dinp");
      expect_representable(dinp.gpu(), t, what + " dinp");
      expect_close(dw.gpu_as(t), dw.cpu_as(t), rtol, what + " dweight");
      expect_close(db.gpu_as(t), db.cpu_as(t), rtol, what + " dbias");
    }

    // Embedding: 16-bit tables and gradients.
    {
      const Shape& s = kShapes[1];
      const std::string what = "embedding" + type;
      Mirror tokens = mirror(random_tokens(s.B * s.T, int32_t(s.V), 11));
      Mirror wte = mirror_as(random_floats(s.V * s.C, 12), t);
      Mirror wpe = mirror_as(random_floats(s.T * s.C, 13), t);
      Mirror out = mirror(random_floats(s.B * s.T * s.C, 14));
      ck.embedding_forward(out.c(), tokens.ci(), wte.co(t), wpe.co(t), s.B, s.T, s.C, nullptr);
      gk.embedding_forward(out.g(), tokens.gi(), wte.go(t), wpe.go(t), s.B, s.T, s.C, nullptr);
      EXPECT_TRUE(same_bits(out.gpu(), out.cpu())) << what << " out";
      expect_representable(out.gpu(), t, what + " out");
      Mirror dout = mirror(random_floats(s.B * s.T * s.C, 15));
      Mirror dwte = mirror_as(random_floats(s.V * s.C, 16), t);
      Mirror dwpe = mirror_as(random_floats(s.T * s.C, 17), t);
      ck.embedding_backward(dwte.co(t), dwpe.co(t), dout.c(), tokens.ci(), s.B, s.T, s.C, nullptr);
      gk.embedding_backward(dwte.go(t), dwpe.go(t), dout.g(), tokens.gi(), s.B, s.T, s.C, nullptr);
      EXPECT_TRUE(same_bits(dwte.gpu_as(t), dwte.cpu_as(t))) << what << " dwte";
      EXPECT_TRUE(same_bits(dwpe.gpu_as(t), dwpe.cpu_as(t))) << what << " dwpe";
    }

    // Layer norm: 16-bit weight, bias and their gradients; mean and rstd stay fp32.
    {
      const int64_t rows = 77, C = 30;
      const std::string what = "layernorm" + type;
      Mirror inp = mirror(random_floats(rows * C, 21, -2.0f, 3.0f));
      Mirror w = mirror_as(random_floats(C, 22, 0.5f, 1.5f), t);
      Mirror b = mirror_as(random_floats(C, 23), t);
      Mirror out = mirror(random_floats(rows * C, 24));
      Mirror mean = mirror(random_floats(rows, 25));
      Mirror rstd = mirror(random_floats(rows, 26));
      ck.layernorm_forward(out.c(), mean.c(), rstd.c(), inp.c(), w.co(t), b.co(t), rows, C);
      gk.layernorm_forward(out.g(), mean.g(), rstd.g(), inp.g(), w.go(t), b.go(t), rows, C);
      expect_close(out.gpu(), out.cpu(), rtol, what + " out");
      expect_representable(out.gpu(), t, what + " out");
      expect_close(mean.gpu(), mean.cpu(), kRtol, what + " mean");
      expect_close(rstd.gpu(), rstd.cpu(), kRtol, what + " rstd");
      mean.reset_gpu(mean.cpu());
      rstd.reset_gpu(rstd.cpu());
      Mirror dout = mirror(random_floats(rows * C, 27));
      Mirror dinp = mirror(random_floats(rows * C, 28));
      Mirror dw = mirror_as(random_floats(C, 29), t);
      Mirror db = mirror_as(random_floats(C, 30), t);
      ck.layernorm_backward(dinp.c(), dw.co(t), db.co(t), dout.c(), inp.c(), w.co(t), mean.c(),
                            rstd.c(), rows, C);
      gk.layernorm_backward(dinp.g(), dw.go(t), db.go(t), dout.g(), inp.g(), w.go(t), mean.g(),
                            rstd.g(), rows, C);
      expect_close(dinp.gpu(), dinp.cpu(), rtol, what + " dinp");
      expect_representable(dinp.gpu(), t, what + " dinp");
      expect_close(dw.gpu_as(t), dw.cpu_as(t), rtol, what + " dweight");
      expect_close(db.gpu_as(t), db.cpu_as(t), rtol, what + " dbias");
    }

    // The activation-only ops of the table round what they write.
    {
      const Shape& s = kShapes[0];
      const std::string what = "activations" + type;
      const int64_t n = s.B * s.T * s.C, att_n = s.B * s.NH * s.T * s.T;
      Mirror qkv = mirror(random_floats(3 * n, 31, -2.0f, 2.0f));
      Mirror out = mirror(random_floats(n, 32));
      Mirror att = mirror(random_floats(att_n, 33));
      gk.attention_forward(out.g(), att.g(), qkv.g(), s.B, s.T, s.C, s.NH, nullptr);
      expect_representable(out.gpu(), t, what + " attention out");
      expect_representable(att.gpu(), t, what + " attention att");
      Mirror dqkv = mirror(random_floats(3 * n, 34));
      Mirror dout = mirror(random_floats(n, 35));
      gk.attention_backward(dqkv.g(), dout.g(), qkv.g(), att.g(), s.B, s.T, s.C, s.NH, nullptr);
      expect_representable(dqkv.gpu(), t, what + " attention dqkv");
      Mirror x = mirror(random_floats(n, 36));
      Mirror y = mirror(random_floats(n, 37));
      gk.residual_forward(out.g(), x.g(), y.g(), n);
      expect_representable(out.gpu(), t, what + " residual");
      gk.gelu_forward(out.g(), x.g(), n);
      expect_representable(out.gpu(), t, what + " gelu");
      gk.gelu_backward(y.g(), x.g(), dout.g(), n);
      expect_representable(y.gpu(), t, what + " gelu dinp");
      gk.accumulate(x.g(), dout.g(), n);
      expect_representable(x.gpu(), t, what + " accumulate");
      gk.fill(x.g(), 0.1f, n);
      expect_representable(x.gpu(), t, what + " fill");
      Mirror logits = mirror(random_floats(s.B * s.T * s.Vp, 38, -3.0f, 3.0f));
      Mirror targets = mirror(random_tokens(s.B * s.T, int32_t(s.V), 39));
      Mirror losses = mirror(random_floats(s.B * s.T, 40));
      gk.softmax_cross_entropy(losses.g(), logits.g(), targets.gi(), s.B * s.T, s.V, s.Vp,
                               LogitsOutput::kGradient, 0.5f);
      expect_representable(logits.gpu(), t, what + " cross-entropy gradient");
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Determinism: each op twice on the GPU from the same inputs gives the same bits.

TEST_F(CudaNnKernelsTest, EveryOpIsDeterministic) {
  const Shape s = kShapes[1];
  const int64_t BT = s.B * s.T, C = s.C, att_n = s.B * s.NH * s.T * s.T;
  // Runs `op` twice from the same starting contents of `outputs` and compares the bits.
  auto twice = [&](const std::string& what, std::vector<Mirror*> outputs,
                   const std::function<void()>& op) {
    std::vector<std::vector<float>> start, first;
    for (Mirror* m : outputs) start.push_back(m->gpu());
    op();
    for (Mirror* m : outputs) first.push_back(m->gpu());
    for (size_t i = 0; i < outputs.size(); ++i) outputs[i]->reset_gpu(start[i]);
    op();
    for (size_t i = 0; i < outputs.size(); ++i)
      EXPECT_TRUE(same_bits(outputs[i]->gpu(), first[i])) << what << " output " << i;
  };
  Mirror inp = mirror(random_floats(BT * C, 1));
  Mirror w = mirror(random_floats(C * 3 * C, 2));
  Mirror bias = mirror(random_floats(3 * C, 3));
  Mirror qkv = mirror(random_floats(BT * 3 * C, 4));
  Mirror dqkv = mirror(random_floats(BT * 3 * C, 5));
  Mirror dinp = mirror(random_floats(BT * C, 6));
  Mirror dw = mirror(random_floats(C * 3 * C, 7));
  Mirror db = mirror(random_floats(3 * C, 8));
  for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
    twice("matmul_forward", {&qkv},
          [&] { gpu().matmul_forward(qkv.g(), inp.g(), w.g(), bias.g(), BT, C, 3 * C, layout); });
    twice("matmul_backward", {&dinp, &dw, &db}, [&] {
      gpu().matmul_backward(dinp.g(), dw.g(), db.g(), dqkv.g(), inp.g(), w.g(), BT, C, 3 * C,
                            layout);
    });
  }
  Mirror tokens = mirror(random_tokens(BT, int32_t(s.V), 9));
  Mirror wte = mirror(random_floats(s.Vp * C, 10));
  Mirror wpe = mirror(random_floats(s.T * C, 11));
  Mirror out = mirror(random_floats(BT * C, 12));
  twice("embedding_forward", {&out}, [&] {
    gpu().embedding_forward(out.g(), tokens.gi(), wte.g(), wpe.g(), s.B, s.T, C, nullptr);
  });
  twice("embedding_backward", {&wte, &wpe}, [&] {
    gpu().embedding_backward(wte.g(), wpe.g(), inp.g(), tokens.gi(), s.B, s.T, C, nullptr);
  });
  Mirror lnw = mirror(random_floats(C, 13));
  Mirror lnb = mirror(random_floats(C, 14));
  Mirror mean = mirror(random_floats(BT, 15));
  Mirror rstd = mirror(random_floats(BT, 16));
  twice("layernorm_forward", {&out, &mean, &rstd}, [&] {
    gpu().layernorm_forward(out.g(), mean.g(), rstd.g(), inp.g(), lnw.g(), lnb.g(), BT, C);
  });
  twice("layernorm_backward", {&dinp, &lnw, &lnb}, [&] {
    gpu().layernorm_backward(dinp.g(), lnw.g(), lnb.g(), out.g(), inp.g(), bias.g(), mean.g(),
                             rstd.g(), BT, C);
  });
  Mirror att = mirror(random_floats(att_n, 17));
  twice("attention_forward", {&out, &att},
        [&] { gpu().attention_forward(out.g(), att.g(), qkv.g(), s.B, s.T, C, s.NH, nullptr); });
  twice("attention_backward", {&dqkv}, [&] {
    gpu().attention_backward(dqkv.g(), inp.g(), qkv.g(), att.g(), s.B, s.T, C, s.NH, nullptr);
  });
  Mirror logits = mirror(random_floats(BT * s.Vp, 18, -4.0f, 4.0f));
  Mirror losses = mirror(random_floats(BT, 19));
  twice("softmax_cross_entropy", {&logits, &losses}, [&] {
    gpu().softmax_cross_entropy(losses.g(), logits.g(), tokens.gi(), BT, s.V, s.Vp,
                                LogitsOutput::kGradient, 0.5f);
  });
}

// ---------------------------------------------------------------------------------------------
// Llama's kernels: RMSNorm, rotary embeddings, SwiGLU, grouped-query attention, the embedding
// without a position table (CPU references: kernels_llama_test.cpp).

TEST_F(CudaNnKernelsTest, RmsnormForwardAndBackwardMatchCpu) {
  for (int64_t C : {int64_t{32}, int64_t{61}}) {
    const int64_t N = 1001;  // more rows than the weight reduction's row groups, not a multiple
    const std::string what = "rmsnorm C" + std::to_string(C);
    Mirror x = mirror(random_floats(N * C, 1, -2.0f, 2.0f));
    Mirror w = mirror(random_floats(C, 2, 0.5f, 1.5f));
    Mirror out = mirror(random_floats(N * C, 3));
    Mirror rstd = mirror(random_floats(N, 4));
    cpu().rmsnorm_forward(out.c(), rstd.c(), x.c(), w.c(), N, C, 1e-6f);
    gpu().rmsnorm_forward(out.g(), rstd.g(), x.g(), w.g(), N, C, 1e-6f);
    expect_close(out.gpu(), out.cpu(), kRtol, what + " out");
    expect_close(rstd.gpu(), rstd.cpu(), kRtol, what + " rstd");
    rstd.reset_gpu(rstd.cpu());
    Mirror dout = mirror(random_floats(N * C, 5));
    Mirror dx = mirror(random_floats(N * C, 6));  // non-zero: += is checked
    Mirror dw = mirror(random_floats(C, 7));
    cpu().rmsnorm_backward(dx.c(), dw.c(), dout.c(), x.c(), w.c(), rstd.c(), N, C);
    gpu().rmsnorm_backward(dx.g(), dw.g(), dout.g(), x.g(), w.g(), rstd.g(), N, C);
    expect_close(dx.gpu(), dx.cpu(), kRtol, what + " dinp");
    expect_close(dw.gpu(), dw.cpu(), 1e-4, what + " dweight");  // 1001-term sums, other order
  }
}

TEST_F(CudaNnKernelsTest, RopeForwardAndBackwardMatchCpu) {
  const int64_t B = 2, T = 300, NH = 4, NKV = 2, hd = 64, R = (NH + 2 * NKV) * hd;
  for (float theta : {10000.0f, 1000000.0f}) {
    const std::string what = "rope theta " + std::to_string(theta);
    Mirror qkv = mirror(random_floats(B * T * R, 1));
    cpu().rope_forward(qkv.c(), B, T, NH, NKV, hd, theta, nullptr);
    gpu().rope_forward(qkv.g(), B, T, NH, NKV, hd, theta, nullptr);
    // The same fp32 angles; cos/sin in double on both, so at most a rare 1-ulp difference.
    expect_close(qkv.gpu(), qkv.cpu(), kRtol, what + " forward");
    qkv.reset_gpu(qkv.cpu());
    cpu().rope_backward(qkv.c(), B, T, NH, NKV, hd, theta, nullptr);
    gpu().rope_backward(qkv.g(), B, T, NH, NKV, hd, theta, nullptr);
    expect_close(qkv.gpu(), qkv.cpu(), kRtol, what + " backward");
  }
}

TEST_F(CudaNnKernelsTest, SwigluForwardAndBackwardMatchCpu) {
  const int64_t N = 37, F = 61;
  Mirror gate_up = mirror(random_floats(N * 2 * F, 1, -8.0f, 8.0f));
  Mirror out = mirror(random_floats(N * F, 2));
  cpu().swiglu_forward(out.c(), gate_up.c(), N, F);
  gpu().swiglu_forward(out.g(), gate_up.g(), N, F);
  expect_close(out.gpu(), out.cpu(), kRtol, "swiglu out");
  Mirror dout = mirror(random_floats(N * F, 3));
  Mirror dgate_up = mirror(random_floats(N * 2 * F, 4));  // non-zero: += is checked
  cpu().swiglu_backward(dgate_up.c(), gate_up.c(), dout.c(), N, F);
  gpu().swiglu_backward(dgate_up.g(), gate_up.g(), dout.g(), N, F);
  expect_close(dgate_up.gpu(), dgate_up.cpu(), kRtol, "swiglu dgate_up");
}

TEST_F(CudaNnKernelsTest, GqaAttentionForwardAndBackwardMatchCpu) {
  struct GqaShape {
    int64_t B, T, NH, NKV, hd;
  };
  for (const GqaShape& s :
       {GqaShape{2, 16, 4, 2, 16}, GqaShape{3, 37, 6, 2, 20}, GqaShape{1, 33, 4, 1, 8}}) {
    const std::string what = "gqa T" + std::to_string(s.T) + " NH" + std::to_string(s.NH) + " NKV" +
                             std::to_string(s.NKV);
    const int64_t R = (s.NH + 2 * s.NKV) * s.hd, HD = s.NH * s.hd;
    Mirror qkv = mirror(random_floats(s.B * s.T * R, 1, -2.0f, 2.0f));
    Mirror out = mirror(random_floats(s.B * s.T * HD, 2));
    Mirror att = mirror(random_floats(s.B * s.NH * s.T * s.T, 3));
    cpu().gqa_attention_forward(out.c(), att.c(), qkv.c(), s.B, s.T, s.NH, s.NKV, s.hd, nullptr);
    gpu().gqa_attention_forward(out.g(), att.g(), qkv.g(), s.B, s.T, s.NH, s.NKV, s.hd, nullptr);
    expect_close(att.gpu(), att.cpu(), kRtol, what + " att");
    expect_close(out.gpu(), out.cpu(), kRtol, what + " out");
    att.reset_gpu(att.cpu());
    Mirror dout = mirror(random_floats(s.B * s.T * HD, 4));
    Mirror dqkv = mirror(random_floats(s.B * s.T * R, 5));  // non-zero: += is checked
    cpu().gqa_attention_backward(dqkv.c(), dout.c(), qkv.c(), att.c(), s.B, s.T, s.NH, s.NKV, s.hd,
                                 nullptr);
    gpu().gqa_attention_backward(dqkv.g(), dout.g(), qkv.g(), att.g(), s.B, s.T, s.NH, s.NKV, s.hd,
                                 nullptr);
    expect_close(dqkv.gpu(), dqkv.cpu(), kRtol, what + " dqkv");
  }
}

TEST_F(CudaNnKernelsTest, EmbeddingWithoutPositionsMatchesCpu) {
  const int64_t B = 2, T = 9, C = 40, V = 31;
  Mirror tokens = mirror(random_tokens(B * T, int32_t(V), 1));
  Mirror wte = mirror(random_floats(V * C, 2));
  Mirror out = mirror(random_floats(B * T * C, 3));
  cpu().embedding_forward(out.c(), tokens.ci(), wte.c(), nullptr, B, T, C, nullptr);
  gpu().embedding_forward(out.g(), tokens.gi(), wte.g(), nullptr, B, T, C, nullptr);
  EXPECT_TRUE(same_bits(out.gpu(), out.cpu()));
  Mirror dout = mirror(random_floats(B * T * C, 4));
  Mirror dwte = mirror(random_floats(V * C, 5));
  cpu().embedding_backward(dwte.c(), nullptr, dout.c(), tokens.ci(), B, T, C, nullptr);
  gpu().embedding_backward(dwte.g(), nullptr, dout.g(), tokens.gi(), B, T, C, nullptr);
  EXPECT_TRUE(same_bits(dwte.gpu(), dwte.cpu()));
}

// ---------------------------------------------------------------------------------------------
// Packed documents and ignored targets (CPU references: kernels_attention_test.cpp,
// kernels_llama_test.cpp, kernels_nn_test.cpp)

// Two rows of 13 (two_rows_of_13: a single-token document, boundaries inside and at the edge of
// a block of 4), and a row of 37 (20, 1, 16 tokens: the warp's 32 keys crossed).
struct DocumentRows {
  int64_t B, T;
  std::vector<int32_t> positions;
};
std::vector<DocumentRows> document_rows() {
  return {{2, 13, test::two_rows_of_13()}, {1, 37, test::document_positions({{20, 1, 16}})}};
}

TEST_F(CudaNnKernelsTest, GqaAttentionWithinDocumentsMatchesCpu) {
  struct Heads {
    int64_t NH, NKV, hd;
  };
  for (const DocumentRows& d : document_rows())
    for (const Heads& h : {Heads{4, 4, 8}, Heads{6, 2, 20}}) {
      const std::string what = "documents T" + std::to_string(d.T) + " NH" + std::to_string(h.NH) +
                               " NKV" + std::to_string(h.NKV);
      const int64_t R = (h.NH + 2 * h.NKV) * h.hd, HD = h.NH * h.hd;
      const int64_t att_n = d.B * h.NH * d.T * d.T;
      Mirror positions = mirror(d.positions);
      Mirror qkv = mirror(random_floats(d.B * d.T * R, 1, -2.0f, 2.0f));
      Mirror out = mirror(random_floats(d.B * d.T * HD, 2));
      Mirror att = mirror(random_floats(att_n, 3));  // outside each document must become 0
      cpu().gqa_attention_forward(out.c(), att.c(), qkv.c(), d.B, d.T, h.NH, h.NKV, h.hd,
                                  positions.ci());
      gpu().gqa_attention_forward(out.g(), att.g(), qkv.g(), d.B, d.T, h.NH, h.NKV, h.hd,
                                  positions.gi());
      const std::vector<float> att_gpu = att.gpu();
      expect_close(att_gpu, att.cpu(), kRtol, what + " att");
      expect_close(out.gpu(), out.cpu(), kRtol, what + " out");
      for (int64_t row = 0; row < d.B * h.NH * d.T; ++row) {
        const int64_t t = row % d.T, bt = row / (h.NH * d.T) * d.T + t;
        const int64_t w = test::first_key(d.positions.data(), bt, d.T);
        for (int64_t j = 0; j < d.T; ++j) {
          if (j < w || j > t) {
            ASSERT_EQ(att_gpu[row * d.T + j], 0.0f) << what << " row " << row;
          }
        }
      }
      att.reset_gpu(att.cpu());
      Mirror dout = mirror(random_floats(d.B * d.T * HD, 4));
      Mirror dqkv = mirror(random_floats(d.B * d.T * R, 5));  // non-zero: += is checked
      cpu().gqa_attention_backward(dqkv.c(), dout.c(), qkv.c(), att.c(), d.B, d.T, h.NH, h.NKV,
                                   h.hd, positions.ci());
      gpu().gqa_attention_backward(dqkv.g(), dout.g(), qkv.g(), att.g(), d.B, d.T, h.NH, h.NKV,
                                   h.hd, positions.gi());
      expect_close(dqkv.gpu(), dqkv.cpu(), kRtol, what + " dqkv");
      if (h.NH == h.NKV) {  // multi-head attention is the same kernels: the same bits
        const int64_t C = h.NH * h.hd;
        Mirror mha_out = mirror(random_floats(d.B * d.T * HD, 6));
        gpu().attention_forward(mha_out.g(), att.g(), qkv.g(), d.B, d.T, C, h.NH, positions.gi());
        gpu().gqa_attention_forward(out.g(), att.g(), qkv.g(), d.B, d.T, h.NH, h.NKV, h.hd,
                                    positions.gi());
        EXPECT_TRUE(same_bits(mha_out.gpu(), out.gpu())) << what << " attention_forward";
      }
    }
}

TEST_F(CudaNnKernelsTest, RopeAtDocumentPositionsMatchesCpu) {
  for (const DocumentRows& d : document_rows()) {
    const int64_t NH = 4, NKV = 2, hd = 16, R = (NH + 2 * NKV) * hd;
    const std::string what = "rope documents T" + std::to_string(d.T);
    Mirror positions = mirror(d.positions);
    Mirror qkv = mirror(random_floats(d.B * d.T * R, 1));
    cpu().rope_forward(qkv.c(), d.B, d.T, NH, NKV, hd, 10000.0f, positions.ci());
    gpu().rope_forward(qkv.g(), d.B, d.T, NH, NKV, hd, 10000.0f, positions.gi());
    expect_close(qkv.gpu(), qkv.cpu(), kRtol, what + " forward");
    qkv.reset_gpu(qkv.cpu());
    cpu().rope_backward(qkv.c(), d.B, d.T, NH, NKV, hd, 10000.0f, positions.ci());
    gpu().rope_backward(qkv.g(), d.B, d.T, NH, NKV, hd, 10000.0f, positions.gi());
    expect_close(qkv.gpu(), qkv.cpu(), kRtol, what + " backward");
  }
}

// The same additions in the same (token) order as the CPU: the same bits.
TEST_F(CudaNnKernelsTest, EmbeddingAtDocumentPositionsMatchesCpu) {
  for (const DocumentRows& d : document_rows()) {
    const int64_t C = 40, V = 31;
    const std::string what = "embedding documents T" + std::to_string(d.T);
    Mirror positions = mirror(d.positions);
    Mirror tokens = mirror(random_tokens(d.B * d.T, int32_t(V), 1));
    Mirror wte = mirror(random_floats(V * C, 2));
    Mirror wpe = mirror(random_floats(d.T * C, 3));
    Mirror out = mirror(random_floats(d.B * d.T * C, 4));
    cpu().embedding_forward(out.c(), tokens.ci(), wte.c(), wpe.c(), d.B, d.T, C, positions.ci());
    gpu().embedding_forward(out.g(), tokens.gi(), wte.g(), wpe.g(), d.B, d.T, C, positions.gi());
    EXPECT_TRUE(same_bits(out.gpu(), out.cpu())) << what << " forward";
    Mirror dout = mirror(random_floats(d.B * d.T * C, 5));
    Mirror dwte = mirror(random_floats(V * C, 6));
    Mirror dwpe = mirror(random_floats(d.T * C, 7));
    cpu().embedding_backward(dwte.c(), dwpe.c(), dout.c(), tokens.ci(), d.B, d.T, C,
                             positions.ci());
    gpu().embedding_backward(dwte.g(), dwpe.g(), dout.g(), tokens.gi(), d.B, d.T, C,
                             positions.gi());
    EXPECT_TRUE(same_bits(dwte.gpu(), dwte.cpu())) << what << " dwte";
    EXPECT_TRUE(same_bits(dwpe.gpu(), dwpe.cpu())) << what << " dwpe";
  }
}

// Ignored rows: loss 0 and a zero gradient row (padding included), exactly; with dloss 0 the row
// is left alone. The other rows as the CPU's.
TEST_F(CudaNnKernelsTest, SoftmaxCrossEntropyIgnoresNegativeTargets) {
  const int64_t N = 6, V = 51, Vp = 61;
  const std::vector<int32_t> host_targets = {3, kIgnoreTarget, 50, -9, 0, kIgnoreTarget};
  const std::vector<float> host_logits = random_floats(N * Vp, 1, -4.0f, 4.0f);
  for (float dloss : {0.0f, 0.5f}) {  // 0: losses only (kKeep)
    const LogitsOutput output = dloss == 0.0f ? LogitsOutput::kKeep : LogitsOutput::kGradient;
    const std::string what = "dloss " + std::to_string(dloss);
    Mirror targets = mirror(host_targets);
    Mirror logits = mirror(host_logits);
    Mirror losses = mirror(random_floats(N, 2));
    cpu().softmax_cross_entropy(losses.c(), logits.c(), targets.ci(), N, V, Vp, output, dloss);
    gpu().softmax_cross_entropy(losses.g(), logits.g(), targets.gi(), N, V, Vp, output, dloss);
    expect_close(losses.gpu(), losses.cpu(), kRtol, what + " losses");
    expect_close(logits.gpu(), logits.cpu(), kRtol, what + " gradient");
    const std::vector<float> loss_gpu = losses.gpu(), grad = logits.gpu();
    for (int64_t r = 0; r < N; ++r) {
      if (host_targets[r] >= 0) continue;
      EXPECT_TRUE(same_bits({loss_gpu[r]}, {0.0f})) << what << " row " << r;
      for (int64_t i = 0; i < Vp; ++i) {
        const float want = dloss == 0.0f ? host_logits[r * Vp + i] : 0.0f;
        ASSERT_TRUE(same_bits({grad[r * Vp + i]}, {want})) << what << " row " << r << " col " << i;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Tensor-core GEMMs and two-stage column reductions, every dtype (issue 11): the table of
// activation dtype t with weights, biases and gradients stored as t (16-bit: cuBLASLt with
// 16-bit operands and fp32 accumulation; fp32: cuBLAS as before), against the CPU's table of the
// same dtype, on shapes that are no multiple of 8 or 16. Inputs hold t's values (kernels.h).
// Per-element tolerance: the error bound of two fp32 summations of the same terms in different
// orders, 2·(terms + 2)·2⁻²⁴·Σ|term| (Σ over the products, the starting value and the bias), plus
// one unit in the last place of t at the result (two results within the bound may round to
// neighbouring t values). A layout or transpose mistake gives O(Σ|term|) errors.

// The relative spacing of t's values (one ulp at 1): 2⁻²³, 2⁻¹⁰, 2⁻⁷.
double ulp_of(DType t) { return t == DType::kF32 ? 0x1p-23 : t == DType::kF16 ? 0x1p-10 : 0x1p-7; }

// |gpu - cpu| <= ulp_of(t)·max(|gpu|, |cpu|) + 2·(terms + 2)·2⁻²⁴·abs_sum[i] per element.
void expect_within_sum_bound(const std::vector<float>& gpu, const std::vector<float>& cpu,
                             const std::vector<double>& abs_sum, int64_t terms, DType t,
                             const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  ASSERT_EQ(gpu.size(), abs_sum.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < gpu.size() && failures < 5; ++i) {
    const double g = gpu[i], c = cpu[i];
    const double tol = ulp_of(t) * std::max(std::abs(g), std::abs(c)) +
                       2.0 * double(terms + 2) * 0x1p-24 * abs_sum[i];
    if (!(std::abs(g - c) <= tol)) {
      ADD_FAILURE() << what << "[" << i << "]: gpu " << g << ", cpu " << c << " (error "
                    << std::abs(g - c) << ", tolerance " << tol << ")";
      ++failures;
    }
  }
}

// Σ_k |a[i,k]·b[k,j]| (+ |start[i,j]| + |bias[j]|) for row-major A (rows, inner) times B given
// element-wise by b(k, j): the magnitude the fp32 sums of out[i,j] are bounded by.
template <class B>
std::vector<double> product_abs_sums(const std::vector<float>& a, int64_t rows, int64_t inner,
                                     int64_t cols, const B& b, const std::vector<float>* start,
                                     const std::vector<float>* bias) {
  std::vector<double> s(static_cast<size_t>(rows * cols), 0.0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      double acc = 0.0;
      for (int64_t k = 0; k < inner; ++k) acc += std::abs(double(a[i * inner + k]) * b(k, j));
      if (start) acc += std::abs(double((*start)[i * cols + j]));
      if (bias) acc += std::abs(double((*bias)[j]));
      s[i * cols + j] = acc;
    }
  return s;
}

struct GemmCase {
  int64_t M, K, N;
};
// Awkward shapes: odd, prime, one row, one column, inner dimensions around a tile's.
const GemmCase kGemmCases[] = {{37, 30, 61}, {1, 7, 3},   {130, 33, 257},
                               {19, 200, 9}, {64, 1, 17}, {5, 129, 1}};

std::string gemm_name(const GemmCase& g, WeightLayout layout, DType t) {
  return "M" + std::to_string(g.M) + " K" + std::to_string(g.K) + " N" + std::to_string(g.N) +
         (layout == WeightLayout::kInOut ? " inout " : " outin ") + std::string(dtype_name(t));
}

TEST_F(CudaNnKernelsTest, TensorCoreMatmulForwardMatchesCpuForEveryDtype) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16})
    for (const GemmCase& g : kGemmCases)
      for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn})
        for (bool with_bias : {true, false}) {
          const std::string what = gemm_name(g, layout, t) + (with_bias ? " bias" : " nobias");
          const bool in_out = layout == WeightLayout::kInOut;
          const std::vector<float> inp = rounded_to(random_floats(g.M * g.K, 1), t);
          const std::vector<float> w = rounded_to(random_floats(g.K * g.N, 2), t);
          const std::vector<float> bias = rounded_to(random_floats(g.N, 3), t);
          Mirror inp_m = mirror(inp);
          Mirror w_m = mirror_as(w, t);
          Mirror bias_m = mirror_as(bias, t);
          Mirror out = mirror(random_floats(g.M * g.N, 4, 5.0f, 6.0f));  // overwritten
          const ConstOperand cb = with_bias ? ConstOperand(bias_m.co(t)) : ConstOperand();
          const ConstOperand gb = with_bias ? ConstOperand(bias_m.go(t)) : ConstOperand();
          cpu_dev_.kernels_for(t).matmul_forward(out.c(), inp_m.c(), w_m.co(t), cb, g.M, g.K, g.N,
                                                 layout);
          gpu_dev_->kernels_for(t).matmul_forward(out.g(), inp_m.g(), w_m.go(t), gb, g.M, g.K, g.N,
                                                  layout);
          auto w_at = [&](int64_t k, int64_t j) {
            return double(in_out ? w[k * g.N + j] : w[j * g.K + k]);
          };
          const std::vector<double> bound =
              product_abs_sums(inp, g.M, g.K, g.N, w_at, nullptr, with_bias ? &bias : nullptr);
          const std::vector<float> got = out.gpu();
          expect_within_sum_bound(got, out.cpu(), bound, g.K, t, what);
          if (t != DType::kF32) expect_representable(got, t, what);
        }
}

// The 16-bit forward with a bias of another dtype (fp32 bias, bf16 weights): the fp32 path of
// the epilogue-less GEMM, still one rounding.
TEST_F(CudaNnKernelsTest, SixteenBitMatmulWithAnFp32BiasMatchesCpu) {
  const DType t = DType::kBF16;
  const GemmCase g{37, 30, 61};
  for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
    const std::string what = gemm_name(g, layout, t) + " fp32 bias";
    const std::vector<float> inp = rounded_to(random_floats(g.M * g.K, 1), t);
    const std::vector<float> w = rounded_to(random_floats(g.K * g.N, 2), t);
    const std::vector<float> bias = random_floats(g.N, 3);  // not bf16 values
    Mirror inp_m = mirror(inp);
    Mirror w_m = mirror_as(w, t);
    Mirror bias_m = mirror(bias);
    Mirror out = mirror(random_floats(g.M * g.N, 4));
    cpu_dev_.kernels_for(t).matmul_forward(out.c(), inp_m.c(), w_m.co(t), bias_m.c(), g.M, g.K, g.N,
                                           layout);
    gpu_dev_->kernels_for(t).matmul_forward(out.g(), inp_m.g(), w_m.go(t), bias_m.g(), g.M, g.K,
                                            g.N, layout);
    const bool in_out = layout == WeightLayout::kInOut;
    auto w_at = [&](int64_t k, int64_t j) {
      return double(in_out ? w[k * g.N + j] : w[j * g.K + k]);
    };
    const std::vector<float> got = out.gpu();
    expect_within_sum_bound(
        got, out.cpu(), product_abs_sums(inp, g.M, g.K, g.N, w_at, nullptr, &bias), g.K, t, what);
    expect_representable(got, t, what);
  }
}

// Backward: dinp (activation, starts non-zero), dweight accumulated in its dtype (16-bit: one
// rounding of dW + inpᵀ·dout; also an fp32 dweight beside a 16-bit table), dbias (two-stage
// column sums), against the CPU.
TEST_F(CudaNnKernelsTest, TensorCoreMatmulBackwardMatchesCpuForEveryDtype) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16})
    for (DType grad_t :
         t == DType::kF32 ? std::vector<DType>{t} : std::vector<DType>{t, DType::kF32}) {
      for (const GemmCase& g : kGemmCases)
        for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
          const std::string what =
              gemm_name(g, layout, t) + " grads " + std::string(dtype_name(grad_t));
          const bool in_out = layout == WeightLayout::kInOut;
          const std::vector<float> inp = rounded_to(random_floats(g.M * g.K, 1), t);
          const std::vector<float> w = rounded_to(random_floats(g.K * g.N, 2), t);
          const std::vector<float> dout = rounded_to(random_floats(g.M * g.N, 3), t);
          const std::vector<float> dinp0 = rounded_to(random_floats(g.M * g.K, 4), t);
          const std::vector<float> dw0 = rounded_to(random_floats(g.K * g.N, 5), grad_t);
          const std::vector<float> db0 = rounded_to(random_floats(g.N, 6), grad_t);
          Mirror inp_m = mirror(inp);
          Mirror w_m = mirror_as(w, t);
          Mirror dout_m = mirror(dout);
          Mirror dinp = mirror(dinp0);
          Mirror dw = mirror_as(dw0, grad_t);
          Mirror db = mirror_as(db0, grad_t);
          cpu_dev_.kernels_for(t).matmul_backward(dinp.c(), dw.co(grad_t), db.co(grad_t),
                                                  dout_m.c(), inp_m.c(), w_m.co(t), g.M, g.K, g.N,
                                                  layout);
          gpu_dev_->kernels_for(t).matmul_backward(dinp.g(), dw.go(grad_t), db.go(grad_t),
                                                   dout_m.g(), inp_m.g(), w_m.go(t), g.M, g.K, g.N,
                                                   layout);
          // dinp (M,K) = dinp0 + dout (M,N) · Wᵀ: term (n, k) = W[k, n].
          auto wt_at = [&](int64_t n, int64_t k) {
            return double(in_out ? w[k * g.N + n] : w[n * g.K + k]);
          };
          const std::vector<float> dinp_got = dinp.gpu();
          expect_within_sum_bound(dinp_got, dinp.cpu(),
                                  product_abs_sums(dout, g.M, g.N, g.K, wt_at, &dinp0, nullptr),
                                  g.N, t, what + " dinp");
          if (t != DType::kF32) expect_representable(dinp_got, t, what + " dinp");
          // dW = dW0 + inpᵀ·dout in W's layout: (K,N) rows k, or (N,K) rows n.
          std::vector<float> inp_t(g.K * g.M), dout_t(g.N * g.M);
          for (int64_t m = 0; m < g.M; ++m) {
            for (int64_t k = 0; k < g.K; ++k) inp_t[k * g.M + m] = inp[m * g.K + k];
            for (int64_t n = 0; n < g.N; ++n) dout_t[n * g.M + m] = dout[m * g.N + n];
          }
          const std::vector<double> dw_bound =
              in_out ? product_abs_sums(
                           inp_t, g.K, g.M, g.N,
                           [&](int64_t m, int64_t n) { return double(dout[m * g.N + n]); }, &dw0,
                           nullptr)
                     : product_abs_sums(
                           dout_t, g.N, g.M, g.K,
                           [&](int64_t m, int64_t k) { return double(inp[m * g.K + k]); }, &dw0,
                           nullptr);
          expect_within_sum_bound(dw.gpu_as(grad_t), dw.cpu_as(grad_t), dw_bound, g.M, grad_t,
                                  what + " dweight");
          // dbias (N) = db0 + column sums of dout.
          std::vector<double> db_bound(g.N);
          for (int64_t n = 0; n < g.N; ++n) {
            db_bound[n] = std::abs(double(db0[n]));
            for (int64_t m = 0; m < g.M; ++m) db_bound[n] += std::abs(double(dout[m * g.N + n]));
          }
          expect_within_sum_bound(db.gpu_as(grad_t), db.cpu_as(grad_t), db_bound, g.M, grad_t,
                                  what + " dbias");
        }
    }
}

// The two-stage column reductions over many rows (several 256-row chunks and a partial one),
// every dtype: the bias gradient, layer norm's weight and bias gradients, RMSNorm's weight
// gradient, against the CPU; and the same bits twice on the GPU.
TEST_F(CudaNnKernelsTest, ColumnReductionsOverManyRowsMatchCpuForEveryDtype) {
  const int64_t M = 1337, N = 45;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    const std::string type = " " + std::string(dtype_name(t));
    Kernels& ck = cpu_dev_.kernels_for(t);
    Kernels& gk = gpu_dev_->kernels_for(t);
    const std::vector<float> dout = rounded_to(random_floats(M * N, 1), t);
    const std::vector<float> inp = rounded_to(random_floats(M * N, 2, -2.0f, 3.0f), t);
    const std::vector<float> start = rounded_to(random_floats(N, 3), t);
    Mirror dout_m = mirror(dout);
    Mirror inp_m = mirror(inp);
    // The per-column Σ|term| bounds, from host statistics of the CPU's.
    auto bound_of = [&](const std::function<double(int64_t, int64_t)>& term) {
      std::vector<double> b(N);
      for (int64_t c = 0; c < N; ++c) {
        b[c] = std::abs(double(start[c]));
        for (int64_t r = 0; r < M; ++r) b[c] += std::abs(term(r, c));
      }
      return b;
    };
    {  // bias gradient
      Mirror db = mirror_as(start, t);
      Mirror w = mirror_as(rounded_to(random_floats(N, 4), t), t);
      ck.matmul_backward(nullptr, nullptr, db.co(t), dout_m.c(), inp_m.c(), w.co(t), M, 1, N,
                         WeightLayout::kInOut);
      gk.matmul_backward(nullptr, nullptr, db.go(t), dout_m.g(), inp_m.g(), w.go(t), M, 1, N,
                         WeightLayout::kInOut);
      expect_within_sum_bound(db.gpu_as(t), db.cpu_as(t),
                              bound_of([&](int64_t r, int64_t c) { return dout[r * N + c]; }), M, t,
                              "dbias" + type);
      Mirror again = mirror_as(start, t);
      gk.matmul_backward(nullptr, nullptr, again.go(t), dout_m.g(), inp_m.g(), w.go(t), M, 1, N,
                         WeightLayout::kInOut);
      EXPECT_TRUE(same_bits(again.gpu_as(t), db.gpu_as(t))) << "dbias twice" << type;
    }
    // Layer norm and RMSNorm: statistics from the CPU's forward, shared by both devices.
    Mirror w = mirror_as(rounded_to(random_floats(N, 5, 0.5f, 1.5f), t), t);
    Mirror b = mirror_as(rounded_to(random_floats(N, 6), t), t);
    Mirror out = mirror(random_floats(M * N, 7));
    Mirror mean = mirror(random_floats(M, 8));
    Mirror rstd = mirror(random_floats(M, 9));
    ck.layernorm_forward(out.c(), mean.c(), rstd.c(), inp_m.c(), w.co(t), b.co(t), M, N);
    mean.reset_gpu(mean.cpu());
    rstd.reset_gpu(rstd.cpu());
    const std::vector<float> mu = mean.cpu(), rs = rstd.cpu();
    {
      Mirror dinp = mirror(std::vector<float>(M * N, 0.0f));
      Mirror dw = mirror_as(start, t);
      Mirror dbias = mirror_as(start, t);
      ck.layernorm_backward(dinp.c(), dw.co(t), dbias.co(t), dout_m.c(), inp_m.c(), w.co(t),
                            mean.c(), rstd.c(), M, N);
      gk.layernorm_backward(dinp.g(), dw.go(t), dbias.go(t), dout_m.g(), inp_m.g(), w.go(t),
                            mean.g(), rstd.g(), M, N);
      expect_within_sum_bound(dw.gpu_as(t), dw.cpu_as(t), bound_of([&](int64_t r, int64_t c) {
                                return double(dout[r * N + c]) *
                                       ((double(inp[r * N + c]) - mu[r]) * rs[r]);
                              }),
                              M + 4, t, "layernorm dweight" + type);
      expect_within_sum_bound(dbias.gpu_as(t), dbias.cpu_as(t),
                              bound_of([&](int64_t r, int64_t c) { return dout[r * N + c]; }), M, t,
                              "layernorm dbias" + type);
    }
    ck.rmsnorm_forward(out.c(), rstd.c(), inp_m.c(), w.co(t), M, N, 1e-5f);
    rstd.reset_gpu(rstd.cpu());
    const std::vector<float> rms = rstd.cpu();
    {
      Mirror dinp = mirror(std::vector<float>(M * N, 0.0f));
      Mirror dw = mirror_as(start, t);
      ck.rmsnorm_backward(dinp.c(), dw.co(t), dout_m.c(), inp_m.c(), w.co(t), rstd.c(), M, N);
      gk.rmsnorm_backward(dinp.g(), dw.go(t), dout_m.g(), inp_m.g(), w.go(t), rstd.g(), M, N);
      expect_within_sum_bound(dw.gpu_as(t), dw.cpu_as(t), bound_of([&](int64_t r, int64_t c) {
                                return double(dout[r * N + c]) * double(inp[r * N + c]) * rms[r];
                              }),
                              M + 4, t, "rmsnorm dweight" + type);
    }
  }
}

// The 16-bit GEMM paths give the same bits twice (cached cuBLASLt plans, fixed reductions).
TEST_F(CudaNnKernelsTest, SixteenBitMatmulIsDeterministic) {
  const GemmCase g{130, 33, 257};
  for (DType t : {DType::kF16, DType::kBF16})
    for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
      const std::string what = gemm_name(g, layout, t);
      Kernels& gk = gpu_dev_->kernels_for(t);
      Mirror inp = mirror(rounded_to(random_floats(g.M * g.K, 1), t));
      Mirror w = mirror_as(random_floats(g.K * g.N, 2), t);
      Mirror bias = mirror_as(random_floats(g.N, 3), t);
      Mirror dout = mirror(rounded_to(random_floats(g.M * g.N, 4), t));
      const std::vector<float> dinp0 = rounded_to(random_floats(g.M * g.K, 5), t);
      const std::vector<float> dw0 = random_floats(g.K * g.N, 6);
      std::vector<std::vector<float>> outs, dinps, dws;
      for (int run = 0; run < 2; ++run) {
        Mirror out = mirror(std::vector<float>(g.M * g.N, 0.0f));
        Mirror dinp = mirror(dinp0);
        Mirror dw = mirror_as(dw0, t);
        gk.matmul_forward(out.g(), inp.g(), w.go(t), bias.go(t), g.M, g.K, g.N, layout);
        gk.matmul_backward(dinp.g(), dw.go(t), nullptr, dout.g(), inp.g(), w.go(t), g.M, g.K, g.N,
                           layout);
        outs.push_back(out.gpu());
        dinps.push_back(dinp.gpu());
        dws.push_back(dw.gpu_as(t));
      }
      EXPECT_TRUE(same_bits(outs[0], outs[1])) << what << " out";
      EXPECT_TRUE(same_bits(dinps[0], dinps[1])) << what << " dinp";
      EXPECT_TRUE(same_bits(dws[0], dws[1])) << what << " dweight";
    }
}

// The chunk budget a GPU gives the LM head (Device::chunk_budget_bytes): a fraction of its
// memory, never below the CPU's.
TEST_F(CudaNnKernelsTest, GpuChunkBudgetIsAtLeastTheCpus) {
  EXPECT_GE(gpu_dev_->chunk_budget_bytes(), cpu_dev_.chunk_budget_bytes());
  EXPECT_EQ(cpu_dev_.chunk_budget_bytes(), Device::kCpuChunkBudgetBytes);
}

// Per-entry times from CUDA events (Device::make_stream_timer): one span per start/stop pair,
// each non-negative, read back in one collect; a second collect starts empty.
TEST_F(CudaNnKernelsTest, StreamTimerTimesEachSpanOnTheStream) {
  std::unique_ptr<StreamTimer> timer = gpu_dev_->make_stream_timer();
  ASSERT_TRUE(timer);
  const GemmCase g{256, 256, 256};
  Mirror inp = mirror(random_floats(g.M * g.K, 1));
  Mirror w = mirror(random_floats(g.K * g.N, 2));
  Mirror out = mirror(random_floats(g.M * g.N, 3));
  for (int i = 0; i < 3; ++i) {
    timer->start();
    gpu().matmul_forward(out.g(), inp.g(), w.g(), nullptr, g.M, g.K, g.N, WeightLayout::kInOut);
    timer->stop();
  }
  const std::vector<double> seconds = timer->collect();
  ASSERT_EQ(seconds.size(), 3u);
  for (double s : seconds) EXPECT_GE(s, 0.0);
  EXPECT_TRUE(timer->collect().empty());
  EXPECT_FALSE(cpu_dev_.make_stream_timer()) << "the CPU times with the host clock";
}

}  // namespace
}  // namespace zt
