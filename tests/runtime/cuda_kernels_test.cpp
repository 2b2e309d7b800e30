// The CUDA back end's element-wise kernels, optimizers and reductions (cuda_kernels.cu,
// cuda_elementwise_kernels.cu) against the CPU back end's, run on the same inputs on both
// devices: compared bitwise where the two run the same IEEE operations (casts, rounding, add,
// fill, residual, accumulate, the last three on the 16-bit activation tables too; NaN payloads
// made by arithmetic excepted) and within a tight tolerance elsewhere, 16-bit optimizer gradients
// and sum_squares inputs included. Every test skips when no GPU is visible. Not here: the matmul /
// embedding / layer-norm / attention / cross-entropy entries (cuda_nn_kernels*_test.cpp) and
// Device memory (cuda_device_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/device_factory.h"
#include "runtime/kernels.h"
#include "runtime/status.h"

#include "cuda_test_util.h"

namespace zt {
namespace {

using namespace test;

// ---------------------------------------------------------------------------------------------
// Element-wise kernels.

TEST_F(CudaDeviceTest, GeluForwardMatchesCpu) {
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{100003}, kGridStrideN}) {
    std::vector<float> x = normal_floats(n, 1, 3.0f);
    if (n > 100) {  // a sweep over the interesting range and the clamps of exp_bounded
      for (int i = 0; i < 100; ++i) x[i] = -60.0f + 1.2f * static_cast<float>(i);
      x[0] = 0.0f;
      x[1] = -0.0f;
      x[2] = 1e-30f;
      x[3] = -1e-30f;
      x[4] = 100.0f;
      x[5] = -100.0f;
    }
    Buffer dx = upload(x);
    Buffer dout = gpu_->alloc(x.size() * sizeof(float), MemCategory::kActivations);
    gk().gelu_forward(dout.as<float>(), dx.as<float>(), n);
    std::vector<float> expected(x.size());
    ck().gelu_forward(expected.data(), x.data(), n);
    expect_close(download<float>(dout, n), expected, 1e-6, "gelu_forward n=" + std::to_string(n));
  }
}

TEST_F(CudaDeviceTest, GeluBackwardAccumulatesAndMatchesCpu) {
  for (int64_t n : {int64_t{5}, int64_t{100003}, kGridStrideN}) {
    std::vector<float> x = normal_floats(n, 2, 3.0f);
    std::vector<float> dout = normal_floats(n, 3);
    std::vector<float> dinp = normal_floats(n, 4);  // accumulated into, not overwritten
    Buffer dx = upload(x), ddout = upload(dout), ddinp = upload(dinp);
    gk().gelu_backward(ddinp.as<float>(), dx.as<float>(), ddout.as<float>(), n);
    ck().gelu_backward(dinp.data(), x.data(), dout.data(), n);
    expect_close(download<float>(ddinp, n), dinp, 1e-6, "gelu_backward n=" + std::to_string(n));
  }
}

// An element's bits do not depend on where it sits or how the buffer is split (kernels.h).
TEST_F(CudaDeviceTest, ElementWiseResultsDoNotDependOnSplitting) {
  const int64_t n = 100003, split = 33331;
  std::vector<float> x = normal_floats(n, 5, 3.0f);
  Buffer dx = upload(x);
  Buffer whole = gpu_->alloc(n * sizeof(float), MemCategory::kOther);
  Buffer parts = gpu_->alloc(n * sizeof(float), MemCategory::kOther);
  gk().gelu_forward(whole.as<float>(), dx.as<float>(), n);
  gk().gelu_forward(parts.as<float>(), dx.as<float>(), split);
  gk().gelu_forward(parts.as<float>() + split, dx.as<float>() + split, n - split);
  expect_bitwise(download<float>(parts, n), download<float>(whole, n), "gelu split");

  std::vector<float> g = normal_floats(n, 6);
  std::vector<float> zeros(static_cast<size_t>(n), 0.0f);
  Buffer p1 = upload(x), m1 = upload(zeros), v1 = upload(zeros), dg = upload(g);
  Buffer p2 = upload(x), m2 = upload(zeros), v2 = upload(zeros);
  AdamWArgs args;
  args.weight_decay = 0.1f;
  gk().adamw(p1.as<float>(), dg.as<float>(), m1.as<float>(), v1.as<float>(), n, args);
  gk().adamw(p2.as<float>(), dg.as<float>(), m2.as<float>(), v2.as<float>(), split, args);
  gk().adamw(p2.as<float>() + split, dg.as<float>() + split, m2.as<float>() + split,
             v2.as<float>() + split, n - split, args);
  expect_bitwise(download<float>(p2, n), download<float>(p1, n), "adamw split params");
  expect_bitwise(download<float>(v2, n), download<float>(v1, n), "adamw split v");
}

