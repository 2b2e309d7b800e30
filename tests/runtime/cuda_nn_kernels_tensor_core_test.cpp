// Issue 11's paths of the CUDA back end, for every dtype on awkward shapes, within the error
// bound of fp32 sums: the tensor-core matmul (cuBLASLt; both layouts, with and without bias,
// dweight accumulated in 16 bits and in fp32), the two-stage column reductions, and their
// determinism; then the CUDA event timer behind zt-bench train --profile
// (Device::make_stream_timer) and the GPU's chunk budget. The fixture and helpers are
// cuda_nn_test_util.h's (see cuda_nn_kernels_test.cpp for the rest of the parity suite). Every
// test skips when no GPU is usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
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

#include "cuda_nn_test_util.h"
#include "packed_documents.h"
#include "random_data.h"

namespace zt::cuda_nn_test {
namespace {

using test::random_floats;

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

// dinp asked to be written (GradOutput::kWrite) is the product alone whatever the buffer held:
// NaNs in it are neither read nor kept, on every table and both GEMM paths (16-bit weights on
// tensor cores, fp32 weights through cuBLAS), and with no product (N = 0) it is zeros.
TEST_F(CudaNnKernelsTest, MatmulBackwardWritesDinpWithoutReadingIt) {
  const GemmCase g{70, 33, 45};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16})
    for (DType w_t : {t, DType::kF32}) {
      const std::string what =
          gemm_name(g, WeightLayout::kOutIn, t) + " weights " + std::string(dtype_name(w_t));
      const std::vector<float> w = rounded_to(random_floats(g.K * g.N, 2), t);
      const std::vector<float> dout = rounded_to(random_floats(g.M * g.N, 3), t);
      const std::vector<float> zeros(g.M * g.K, 0.0f);
      Mirror w_m = mirror_as(w, w_t);
      Mirror dout_m = mirror(dout);
      Mirror dinp = mirror(std::vector<float>(g.M * g.K, nan));
      cpu_dev_.kernels_for(t).matmul_backward(dinp.c(), nullptr, nullptr, dout_m.c(), nullptr,
                                              w_m.co(w_t), g.M, g.K, g.N, WeightLayout::kOutIn,
                                              GradOutput::kWrite);
      gpu_dev_->kernels_for(t).matmul_backward(dinp.g(), nullptr, nullptr, dout_m.g(), nullptr,
                                               w_m.go(w_t), g.M, g.K, g.N, WeightLayout::kOutIn,
                                               GradOutput::kWrite);
      auto wt_at = [&](int64_t n, int64_t k) { return double(w[n * g.K + k]); };
      expect_within_sum_bound(dinp.gpu(), dinp.cpu(),
                              product_abs_sums(dout, g.M, g.N, g.K, wt_at, &zeros, nullptr), g.N, t,
                              what + " dinp");

      Mirror empty = mirror(std::vector<float>(g.M * g.K, nan));
      gpu_dev_->kernels_for(t).matmul_backward(empty.g(), nullptr, nullptr, dout_m.g(), nullptr,
                                               w_m.go(w_t), g.M, g.K, 0, WeightLayout::kOutIn,
                                               GradOutput::kWrite);
      EXPECT_EQ(empty.gpu(), zeros) << what << " N = 0";
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
}  // namespace zt::cuda_nn_test
