// The CUDA back end's backward entries with frozen parameters, as kernels_frozen_params_test.cpp
// checks the CPU's: a null weight or bias gradient Operand is skipped, and the input gradient (or
// the other embedding gradient) keeps the bits of the call with every gradient, on every
// activation table. Every test skips when no GPU is visible.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/kernels.h"

#include "cuda_test_util.h"

namespace zt {
namespace {

using namespace test;

// dinp after a backward call with every parameter gradient, and with none (frozen parameters).
TEST_F(CudaDeviceTest, BackwardEntriesSkipNullParameterGradients) {
  const int64_t N = 300, C = 24, K = 16, H = 3, hd = 8, stride = 40;
  const std::vector<float> x = normal_floats(N * C, 6), w = normal_floats(C, 7),
                           b = normal_floats(C, 8), dout = normal_floats(N * C, 9),
                           dinp0 = normal_floats(N * C, 10), mw = normal_floats(K * C, 11),
                           mx = normal_floats(N * K, 12), mdinp0 = normal_floats(N * K, 13),
                           hx = normal_floats(N * stride, 14), hw = normal_floats(hd, 15),
                           hdx0 = normal_floats(N * stride, 16);
  Buffer dx = upload(x), dw = upload(w), db = upload(b), ddout = upload(dout), dmw = upload(mw),
         dmx = upload(mx), dhx = upload(hx), dhw = upload(hw);
  const MemCategory other = MemCategory::kOther;
  Buffer mean = gpu_->alloc(N * sizeof(float), other), rstd = gpu_->alloc(N * sizeof(float), other),
         hrstd = gpu_->alloc(N * H * sizeof(float), other),
         out = gpu_->alloc(N * C * sizeof(float), other);
  for (DType act : kAllTypes) {
    Kernels& g = gpu_->kernels_for(act);
    // `call` once with zeroed parameter gradients and once with null ones, each into its own copy
    // of `start`: the two results must have the same bits.
    auto check = [&](const char* what, const std::vector<float>& start, const auto& call) {
      Buffer with = upload(start), without = upload(start);
      Buffer gw = gpu_->alloc_zeroed(K * C * sizeof(float), MemCategory::kOther),
             gb = gpu_->alloc_zeroed(K * C * sizeof(float), MemCategory::kOther);
      call(with.as<float>(), Operand(gw.as<float>()), Operand(gb.as<float>()));
      call(without.as<float>(), Operand(), Operand());
      const int64_t n = static_cast<int64_t>(start.size());
      expect_bitwise(download<float>(without, n), download<float>(with, n),
                     std::string(what) + " " + type_name(act));
    };
    g.layernorm_forward(out.as<float>(), mean.as<float>(), rstd.as<float>(), dx.as<float>(),
                        dw.as<float>(), db.as<float>(), N, C);
    check("layernorm_backward", dinp0, [&](float* dinp, Operand gw, Operand gb) {
      g.layernorm_backward(dinp, gw, gb, ddout.as<float>(), dx.as<float>(), dw.as<float>(),
                           mean.as<float>(), rstd.as<float>(), N, C);
    });
    g.rmsnorm_forward(out.as<float>(), rstd.as<float>(), dx.as<float>(), dw.as<float>(), N, C,
                      1e-6f);
    check("rmsnorm_backward", dinp0, [&](float* dinp, Operand gw, Operand) {
      g.rmsnorm_backward(dinp, gw, ddout.as<float>(), dx.as<float>(), dw.as<float>(),
                         rstd.as<float>(), N, C);
    });
    Buffer hx_normed = upload(hx);
    g.head_rmsnorm_forward(hx_normed.as<float>(), hrstd.as<float>(), dhw.as<float>(), N, H, hd,
                           stride, 1e-6f);
    check("head_rmsnorm_backward", hdx0, [&](float* dxh, Operand gw, Operand) {
      g.head_rmsnorm_backward(dxh, gw, dhx.as<float>(), dhw.as<float>(), hrstd.as<float>(), N, H,
                              hd, stride);
    });
    // inp (N,K) · W (K,C): dinp (N,K).
    check("matmul_backward", mdinp0, [&](float* dinp, Operand gw, Operand gb) {
      g.matmul_backward(dinp, gw, gb, ddout.as<float>(), dmx.as<float>(), dmw.as<float>(), N, K, C,
                        WeightLayout::kInOut);
    });
  }
  // Embedding: either gradient null leaves the other as the full call does.
  const int64_t B = 2, T = 5, V = 13;
  const std::vector<int32_t> tokens = {3, 12, 0, 3, 7, 7, 3, 1, 12, 0};
  const std::vector<float> edout = normal_floats(B * T * C, 17), wte0 = normal_floats(V * C, 18),
                           wpe0 = normal_floats(T * C, 19);
  Buffer dtokens = upload(tokens), dedout = upload(edout);
  Buffer wte = upload(wte0), wpe = upload(wpe0), wte_only = upload(wte0), wpe_only = upload(wpe0);
  gk().embedding_backward(wte.as<float>(), wpe.as<float>(), dedout.as<float>(),
                          dtokens.as<int32_t>(), B, T, C, nullptr);
  gk().embedding_backward(wte_only.as<float>(), nullptr, dedout.as<float>(), dtokens.as<int32_t>(),
                          B, T, C, nullptr);
  gk().embedding_backward(nullptr, wpe_only.as<float>(), dedout.as<float>(), dtokens.as<int32_t>(),
                          B, T, C, nullptr);
  gk().embedding_backward(nullptr, nullptr, dedout.as<float>(), dtokens.as<int32_t>(), B, T, C,
                          nullptr);
  expect_bitwise(download<float>(wte_only, V * C), download<float>(wte, V * C), "dwte alone");
  expect_bitwise(download<float>(wpe_only, T * C), download<float>(wpe, T * C), "dwpe alone");
}

}  // namespace
}  // namespace zt