// On every table: a 16-bit one rounds the sums as it stores them (fp16 overflow to ±inf among
// the large values), with the CPU's bits.
TEST_F(CudaDeviceTest, ResidualAndAccumulateAreBitwiseEqualToCpuOnEveryTable) {
  for (DType act : kAllTypes) {
    Kernels& g = gpu_->kernels_for(act);
    Kernels& c = cpu_.kernels_for(act);
    for (int64_t n : {int64_t{1}, int64_t{100003}, kGridStrideN}) {
      const std::string what = type_name(act) + " n=" + std::to_string(n);
      std::vector<float> a = normal_floats(n, 7), b = normal_floats(n, 8, 1e-3f);
      if (n > 100) {  // fp16: a sum rounding to its largest value, 65504; one overflowing to -inf
        a[10] = 65500.0f;
        b[10] = 3.0f;
        a[11] = -40000.0f;
        b[11] = -30000.0f;
      }
      Buffer da = upload(a), db = upload(b);
      Buffer dout = gpu_->alloc(n * sizeof(float), MemCategory::kActivations);
      g.residual_forward(dout.as<float>(), da.as<float>(), db.as<float>(), n);
      std::vector<float> expected(static_cast<size_t>(n));
      c.residual_forward(expected.data(), a.data(), b.data(), n);
      expect_bitwise(download<float>(dout, n), expected, "residual " + what);

      // out aliasing a
      g.residual_forward(da.as<float>(), da.as<float>(), db.as<float>(), n);
      expect_bitwise(download<float>(da, n), expected, "residual in place " + what);

      // y += x, twice
      std::vector<float> y = normal_floats(n, 9);
      Buffer dy = upload(y);
      g.accumulate(dy.as<float>(), db.as<float>(), n);
      g.accumulate(dy.as<float>(), db.as<float>(), n);
      c.accumulate(y.data(), b.data(), n);
      c.accumulate(y.data(), b.data(), n);
      expect_bitwise(download<float>(dy, n), y, "accumulate " + what);
    }
  }
}

