// The CUDA back end's LoRA entries (cuda_lora_kernels.cu) against the CPU back end's, on the same
// inputs on both devices, bit for bit on every activation table (fp32, fp16, bf16): add_columns
// (kWrite and kAdd; the columns it does not write keep their bits) and dropout forward and
// backward (the same mask from the same seed; p = 0 a copy), with buffers long enough for the
// grid-stride loop. Every test skips when no GPU is visible. Not here: the CPU's own tests
// (kernels_lora_test.cpp), frozen parameters (cuda_frozen_params_test.cpp).
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

TEST_F(CudaDeviceTest, AddColumnsIsBitwiseEqualToCpuOnEveryTable) {
  struct Shape {
    int64_t N, R, at, width, S;
  };
  // The second: more than the 8192 · 256 elements of one grid.
  const Shape shapes[] = {{37, 40, 9, 13, 17}, {70000, 72, 4, 64, 64}};
  for (DType act : kAllTypes) {
    for (const Shape& s : shapes) {
      for (GradOutput output : {GradOutput::kWrite, GradOutput::kAdd}) {
        const std::string what = "add_columns " + type_name(act) + " N=" + std::to_string(s.N) +
                                 (output == GradOutput::kAdd ? " kAdd" : " kWrite");
        const std::vector<float> dst0 = normal_floats(s.N * s.R, 1),
                                 src = normal_floats(s.N * s.S, 2);
        Buffer ddst = upload(dst0), dsrc = upload(src);
        gpu_->kernels_for(act).add_columns(ddst.as<float>() + s.at, s.R, dsrc.as<float>(), s.S, s.N,
                                           s.width, 0.37f, output);
        std::vector<float> dst = dst0;
        cpu_.kernels_for(act).add_columns(dst.data() + s.at, s.R, src.data(), s.S, s.N, s.width,
                                          0.37f, output);
        expect_bitwise(download<float>(ddst, s.N * s.R), dst, what);
      }
    }
  }
}

TEST_F(CudaDeviceTest, DropoutIsBitwiseEqualToCpuOnEveryTable) {
  for (DType act : kAllTypes) {
    for (int64_t n : {int64_t{100003}, kGridStrideN}) {
      for (float p : {0.1f, 0.5f, 0.0f}) {
        const std::string what =
            type_name(act) + " n=" + std::to_string(n) + " p=" + std::to_string(p);
        const std::vector<float> inp = normal_floats(n, 3), dout = normal_floats(n, 4),
                                 dinp0 = normal_floats(n, 5);
        Buffer dinp_buf = upload(inp), ddout = upload(dout), ddinp = upload(dinp0);
        Buffer dout_buf = gpu_->alloc(n * sizeof(float), MemCategory::kActivations);
        Kernels& g = gpu_->kernels_for(act);
        Kernels& c = cpu_.kernels_for(act);
        g.dropout_forward(dout_buf.as<float>(), dinp_buf.as<float>(), n, p, 2024);
        g.dropout_backward(ddinp.as<float>(), ddout.as<float>(), n, p, 2024);
        std::vector<float> out(n), dinp = dinp0;
        c.dropout_forward(out.data(), inp.data(), n, p, 2024);
        c.dropout_backward(dinp.data(), dout.data(), n, p, 2024);
        expect_bitwise(download<float>(dout_buf, n), out, "dropout_forward " + what);
        expect_bitwise(download<float>(ddinp, n), dinp, "dropout_backward " + what);

        // In place (out = inp).
        g.dropout_forward(dinp_buf.as<float>(), dinp_buf.as<float>(), n, p, 2024);
        expect_bitwise(download<float>(dinp_buf, n), out, "dropout_forward in place " + what);
      }
    }
  }
}

}  // namespace
}  // namespace zt