TEST_F(CudaDeviceTest, FillIsBitwiseEqualToCpuOnEveryTable) {
  const int64_t n = kGridStrideN;
  for (DType act : kAllTypes) {
    for (float value : {1.5f, -0.0f, 0.0f, 0.1f, 1e5f, kInf, from_bits(0x7fc12345u)}) {
      std::vector<float> x = normal_floats(n, 11);
      Buffer dx = upload(x);
      gpu_->kernels_for(act).fill(dx.as<float>() + 3, value, n - 5);  // first 3, last 2 untouched
      cpu_.kernels_for(act).fill(x.data() + 3, value, n - 5);
      expect_bitwise(download<float>(dx, n), x,
                     "fill " + std::to_string(value) + " " + type_name(act));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Optimizers: several steps, so m, v and the momentum buffer carry state between calls.

TEST_F(CudaDeviceTest, AdamWMatchesCpuOverSteps) {
  const int64_t n = 100003;
  for (bool decoupled : {true, false}) {
    for (float weight_decay : {0.0f, 0.1f}) {
      std::vector<float> p = normal_floats(n, 12), m(static_cast<size_t>(n), 0.0f), v = m;
      Buffer dp = upload(p), dm = upload(m), dv = upload(v);
      for (int64_t step = 1; step <= 4; ++step) {
        const std::vector<float> g = normal_floats(n, static_cast<uint32_t>(13 + step));
        Buffer dg = upload(g);
        AdamWArgs args;
        args.lr = 1e-2f;
        args.weight_decay = weight_decay;
        args.step = step;
        args.grad_scale = step == 3 ? 0.25f : 1.0f;
        args.decoupled = decoupled;
        gk().adamw(dp.as<float>(), dg.as<float>(), dm.as<float>(), dv.as<float>(), n, args);
        ck().adamw(p.data(), g.data(), m.data(), v.data(), n, args);
        const std::string what = std::string("adamw decoupled=") + (decoupled ? "1" : "0") +
                                 " wd=" + std::to_string(weight_decay) +
                                 " step=" + std::to_string(step);
        expect_close(download<float>(dp, n), p, 1e-6, what + " params");
        expect_close(download<float>(dm, n), m, 1e-6, what + " m");
        expect_close(download<float>(dv, n), v, 1e-6, what + " v");
      }
    }
  }
}

TEST_F(CudaDeviceTest, SgdMatchesCpuWithAndWithoutMomentumAndDecay) {
  const int64_t n = 100003;
  for (float momentum : {0.0f, 0.9f}) {
    for (float weight_decay : {0.0f, 0.01f}) {
      std::vector<float> p = normal_floats(n, 20), buf(static_cast<size_t>(n), 0.0f);
      Buffer dp = upload(p), dbuf = upload(buf);
      for (int step = 1; step <= 3; ++step) {
        const std::vector<float> g = normal_floats(n, static_cast<uint32_t>(21 + step));
        Buffer dg = upload(g);
        SgdArgs args;
        args.lr = 0.05f;
        args.momentum = momentum;
        args.weight_decay = weight_decay;
        args.grad_scale = step == 2 ? 0.5f : 1.0f;
        float* gbuf = momentum != 0.0f ? dbuf.as<float>() : nullptr;
        float* cbuf = momentum != 0.0f ? buf.data() : nullptr;
        gk().sgd(dp.as<float>(), dg.as<float>(), gbuf, n, args);
        ck().sgd(p.data(), g.data(), cbuf, n, args);
        const std::string what = "sgd momentum=" + std::to_string(momentum) +
                                 " wd=" + std::to_string(weight_decay) +
                                 " step=" + std::to_string(step);
        expect_close(download<float>(dp, n), p, 1e-6, what + " params");
        if (momentum != 0.0f) expect_close(download<float>(dbuf, n), buf, 1e-6, what + " buf");
      }
    }
  }
}

// A 16-bit gradient (ConstOperand) is widened as it is read: the same results as the CPU's.
TEST_F(CudaDeviceTest, OptimizersRead16BitGradientsLikeCpu) {
  const int64_t n = 100003;
  for (DType t : {DType::kF16, DType::kBF16}) {
    std::vector<float> p = normal_floats(n, 12), m(static_cast<size_t>(n), 0.0f), v = m;
    std::vector<float> sp = p, buf(static_cast<size_t>(n), 0.0f);
    Buffer dp = upload(p), dm = upload(m), dv = upload(v), dsp = upload(sp), dbuf = upload(buf);
    for (int64_t step = 1; step <= 3; ++step) {
      const std::vector<uint8_t> g = as_dtype(normal_floats(n, uint32_t(13 + step)), t);
      Buffer dg = upload(g);
      AdamWArgs args;
      args.lr = 1e-2f;
      args.weight_decay = 0.1f;
      args.step = step;
      gk().adamw(dp.as<float>(), ConstOperand(dg.data(), t), dm.as<float>(), dv.as<float>(), n,
                 args);
      ck().adamw(p.data(), ConstOperand(g.data(), t), m.data(), v.data(), n, args);
      SgdArgs sargs;
      sargs.lr = 0.05f;
      sargs.momentum = 0.9f;
      gk().sgd(dsp.as<float>(), ConstOperand(dg.data(), t), dbuf.as<float>(), n, sargs);
      ck().sgd(sp.data(), ConstOperand(g.data(), t), buf.data(), n, sargs);
      const std::string what = type_name(t) + " step=" + std::to_string(step);
      expect_close(download<float>(dp, n), p, 1e-6, "adamw " + what + " params");
      expect_close(download<float>(dv, n), v, 1e-6, "adamw " + what + " v");
      expect_close(download<float>(dsp, n), sp, 1e-6, "sgd " + what + " params");
      expect_close(download<float>(dbuf, n), buf, 1e-6, "sgd " + what + " buf");
    }
  }
}

// The working copy adamw writes in its pass: the CPU's bits, fp16 and bf16.
TEST_F(CudaDeviceTest, AdamWWorkingCopyIsBitwiseEqualToCpu) {
  const int64_t n = 100003;
  for (DType t : {DType::kF16, DType::kBF16}) {
    std::vector<float> p = normal_floats(n, 17), m(static_cast<size_t>(n), 0.0f), v = m;
    const std::vector<float> g = normal_floats(n, 18);
    std::vector<uint16_t> working(static_cast<size_t>(n));
    Buffer dp = upload(p), dm = upload(m), dv = upload(v), dg = upload(g);
    Buffer dw = upload(working);
    AdamWArgs args;
    args.lr = 1e-2f;
    gk().adamw(dp.as<float>(), dg.as<float>(), dm.as<float>(), dv.as<float>(), n, args,
               Operand(dw.data(), t));
    ck().adamw(p.data(), g.data(), m.data(), v.data(), n, args, Operand(working.data(), t));
    EXPECT_EQ(download<uint16_t>(dw, n), working) << type_name(t);
  }
}

// ---------------------------------------------------------------------------------------------
// Casts, rounding and add: bit for bit.

TEST_F(CudaDeviceTest, CastFromFloatIsBitwiseEqualToCpu) {
  std::vector<float> x = rounding_edge_floats(30);
  const std::vector<float> wide = random_bit_floats(200000, 31, /*allow_nan=*/true);
  const std::vector<float> normal = normal_floats(200000, 32, 100.0f);
  x.insert(x.end(), wide.begin(), wide.end());
  x.insert(x.end(), normal.begin(), normal.end());
  const int64_t n = static_cast<int64_t>(x.size());
  Buffer dx = upload(x);
  for (DType dst : kAllTypes) {
    Buffer dd = gpu_->alloc(n * dtype_size(dst), MemCategory::kOther);
    gk().cast(dd.data(), dst, dx.data(), DType::kF32, n);
    expect_elements_equal(download_bytes(dd, n * dtype_size(dst)), as_dtype(x, dst), dst, n,
                          /*nan_is_nan=*/false, "cast fp32 -> " + type_name(dst));
  }
}

// Every 16-bit pattern, to every type.
TEST_F(CudaDeviceTest, CastFrom16BitTypesIsBitwiseEqualToCpuForEveryPattern) {
  const std::vector<uint16_t> patterns = all_16bit_patterns();
  const int64_t n = static_cast<int64_t>(patterns.size());
  Buffer dsrc = upload(patterns);
  for (DType src : {DType::kF16, DType::kBF16}) {
    for (DType dst : kAllTypes) {
      const size_t bytes = n * dtype_size(dst);
      Buffer dd = gpu_->alloc(bytes, MemCategory::kOther);
      gk().cast(dd.data(), dst, dsrc.data(), src, n);
      std::vector<uint8_t> expected(bytes);
      ck().cast(expected.data(), dst, patterns.data(), src, n);
      expect_elements_equal(download_bytes(dd, bytes), expected, dst, n, /*nan_is_nan=*/false,
                            "cast " + type_name(src) + " -> " + type_name(dst));
    }
  }
}

TEST_F(CudaDeviceTest, CastOfLongBuffersCoversEveryElement) {
  const int64_t n = kGridStrideN;
  const std::vector<float> x = normal_floats(n, 33);
  Buffer dx = upload(x);
  Buffer dh = gpu_->alloc(n * 2, MemCategory::kOther);
  Buffer back = gpu_->alloc(n * 4, MemCategory::kOther);
  gk().cast(dh.data(), DType::kBF16, dx.data(), DType::kF32, n);
  gk().cast(back.data(), DType::kF32, dh.data(), DType::kBF16, n);
  std::vector<float> expected = x;
  ck().round_to(expected.data(), DType::kBF16, n);
  expect_bitwise(download<float>(back, n), expected, "fp32 -> bf16 -> fp32");
}

TEST_F(CudaDeviceTest, RoundToIsBitwiseEqualToCpu) {
  std::vector<float> x = rounding_edge_floats(40);
  const std::vector<float> wide = random_bit_floats(300000, 41, /*allow_nan=*/true);
  x.insert(x.end(), wide.begin(), wide.end());
  const int64_t n = static_cast<int64_t>(x.size());
  for (DType t : kAllTypes) {
    Buffer dx = upload(x);
    gk().round_to(dx.as<float>(), t, n);
    std::vector<float> expected = x;
    ck().round_to(expected.data(), t, n);
    expect_bitwise(download<float>(dx, n), expected, "round_to " + type_name(t));
  }
}

// dst = dst_type(float(a) + float(b)) for all 27 type combinations; data that rounds, ties,
// overflows, and infinities (inf - inf is NaN: payload aside).
TEST_F(CudaDeviceTest, AddIsBitwiseEqualToCpuForEveryTypeCombination) {
  std::vector<float> a = normal_floats(50000, 50), b = normal_floats(50000, 51, 1e-2f);
  const std::vector<float> edges = rounding_edge_floats(52);
  const std::vector<float> wide_a = random_bit_floats(50000, 53, /*allow_nan=*/false);
  const std::vector<float> wide_b = random_bit_floats(50000, 54, /*allow_nan=*/false);
  a.insert(a.end(), edges.begin(), edges.end());
  b.insert(b.end(), edges.rbegin(), edges.rend());
  a.insert(a.end(), wide_a.begin(), wide_a.end());
  b.insert(b.end(), wide_b.begin(), wide_b.end());
  a.insert(a.end(), {kInf, kInf, -0.0f, -0.0f, 65504.0f, 1e-8f});
  b.insert(b.end(), {-kInf, 1.0f, -0.0f, 0.0f, 16.0f, -0.0f});
  const int64_t n = static_cast<int64_t>(a.size());
  for (DType at : kAllTypes) {
    const std::vector<uint8_t> ha = as_dtype(a, at);
    Buffer da = upload(ha);
    for (DType bt : kAllTypes) {
      const std::vector<uint8_t> hb = as_dtype(b, bt);
      Buffer db = upload(hb);
      for (DType dt : kAllTypes) {
        const size_t bytes = n * dtype_size(dt);
        Buffer dd = gpu_->alloc(bytes, MemCategory::kOther);
        gk().add(dd.data(), dt, da.data(), at, db.data(), bt, n);
        std::vector<uint8_t> expected(bytes);
        ck().add(expected.data(), dt, ha.data(), at, hb.data(), bt, n);
        expect_elements_equal(
            download_bytes(dd, bytes), expected, dt, n, /*nan_is_nan=*/true,
            "add " + type_name(dt) + " = " + type_name(at) + " + " + type_name(bt));
      }
    }
  }
}

TEST_F(CudaDeviceTest, AddWithNullAIsACastAndKeepsNegativeZero) {
  std::vector<float> b = rounding_edge_floats(60);
  b.insert(b.end(), {-0.0f, -0.0f, 0.0f});
  const int64_t n = static_cast<int64_t>(b.size());
  for (DType bt : kAllTypes) {
    const std::vector<uint8_t> hb = as_dtype(b, bt);
    Buffer db = upload(hb);
    for (DType dt : kAllTypes) {
      const size_t bytes = n * dtype_size(dt);
      Buffer dd = gpu_->alloc(bytes, MemCategory::kOther);
      gk().add(dd.data(), dt, nullptr, DType::kF32, db.data(), bt, n);
      std::vector<uint8_t> expected(bytes);
      ck().add(expected.data(), dt, nullptr, DType::kF32, hb.data(), bt, n);
      const std::string what = "add null + " + type_name(bt) + " -> " + type_name(dt);
      const std::vector<uint8_t> got = download_bytes(dd, bytes);
      expect_elements_equal(got, expected, dt, n, /*nan_is_nan=*/false, what);
      const float last = element_as_float(got, dt, static_cast<size_t>(n - 2));
      EXPECT_TRUE(last == 0.0f && std::signbit(last)) << what << ": -0 became " << last;
    }
  }
}

TEST_F(CudaDeviceTest, AddInPlaceIntoEitherOperand) {
  const int64_t n = 100003;
  const std::vector<float> a = normal_floats(n, 70), b = normal_floats(n, 71);
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    const std::vector<uint8_t> ha = as_dtype(a, t), hb = as_dtype(b, t);
    std::vector<uint8_t> expected(ha.size());
    ck().add(expected.data(), t, ha.data(), t, hb.data(), t, n);
    Buffer da = upload(ha), db = upload(hb);
    gk().add(da.data(), t, da.data(), t, db.data(), t, n);  // dst = a
    expect_elements_equal(download_bytes(da, ha.size()), expected, t, n, false,
                          "add in place into a, " + type_name(t));
    Buffer da2 = upload(ha);
    gk().add(db.data(), t, da2.data(), t, db.data(), t, n);  // dst = b
    expect_elements_equal(download_bytes(db, hb.size()), expected, t, n, false,
                          "add in place into b, " + type_name(t));
  }
  // A fp32 accumulator plus a bf16 gradient, in place (the gradient fold of mixed precision).
  const std::vector<uint8_t> hb = as_dtype(b, DType::kBF16);
  std::vector<float> acc = a;
  Buffer dacc = upload(acc), db = upload(hb);
  gk().add(dacc.data(), DType::kF32, dacc.data(), DType::kF32, db.data(), DType::kBF16, n);
  ck().add(acc.data(), DType::kF32, acc.data(), DType::kF32, hb.data(), DType::kBF16, n);
  expect_bitwise(download<float>(dacc, n), acc, "fp32 += bf16 in place");
}

// ---------------------------------------------------------------------------------------------
// Reductions.

TEST_F(CudaDeviceTest, SumSquaresMatchesCpuAndIsDeterministic) {
  for (int64_t n : {int64_t{1}, int64_t{7}, kSumSquaresBlock - 1, kSumSquaresBlock,
                    kSumSquaresBlock + 1, 3 * kSumSquaresBlock + 123, int64_t{5000011}}) {
    const std::vector<float> x = normal_floats(n, static_cast<uint32_t>(90 + n % 1000), 2.0f);
    Buffer dx = upload(x);
    const double got = gk().sum_squares(dx.as<float>(), n);
    const double expected = ck().sum_squares(x.data(), n);
    EXPECT_NEAR(got, expected, 1e-12 * expected) << "n=" << n;
    EXPECT_EQ(std::bit_cast<uint64_t>(gk().sum_squares(dx.as<float>(), n)),
              std::bit_cast<uint64_t>(got))
        << "n=" << n << ": two calls differ";
    if (n > 1000) {  // a range at an offset
      const double part = gk().sum_squares(dx.as<float>() + 999, n - 999);
      const double part_cpu = ck().sum_squares(x.data() + 999, n - 999);
      EXPECT_NEAR(part, part_cpu, 1e-12 * part_cpu) << "n=" << n << " offset 999";
    }
  }
  EXPECT_EQ(gk().sum_squares(nullptr, 0), 0.0);
  // x stored in 16 bits: the sum of squares of its widened values, as on the CPU.
  for (DType t : {DType::kF16, DType::kBF16}) {
    const int64_t n = 3 * kSumSquaresBlock + 123;
    const std::vector<uint8_t> x = as_dtype(normal_floats(n, 92, 2.0f), t);
    Buffer dx = upload(x);
    const double expected = ck().sum_squares(ConstOperand(x.data(), t), n);
    EXPECT_NEAR(gk().sum_squares(ConstOperand(dx.data(), t), n), expected, 1e-12 * expected)
        << type_name(t);
  }
  // Special values: inf gives inf, NaN gives NaN, on both.
  std::vector<float> y = normal_floats(1000, 91);
  y[500] = kInf;
  Buffer dy = upload(y);
  EXPECT_EQ(gk().sum_squares(dy.as<float>(), 1000), ck().sum_squares(y.data(), 1000));
  y[500] = std::numeric_limits<float>::quiet_NaN();
  Buffer dz = upload(y);
  EXPECT_TRUE(std::isnan(gk().sum_squares(dz.as<float>(), 1000)));
}

// More blocks of 16384 than the reduction's grid (8192 thread blocks): every block is counted
// exactly once. 1.5^2 = 2.25 and every partial sum is exact in double, so the total is exact.
TEST_F(CudaDeviceTest, SumSquaresCoversMoreBlocksThanTheGrid) {
  const int64_t n = int64_t{8192} * kSumSquaresBlock + 5 * kSumSquaresBlock + 77;  // ~0.5 GB
  Buffer dx = gpu_->alloc(n * sizeof(float), MemCategory::kOther);
  gk().fill(dx.as<float>(), 1.5f, n);
  EXPECT_EQ(gk().sum_squares(dx.as<float>(), n), 2.25 * static_cast<double>(n));
  // The last element alone, and the last block's tail.
  EXPECT_EQ(gk().sum_squares(dx.as<float>() + n - 1, 1), 2.25);
  EXPECT_EQ(gk().sum_squares(dx.as<float>() + n - 77, 77), 2.25 * 77);
}

}  // namespace
}  // namespace zt
